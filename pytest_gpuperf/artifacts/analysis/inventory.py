"""Kernel inventories: what a benchmark runs on the GPU per call, and what changed. Pure Python.

An inventory is a small JSON-safe dict stored with each baseline run in
``Result.extra["kernels"]``. Names are normalised (:func:`normalize`) so that the same kernel
matches across runs; on the CPU the entries are operators (``kind: "op"``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_gpuperf.artifacts.analysis.timeline import (
    ProfileAnalysis,
    Trace,
    analyze,
    op_self_times,
)

INVENTORY_SCHEMA = 1
#: Kernels kept per inventory (the rest are summed in ``other_us_per_call``).
MAX_KERNELS = 30
#: A kernel is "slower"/"faster" only beyond this change and the baseline's own spread.
MIN_CHANGE = 0.05
#: ... and beyond this absolute change per call (µs), so that 0.1 µs kernels are not news.
MIN_CHANGE_US = 0.5
#: Per-call numbers of an inventory that :func:`combine` takes the median of.
SUMMARY_FIELDS = (
    "per_call_us",
    "gpu_us_per_call",
    "busy_fraction",
    "syncs_per_call",
    "h2d_per_call",
    "h2d_bytes_per_call",
    "d2h_per_call",
    "d2h_bytes_per_call",
    "compiled_regions_per_call",
    "other_us_per_call",
)
_GEMM = re.compile(
    r"gemm|nvjet|cutlass|xmma|cublas|matmul|wgmma|_mma|gemv|^aten::(?:mm|bmm|addmm|baddbmm|linear)$",
    re.I,
)


def _sig(x: float) -> float:
    return float(f"{x:.4g}")


def _strip_params(name: str) -> str:
    """Drop a trailing, balanced ``(...)`` parameter list."""
    name, depth = name.strip(), 0
    for i in reversed(range(len(name)) if name.endswith(")") else range(0)):
        depth += {")": 1, "(": -1}.get(name[i], 0)
        if depth == 0:
            head = name[:i].rstrip()
            # "(anonymous namespace)" or a name that is only parentheses: keep it
            return head if head and not head.endswith(("::", "<", ",")) else name
    return name


@functools.lru_cache(maxsize=4096)
def normalize(name: str) -> str:
    """The key a kernel is matched by: no ``void``, no parameter list, single spaces."""
    n = re.sub(r"\s+", " ", name.strip())
    if n.startswith("void "):
        n = n[5:]
    n = _strip_params(n)
    n = re.sub(r"\((?:int|unsigned long|long|unsigned int|bool|char)\)(-?\d+)", r"\1", n)
    n = re.sub(r"(\d+)(?:ul|u|l)\b", r"\1", n)
    n = re.sub(r"\s*>\s*>", ">>", n)
    n = re.sub(r"\s*>\s*>", ">>", n)
    n = n.replace(" >", ">").replace("char *", "char*")
    return n


def base_function(name: str) -> str:
    """The bare function name, as Nsight Compute's ``--kernel-name-base function`` sees it."""
    n = normalize(name)
    return n.split("<", 1)[0].rsplit("::", 1)[-1].strip() or n


def short_name(name: str, width: int = 72) -> str:
    """A readable name: ``vectorized_elementwise_kernel<MulFunctor>`` for ATen's long ones."""
    n = normalize(name)
    if n.startswith(("aten::", "Memcpy", "Memset")):
        return n if len(n) <= width else n[: width - 1] + "…"
    base = base_function(n)
    if base != n:
        rest = n[n.find(base) + len(base) :]  # base may follow a namespace
        functors = re.findall(r"(\w*Functor\w*|\w+_kernel\w*|\w+Op)\b", rest)
        functors = [f for f in functors if f != base]
        if functors:
            base = f"{base}<{functors[-1]}>"
        else:  # cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>: the argument says it
            first = re.match(r"\s*<\s*(?:\w+::)*(\w+)", n[n.find(base) + len(base) :])
            if first:
                base = f"{base}<{first.group(1)}>"
    return base if len(base) <= width else base[: width - 1] + "…"


def is_gemm(name: str) -> bool:
    return bool(_GEMM.search(name))


