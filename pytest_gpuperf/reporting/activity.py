"""One line each for what the GPU's units did (GPM), what the allocator did, and the peaks
(the terminal's ``-v``, the HTML report, the diagnosis' details)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_gpuperf.measure import peaks
from pytest_gpuperf.model import Result
from pytest_gpuperf.reporting.explain import secondary_words
from pytest_gpuperf.telemetry import activity as act
from pytest_gpuperf.units import fmt_bytes
from pytest_gpuperf.verdict.secondary import HIGHER, LOWER, MEMORY_BEHAVIOUR, PEAK_MEMORY

#: The GPM figures a line shows, each from this value up: the main four always, the
#: secondary ones from 10 %, transfers from a rate that counts as moving data.
_SHOWN: dict[str, float | None] = {
    **dict.fromkeys(("sm_util_pct", "sm_occupancy_pct", "tensor_pct", "dram_bw_util_pct"), None),
    **dict.fromkeys(("tensor_hmma_pct", "fp32_util_pct", "fp64_util_pct"), 10.0),
    **dict.fromkeys(
        ("pcie_tx_mib_s", "pcie_rx_mib_s", "nvlink_tx_mib_s", "nvlink_rx_mib_s"),
        act.MOVE_RATE_MIB_S,
    ),
}


def _unavailable(x: Mapping[str, Any] | None) -> str:
    return f"unavailable: {x.get('reason', '?')}" if x else ""


def activity_line(a: Mapping[str, Any] | None) -> str:
    """``SM util 95 %, SM occupancy 77 %, DRAM bandwidth 77 %: memory-bound``."""
    if not a or not a.get("available"):
        return _unavailable(a)
    shown = [
        f"{act.LABELS[k]} {act.fmt(k, v)}"
        for k, least in _SHOWN.items()
        if (v := act.num(a, k)) is not None and (least is None or v >= least)
    ]
    b = act.bound(a)
    text = ", ".join(shown)
    return f"{text}: {b.label}" if b is not None and b.label != "no clear limit" else text


def memory_line(m: Mapping[str, Any] | None) -> str:
    """``1 allocation(s) per call (64.0 MiB), 0 cudaMalloc per call; ...; no retries``."""
    if not m or not m.get("available"):
        return _unavailable(m)
    parts = []
    allocs = act.num(m, "allocations_per_call")
    if allocs is not None:
        size = act.num(m, "allocated_bytes_per_call")
        parts.append(
            f"{allocs:g} allocation(s) per call"
            + (f" ({fmt_bytes(size)})" if size else "")
            + f", {(act.num(m, 'device_allocs_per_call') or 0):g} cudaMalloc per call"
        )
    growth = act.num(m, "reserved_growth_bytes")
    if growth is not None:
        sign = "+" if growth >= 0 else "-"
        parts.append(f"reserved {sign}{fmt_bytes(abs(growth))} during the measurement")
    if retries := act.num(m, "alloc_retries"):
        parts.append(f"{retries:g} allocator retr{'y' if retries == 1 else 'ies'} (cache flushed)")
    elif retries == 0:
        parts.append("no retries")
    return "; ".join(parts)


def lines(r: Result) -> list[str]:
    """What a report says of one result's activity, memory behaviour and peak fractions."""
    out = []
    if a := (r.run.telemetry or {}).get("activity"):
        out.append(f"activity (GPM): {activity_line(a)}")
    if r.run.memory:
        out.append(f"allocator: {memory_line(r.run.memory)}")
    if p := peaks.describe(r.run.of_peak):
        out.append(f"throughput: {p}")
    return out


def memory_changes(r: Result) -> list[str]:
    """The memory figures that changed against the baseline, as the verdict compared them."""
    c = r.comparison
    if c is None:
        return []
    return [
        secondary_words(s)
        for s in c.secondary
        if s.metric in (PEAK_MEMORY, *MEMORY_BEHAVIOUR) and s.kind in (HIGHER, LOWER)
    ]
