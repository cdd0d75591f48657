"""CPU backend: the measuring thread's CPU time, or wall time (torch CPU work is synchronous).

Work on the measuring thread alone is timed by its CPU time (a neighbour that takes the
core adds wall time, not CPU time); work on other threads too, or that sleeps, by wall
time. The choice is made once per timer on its first rounds (``contention["clock"]``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pytest_gpuperf.measure.backend import Invocation, Timer
from pytest_gpuperf.measure.contention import ONE_THREAD, thread_schedstat
from pytest_gpuperf.measure.policy import MeasurePolicy

THREAD, WALL = "thread", "wall"
#: rounds (the engine's first, calibrating ones) and wall time the clock is chosen on
PROBE_ROUNDS, PROBE_S = 3, 0.002
#: the thread blocked (sleeping, waiting for I/O or a peer) at most this share of the time
BLOCKED = 0.1


class CpuTimer(Timer):
    """Rounds of back-to-back calls, the mean time per call on :attr:`clock`; with
    ``setup=``, each call timed alone after its setup."""

    mode = "cpu"

    def __init__(self, call: Invocation):
        self._inv = call
        fn, args, kwargs = call.fn, call.args, call.kwargs
        # Without setup, a plain closure: no extra work per timed call.
        self._call: Callable[[], Any] = call if call.has_setup else (lambda: fn(*args, **kwargs))
        #: THREAD or WALL, once the first rounds have shown which (None until then)
        self.clock: str | None = None
        self._probe = _Probe()

    def first_call(self) -> tuple[float, Any]:
        self._inv.prepare()
        t = time.perf_counter_ns()
        out = self._call()
        return (time.perf_counter_ns() - t) / 1e9, out

    def time_round(self, calls: int) -> tuple[float, float, int]:
        if self.clock is None:
            return self._probe_round(calls)
        tick = time.thread_time_ns if self.clock == THREAD else time.perf_counter_ns
        t = time.perf_counter_ns()
        ns = calls_ns(self._inv, calls, tick, self._call)
        return ns / 1e9 / calls, (time.perf_counter_ns() - t) / 1e9, calls

    def _probe_round(self, calls: int) -> tuple[float, float, int]:
        """A round timed on both clocks; the clock is chosen once the probe has seen enough."""
        p = self._probe
        sched = thread_schedstat()
        proc, thread = time.process_time_ns(), time.thread_time_ns()
        t = time.perf_counter_ns()
        calls_ns(self._inv, calls, time.perf_counter_ns, self._call)
        wall = time.perf_counter_ns() - t
        p.add(wall, time.thread_time_ns() - thread, time.process_time_ns() - proc, sched)
        if p.rounds >= PROBE_ROUNDS and p.wall >= PROBE_S * 1e9:
            self.clock = p.clock()
        return wall / 1e9 / calls, wall / 1e9, calls


class _Probe:
    """What the first rounds showed: wall, thread and process CPU time, time blocked."""

    def __init__(self) -> None:
        self.rounds = 0
        self.wall = self.thread = self.proc = self.blocked = 0
        self.best = 0.0
        self.sched = True

    def add(self, wall: int, thread: int, proc: int, before: tuple[int, int] | None) -> None:
        after = thread_schedstat()
        self.rounds += 1
        self.wall += wall
        self.thread += thread
        self.proc += proc
        self.best = max(self.best, thread / wall if wall > 0 else 0.0)
        if before is None or after is None:
            self.sched = False
        else:  # the CPU time from the thread's clock: schedstat's lags by up to a tick
            self.blocked += max(0, wall - thread - (after[1] - before[1]))

    def clock(self) -> str:
        if self.proc > ONE_THREAD * self.thread:
            return WALL
        if self.sched:
            return THREAD if self.blocked <= BLOCKED * self.wall else WALL
        return THREAD if self.best >= 1 - BLOCKED else WALL


def calls_ns(
    call: Invocation, calls: int, clock: Callable[[], int], plain: Callable[[], Any] | None = None
) -> int:
    """Nanoseconds of ``calls`` calls on ``clock``: back to back (of ``plain``, the same call
    without the Invocation's own work, if given), or with ``setup=`` each timed alone after it."""
    if not call.has_setup:
        fn = plain or call
        a = clock()
        for _ in range(calls):
            fn()
        return clock() - a
    timed = 0
    for _ in range(calls):
        call.prepare()
        a = clock()
        call()
        timed += clock() - a
    return timed


def make_cpu_timer(call: Invocation, policy: MeasurePolicy) -> Timer:
    """The factory of the ``cpu`` mode (:class:`.backend.TimerFactory`)."""
    return CpuTimer(call)
