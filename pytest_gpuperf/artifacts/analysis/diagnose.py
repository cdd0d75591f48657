"""Where the time went: evidence of one regressed benchmark to a short paragraph. Pure Python.

The paragraph follows the usual analysis flow. First: was the GPU idle
(busy fraction over the profiled calls, largest gaps and what the host did
in them, launch-bound signs, host syncs, host-device copies) or busy but
slow (which kernels got slower, appeared or vanished, and what Nsight
Compute says limits them)? For compiled code: graph breaks, recompiles and
fallbacks. The most likely cause comes first, named so that a reader (and a
test) can tell: :data:`CAUSES`. What the compiler did differently (the
compiled code gone, new graph breaks, recompiles to the limit) outranks what
it causes (launch-boundness, new eager kernels); a layout change and a Triton
launch-config change are told as one story each (:mod:`.compile_story`), and so
is a library's choice of algorithm: the SDPA backend, the GEMMs' precision, the
convolution algorithm, cuBLAS's kernel at equal precision
(:mod:`.algorithm_story`): the choice first, the kernels after. The GPU's
activity (NVML GPM) and the allocator's figures per call, measured with every
CUDA result, add what moved and what bounds the work (:mod:`.resource_story`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_gpuperf.artifacts.analysis import algorithm_story as als
from pytest_gpuperf.artifacts.analysis import comms
from pytest_gpuperf.artifacts.analysis import compile_story as cs
from pytest_gpuperf.artifacts.analysis import resource_story as rs
from pytest_gpuperf.artifacts.analysis.inventory import (
    KernelChange,
    KernelDiff,
    is_gemm,
    short_name,
)
from pytest_gpuperf.artifacts.analysis.timeline import ProfileAnalysis
from pytest_gpuperf.outcome import Diagnosis as Diagnosis

HOST_SYNC = "host-sync"
H2D_COPY = "h2d-copy"
LAUNCH_BOUND = "launch-bound"
GPU_IDLE = "gpu-idle"
KERNEL_VARIANT = "kernel-variant"
EXTRA_COPY = "extra-copy"
KERNEL_SLOWER = "kernel-slower"
MORE_KERNELS = "more-kernels"
GRAPH_BREAK = cs.GRAPH_BREAK
RECOMPILE = cs.RECOMPILE
FALLBACK = "fallback"
COMPILED_CODE_GONE = cs.COMPILED_CODE_GONE
LAYOUT = cs.LAYOUT
TRITON_CONFIG = cs.TRITON_CONFIG
SDPA_BACKEND = als.SDPA_BACKEND
GEMM_PRECISION = als.GEMM_PRECISION
CONV_ALGORITHM = als.CONV_ALGORITHM
GEMM_HEURISTIC = als.GEMM_HEURISTIC
ALLOCATION_CHURN = rs.ALLOCATION_CHURN
#: a distributed benchmark's causes (artifacts/analysis/comms.py), told first when they lead
TRANSPORT_FALLBACK = comms.TRANSPORT
RANK_IMBALANCE = comms.RANK_IMBALANCE
LOST_OVERLAP = comms.LOST_OVERLAP
MORE_COLLECTIVES = comms.MORE_COLLECTIVES
MESSAGE_SIZE = comms.MESSAGE_SIZE
GROUP_CAUSES = comms.CAUSES
CAUSES = (
    *GROUP_CAUSES,
    COMPILED_CODE_GONE,
    LAYOUT,
    SDPA_BACKEND,
    GEMM_PRECISION,
    CONV_ALGORITHM,
    GEMM_HEURISTIC,
    TRITON_CONFIG,
    ALLOCATION_CHURN,
    HOST_SYNC,
    H2D_COPY,
    LAUNCH_BOUND,
    GPU_IDLE,
    KERNEL_VARIANT,
    EXTRA_COPY,
    KERNEL_SLOWER,
    MORE_KERNELS,
    GRAPH_BREAK,
    RECOMPILE,
    FALLBACK,
)
#: Operators whose host sync belongs to a copy, not to user code.
_COPY_OPS = ("aten::copy_", "aten::to", "aten::_to_copy", "aten::contiguous", "aten::clone")
_COPY_KERNEL = ("copy", "contiguous", "Memcpy", "Memset")


def fmt_time(s: float | None) -> str:
    if s is None or not math.isfinite(s):
        return "?"
    a = abs(s)
    if a >= 1:
        return f"{s:.3g} s"
    if a >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} µs"


def fmt_bytes(b: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= size:
            return f"{b / size:.3g} {unit}"
    return f"{b:.0f} B"


@dataclass
class Evidence:
    """Everything known about one regressed benchmark (all parts optional)."""

    key: str
    display: str = ""
    baseline_s: float | None = None
    current_s: float | None = None
    #: the change the gate used, with its figure, as every output writes it ("2.96x time";
    #: reporting/explain.py:change_text); "" when not known (then the two times' ratio)
    change: str = ""
    analysis: ProfileAnalysis | None = None
    baseline_inventory: Mapping[str, Any] | None = None
    kernel_diff: KernelDiff | None = None
    ncu: Sequence[Mapping[str, Any]] = ()
    compile: Mapping[str, Any] | None = None
    nsys: Sequence[str] = ()
    child_median_s: float | None = None
    #: rounds behind ``child_median_s`` (a capture child re-measures briefly)
    child_rounds: int | None = None
    #: where the profile was taken ("a fresh process of the current code"), as the details say
    profiled_in: str | None = None
    #: the current profile's inventory (for the compiled code and launch configs it shows)
    current_inventory: Mapping[str, Any] | None = None
    #: Triton kernel -> the config its autotuner chose in the current run (the autotune log)
    triton_configs: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    #: what the library's choices depended on in the profiler's process (the baseline's is
    #: its inventory's ``probe``): artifacts/collectors/algorithms.py
    current_probe: Mapping[str, Any] | None = None
    #: the GPU's activity (NVML GPM) of the current result and of the baseline's runs
    current_activity: Mapping[str, Any] | None = None
    baseline_activity: Sequence[Mapping[str, Any] | None] = ()
    #: the caching allocator's figures per call, current and of the baseline's runs
    current_memory: Mapping[str, Any] | None = None
    baseline_memory: Sequence[Mapping[str, Any] | None] = ()
    #: a distributed benchmark's group now and in the baseline (``Result.extra["group"]``:
    #: ``comms``, its collectives from the ranks' profiles; ``nccl``, its NCCL setup)
    group: Mapping[str, Any] | None = None
    baseline_group: Mapping[str, Any] | None = None
    #: measured against a base tree (``--gpuperf-ab``), not a saved baseline
    ab: bool = False

    @property
    def ratio(self) -> float | None:
        if self.baseline_s and self.current_s:
            return self.current_s / self.baseline_s
        return None

    @property
    def slowdown_s(self) -> float | None:
        if self.baseline_s is None or self.current_s is None:
            return None
        return self.current_s - self.baseline_s


@dataclass
class _Finding:
    cause: str
    weight: float  # how well it explains the slowdown (0..1+)
    sentence: str


def diagnose(ev: Evidence, extra_lines: Sequence[str] = ()) -> Diagnosis:
    """The paragraph that opens the failure message, with the details under it."""
    slow_s = ev.slowdown_s
    slow_us = slow_s * 1e6 if slow_s is not None and slow_s > 0 else None
    findings: list[_Finding] = []
    details: list[str] = []
    idle_sentence = _idle_part(ev, slow_us, findings, details)
    _group_part(ev, slow_us, findings, details)
    _kernel_part(ev, slow_us, findings, details)
    _compile_part(ev, idle_sentence, findings, details)
    details += _context_details(ev)
    findings.sort(key=lambda f: -f.weight)
    if findings and findings[0].cause in cs.COMPILER_CAUSES and findings[0].weight >= 1.5:
        for f in findings[1:]:
            if f.cause in (LAUNCH_BOUND, MORE_KERNELS, GPU_IDLE):
                f.sentence += " (a consequence of the above: eager code launches op by op)"
    causes = [f.cause for f in findings if f.weight > 0]
    if idle_sentence and not any(c in causes for c in (HOST_SYNC, H2D_COPY, LAUNCH_BOUND)):
        causes.append(GPU_IDLE)
    parts = _paragraph(ev, findings, idle_sentence)
    parts += [s.rstrip(".") + "." for s in extra_lines]
    paragraph = " ".join(parts)
    if ev.analysis is not None and ev.analysis.device != "cuda":
        paragraph, details = cpu_words(paragraph), [cpu_words(d) for d in details]
    return Diagnosis(ev.key, paragraph, causes, details)


_GPU_WORDS = {
    "kernels": "ops",
    "kernel": "op",
    "Kernels": "Ops",
    "Kernel": "Op",
    "launches": "calls",
    "launched": "called",
}
_GPU_WORD = re.compile(r"\b(" + "|".join(_GPU_WORDS) + r")\b")


def cpu_words(text: str) -> str:
    """A CPU profile has aten ops, not kernels: ``new kernel aten::stack: 1x per call``
    reads ``new op aten::stack: 1x per call``, ``launches 1 -> 3`` ``calls 1 -> 3``."""
    return _GPU_WORD.sub(lambda m: _GPU_WORDS[m.group(1)], text)


def _headline(ev: Evidence, cause: str = "") -> str:
    """``<name> is slower than its baseline: 2.96x time (...)``, or ``<name> regressed.``;
    with ``cause``, it follows in the same sentence (``...: rank imbalance: ...``). The change
    is the gate's (``ev.change``), else the two times' ratio, written as every output does."""
    from pytest_gpuperf.units import fmt_change

    head = f"{ev.display or ev.key}"
    change = ev.change if ev.change and ev.change != "-" else ""
    if not change and ev.ratio is not None:
        change = f"{fmt_change(ev.ratio)} time"
    if change:
        head += (
            f" is slower than its baseline: {change} "
            f"({fmt_time(ev.baseline_s)} -> {fmt_time(ev.current_s)} per call)"
        )
    else:
        head += " regressed"
    return head + (f": {cause}." if cause else ".")


def _group_part(
    ev: Evidence, slow_us: float | None, findings: list[_Finding], details: list[str]
) -> None:
    """A distributed benchmark: what changed in its transport and its collectives."""
    from pytest_gpuperf.artifacts.analysis import nccl_log

    cur, base = ev.group or {}, ev.baseline_group or {}
    if not cur:
        return
    moved = nccl_log.transport_change(base.get("nccl"), cur.get("nccl"))
    if moved:
        findings.append(_Finding(TRANSPORT_FALLBACK, 1.0 if "fallback" in moved else 0.6, moved))
    for f in comms.findings(base.get("comms"), cur.get("comms"), slow_us):
        findings.append(_Finding(f.cause, f.weight, f.sentence))
    details.extend(_group_details(cur, base))


def _group_details(cur: Mapping[str, Any], base: Mapping[str, Any]) -> list[str]:
    from pytest_gpuperf.artifacts.analysis import nccl_log

    out = []
    c = cur.get("comms") or {}
    if c.get("collectives_per_call"):
        ops = ", ".join(f"{op} x{d.get('count')}" for op, d in (c.get("ops") or {}).items())
        out.append(f"collectives per call: {ops} (baseline: " + (
            ", ".join(f"{op} x{d.get('count')}" for op, d in
                      ((base.get("comms") or {}).get("ops") or {}).items()) or "not profiled"
        ) + ")")  # fmt: skip
        for r in c.get("per_rank") or []:
            out.append(
                f"rank {r['rank']}: compute {comms.fmt_us(r['compute_us'])}, in collectives "
                f"{comms.fmt_us(r['comm_us'])} (waiting {comms.fmt_us(r['wait_us'])}) per call"
            )
        if c.get("overlap") is not None:
            out.append(f"overlap of collectives with compute: {100 * c['overlap']:.0f} %")
    if cur.get("nccl") or base.get("nccl"):
        out.append(f"NCCL now: {nccl_log.describe(cur.get('nccl'))}")
        out.append(f"NCCL in the baseline: {nccl_log.describe(base.get('nccl'))}")
    return out


def _idle_part(
    ev: Evidence, slow_us: float | None, findings: list[_Finding], details: list[str]
) -> str:
    """Was the GPU idle? Adds the idle-time findings and the profile's details; returns
    the sentence that says the GPU was idle ("" when it was not, or no CUDA profile)."""
    a = ev.analysis
    if a is None:
        return ""
    if a.device != "cuda":
        details.append(
            f"profile: {a.calls} calls on the CPU{_where(ev)}, "
            f"{fmt_time(a.cpu_per_call_us * 1e-6)} per call"
        )
        return ""
    base = ev.baseline_inventory or {}
    kd = ev.kernel_diff
    idle_sentence = ""
    busy = a.busy_fraction or 0.0
    b_busy = base.get("busy_fraction")
    explained = kd.explained if kd is not None else None
    idle_grew = isinstance(b_busy, (int, float)) and busy < b_busy - 0.1
    if busy < 0.8 and (explained is None or explained < 0.5 or idle_grew):
        was = f", {100 * b_busy:.0f} % in the baseline" if isinstance(b_busy, float) else ""
        idle_sentence = (
            f"The GPU was idle: busy only {100 * busy:.0f} % of the profiled calls{was}"
            + (
                f"; kernels explain {100 * max(explained, 0):.0f} % of the slowdown"
                if explained is not None
                else ""
            )
            + "."
        )
    findings += _idle_findings(a, base, slow_us)
    details.append(
        f"profile: {a.calls} steady-state calls{_where(ev)}, "
        f"{fmt_time(a.per_call_us * 1e-6)} per call, "
        f"GPU busy {100 * busy:.0f} %, {a.kernels / max(a.calls, 1):.0f} kernel(s) per call"
        + (f" (median {a.median_kernel_us:.1f} µs)" if a.median_kernel_us else "")
    )
    for g in a.gaps[:3]:
        details.append(
            f"gap {g.dur_us:.1f} µs at +{g.start_us:.0f} µs, after {short_name(g.after, 40)}: "
            f"{g.cause}"
        )
    return idle_sentence


def _where(ev: Evidence) -> str:
    return f" in {ev.profiled_in}" if ev.profiled_in else ""


def _kernel_part(
    ev: Evidence, slow_us: float | None, findings: list[_Finding], details: list[str]
) -> None:
    """Or busy but slow? Adds the stories (layout, the library's algorithm, Triton configs,
    allocations) and the kernel findings they leave, the kernel and ncu details."""
    kd = ev.kernel_diff
    stories: list[cs.Story] = []
    if kd is not None:
        base = ev.baseline_inventory or {}
        layout = cs.layout_story(kd, slow_us)
        if layout is not None:
            stories.append(layout)
        stories += als.algorithm_stories(
            kd, base, ev.current_probe, slow_us, skip=cs.absorbed(stories)
        )
        stories += cs.triton_config_stories(
            kd, base, ev.current_inventory, current_configs=ev.triton_configs, slowdown_us=slow_us
        )
    churn = rs.allocation_story(ev.baseline_memory, ev.current_memory, kd)
    if churn is not None:
        stories.append(churn)
    findings += [_Finding(st.cause, st.weight, st.sentence) for st in stories]
    if kd is not None:
        findings += _kernel_findings(kd, slow_us, skip=cs.absorbed(stories))
        details += [f"kernels: {line}" for line in kd.lines()]
    elif ev.analysis is not None and ev.ab:
        details.append("kernels: the base tree was not profiled, so nothing to compare them with")
    elif ev.analysis is not None:
        details.append("kernels: no baseline inventory to compare with (save a baseline again)")
    for n in ev.ncu:
        details.append(f"ncu {short_name(str(n.get('name', '?')), 48)}: {ncu_line(n)}")


def _compile_part(
    ev: Evidence, idle_sentence: str, findings: list[_Finding], details: list[str]
) -> None:
    """What the compiler did: its stories, the fallbacks, and the compile details."""
    a = ev.analysis
    kd = ev.kernel_diff
    comp = ev.compile or {}
    breaks = comp.get("graph_breaks") or []
    n_breaks = int(comp.get("graph_break_count") or len(breaks))
    recompiles = comp.get("recompiles") or []
    compiler = cs.compiler_stories(
        ev.baseline_inventory,
        ev.current_inventory,
        comp,
        current_regions=a.compiled_regions if a is not None else None,
    )
    kernels_moved = bool(kd and any(c.status in ("appeared", "vanished") for c in kd.changes))
    for st in compiler:
        if st.cause == GRAPH_BREAK and 0.3 < st.weight < 1.0 and (kernels_moved or idle_sentence):
            st.weight = 0.9  # no baseline regions to compare, but the kernels moved
        findings.append(_Finding(st.cause, st.weight, st.sentence))
    for f in comp.get("frame_failures") or []:
        if isinstance(f, Mapping) and (f.get("eager") or f.get("limit")):
            details.append(
                f"compile: dynamo gave up on {f.get('function')} ({f.get('type')}): "
                f"{f.get('reason')}"
                + (f" at {f.get('where')}" if f.get("where") else "")
                + (f"; hint: {f.get('hint')}" if f.get("hint") else "")
            )
    fallbacks = comp.get("fallbacks") or []
    if fallbacks:
        findings.append(
            _Finding(
                FALLBACK, 0.3, f"ops left to eager ATen (fallbacks): {', '.join(fallbacks[:4])}"
            )
        )
    if comp.get("graphs") is not None:
        details.append(
            f"compile: {comp.get('graphs')} graph(s), {n_breaks} graph break(s), "
            f"{len(recompiles)} recompile(s)" + (f", fallbacks {fallbacks}" if fallbacks else "")
        )


def _context_details(ev: Evidence) -> list[str]:
    """The nsys lines, the activity and allocator figures, and whether the slowdown
    reproduced in the profiler's process."""
    details = [f"nsys: {s}" for s in ev.nsys]
    details += rs.details(
        ev.baseline_activity, ev.current_activity, ev.baseline_memory, ev.current_memory
    )
    if ev.child_median_s is not None and ev.baseline_s:
        again = ev.child_median_s / ev.baseline_s - 1
        rounds = f", {ev.child_rounds} rounds" if ev.child_rounds else ""
        details.append(
            f"re-measured in the profiler's process{rounds}: {fmt_time(ev.child_median_s)} "
            f"({100 * again:+.1f} % against the baseline)"
            + (
                ""
                if ev.ratio is None or again > (ev.ratio - 1) / 3
                else "; the slowdown did not reproduce there, so the profiles may not show it"
            )
        )
    return details


