"""The measurement loop: calibrate, warm up until settled, measure, trim, classify.

"How to time" is a :class:`RoundTimer` (a backend); "when to stop" is a
:class:`~pytest_gpuperf.measure.policy.MeasurePolicy`. The loop calls the
timer itself, round after round; between two rounds it calls ``tick`` (the
progress line's, which writes at most once a second). The loop is pure
Python and is unit-tested with a synthetic timer.
"""

from __future__ import annotations

import contextlib
import gc
import math
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from pytest_gpuperf.measure.names import UNSTABLE_CLASSES
from pytest_gpuperf.measure.policy import MeasurePolicy
from pytest_gpuperf.measure.steady_state import (
    classify,
    drifting,
    mser_cut,
    settled,
    steady_tail,
)


class Round(NamedTuple):
    """What one round of a timer measured.

    ``per_call`` is the round's value of the benchmark's main figure (seconds per
    call), ``wall`` the host time the round took, ``calls`` the calls it made.
    ``e2e`` is a second figure some timers take in the same round: the
    end-to-end time per call of back-to-back calls (None where there is none).
    ``ranks`` is, for a timer of a process group, each rank's own time per call in
    rank order (``per_call`` then being the slowest rank's).
    """

    per_call: float
    wall: float
    calls: int
    e2e: float | None = None
    ranks: tuple[float, ...] | None = None


class RoundTimer(Protocol):
    """One timing backend, prepared for one function."""

    def time_round(self, calls: int) -> tuple[float, float, int] | Round:
        """Run about ``calls`` calls; return (seconds per call, wall seconds, calls made)."""
        ...


def _e2e(r: tuple[float, float, int] | Round) -> float | None:
    return r[3] if len(r) > 3 else None  # type: ignore[misc]


def _ranks(r: tuple[float, float, int] | Round) -> tuple[float, ...] | None:
    return r[4] if len(r) > 4 else None  # type: ignore[misc]


PhaseHook = Callable[[str], AbstractContextManager[object]]
#: called between two rounds, never inside one
Tick = Callable[[], None]


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
    #: the timer's second figure for each kept round (end-to-end time per call of
    #: back-to-back calls), aligned with ``rounds``; empty when the timer has none
    e2e_rounds: list[float] = field(default_factory=list)
    #: the loop's time cap stopped a measurement pass before its rounds were done
    time_capped: bool = False
    #: each rank's own time per call for each kept round (a process group's timer),
    #: aligned with ``rounds``; empty for other timers
    rank_rounds: list[tuple[float, ...]] = field(default_factory=list)


def _no_phase(name: str) -> AbstractContextManager[object]:
    return contextlib.nullcontext()


def _no_tick() -> None:
    pass


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def calibrate(timer: RoundTimer, policy: MeasurePolicy, tick: Tick = _no_tick) -> int:
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
        _, wall, done = timer.time_round(n)[:3]
        tick()
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
    tick: Tick = _no_tick,
) -> RawMeasurement:
    """Measure the steady state of whatever ``timer`` times (after its first call)."""
    t0 = clock()
    with phase("calibrate"):
        calls = calibrate(timer, policy, tick)
    with phase("warmup"), _gc_paused():
        w0 = clock()
        warm = _warm_up(timer, policy, calls, clock, w0, tick)
    warmup_s = clock() - w0
    deadline = _deadline(policy, warm.walls, t0)
    rounds = _Rounds(timer, warm.calls, clock, t0, deadline, tick)
    with phase("measure"), _gc_paused():
        start, changes, drift = _measure_steady(rounds, policy)
    stability, start = _classify(rounds, policy, start, changes, drift, warm.settled)
    kept = rounds.measured[start:]
    e2e = [x for x in rounds.second[start:] if x is not None]
    by_rank = [x for x in rounds.ranks[start:] if x is not None]
    return RawMeasurement(
        rounds=kept,
        calls_per_round=warm.calls,
        warmup=warm.rounds,
        trimmed=start,
        stability=stability,
        settled=warm.settled,
        warmup_s=warmup_s,
        wall_s=clock() - t0,
        spans=rounds.spans[start:],
        t0=t0,
        level_changes=changes,
        e2e_rounds=e2e if len(e2e) == len(kept) else [],
        time_capped=rounds.capped,
        rank_rounds=by_rank if len(by_rank) == len(kept) else [],
    )


@dataclass
class _Warmup:
    #: seconds per call of each warm-up round
    rounds: list[float]
    #: the host time of each warm-up round, for a timer that takes two figures
    walls: list[float]
    settled: bool
    #: calls per round (the last round's)
    calls: int