def inventory_from_trace(trace: Trace, analysis: ProfileAnalysis | None = None) -> dict[str, Any]:
    """The inventory of the profiled calls in ``trace`` (``analysis``: its ``analyze``)."""
    a = analysis if analysis is not None else analyze(trace)
    calls = max(a.calls, 1)
    items: dict[tuple[str, str], dict[str, Any]] = {}
    if a.device == "cuda":
        for act in (x for x in trace.activities if x.call is not None or not trace.calls):
            key = (normalize(act.name) if act.kind == "kernel" else act.name, act.kind)
            it = items.setdefault(
                key, {"name": key[0], "kind": act.kind, "n": 0, "us": 0.0, "args": act.args}
            )
            it["n"] += 1
            it["us"] += act.dur
    else:
        for name, us, count in op_self_times(trace):
            items[(name, "op")] = {"name": name, "kind": "op", "n": count, "us": us, "args": {}}
    ranked = sorted(items.values(), key=lambda it: -it["us"])
    kernels = []
    for it in ranked[:MAX_KERNELS]:
        entry: dict[str, Any] = {
            "name": it["name"],
            "kind": it["kind"],
            "launches": _sig(it["n"] / calls),
            "us_per_call": _sig(it["us"] / calls),
            "us_per_launch": _sig(it["us"] / it["n"]) if it["n"] else 0.0,
        }
        args = it["args"]
        for dim in ("grid", "block"):
            if isinstance(args.get(dim), list):
                entry[dim] = [int(x) for x in args[dim]]
        if isinstance(args.get("registers per thread"), (int, float)):
            entry["registers"] = int(args["registers per thread"])
        if it["kind"] == "memcpy" and isinstance(args.get("bytes"), (int, float)):
            entry["bytes_per_launch"] = int(args["bytes"])
        kernels.append(entry)
    other = sum(it["us"] for it in ranked[MAX_KERNELS:]) / calls
    h2d, h2d_bytes = a.copies_per_call("HtoD")
    d2h, d2h_bytes = a.copies_per_call("DtoH")
    return {
        "schema": INVENTORY_SCHEMA,
        "source": "torch.profiler",
        "device": a.device,
        "device_name": trace.device_name,
        "calls": a.calls,
        "per_call_us": _sig(a.per_call_us) if a.calls else None,
        "cpu_per_call_us": _sig(a.cpu_per_call_us),
        "gpu_us_per_call": _sig(a.gpu_time_us / calls),
        "busy_fraction": None if a.busy_fraction is None else round(a.busy_fraction, 3),
        "syncs_per_call": _sig(a.syncs_per_call),
        "h2d_per_call": _sig(h2d),
        "h2d_bytes_per_call": _sig(h2d_bytes),
        "d2h_per_call": _sig(d2h),
        "d2h_bytes_per_call": _sig(d2h_bytes),
        "compiled_regions_per_call": _sig(a.compiled_regions),
        "compiled": a.compiled,
        "kernels": kernels,
        "other_us_per_call": _sig(other),
    }