def _paragraph(ev: Evidence, findings: Sequence[_Finding], idle_sentence: str) -> list[str]:
    """The paragraph's sentences: headline, likely cause, idle time, what the GPU's units
    say (the GPM figures that moved, what bounds the work), the next causes, and what
    Nsight Compute says of the hottest kernel when a kernel change leads."""
    kd = ev.kernel_diff
    if findings and findings[0].cause in GROUP_CAUSES:
        # a distributed cause is named in the first sentence itself
        parts = [_headline(ev, findings[0].sentence)]
    else:
        parts = [_headline(ev)]
        if findings:
            parts.append(f"Likely cause: {findings[0].sentence}.")
    if idle_sentence:
        parts.append(idle_sentence)
    gpm = rs.activity_sentences(ev.baseline_activity, ev.current_activity)
    parts += [f"{s}." for s in gpm]
    parts += [f"Also: {f.sentence}." for f in findings[1:4]]
    if (
        kd is not None
        and findings
        and findings[0].cause in (KERNEL_VARIANT, KERNEL_SLOWER, EXTRA_COPY)
    ):
        ncu_by_name = {n.get("name"): n for n in ev.ncu}
        hot = next((c for c in kd.notable if c.delta_us > 0), None)
        hot_ncu = ncu_by_name.get(hot.name) if hot else None
        if hot_ncu:
            parts.append(
                f"Nsight Compute on {short_name(str(hot_ncu.get('name')), 48)}: "
                f"{ncu_line(hot_ncu)}."
            )
    if not findings and not idle_sentence and not gpm:
        if ev.analysis is None:
            parts.append("No profile could be taken (see the collectors below).")
        elif ev.analysis.device != "cuda":
            parts.append(
                "The profile shows no op whose change explains it: the time is likely in Python "
                "code between the ops (a loop, sorted(), ...), which torch.profiler does not "
                "break down; profile the function with cProfile, or compare the traces below."
            )
        else:
            parts.append(
                "The profile shows no host sync, copy or kernel change that explains it; "
                "compare the traces below (clocks, other processes on the GPU)."
            )
    return parts


