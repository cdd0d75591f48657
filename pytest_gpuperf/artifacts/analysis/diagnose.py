"""Where the time went: evidence of one regressed benchmark to a short paragraph. Pure Python.

The stories claim the slowdown's terms (:mod:`.attribution`) in the order of :data:`STORIES`,
causes before the symptoms they bring; the first sentence names the finding that explains
the largest share, with its share.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pytest_gpuperf.artifacts.analysis import algorithm_story as als
from pytest_gpuperf.artifacts.analysis import comms, nccl_log
from pytest_gpuperf.artifacts.analysis import compile_story as cs
from pytest_gpuperf.artifacts.analysis import resource_story as rs
from pytest_gpuperf.artifacts.analysis import work_story as ws
from pytest_gpuperf.artifacts.analysis.attribution import Evidence as Evidence
from pytest_gpuperf.artifacts.analysis.attribution import Finding, Ledger, leads, rank, told
from pytest_gpuperf.artifacts.analysis.inventory import short_name
from pytest_gpuperf.measure.collectives import normalize
from pytest_gpuperf.outcome import Diagnosis as Diagnosis
from pytest_gpuperf.units import fmt_change, fmt_time

HOST_SYNC, H2D_COPY, EXTRA_COPY, UNFUSED = ws.HOST_SYNC, ws.H2D_COPY, ws.EXTRA_COPY, ws.UNFUSED
PER_TENSOR, RECOMPUTE, LAUNCH_BOUND = ws.PER_TENSOR, ws.RECOMPUTE, ws.LAUNCH_BOUND
KERNEL_VARIANT, KERNEL_SLOWER, MORE_KERNELS = ws.KERNEL_VARIANT, ws.KERNEL_SLOWER, ws.MORE_KERNELS
COMPILED_CODE_GONE, GRAPH_BREAK, RECOMPILE = cs.COMPILED_CODE_GONE, cs.GRAPH_BREAK, cs.RECOMPILE
LAYOUT, TRITON_CONFIG, ALLOCATION_CHURN = cs.LAYOUT, cs.TRITON_CONFIG, rs.ALLOCATION_CHURN
SDPA_BACKEND, GEMM_PRECISION = als.SDPA_BACKEND, als.GEMM_PRECISION
CONV_ALGORITHM, GEMM_HEURISTIC = als.CONV_ALGORITHM, als.GEMM_HEURISTIC
TRANSPORT_FALLBACK, RANK_IMBALANCE = comms.TRANSPORT, comms.RANK_IMBALANCE
LOST_OVERLAP, MORE_COLLECTIVES = comms.LOST_OVERLAP, comms.MORE_COLLECTIVES
CAUSES = (*comms.CAUSES, *cs.CAUSES, *als.CAUSES, ALLOCATION_CHURN, *ws.CAUSES)
#: What opens the cause in the first sentence; :func:`lead` reads the cause back from it.
LEAD = "; likely cause"


def _group(ev: Evidence, led: Ledger) -> list[Finding]:
    """A distributed benchmark: what changed in its transport and its collectives."""
    cur, base = ev.group or {}, ev.baseline_group or {}
    moved = nccl_log.transport_change(base.get("nccl"), cur.get("nccl"))
    out = [Finding(TRANSPORT_FALLBACK, moved)] if moved else []
    out += comms.findings(base.get("comms"), cur.get("comms"), led.slowdown_us)
    if out:  # the ranks' waiting (GPU idle; on the CPU, time outside the ops) is its doing
        out[0].idle = True
    for f in out:  # more or other collectives: their own time too (gloo waits inside its ops)
        if f.cause in (MORE_COLLECTIVES, comms.MESSAGE_SIZE) and not f.kernels:
            f.kernels = [c.name for c in led.free() if normalize(c.name) is not None]
    return out


#: The stories, in the order they claim the slowdown's terms: causes before their symptoms.
STORIES: tuple[Callable[[Evidence, Ledger], Sequence[Finding]], ...] = (
    _group,
    cs.compiler,
    cs.layout,
    ws.unfused,
    als.sdpa,
    als.precision,
    als.heuristic,
    als.conv,
    cs.triton_configs,
    ws.host_sync,
    ws.copies,
    ws.multi_tensor,
    ws.split_launches,
    ws.recompute,
    rs.allocation,
    ws.extra_copies,
    ws.kernels,
    ws.idle,
)


def diagnose(ev: Evidence, extra_lines: Sequence[str] = ()) -> Diagnosis:
    """The paragraph that opens the failure message, with the details under it."""
    slow_us = ev.slowdown_s * 1e6 if ev.slowdown_s is not None else None
    if ev.kernel_diff is not None and ev.kernel_diff.slowdown_us is None:
        slow_us = None  # the profiles disagree with the measurement: shares of what they show
    led = Ledger(ev.kernel_diff, _waiting(ev, slow_us), slow_us)
    claimed = [led.claim(f) for story in STORIES for f in story(ev, led)] if ev.slower else []
    ranked = rank([f for f in claimed if f is not None], led)
    of = "the slowdown" if led.slowdown_us or ev.kernel_diff is None else "what the profiles show"
    unseen = []
    if led.unseen and led.seen is not None and led.slowdown_us:  # what the profiles do not see
        seen = led.seen * led.slowdown_us
        unseen.append(
            f"The profiles show {100 * max(led.seen, 0.0):.0f} % of the slowdown ({seen:+.1f} of "
            f"{led.slowdown_us:+.1f} µs per call): the rest is time they do not measure (outside "
            "the profiled calls, or a slowdown that did not reproduce in the profiler's process)."
        )
    parts = _paragraph(ev, ranked, of, unseen) + [s.rstrip(".") + "." for s in extra_lines]
    paragraph, details = " ".join(parts), _details(ev)
    if ev.analysis is not None and ev.analysis.device != "cuda":
        paragraph, details = cpu_words(paragraph), [cpu_words(d) for d in details]
    causes = [f.cause for f in ranked if leads(f) or told(f)]
    return Diagnosis(ev.key, paragraph, causes, details)


def _waiting(ev: Evidence, slow_us: float | None) -> float | None:
    """The growth of the device's waiting per call. On one GPU, at most what its kernels leave
    of the measured slowdown: a device-time figure hides the host's launch gaps the profile
    shows (on the CPU an op's time holds its waits, and a rank's waiting is its collectives')."""
    b, c = ws.waiting_us(ev.baseline_inventory), ws.waiting_us(ev.current_inventory, ev.analysis)
    if b is None or c is None:
        return None
    kd, cuda = ev.kernel_diff, ev.analysis is not None and ev.analysis.device == "cuda"
    if slow_us and slow_us > 0 and kd is not None and cuda and not ev.group:
        return min(c - b, max(slow_us - kd.gpu_delta_us, 0.0))
    return c - b


def lead(paragraph: str) -> str:
    """The cause as the first sentence names it: the text after ``; likely cause...: ``."""
    _, sep, rest = paragraph.partition(LEAD)
    return rest.split(": ", 1)[1] if sep and ": " in rest else ""


_GPU_WORDS = {
    "kernels": "ops",
    "kernel": "op",
    "Kernels": "Ops",
    "Kernel": "Op",
    "launches": "calls",
    "launched": "called",
    "launch": "call",
}
_GPU_WORD = re.compile(r"\b(" + "|".join(_GPU_WORDS) + r")\b")


def cpu_words(text: str) -> str:
    """A CPU profile has aten ops, not kernels: its words."""
    return _GPU_WORD.sub(lambda m: _GPU_WORDS[m.group(1)], text)


def _headline(ev: Evidence, cause: Finding | None, of: str) -> str:
    """``<name> is slower than its baseline: 2.96x time (...)``, with ``cause`` and its share."""
    head = f"{ev.display or ev.key}"
    change = ev.change if ev.change and ev.change != "-" else ""
    change = change or (f"{fmt_change(ev.ratio)} time" if ev.ratio is not None else "")
    per_call = f"({_time(ev.baseline_s)} -> {_time(ev.current_s)} per call)"
    if not ev.slower:
        head += f": no slowdown to explain ({change or 'no change'} {per_call}, {ev.verdict})"
    elif change:
        head += f" is slower than its baseline: {change} {per_call}"
    else:
        head += " regressed"
    if cause is None:
        return head + "."
    share = f", {min(100 * cause.share, 100):.0f} % of {of}" if cause.share else ""
    return f"{head}{LEAD}{share}: {cause.sentence}."


def _time(s: float | None) -> str:
    return fmt_time(s) if s is not None else "?"


def _paragraph(
    ev: Evidence, ranked: Sequence[Finding], of: str, unseen: Sequence[str] = ()
) -> list[str]:
    """The headline with the lead cause, then what comes with it and the next causes."""
    first = ranked[0] if ranked and leads(ranked[0]) else None
    symptoms = [f.sentence for f in ranked if f.symptom]
    gpm = rs.activity_sentences(ev)
    rest = [f for f in ranked if f is not first and told(f)][:3]
    if first is None:  # a headline that names no cause
        parts = [_headline(ev, None, of), *(f"{s}." for s in gpm)]
        if rest:
            parts.append("No change in the profiles explains much of it; the largest:")
            return parts + [f"{f.sentence}{_share(f)}." for f in rest]
        return parts + [f"{s[0].upper()}{s[1:]}." for s in symptoms] + _nothing(ev, gpm)
    parts = [_headline(ev, first, of), *unseen, *(f"With it: {s}." for s in [*symptoms, *gpm])]
    parts += [f"Also{_share(f)}: {f.sentence}." for f in rest]
    by_name = {n.get("name"): n for n in ev.ncu}
    hot = next((c for c in first.got if c.delta_us > 0 and c.name in by_name), None)
    if first.cause in (KERNEL_VARIANT, KERNEL_SLOWER, EXTRA_COPY) and hot is not None:
        n = by_name[hot.name]
        parts.append(f"Nsight Compute on {short_name(str(n.get('name')), 48)}: {ncu_line(n)}.")
    return parts


def _share(f: Finding) -> str:
    return f" ({min(100 * f.share, 100):.0f} %)" if f.share is not None else ""


def _nothing(ev: Evidence, gpm: Sequence[str]) -> list[str]:
    """What to say when no story explains the slowdown."""
    a = ev.analysis
    if not ev.slower or (a is None and gpm):
        return []
    if a is None:
        return ["No profile could be taken (see the collectors below)."]
    if not ev.baseline_inventory:
        side = "the base tree was not profiled" if ev.ab else "the baseline has no inventory"
        inv = ev.current_inventory or {}
        top = ", ".join(
            f"{short_name(str(k.get('name')), 48)} ({float(k.get('us_per_call') or 0):.1f} µs "
            f"per call, {float(k.get('launches') or 0):g}x)"
            for k in (inv.get("kernels") or [])[:3]
        )
        return [
            f"The profile cannot say what changed: {side}, so there is nothing to compare it "
            "with" + (f"; the heaviest kernels now: {top}" if top else "") + "."
        ]
    if gpm:
        return []
    if a.device != "cuda":
        return [
            "The profile shows no op whose change explains it: the time is likely in Python code "
            "between the ops (a loop, sorted(), ...), which torch.profiler does not break down; "
            "profile the function with cProfile, or compare the traces below."
        ]
    return [
        "The profile shows no host sync, copy or kernel change that explains it; compare the "
        "traces below (clocks, other processes on the GPU)."
    ]


def _details(ev: Evidence) -> list[str]:
    """The lines under the paragraph."""
    out = _profile_details(ev) + _group_details(ev.group or {}, ev.baseline_group or {})
    kd = ev.kernel_diff
    if kd is not None and not ev.slower:
        out.append(f"kernels: {ev.verdict or 'no slowdown'}, so no kernel change is a cause")
    elif kd is not None:
        out += [f"kernels: {line}" for line in kd.lines()]
    elif ev.analysis is not None and ev.ab:
        out.append("kernels: the base tree was not profiled, so nothing to compare them with")
    elif ev.analysis is not None:
        out.append("kernels: no baseline inventory to compare with (save a baseline again)")
    out += [f"ncu {short_name(str(n.get('name', '?')), 48)}: {ncu_line(n)}" for n in ev.ncu]
    out += cs.details(ev.compile)
    out += [f"nsys: {s}" for s in ev.nsys]
    out += rs.details(ev)
    if ev.child_median_s is not None and ev.baseline_s:
        again = ev.child_median_s / ev.baseline_s - 1
        rounds = f", {ev.child_rounds} rounds" if ev.child_rounds else ""
        reproduced = ev.ratio is None or again > (ev.ratio - 1) / 3
        out.append(
            f"re-measured in the profiler's process{rounds}: {_time(ev.child_median_s)} "
            f"({fmt_change(1 + again)} against the baseline)"
            + ("" if reproduced else "; the slowdown did not reproduce there, so the profiles "
               "may not show it")
        )  # fmt: skip
    return out


def _profile_details(ev: Evidence) -> list[str]:
    a, where = ev.analysis, f" in {ev.profiled_in}" if ev.profiled_in else ""
    if a is None:
        return []
    if a.device != "cuda":
        return [f"profile: {a.calls} calls on the CPU{where}, {_time(a.cpu_per_call_us * 1e-6)} "
                "per call"]  # fmt: skip
    out = [
        f"profile: {a.calls} steady-state calls{where}, {_time(a.per_call_us * 1e-6)} per call, "
        f"GPU busy {100 * (a.busy_fraction or 0.0):.0f} %, "
        f"{a.kernels / max(a.calls, 1):.0f} kernel(s) per call"
        + (f" (median {a.median_kernel_us:.1f} µs)" if a.median_kernel_us else "")
    ]
    return out + [
        f"gap {g.dur_us:.1f} µs at +{g.start_us:.0f} µs, after {short_name(g.after, 40)}: {g.cause}"
        for g in a.gaps[:3]
    ]


def _group_details(cur: Mapping[str, Any], base: Mapping[str, Any]) -> list[str]:
    out = []
    c = cur.get("comms") or {}
    if c.get("collectives_per_call"):

        def ops(d: Mapping[str, Any]) -> str:
            return ", ".join(f"{op} x{x.get('count')}" for op, x in (d.get("ops") or {}).items())

        baseline = ops(base.get("comms") or {}) or "not profiled"
        out.append(f"collectives per call: {ops(c)} (baseline: {baseline})")
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


def ncu_line(n: Mapping[str, Any]) -> str:
    """``compute-bound: SM 85 %, memory 40 %, occupancy 24 % (168 registers), stalls ...``."""
    num = {k: v for k, v in n.items() if isinstance(v, (int, float))}
    labels = (("sm_pct", "SM"), ("mem_pct", "memory"), ("dram_pct", "DRAM"))
    nums = [f"{label} {num[k]:.0f} %" for k, label in labels if k in num]
    if "occupancy_pct" in num:
        regs = f" ({n['registers']} registers/thread)" if n.get("registers") else ""
        nums.append(f"occupancy {num['occupancy_pct']:.0f} %{regs}")
    stalls = ", ".join(f"{s[0]} {float(s[1]):.1f}" for s in (n.get("stalls") or [])[:2])
    parts = [str(n.get("bottleneck") or "?"), ", ".join(nums), stalls and f"main stalls {stalls}"]
    dur = f"{num['duration_us']:.1f} µs per launch" if "duration_us" in num else ""
    return "; ".join(p for p in [*parts, dur] if p)