def combine(inventories: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """One inventory from several baseline runs: per-kernel medians, and their spread
    ((max - min) / median over the runs that have the kernel)."""
    invs = [i for i in inventories if i and i.get("schema") == INVENTORY_SCHEMA]
    if len(invs) <= 1:
        return dict(invs[0]) if invs else None
    out = dict(invs[-1])
    for key in SUMMARY_FIELDS:
        vals = [float(i[key]) for i in invs if isinstance(i.get(key), (int, float))]
        if vals:
            out[key] = _sig(statistics.median(vals))
    by_name: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for inv in invs:
        for k in inv.get("kernels", []):
            by_name.setdefault((k["name"], k.get("kind", "kernel")), []).append(k)
    kernels = []
    for entries in by_name.values():
        times = [float(e["us_per_call"]) for e in entries]
        med = statistics.median(times)
        merged = dict(entries[-1])
        merged["us_per_call"] = _sig(med)
        merged["launches"] = _sig(statistics.median(float(e["launches"]) for e in entries))
        merged["spread"] = _sig((max(times) - min(times)) / med) if med > 0 else 0.0
        merged["runs"] = len(entries)
        kernels.append(merged)
    out["kernels"] = sorted(kernels, key=lambda k: -float(k["us_per_call"]))
    flags = [i["compiled"] for i in invs if isinstance(i.get("compiled"), bool)]
    if flags:
        out["compiled"] = any(flags)
    out["runs"] = len(invs)
    return out


@dataclass
class KernelChange:
    name: str
    kind: str
    status: str  # slower, faster, appeared, vanished, same
    base_us: float  # per call
    cur_us: float
    base_launches: float
    cur_launches: float
    note: str = ""

    @property
    def delta_us(self) -> float:
        return self.cur_us - self.base_us

    def describe(self) -> str:
        nm = short_name(self.name)
        if self.status == "appeared":
            return f"appeared: {nm} ({self.cur_launches:g}x per call, {self.cur_us:.1f} µs)"
        if self.status == "vanished":
            return f"vanished: {nm} (was {self.base_launches:g}x per call, {self.base_us:.1f} µs)"
        pct = 100 * self.delta_us / self.base_us if self.base_us else math.inf
        moved = abs(self.cur_launches - self.base_launches) > 1e-6
        launches = f", launches {self.base_launches:g} -> {self.cur_launches:g} per call"
        launches = launches if moved else ""
        return (
            f"{self.status}: {nm} {self.base_us:.1f} -> {self.cur_us:.1f} µs per call "
            f"({pct:+.0f} %{launches}){self.note}"
        )


@dataclass
class KernelDiff:
    """Which kernels explain a slowdown (all times per call, µs)."""

    slowdown_us: float | None
    gpu_delta_us: float
    changes: list[KernelChange] = field(default_factory=list)
    variants: list[tuple[str, str]] = field(default_factory=list)  # (vanished, appeared)
    notes: list[str] = field(default_factory=list)

    @property
    def explained(self) -> float | None:
        """Share of the slowdown explained by more GPU time (the rest: the GPU idled)."""
        s = self.slowdown_us
        return self.gpu_delta_us / s if s and s > 0 else None

    @property
    def notable(self) -> list[KernelChange]:
        return [c for c in self.changes if c.status != "same"]

    def lines(self, limit: int = 6) -> list[str]:
        out = []
        if self.slowdown_us is not None:
            exp = self.explained
            out.append(
                f"profiled time per call {self.gpu_delta_us:+.1f} µs against a slowdown of "
                f"{self.slowdown_us:+.1f} µs"
                + (f": kernels explain {100 * exp:.0f} %" if exp is not None else "")
            )
        for old, new in self.variants:
            out.append(f"variant: {short_name(new)} replaced {short_name(old)}")
        out.extend(c.describe() for c in self.notable[:limit])
        if len(self.notable) > limit:
            out.append(f"... and {len(self.notable) - limit} more change(s)")
        out.extend(self.notes)
        return out

    def to_dict(self) -> dict[str, Any]:
        """For people (``evidence.json``): the fields, the share explained, the lines."""
        return {**dataclasses.asdict(self), "explained": self.explained, "lines": self.lines(20)}


def diff_inventories(
    baseline_inv: Mapping[str, Any], current_inv: Mapping[str, Any], slowdown_s: float | None
) -> KernelDiff:
    """Attribute a slowdown (seconds per call) to the kernels' changes; a vanished and an
    appeared kernel of one family are a variant swap."""
    slowdown_us = slowdown_s * 1e6 if slowdown_s is not None else None
    base = {(k["name"], k.get("kind", "kernel")): k for k in baseline_inv.get("kernels", [])}
    cur = {(k["name"], k.get("kind", "kernel")): k for k in current_inv.get("kernels", [])}
    changes = [
        _kernel_change(key, base.get(key), cur.get(key))
        for key in list(base) + [k for k in cur if k not in base]
    ]
    changes.sort(key=lambda ch: -abs(ch.delta_us))
    gpu_delta = sum(c.delta_us for c in changes)
    b_other = float(baseline_inv.get("other_us_per_call") or 0.0)
    c_other = float(current_inv.get("other_us_per_call") or 0.0)
    gpu_delta += c_other - b_other
    notes = []
    if slowdown_us is not None and (slowdown_us <= 0 or abs(gpu_delta) > 2 * slowdown_us):
        notes.append(
            f"the profiled time per call changed by {gpu_delta:+.1f} µs while the measured "
            f"slowdown is {slowdown_us:+.1f} µs: shares are of what the profiles show"
        )
        slowdown_us = None  # the profiles disagree by 2x: no share of the measured slowdown
    gpus = baseline_inv.get("device_name"), current_inv.get("device_name")
    if all(gpus) and gpus[0] != gpus[1]:
        notes.append(f"inventories from different GPUs: {gpus[0]} vs {gpus[1]}")
    return KernelDiff(slowdown_us, gpu_delta, changes, _variants(changes), notes)


def _kernel_change(
    key: tuple[str, str], b: Mapping[str, Any] | None, c: Mapping[str, Any] | None
) -> KernelChange:
    b_us, b_n = (float(b["us_per_call"]), float(b["launches"])) if b else (0.0, 0.0)
    c_us, c_n = (float(c["us_per_call"]), float(c["launches"])) if c else (0.0, 0.0)
    if b is None:
        status = "appeared"
    elif c is None:
        status = "vanished"
    else:
        tol = max(max(MIN_CHANGE, float(b.get("spread") or 0.0)) * b_us, MIN_CHANGE_US)
        if c_us - b_us > tol:
            status = "slower"
        elif b_us - c_us > tol:
            status = "faster"
        elif abs(c_n - b_n) > 1e-6:
            status = "count"
        else:
            status = "same"
    grids = (b or {}).get("grid"), (c or {}).get("grid")
    note = f", grid {grids[0]} -> {grids[1]}" if all(grids) and grids[0] != grids[1] else ""
    return KernelChange(key[0], key[1], status, b_us, c_us, b_n, c_n, note)


def _variants(changes: Sequence[KernelChange]) -> list[tuple[str, str]]:
    """(vanished, appeared) pairs of one kernel family: the library chose another variant."""
    gone = [c for c in changes if c.status == "vanished"]
    new = [c for c in changes if c.status == "appeared"]
    variants: list[tuple[str, str]] = []
    for old in gone:
        fam = _family(old.name)
        for nw in new:
            if _family(nw.name) == fam and nw.name not in {v[1] for v in variants}:
                variants.append((old.name, nw.name))
                break
    return variants


def _family(name: str) -> str:
    if is_gemm(name):
        return "gemm"
    if base_function(name).startswith("triton_"):
        return "triton:" + base_function(name).split("_")[1]
    return base_function(name)