def _idle_findings(
    a: ProfileAnalysis, base: Mapping[str, Any], slow_us: float | None
) -> list[_Finding]:
    out: list[_Finding] = []
    has_base = bool(base)
    syncs = a.syncs_per_call
    b_syncs = float(base.get("syncs_per_call") or 0.0)
    h2d, h2d_bytes = a.copies_per_call("HtoD")
    b_h2d = float(base.get("h2d_per_call") or 0.0)
    h2d_stat = next((c for c in a.copies if c.direction == "HtoD"), None)
    sync_ops = sorted({op for s in a.syncs for op in s.ops})
    copy_syncs = bool(sync_ops) and all(op.startswith(_COPY_OPS) for op in sync_ops)
    if h2d > 0 and (not has_base or h2d > b_h2d + 0.25):
        us = h2d_stat.dur_us / a.calls if h2d_stat else 0.0
        pageable = h2d_stat.pageable / a.calls if h2d_stat else 0.0
        new = " (none in the baseline)" if has_base and b_h2d == 0 else ""
        share = us / slow_us if slow_us else None
        out.append(
            _Finding(
                H2D_COPY,
                0.95 if has_base else 0.6,
                f"a host-to-device copy inside the benchmarked function: {h2d:g} per call{new}, "
                f"{fmt_bytes(h2d_bytes)} per call"
                + (" from pageable memory" if pageable else "")
                + f", {us:.0f} µs of copy time"
                + (f" ({100 * share:.0f} % of the slowdown)" if share is not None else "")
                + (" plus the host sync it forces" if syncs and copy_syncs else "")
                + "; keep the tensor on the GPU, or copy once from pinned memory with "
                "non_blocking=True",
            )
        )
    if syncs > 0 and (not has_base or syncs > b_syncs + 0.25) and not (copy_syncs and out):
        names = ", ".join(f"{s.name} x{s.count / a.calls:g}" for s in a.syncs)
        where = f" from {', '.join(sync_ops[:3])}" if sync_ops else ""
        new = " (none in the baseline)" if has_base and b_syncs == 0 else ""
        out.append(
            _Finding(
                HOST_SYNC,
                0.95 if has_base else 0.7,
                f"the benchmarked function synchronises with the host {syncs:g} time(s) per "
                f"call{new}: {names}{where}; the GPU drains and idles while the host waits "
                "(.item(), .cpu(), printing or branching on a GPU value, "
                "torch.cuda.synchronize())",
            )
        )
    if a.launch_bound:
        out.append(
            _Finding(
                LAUNCH_BOUND,
                0.6,
                "launch-bound: " + "; ".join(a.launch_notes) + " (CUDA graphs or "
                "torch.compile(mode='reduce-overhead') remove the launch cost)",
            )
        )
    return out


