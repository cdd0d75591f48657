"""Whether the measured rounds had the CPUs they needed: what a run records beside its timings.

A timing taken while the process waited for a CPU measures the machine, not the code.
``waited``: the threads' run-queue delay (``/proc/self/task/*/schedstat``; sleeping or
waiting for the GPU does not count) over the rounds' wall time; ``threads``: the process's
CPU time over the measuring thread's.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any

from pytest_gpuperf.measure.engine import PhaseHook

#: the engine's phase whose rounds the record speaks for
PHASE = "measure"
#: A figure that counts waits for a CPU is no evidence once the run's threads waited for one
#: this share of its rounds' time (beyond the 3 % threshold; such wall-clock runs spread
#: 1.5-3x between processes on the 2-core machine, bench/cpu_pools.py)
WAITED = 0.05
#: a process whose CPU time is at most this many times its measuring thread's did the work
#: on that thread (the CPU timer's thread clock needs it, measure/cpu.py)
ONE_THREAD = 1.1
#: the first word of the note a contended run carries (measure/flags.py)
CONTENDED = "contended:"


def thread_schedstat() -> tuple[int, int] | None:
    """(ns on a CPU, ns waiting for one) of this thread, or None where the kernel does not say."""
    return _schedstat("/proc/thread-self/schedstat")


def process_wait_ns() -> int | None:
    """Nanoseconds the process's threads have waited for a CPU, summed (None: not known)."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    # a thread that ended meanwhile is gone: its waits with it
    waits = [got[1] for t in tasks if (got := _schedstat(f"/proc/self/task/{t}/schedstat"))]
    return sum(waits) if waits else None


def _schedstat(path: str) -> tuple[int, int] | None:
    try:
        with open(path, encoding="ascii") as f:
            run, wait = f.read().split()[:2]
        return int(run), int(wait)
    except (OSError, ValueError):
        return None


class ContentionWindow:
    """The contention of one benchmark's measured rounds: :meth:`phase` wraps the engine's
    phase hook; :meth:`record` is what the run keeps."""

    def __init__(self) -> None:
        self._start: tuple[float, int | None, int, int] | None = None
        self.waited: float | None = None
        self.threads: float | None = None

    def _close(self) -> None:
        if self._start is None:
            return
        wall0, wait0, proc0, thread0 = self._start
        thread = time.thread_time_ns() - thread0
        proc = time.process_time_ns() - proc0
        wait = process_wait_ns()
        wall = time.perf_counter() - wall0
        if wait is not None and wait0 is not None and wall > 0:
            self.waited = max(0.0, (wait - wait0) / 1e9 / wall)
        if thread > 0:
            self.threads = max(1.0, proc / thread)

    def phase(self, inner: PhaseHook) -> PhaseHook:
        """``inner`` with the scheduler read just before and just after :data:`PHASE`."""

        @contextlib.contextmanager
        def hook(name: str) -> Iterator[object]:
            if name != PHASE:
                with inner(name) as value:
                    yield value
                return
            wait = process_wait_ns()
            self._start = (time.perf_counter(), wait, time.process_time_ns(), time.thread_time_ns())
            try:
                with inner(name) as value:
                    yield value
            finally:
                self._close()

        return hook

    def record(self, clock: str | None = None) -> dict[str, Any] | None:
        """``contention`` of a run: ``waited``, ``threads`` and the ``clock`` the timer read
        (``"thread"``, ``"wall"``, or None for a GPU's own figure)."""
        waited = None if self.waited is None else round(self.waited, 4)
        threads = None if self.threads is None else round(self.threads, 2)
        out = {"clock": clock, "waited": waited, "threads": threads}
        return {k: v for k, v in out.items() if v is not None} or None
