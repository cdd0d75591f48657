"""Clock regimes: is a comparison with the baseline fair, and does a slowdown persist in cycles?

Pure functions on ``Result.telemetry`` dicts. A would-be regression whose clock regime
differs from the baseline's (:func:`regime_difference`) is inconclusive (environment),
unless the slowdown persists in cycles (:func:`confirm_in_cycles`, nvbench's robust
comparison). A baseline keeps :data:`REGIME_KEYS` of each run's telemetry.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_gpuperf.telemetry import activity
from pytest_gpuperf.telemetry.reasons import BENIGN_NAMES

#: Median clocks further apart than this (relative) are different regimes.
CLOCK_TOLERANCE = 0.03
#: A slowdown reason active this much longer (share of the measurement) is a different regime.
SHARE_TOLERANCE = 0.2
#: The telemetry keys the functions below read (what a baseline keeps).
REGIME_KEYS = (
    "available",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "clock_events",
    "throttled_share",
    "other_processes",
)


def regime_summary(telemetry: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The part of a result's telemetry that regime comparisons need."""
    if not telemetry or not telemetry.get("available"):
        return None
    return {k: telemetry[k] for k in REGIME_KEYS if k in telemetry}


def baseline_telemetry(telemetry: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What a baseline run keeps of a result's telemetry: :func:`regime_summary`, and
    :func:`.activity.summary` under ``"activity"``."""
    out = regime_summary(telemetry) or {}
    act = activity.summary((telemetry or {}).get("activity"))
    if act is not None:
        out["activity"] = act
    return out or None


def _usable(t: Mapping[str, Any] | None) -> bool:
    return bool(t) and bool(t.get("available")) and _median(t, "sm_clock_mhz") is not None  # type: ignore[union-attr]


def _median(t: Mapping[str, Any] | None, metric: str) -> float | None:
    st = (t or {}).get(metric)
    if isinstance(st, Mapping) and st.get("median") is not None:
        return float(st["median"])
    return None


def _mhz_range(lo: float, hi: float) -> str:
    return f"{lo:.0f}" if round(lo) == round(hi) else f"{lo:.0f}-{hi:.0f}"


def regime_difference(
    baseline_summaries: Sequence[Mapping[str, Any] | None], current: Mapping[str, Any] | None
) -> str | None:
    """Why the current run's clock regime differs from the baseline runs' (a median clock, a
    slowdown reason's share beyond the tolerances above, other processes), or ``None``."""
    base = [b for b in baseline_summaries if b is not None and _usable(b)]
    if not base or current is None or not _usable(current):
        return None
    found: list[str] = []
    for metric, label in (("sm_clock_mhz", "SM clock"), ("mem_clock_mhz", "memory clock")):
        cur = _median(current, metric)
        vals = [v for v in (_median(b, metric) for b in base) if v is not None]
        if cur is None or not vals:
            continue
        lo, hi = min(vals), max(vals)
        if cur < lo * (1 - CLOCK_TOLERANCE) or cur > hi * (1 + CLOCK_TOLERANCE):
            off, side = (1 - cur / lo, "below") if cur < lo else (cur / hi - 1, "above")
            found.append(
                f"median {label} {cur:.0f} MHz, {100 * off:.0f} % {side} the "
                f"baseline's {_mhz_range(lo, hi)} MHz"
            )
    cur_shares: Mapping[str, float] = current.get("clock_events") or {}
    names = set(cur_shares).union(*(b.get("clock_events") or {} for b in base))
    for name in sorted(names - BENIGN_NAMES):
        c = float(cur_shares.get(name, 0.0))
        bs = [float((b.get("clock_events") or {}).get(name, 0.0)) for b in base]
        if c - max(bs) > SHARE_TOLERANCE or min(bs) - c > SHARE_TOLERANCE:
            bound, edge = ("at most", max(bs)) if c > max(bs) else ("at least", min(bs))
            found.append(
                f"{name} active {100 * c:.0f} % of the measurement, {bound} "
                f"{100 * edge:.0f} % in the baseline"
            )
    others = current.get("other_processes") or []
    if others and not any(b.get("other_processes") for b in base):
        pids = ", ".join(str(p.get("pid")) for p in others[:5])
        found.append(f"other processes on the GPU (pid {pids}), none during the baseline")
    return "clock regime differs from the baseline's: " + "; ".join(found) if found else None


def cycles_per_call(time_s: float, telemetry: Mapping[str, Any] | None) -> float | None:
    """SM cycles per call: time × median SM clock (``None`` without a clock)."""
    clock = _median(telemetry, "sm_clock_mhz") if telemetry and telemetry.get("available") else None
    if clock is None or clock <= 0:
        return None
    return time_s * clock * 1e6


@dataclass(frozen=True)
class CyclesCheck:
    """Whether a slowdown persists once the clock is accounted for."""

    #: current time / baseline time - 1
    time_change: float
    #: current cycles / baseline cycles - 1, ``None`` without clocks on both sides
    cycles_change: float | None
    #: the slowdown is at least ``min_change`` in cycles; ``None`` when it cannot be told
    confirmed: bool | None
    explanation: str


def confirm_in_cycles(
    baseline: Sequence[tuple[float, Mapping[str, Any] | None]],
    current_time_s: float,
    current_telemetry: Mapping[str, Any] | None,
    *,
    min_change: float,
) -> CyclesCheck:
    """Is a slowdown of at least ``min_change`` still there in cycles (time × SM clock)?

    ``baseline`` holds (time per call, telemetry) of each baseline run. A memory-bound
    kernel's time follows the memory clock, so there "not confirmed" means "cannot tell".
    """
    times = [t for t, _ in baseline if t and t > 0]
    if not times or current_time_s <= 0:
        return CyclesCheck(0.0, None, None, "no baseline time to compare with")
    time_change = current_time_s / statistics.median(times) - 1
    base = [c for c in (cycles_per_call(t, tel) for t, tel in baseline) if c is not None]
    cur = cycles_per_call(current_time_s, current_telemetry)
    if not base or cur is None:
        side = "the baseline" if not base else "this run"
        return CyclesCheck(
            time_change, None, None, f"no SM clock for {side}: cannot confirm in cycles"
        )
    change = cur / statistics.median(base) - 1
    confirmed = change >= min_change
    if confirmed:
        verdict = "the slowdown persists at equal clocks"
    elif time_change >= min_change:
        verdict = "the clock difference explains the slowdown"
    else:
        verdict = f"no slowdown of {100 * min_change:.1f} % or more"
    return CyclesCheck(
        time_change,
        change,
        confirmed,
        f"time {100 * time_change:+.1f} %, cycles (time × median SM clock) "
        f"{100 * change:+.1f} %: {verdict}",
    )