def _warm_up(
    timer: RoundTimer,
    policy: MeasurePolicy,
    calls: int,
    clock: Callable[[], float],
    w0: float,
    tick: Tick = _no_tick,
) -> _Warmup:
    """Run rounds until they settle (after ``min_warmup_ms``) or ``warmup_ms`` is spent."""
    warm: list[float] = []
    walls: list[float] = []
    while True:
        a = clock()
        r = timer.time_round(calls)
        per_call, calls_done = r[0], r[2]
        if _e2e(r) is not None:
            walls.append(clock() - a)
        tick()
        warm.append(per_call)
        elapsed_ms = (clock() - w0) * 1000.0
        if elapsed_ms >= policy.min_warmup_ms and settled(
            warm, policy.settle_window, policy.settle_tol
        ):
            return _Warmup(warm, walls, True, calls_done)
        if elapsed_ms >= policy.warmup_ms:
            return _Warmup(warm, walls, False, calls_done)


def _deadline(policy: MeasurePolicy, walls: list[float], t0: float) -> float:
    """A hard stop for the whole loop (rounds grow if the function slows down).

    The warm-up budget plus 2.5 measurement passes, after at least 5 rounds per pass. A
    round of a timer that takes two figures (or holds the GPU while the host enqueues)
    lasts longer than round_ms: its passes are sized by its warm-up rounds, up to 4x.
    """
    round_s = policy.round_ms / 1000.0
    if walls:
        recent = sorted(walls[-policy.settle_window :])
        round_s = min(4 * round_s, max(round_s, recent[len(recent) // 2]))
    return t0 + policy.warmup_ms / 1000.0 + 2.5 * policy.rounds * round_s


@dataclass
class _Rounds:
    """The measured rounds so far, and the time cap that stops a pass early."""

    timer: RoundTimer
    calls: int
    clock: Callable[[], float]
    t0: float
    deadline: float
    tick: Tick = _no_tick
    measured: list[float] = field(default_factory=list)
    #: the timer's second figure of each round (None where it has none)
    second: list[float | None] = field(default_factory=list)
    #: each rank's time per call of each round (a process group's timer; None otherwise)
    ranks: list[tuple[float, ...] | None] = field(default_factory=list)
    spans: list[tuple[float, float]] = field(default_factory=list)
    capped: bool = False

    def measure(self, n_rounds: int) -> None:
        """One pass: up to ``n_rounds`` rounds, at least 5 before the deadline may stop it."""
        for i in range(n_rounds):
            if i >= 5 and self.clock() > self.deadline:
                self.capped = True
                break
            a = self.clock()
            r = self.timer.time_round(self.calls)
            b = self.clock()
            self.tick()
            self.measured.append(r[0])
            self.second.append(_e2e(r))
            self.ranks.append(_ranks(r))
            self.spans.append((a - self.t0, b - self.t0))


def _measure_steady(rounds: _Rounds, policy: MeasurePolicy) -> tuple[int, int, bool]:
    """Measure a pass, and a second one if the first shows no steady level.

    Returns the steady tail's start, the level changes before it, and whether it drifts.
    """
    rounds.measure(policy.rounds)
    start, changes = steady_tail(rounds.measured, policy.shift_tol)
    drift = drifting(rounds.measured[start:], policy.shift_tol)
    if len(rounds.measured) - start < policy.rounds // 2 or changes >= 2 or drift:
        # Too little steady data, or a moving level: measure once more and look again.
        rounds.measure(policy.rounds)
        start, changes = steady_tail(rounds.measured, policy.shift_tol)
        drift = drifting(rounds.measured[start:], policy.shift_tol)
    return start, changes, drift


def _classify(
    rounds: _Rounds,
    policy: MeasurePolicy,
    start: int,
    changes: int,
    drift: bool,
    is_settled: bool,
) -> tuple[str, int]:
    """The measurement's stability class, and the first round to keep."""
    measured = rounds.measured
    wanted = policy.rounds
    if rounds.capped:
        # The time cap, not the data, limited the rounds (a function of seconds per call gets
        # 5 per pass): judge the kept rounds against those it let us measure, and look for a
        # drift over all of them, the kept ones being too few for drifting().
        wanted = min(wanted, len(measured))
        drift = drift or drifting(measured, policy.shift_tol)
    stability = classify(
        len(measured) - start, wanted, changes, warmup_settled=is_settled, drift=drift
    )
    if stability in UNSTABLE_CLASSES:
        # No steady level: every round after the initial transient is evidence of where its
        # level lies (the verdict bounds it by their range), not only the last segment.
        start = mser_cut(measured)
    return stability, start