def _kernel_findings(
    kd: KernelDiff, slow_us: float | None, skip: set[str] | frozenset[str] = frozenset()
) -> list[_Finding]:
    """Kernel changes one by one, except those a story (``skip``) already tells."""
    out = _variant_findings(kd, slow_us, skip)
    variant_names = {n for v in kd.variants for n in v}
    for c in kd.notable:
        if c.name in variant_names or c.name in skip or c.delta_us <= 0:
            continue
        if c.kind == "memcpy" and ("HtoD" in c.name or "DtoH" in c.name):
            continue  # a host-device copy: judged with the idle time
        if c.share is not None and c.share < 0.05:
            continue  # too small to be news (it stays in the details)
        finding = _change_finding(c)
        if finding is not None:
            out.append(finding)
        if len(out) >= 4:
            break
    if kd.explained is not None and kd.explained < 0.5:
        for f in out:
            f.weight *= 0.7
    return out


def _variant_findings(
    kd: KernelDiff, slow_us: float | None, skip: set[str] | frozenset[str]
) -> list[_Finding]:
    """One finding per kernel swapped for another variant that costs 5 % of the slowdown."""
    out: list[_Finding] = []
    for old, new in kd.variants:
        if old in skip or new in skip:
            continue
        ch_new = next((c for c in kd.changes if c.name == new), None)
        ch_old = next((c for c in kd.changes if c.name == old), None)
        net = (ch_new.delta_us if ch_new else 0.0) + (ch_old.delta_us if ch_old else 0.0)
        share = net / slow_us if slow_us else None
        if share is not None and share < 0.05:
            continue  # a swap that costs nothing is not the news (it stays in the details)
        why = (
            "an input's dtype, layout (contiguity, strides) or shape changed the library's choice"
            if is_gemm(new)
            else "the generated or chosen kernel changed (for Triton kernels: the fusion changed)"
        )
        out.append(
            _Finding(
                KERNEL_VARIANT,
                0.3 + min(max(share or 0.5, 0.0), 1.0) * 0.65,
                f"a different kernel variant runs: {short_name(new)} replaced {short_name(old)}"
                + (
                    f" ({ch_old.base_us:.1f} -> {ch_new.cur_us:.1f} µs per call"
                    + (f", {100 * share:.0f} % of the slowdown" if share is not None else "")
                    + ")"
                    if ch_new and ch_old
                    else ""
                )
                + f"; {why}",
            )
        )
    return out


