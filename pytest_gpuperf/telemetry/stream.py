"""Pure functions on a stream of telemetry samples: summaries, time shares, rounds marked.

Sample times ``t`` are on the clock of the measurement's round spans (seconds).
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from pytest_gpuperf.telemetry.reasons import (
    BENIGN_NAMES,
    KNOWN,
    MACHINE,
    MACHINE_NAMES,
    decode,
    slowdown,
)

#: A round runs at a "low clock" below this fraction of the maximum SM clock
#: (nvbench's throttle threshold is 75 % of the default clock).
LOW_CLOCK_FRACTION = 0.75


class Sample(NamedTuple):
    """One reading of the GPU; ``None`` where the GPU does not report a metric."""

    t: float
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    power_w: float | None = None
    temperature_c: float | None = None
    gpu_util_pct: float | None = None
    mem_util_pct: float | None = None
    #: NVML clock-event reason mask (see reasons.py)
    clock_events: int | None = None


#: The numeric metrics of a sample, as named in summaries and in the JSON.
METRICS = Sample._fields[1:-1]


def stats(values: Sequence[float]) -> dict[str, float] | None:
    """``{"min", "median", "max"}`` of ``values`` (``None`` when there are none)."""
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return None
    return {
        "min": round(min(vals), 3),
        "median": round(statistics.median(vals), 3),
        "max": round(max(vals), 3),
    }


def covering(samples: Sequence[Sample], start: float, end: float) -> list[Sample]:
    """The samples (sorted by time) that tell what the GPU did during ``[start, end]``: those
    inside it, or, when none is, the last sample before and the first after it."""
    times = [s.t for s in samples]
    lo = bisect.bisect_left(times, start)
    hi = bisect.bisect_right(times, end)
    if hi > lo:
        return list(samples[lo:hi])
    return list(samples[max(lo - 1, 0) : hi + 1])  # none inside: lo == hi (start <= end)


def weights(times: Sequence[float], start: float, end: float) -> list[float]:
    """The share of ``[start, end]`` each sample stands for: from the midpoint with its
    predecessor to the one with its successor, so irregular sampling does not bias shares."""
    n = len(times)
    if n == 0:
        return []
    bounds = [start] + [(times[i - 1] + times[i]) / 2 for i in range(1, n)] + [end]
    out = [max(0.0, min(bounds[i + 1], end) - max(bounds[i], start)) for i in range(n)]
    total = sum(out)
    if total <= 0:
        return [1.0 / n] * n
    return [w / total for w in out]


def reason_shares(
    samples: Sequence[Sample], start: float, end: float, names: Mapping[int, str] | None = None
) -> tuple[dict[str, float], float, int]:
    """Time share of each clock-event reason seen, share with any slowdown, and the bits seen."""
    have = [s for s in samples if s.clock_events is not None]
    if not have:
        return {}, 0.0, 0
    w = weights([s.t for s in have], start, end)
    shares: dict[str, float] = {}
    throttled = 0.0
    seen = 0
    for s, wi in zip(have, w, strict=True):
        mask = int(s.clock_events or 0)
        seen |= mask
        for name in decode(mask, names or KNOWN):
            shares[name] = shares.get(name, 0.0) + wi
        if slowdown(mask):
            throttled += wi
    return {k: round(v, 4) for k, v in sorted(shares.items())}, round(throttled, 4), seen


def summarize(
    samples: Sequence[Sample], start: float, end: float, names: Mapping[int, str] | None = None
) -> dict[str, Any]:
    """Per-metric min/median/max and reason time shares of the samples covering ``[start, end]``
    (each metric by the samples that report it: the slow ones are read every few samples)."""
    window = covering(samples, start, end)
    out: dict[str, Any] = {"samples": len(window)}
    for metric in METRICS:
        have = [s for s in samples if getattr(s, metric) is not None]
        st = stats([getattr(s, metric) for s in covering(have, start, end)])
        if st is not None:
            out[metric] = st
    shares, throttled, seen = reason_shares(window, start, end, names)
    out["clock_events"] = shares
    out["throttled_share"] = throttled
    out["clock_event_mask"] = seen
    return out


class RoundMarks(NamedTuple):
    """Indices of the kept rounds that telemetry marks."""

    #: overlapped a sample with any slowdown reason (power cap included)
    throttled: list[int]
    #: overlapped a thermal or hardware slowdown (the machine, not the workload)
    machine: list[int]
    #: ran below :data:`LOW_CLOCK_FRACTION` of the maximum SM clock
    low_clock: list[int]


def mark_rounds(
    samples: Sequence[Sample],
    spans: Sequence[tuple[float, float]],
    *,
    sm_clock_max_mhz: float | None,
) -> RoundMarks:
    """Mark (never drop) the rounds that ran throttled, throttled by the machine, or at a low
    SM clock, each judged by the samples covering it."""
    marks = RoundMarks([], [], [])
    limit = LOW_CLOCK_FRACTION * sm_clock_max_mhz if sm_clock_max_mhz else None
    for i, (a, b) in enumerate(spans):
        cover = covering(samples, a, b)
        masks = [int(s.clock_events) for s in cover if s.clock_events]
        if any(slowdown(m) for m in masks):
            marks.throttled.append(i)
        if any(m & MACHINE for m in masks):
            marks.machine.append(i)
        if limit is not None and any(
            s.sm_clock_mhz is not None and s.sm_clock_mhz < limit for s in cover
        ):
            marks.low_clock.append(i)
    return marks


def round_clocks(
    samples: Sequence[Sample], spans: Sequence[tuple[float, float]]
) -> list[float | None]:
    """The median SM clock of the samples covering each round (aligned with the rounds)."""
    have = [s for s in samples if s.sm_clock_mhz is not None]
    out: list[float | None] = []
    for a, b in spans:
        vals = [float(s.sm_clock_mhz) for s in covering(have, a, b) if s.sm_clock_mhz is not None]
        out.append(round(statistics.median(vals), 1) if vals else None)
    return out


def raw_table(samples: Sequence[Sample], t0: float) -> dict[str, Any]:
    """The raw stream, compactly: field names and one row per sample (``t`` relative to ``t0``)."""
    rows = [[round(s.t - t0, 6), *s[1:]] for s in samples]  # Sample: t, *METRICS, clock_events
    return {"fields": ["t_s", *METRICS, "clock_events"], "rows": rows}


def notes(telemetry: Mapping[str, Any] | None) -> list[str]:
    """What the telemetry of one result says a reader must know, each with what to do about it."""
    if not telemetry:
        return []
    if not telemetry.get("available"):
        if telemetry.get("failed"):
            return [f"telemetry failed during the measurement: {telemetry.get('reason')}"]
        return []
    out = []
    rounds = int(telemetry.get("rounds_checked") or 0)
    sm = telemetry.get("sm_clock_mhz") or {}
    smax = telemetry.get("sm_clock_max_mhz")
    clock = ""
    if sm:
        clock = f"SM clock {sm['min']:.0f}-{sm['max']:.0f} MHz (median {sm['median']:.0f}"
        clock += f", max {smax:.0f})" if smax else ")"
    share = float(telemetry.get("throttled_share") or 0.0)
    if share > 0:
        shares = telemetry.get("clock_events") or {}
        reasons = [
            f"{name} {100 * v:.0f} %"
            for name, v in shares.items()
            if v > 0 and name not in BENIGN_NAMES
        ]
        marked = f"{len(telemetry.get('throttled_rounds') or [])} of {rounds} rounds"
        head = f"{', '.join(reasons)} of the measurement; {clock}; {marked} marked"
        if any(shares.get(name, 0) > 0 for name in MACHINE_NAMES):
            out.append(
                f"throttled by the machine: {head}. Thermal and hardware slowdowns come from "
                "cooling or power delivery, not from the code: let the GPU cool, check its "
                "fans and power supply, and re-run"
            )
        else:
            out.append(
                f"clock limited: {head}. This is how the GPU runs this work under sustained "
                "load (power cap); results compare only with baselines measured in the same "
                "clock regime"
            )
    low = telemetry.get("low_clock_rounds") or []
    if low and share == 0:
        out.append(
            f"low clock: {len(low)} of {rounds} rounds ran below "
            f"{100 * LOW_CLOCK_FRACTION:.0f} % of the maximum SM clock ({clock}) without a "
            "throttle reason: the GPU was partly idle (launch-bound work: use cuda_graph=True) "
            "or still ramping up (raise warmup_ms)"
        )
    others = telemetry.get("other_processes") or []
    if others:
        out.append(
            f"other processes used the GPU during the measurement ({process_list(others)}); "
            "they share its SMs, memory bandwidth and power budget: stop them, or run on an "
            "idle GPU"
        )
    return out


def process_list(procs: Sequence[Mapping[str, Any]], most: int = 3) -> str:
    """``pid 42 python, 2.0 GiB, pid 77 ...`` for the first ``most`` processes, then a count."""
    parts = []
    for p in procs[:most]:
        text = f"pid {p.get('pid')}"
        if p.get("name"):
            text += f" {p['name']}"
        if p.get("used_memory_bytes"):
            text += f", {p['used_memory_bytes'] / 2**30:.1f} GiB"
        parts.append(text)
    if len(procs) > most:
        parts.append(f"and {len(procs) - most} more")
    return ", ".join(parts)
