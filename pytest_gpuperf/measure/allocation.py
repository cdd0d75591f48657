"""Memory behaviour per call, from the caching allocator's counters (read by :mod:`.memory`).

The ``*_per_call`` figures come from a window of plain calls after the measurement;
``alloc_retries``, ``device_allocs`` and ``reserved_growth_bytes`` count over the measurement.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Our name -> the memory_stats keys that hold it, in order of preference (they moved
#: between torch releases).
COUNTERS: dict[str, tuple[str, ...]] = {
    "allocations": ("allocation.all.allocated", "allocated.all.allocated"),
    "frees": ("allocation.all.freed", "allocated.all.freed"),
    "allocated_bytes": ("allocated_bytes.all.allocated",),
    "device_allocs": ("num_device_alloc", "segment.all.allocated"),
    "device_frees": ("num_device_free", "segment.all.freed"),
    "alloc_retries": ("num_alloc_retries",),
    "ooms": ("num_ooms",),
    "reserved_bytes": ("reserved_bytes.all.current",),
    "reserved_peak_bytes": ("reserved_bytes.all.peak",),
}
PER_CALL = ("allocations", "frees", "allocated_bytes", "device_allocs", "device_frees")
#: What a report shows without a GPU (and what a baseline keeps then: nothing).
CPU_REASON = (
    "the CPU has no caching-allocator counters in PyTorch (allocations, frees, retries and "
    "reserved memory are CUDA figures); peak memory is not measured on the CPU either"
)


def pick(stats: Mapping[str, Any]) -> dict[str, int]:
    """The counters of :data:`COUNTERS` found in a ``torch.cuda.memory_stats()`` dict."""
    out: dict[str, int] = {}
    for name, keys in COUNTERS.items():
        for k in keys:
            v = stats.get(k)
            if isinstance(v, int) and not isinstance(v, bool):
                out[name] = v
                break
    return out


def unavailable(reason: str) -> dict[str, Any]:
    return {"available": False, "reason": reason}


def figures(
    measure_start: Mapping[str, int],
    measure_end: Mapping[str, int],
    window_start: Mapping[str, int],
    window_end: Mapping[str, int],
    calls: int,
) -> dict[str, Any]:
    """``Result.memory`` from snapshots around the measurement and its window of plain calls."""
    out: dict[str, Any] = {"available": True, "source": "torch.cuda.memory_stats"}

    def delta(a: Mapping[str, int], b: Mapping[str, int], name: str) -> int | None:
        return b[name] - a[name] if name in a and name in b else None

    if calls > 0:
        out["calls"] = calls
        for name in PER_CALL:
            d = delta(window_start, window_end, name)
            if d is not None:
                out[f"{name}_per_call"] = round(d / calls, 4)
    for name in ("alloc_retries", "device_allocs", "ooms"):
        d = delta(measure_start, window_end, name)
        if d is not None:
            out[name] = d
    if "reserved_bytes" in window_end:
        out["reserved_bytes"] = window_end["reserved_bytes"]
    d = delta(measure_start, measure_end, "reserved_bytes")
    if d is not None:
        out["reserved_growth_bytes"] = d
    return out
