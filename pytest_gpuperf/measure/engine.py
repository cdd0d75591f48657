"""The measurement loop: calibrate, warm up until settled, measure, trim, classify.

"How to time" is a :class:`Timer` (the loop calls its ``time_round``),
"when to stop" a :class:`MeasurePolicy`. Pure Python, unit-tested with a synthetic timer;
:func:`run` is the whole loop.
"""

from __future__ import annotations

import contextlib
import gc
import math
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, TypeVar

from pytest_gpuperf.measure.names import UNSTABLE_CLASSES
from pytest_gpuperf.measure.policy import MeasurePolicy
from pytest_gpuperf.measure.steady_state import classify, drifting, mser_cut, settled, steady_tail


class Round(NamedTuple):
    """What one round of a timer measured: ``per_call`` seconds of the main figure, ``wall``
    host seconds, ``calls`` made; ``e2e``, end-to-end time per call of back-to-back calls,
    where the timer takes it; ``ranks``, each rank's own time (a process group's timer)."""

    per_call: float
    wall: float
    calls: int
    e2e: float | None = None
    ranks: tuple[float, ...] | None = None


class Timer(Protocol):
    """One timing backend for one function, called in the order of its methods below
    (:meth:`close` always, last); a subclass inherits the defaults: no such figures."""

    def first_call(self) -> tuple[float, Any]:
        """Call the function once, untimed by the loop: (seconds it took, its output)."""
        ...

    def prepare(self) -> None:
        """Get ready to time rounds (capture a graph, allocate the L2 flush buffer)."""
        return None

    def reset_peak_memory(self) -> None:
        return None

    def time_round(self, calls: int) -> tuple[float, float, int] | Round:
        """Run about ``calls`` calls; return (seconds per call, wall seconds, calls made)."""
        ...

    def host_hidden(self, last: int) -> bool | None:
        """Whether the host ran ahead of the device in the ``last`` rounds."""
        return None

    def host_time(self, last: int) -> float | None:
        """The host's own time per call in the ``last`` rounds."""
        return None

    def peak_memory(self) -> int | None:
        """Peak device memory in bytes since :meth:`reset_peak_memory`."""
        return None

    def close(self) -> None:
        """Release what the timer holds (graphs, buffers)."""
        return None


_T = TypeVar("_T")
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
    #: the timer's second figure for each kept round (empty when it has none)
    e2e_rounds: list[float] = field(default_factory=list)
    #: the loop's time cap stopped a measurement pass before its rounds were done
    time_capped: bool = False
    #: each rank's own time per call for each kept round (a process group's timer)
    rank_rounds: list[tuple[float, ...]] = field(default_factory=list)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def calibrate(timer: Timer, policy: MeasurePolicy, tick: Tick = lambda: None) -> int:
    """Calls per round so that one round lasts about ``round_ms`` of wall time, from the
    fastest per-call wall time of at least three rounds (one slow call does not count)."""
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
    timer: Timer,
    policy: MeasurePolicy,
    *,
    clock: Callable[[], float] = time.perf_counter,
    phase: PhaseHook = contextlib.nullcontext,
    tick: Tick = lambda: None,
) -> RawMeasurement:
    """Measure the steady state of what ``timer`` times (after its first call): size the rounds,
    warm up until they settle, measure a pass of rounds (two if the first holds no steady level),
    classify them, keep the steady tail. Only the timer runs fn; ``tick`` runs between rounds."""
    t0 = clock()
    with phase("calibrate"):
        calls = calibrate(timer, policy, tick)

    # Warm up: rounds until they settle (after min_warmup_ms) or warmup_ms is spent.
    warmup: list[float] = []
    walls: list[float] = []  # each warm-up round's host time, for a timer of two figures
    with phase("warmup"), gc_paused():
        w0 = clock()
        while True:
            a = clock()
            r = Round(*timer.time_round(calls))
            if r.e2e is not None:
                walls.append(clock() - a)
            tick()
            warmup.append(r.per_call)
            elapsed_ms = (clock() - w0) * 1000.0
            warm = elapsed_ms >= policy.min_warmup_ms
            warmed = warm and settled(warmup, policy.settle_window, policy.settle_tol)
            if warmed or elapsed_ms >= policy.warmup_ms:
                break
    warmup_s = clock() - w0
    calls = r.calls  # the calls per round the timer made (its last warm-up round's)
    deadline = _deadline(policy, walls, t0)

    # Measure a pass, and one more if it holds no steady level (the deadline may end one at 5)
    rounds: list[float] = []
    taken: list[tuple[Round, float, float]] = []  # (round, start, end)
    capped = False
    with phase("measure"), gc_paused():
        for _ in range(2):
            for i in range(policy.rounds):
                if i >= 5 and clock() > deadline:
                    capped = True
                    break
                a = clock()
                r = Round(*timer.time_round(calls))
                b = clock()
                tick()
                rounds.append(r.per_call)
                taken.append((r, a - t0, b - t0))
            start, changes = steady_tail(rounds, policy.shift_tol)
            drift = drifting(rounds[start:], policy.shift_tol)
            if len(rounds) - start >= policy.rounds // 2 and changes < 2 and not drift:
                break

    # Classify (against the rounds a time cap let us take); unsteady: keep all but the transient
    wanted = min(policy.rounds, len(rounds)) if capped else policy.rounds
    drift = drift or (capped and drifting(rounds, policy.shift_tol))
    stability = classify(len(rounds) - start, wanted, changes, warmup_settled=warmed, drift=drift)
    if stability in UNSTABLE_CLASSES:
        start = mser_cut(rounds)
    kept, tail = rounds[start:], taken[start:]
    return RawMeasurement(
        rounds=kept,
        calls_per_round=calls,
        warmup=warmup,
        trimmed=start,
        stability=stability,
        settled=warmed,
        warmup_s=warmup_s,
        wall_s=clock() - t0,
        spans=[(a, b) for _, a, b in tail],
        t0=t0,
        e2e_rounds=_every([r.e2e for r, _, _ in tail]),
        time_capped=capped,
        rank_rounds=_every([r.ranks for r, _, _ in tail]),
    )


def _every(values: list[_T | None]) -> list[_T]:
    """``values`` when every round has one, else empty (a timer gives a figure or none)."""
    kept = [v for v in values if v is not None]
    return kept if len(kept) == len(values) else []


def _deadline(policy: MeasurePolicy, walls: list[float], t0: float) -> float:
    """A hard stop for the whole loop: the warm-up budget plus 2.5 measurement passes (a timer
    of two figures has longer rounds than round_ms: sized by its warm-up rounds, up to 4x)."""
    round_s = policy.round_ms / 1000.0
    if walls:
        recent = statistics.median_high(walls[-policy.settle_window :])
        round_s = min(4 * round_s, max(round_s, recent))
    return t0 + policy.warmup_ms / 1000.0 + 2.5 * policy.rounds * round_s
