"""CPU backend: host wall time with ``perf_counter_ns`` (torch CPU work is synchronous)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.measure.backend import Invocation
from pytest_gpuperf.measure.policy import MeasurePolicy

if TYPE_CHECKING:
    from pytest_gpuperf.measure.backend import Timer


class CpuTimer:
    """Rounds of back-to-back calls; with ``setup=``, each call timed alone after its setup.

    A round's value is the mean time per call; with ``setup`` it is the sum of
    the calls' own times (setup left out) over the calls.
    """

    mode = "cpu"

    def __init__(self, call: Invocation):
        #: with setup=: fresh arguments before each call (prepared outside the timed region)
        self._setup = call if call.has_setup else None
        fn, args, kwargs = call.fn, call.args, call.kwargs
        # Without setup, a plain closure: no extra work per timed call.
        self._call: Callable[[], Any] = (
            self._setup if self._setup is not None else (lambda: fn(*args, **kwargs))
        )

    def first_call(self) -> tuple[float, Any]:
        if self._setup is not None:
            self._setup.prepare()
        t = time.perf_counter_ns()
        out = self._call()
        return (time.perf_counter_ns() - t) / 1e9, out

    def prepare(self) -> None:
        pass

    def time_round(self, calls: int) -> tuple[float, float, int]:
        call = self._call
        clock = time.perf_counter_ns
        t = clock()
        if self._setup is not None:
            return calls_alone_ns(self._setup, calls) / 1e9 / calls, (clock() - t) / 1e9, calls
        for _ in range(calls):
            call()
        dt = (clock() - t) / 1e9
        return dt / calls, dt, calls

    def reset_peak_memory(self) -> None:
        pass

    def host_hidden(self, last: int) -> bool | None:
        return None  # one figure: the host's own time

    def host_time(self, last: int) -> float | None:
        return None

    def peak_memory(self) -> int | None:
        return None

    def close(self) -> None:
        pass


def calls_alone_ns(call: Invocation, calls: int) -> int:
    """Nanoseconds of ``calls`` calls, each timed alone after its (untimed) setup."""
    clock = time.perf_counter_ns
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
