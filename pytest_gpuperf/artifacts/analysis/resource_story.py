"""What the GPU's units (NVML GPM) and the caching allocator say about a regression. Pure Python.

Both are measured with every CUDA result, no capture needed. The activity figures that moved
follow from the cause; more allocations alone are a symptom, never the cause.
"""

from __future__ import annotations

import functools
import re
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pytest_gpuperf.artifacts.analysis.attribution import Evidence, Finding, Ledger, names
from pytest_gpuperf.telemetry import activity as act
from pytest_gpuperf.units import fmt_bytes

ALLOCATION_CHURN = "allocation-churn"
#: More allocations per call than the baseline's by this much is news ...
MORE_ALLOCATIONS = 0.5
#: ... when they hold at least this many bytes per call more.
MORE_BYTES = float(2**20)
#: cudaMalloc calls per call beyond the baseline's by this much: the cache is not reused.
MORE_DEVICE_ALLOCS = 0.5
#: Kernels that fill a fresh buffer (zero-fill, a concatenation into it).
_BUFFER_KERNELS = re.compile(r"CatArray|cat_|fill|zero|Memset", re.I)


def _base(baseline: Sequence[Mapping[str, Any] | None], key: str) -> float | None:
    vals = [v for b in baseline if b and b.get("available") and (v := act.num(b, key)) is not None]
    return statistics.median(vals) if vals else None


def _grew(
    base: Sequence[Mapping[str, Any] | None], cur: Mapping[str, Any], key: str, by: float
) -> tuple[float, float] | None:
    """(baseline, now) of a figure that grew by ``by`` or more over the baseline's runs."""
    now, was = act.num(cur, key), _base(base, key)
    return (was, now) if now is not None and was is not None and now >= was + by else None


def allocation(ev: Evidence, led: Ledger) -> list[Finding]:
    """A buffer allocated per call, a cache not reused, allocator retries (the allocator's
    figures against the baseline runs')."""
    base, cur = ev.baseline_memory, ev.current_memory
    if not cur or not cur.get("available"):
        return []
    out = []
    allocs = _grew(base, cur, "allocations_per_call", MORE_ALLOCATIONS)
    size = _grew(base, cur, "allocated_bytes_per_call", MORE_BYTES)
    if allocs and size:
        out.append(_buffers(led, allocs, size))
    dev = _grew(base, cur, "device_allocs_per_call", MORE_DEVICE_ALLOCS)
    if dev:
        text = (
            f"{dev[0]:g} -> {dev[1]:g} cudaMalloc calls per call: the allocator's cache is not "
            "reused (torch.cuda.empty_cache() inside the call, or sizes that change every "
            "call); each cudaMalloc/cudaFree costs tens of µs and cudaFree synchronises"
        )
        out.append(Finding(ALLOCATION_CHURN, text, idle=True))
    retries = _grew(base, cur, "alloc_retries", 1.0)
    if retries and not retries[0]:
        text = (
            f"{retries[1]:g} allocator retries during the measurement, none in the baseline: "
            "cudaMalloc failed and the cache was flushed (fragmentation, or memory running out; "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True helps against fragmentation)"
        )
        out.append(Finding(ALLOCATION_CHURN, text, idle=True))
    return out


def _buffers(led: Ledger, allocs: tuple[float, float], size: tuple[float, float]) -> Finding:
    """More allocations per call: a cause with the kernels that fill them, else a symptom."""
    counts = (
        f"{allocs[0]:g} -> {allocs[1]:g} allocations per call, {fmt_bytes(size[0])} -> "
        f"{fmt_bytes(size[1])} allocated per call (the caching allocator's counts)"
    )
    fills = [c for c in led.free() if c.delta_us > 0 and _BUFFER_KERNELS.search(c.name)]
    if not fills:
        return Finding(ALLOCATION_CHURN, f"{counts}: the buffers of the work above, not a cause "
                       "of their own", symptom=True)  # fmt: skip
    named = names(fills, 2)
    text = (
        f"a buffer is allocated on every call: {counts}; with it {named}; each fresh buffer is "
        "written in full again (a torch.cat into a new tensor, torch.zeros): allocate it once "
        "and write into it in place (out=, index_copy_, a preallocated cache)"
    )
    return Finding(ALLOCATION_CHURN, text, fills)


def activity_sentences(ev: Evidence) -> list[str]:
    """What the GPU's units say: the figures that moved, then what bounds the work now."""
    current = ev.current_activity
    if not act.usable(current):
        return []
    out = []
    moves = act.moved(ev.baseline_activity, current)
    if moves:
        text = ", ".join(m.text() for m in moves[:3])
        if act.left_tensor_cores(moves):
            text += ": the GEMMs left the tensor cores"
        out.append(f"GPU activity (NVML GPM): {text}")
    b = act.bound(current)
    if b is not None and b.label != "no clear limit":
        out.append(f"GPM now: {b.sentence}")
    return out


_DETAIL_KEYS = (
    "sm_util_pct",
    "sm_occupancy_pct",
    "tensor_pct",
    "fp32_util_pct",
    "dram_bw_util_pct",
)
_MEMORY_KEYS = (
    ("allocations_per_call", "allocations per call", "{:g}".format),
    ("allocated_bytes_per_call", "allocated per call", fmt_bytes),
    ("device_allocs_per_call", "cudaMalloc per call", "{:g}".format),
    ("alloc_retries", "retries", "{:g}".format),
)


def _cells(
    base: Sequence[Mapping[str, Any] | None],
    cur: Mapping[str, Any] | None,
    figures: Sequence[tuple[str, str, Callable[[Any], str]]],
) -> str:
    """``label baseline -> now`` of each figure the current side has."""
    cells = []
    for key, label, show in figures:
        now, was = act.num(cur, key), _base(base, key)
        if now is not None:
            cells.append(f"{label} {'' if was is None else show(was) + ' -> '}{show(now)}")
    return ", ".join(cells)


def details(ev: Evidence) -> list[str]:
    """The diagnosis' detail lines: the activity and allocator figures, baseline -> now."""
    out, gpu, mem = [], ev.current_activity, ev.current_memory
    if act.usable(gpu):
        gpm = [(k, act.LABELS[k], functools.partial(act.fmt, k)) for k in _DETAIL_KEYS]
        out.append("activity (GPM, baseline -> now): " + _cells(ev.baseline_activity, gpu, gpm))
    elif gpu and gpu.get("reason"):
        out.append(f"activity (GPM): unavailable: {gpu['reason']}")
    if mem and mem.get("available"):
        out.append("allocator (baseline -> now): " + _cells(ev.baseline_memory, mem, _MEMORY_KEYS))
    return out