def _change_finding(c: KernelChange) -> _Finding | None:
    """An extra copy, a slower kernel, or a new or more often launched one; None otherwise."""
    share = c.share
    w = min(max(share if share is not None else 0.3, 0.0), 1.0)
    of_slowdown = f" ({100 * share:.0f} % of the slowdown)" if share is not None else ""
    if c.status == "appeared" and any(t in c.name for t in _COPY_KERNEL):
        return _Finding(
            EXTRA_COPY,
            0.3 + 0.65 * w,
            f"an extra copy appeared: {short_name(c.name)} {c.cur_launches:g}x per call, "
            f"{c.cur_us:.1f} µs"
            + of_slowdown
            + "; a non-contiguous or wrongly typed input is copied on every call",
        )
    if c.status == "slower":
        return _Finding(
            KERNEL_SLOWER,
            0.2 + 0.7 * w,
            f"{short_name(c.name)} got slower: "
            f"{c.base_us:.1f} -> {c.cur_us:.1f} µs per call" + of_slowdown + c.note,
        )
    if c.status in ("appeared", "count"):
        return _Finding(
            MORE_KERNELS,
            0.2 + 0.6 * w,
            (
                f"new kernel {short_name(c.name)}: {c.cur_launches:g}x per call, {c.cur_us:.1f} µs"
                if c.status == "appeared"
                else f"{short_name(c.name)} launches {c.base_launches:g} -> "
                f"{c.cur_launches:g} per call"
            )
            + of_slowdown,
        )
    return None


def ncu_line(n: Mapping[str, Any]) -> str:
    """``compute-bound: SM 85 %, memory 40 %, occupancy 24 % (168 registers), stalls ...``."""
    parts = [str(n.get("bottleneck") or "?")]
    nums = []
    for key, label in (("sm_pct", "SM"), ("mem_pct", "memory"), ("dram_pct", "DRAM")):
        v = n.get(key)
        if isinstance(v, (int, float)):
            nums.append(f"{label} {v:.0f} %")
    occ = n.get("occupancy_pct")
    if isinstance(occ, (int, float)):
        regs = n.get("registers")
        nums.append(f"occupancy {occ:.0f} %" + (f" ({regs} registers/thread)" if regs else ""))
    if nums:
        parts.append(", ".join(nums))
    stalls = n.get("stalls") or []
    if stalls:
        parts.append("main stalls " + ", ".join(f"{s[0]} {float(s[1]):.1f}" for s in stalls[:2]))
    text = "; ".join(parts)
    dur = n.get("duration_us")
    if isinstance(dur, (int, float)):
        text += f"; {dur:.1f} µs per launch"
    return text
