"""The measurement loop: calibrate, warm up until settled, measure, trim, classify.

"How to time" is a :class:`RoundTimer` (a backend); "when to stop" is a
:class:`~pytest_gpuperf.measure.policy.MeasurePolicy`. The loop itself is
pure Python and is unit-tested with a synthetic timer.
"""

from __future__ import annotations

import contextlib
import gc
import math
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

from pytest_gpuperf.measure.policy import MeasurePolicy
from pytest_gpuperf.measure.steady_state import classify, drifting, settled, steady_tail


class RoundTimer(Protocol):
    """One timing backend, prepared for one function."""

    def time_round(self, calls: int) -> tuple[float, float, int]:
        """Run about ``calls`` calls; return (seconds per call, wall seconds, calls made)."""
        ...


PhaseHook = Callable[[str], AbstractContextManager[object]]


@dataclass
class RawMeasurement:
    rounds: list[float]
    calls_per_round: int
    warmup: list[float]
    trimmed: int
    stability: str
    settled: bool
    warmup_s: float
    wall_s: float
    #: (start, end) of each kept round, seconds since the loop began
    spans: list[tuple[float, float]] = field(default_factory=list)
    #: the loop's start on ``clock`` (to align telemetry samples with rounds)
    t0: float = 0.0
    #: material level changes found before the steady tail (2+ = unstable)
    level_changes: int = 0
    #: the loop's time cap stopped a measurement pass before its rounds were done
    time_capped: bool = False


def _no_phase(name: str) -> AbstractContextManager[object]:
    return contextlib.nullcontext()


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def calibrate(timer: RoundTimer, policy: MeasurePolicy) -> int:
    """Calls per round so that one round lasts about ``round_ms`` of wall time.

    Rounds grow until one lasts a quarter of ``round_ms``; the estimate is the
    fastest per-call wall time of at least three rounds, so one slow call
    (a recompile, a page fault) does not shrink every round to one call.
    """
    target = policy.round_ms / 1000.0
    n = 1
    best = math.inf
    trials = 0
    while True:
        _, wall, done = timer.time_round(n)
        trials += 1
        best = min(best, wall / max(done, 1))
        if trials >= 3 and (wall >= target / 4 or done >= policy.max_calls_per_round):
            break
        if wall < target / 4 and done < policy.max_calls_per_round:
            grow = math.ceil(done * (target / 4) / max(wall, 1e-9))
            n = min(policy.max_calls_per_round, max(2 * done, grow))
    return max(1, min(policy.max_calls_per_round, round(target / max(best, 1e-12))))


def run(
    timer: RoundTimer,
    policy: MeasurePolicy,
    *,
    clock: Callable[[], float] = time.perf_counter,
    phase: PhaseHook = _no_phase,
) -> RawMeasurement:
    """Measure the steady state of whatever ``timer`` times (after its first call)."""
    t0 = clock()
    with phase("calibrate"):
        calls = calibrate(timer, policy)

    warm: list[float] = []
    is_settled = False
    with phase("warmup"), _gc_paused():
        w0 = clock()
        while True:
            per_call, _, calls_done = timer.time_round(calls)
            warm.append(per_call)
            elapsed_ms = (clock() - w0) * 1000.0
            if elapsed_ms >= policy.min_warmup_ms and settled(
                warm, policy.settle_window, policy.settle_tol
            ):
                is_settled = True
                break
            if elapsed_ms >= policy.warmup_ms:
                break
    warmup_s = clock() - w0
    calls = calls_done

    measured: list[float] = []
    spans: list[tuple[float, float]] = []
    capped = False
    # A hard stop for the whole loop (rounds grow if the function slows down): the
    # warm-up budget plus 2.5 measurement passes, after at least 5 rounds per pass.
    deadline = t0 + (policy.warmup_ms + 2.5 * policy.rounds * policy.round_ms) / 1000.0

    def measure(n_rounds: int) -> None:
        nonlocal capped
        for i in range(n_rounds):
            if i >= 5 and clock() > deadline:
                capped = True
                break
            a = clock()
            per_call, _, _ = timer.time_round(calls)
            b = clock()
            measured.append(per_call)
            spans.append((a - t0, b - t0))

    with phase("measure"), _gc_paused():
        measure(policy.rounds)
        start, changes = steady_tail(measured, policy.shift_tol)
        drift = drifting(measured[start:], policy.shift_tol)
        if len(measured) - start < policy.rounds // 2 or changes >= 2 or drift:
            # Too little steady data, or a moving level: measure once more and look again.
            measure(policy.rounds)
            start, changes = steady_tail(measured, policy.shift_tol)
            drift = drifting(measured[start:], policy.shift_tol)
    kept = measured[start:]
    wanted = policy.rounds
    if capped:
        # The time cap, not the data, limited the rounds (a function of seconds per call gets
        # 5 per pass): judge the kept rounds against those it let us measure, and look for a
        # drift over all of them, the kept ones being too few for drifting() (issue 12, #9).
        wanted = min(wanted, len(measured))
        drift = drift or drifting(measured, policy.shift_tol)
    stability = classify(len(kept), wanted, changes, warmup_settled=is_settled, drift=drift)
    return RawMeasurement(
        rounds=kept,
        calls_per_round=calls,
        warmup=warm,
        trimmed=start,
        stability=stability,
        settled=is_settled,
        warmup_s=warmup_s,
        wall_s=clock() - t0,
        spans=spans[start:],
        t0=t0,
        level_changes=changes,
        time_capped=capped,
    )
