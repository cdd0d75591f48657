"""The host-speed canary: how fast this process's host runs now, measured beside each benchmark.

Host-bound work (Python dispatch of small ops, kernel launches) runs at the host's speed,
and a host's speed moves: a neighbour process sharing the core, a sibling hyper-thread,
a slow period of the machine that outlasts a process (on an H200 host a whole compare ran
1.7x slower than its baseline's processes). A benchmark's own time cannot tell a slower
host from slower code; a fixed, tiny workload of the same kind, measured in the same
process next to the benchmark, can. Two numbers, read around the measured rounds of every
benchmark (the ``"measure"`` phase of :func:`pytest_gpuperf.measure.engine.run`):

* **op time**: the time per op of the fastest of a few bursts of tiny torch ops dispatched
  from a Python loop (``x.mul_(1.0)`` on a one-element tensor on the benchmark's device: on
  CUDA, one kernel launch each), half just before the rounds and half just after. Bursts are
  short (well under a scheduler slice); a burst that gets interrupted only gets slower, and on
  a shared machine half of them can be 2-4x slower (the CPU checks' saves of 2026-12-04: 3 of
  6 bursts at 7-14 us against 2.5-3 us), which moved a median by 2x while the host's own speed
  had not changed, and a baseline whose canaries said so failed unchanged code under a
  neighbour. The fastest burst is the host's speed while it runs
  (:func:`pytest_gpuperf.verdict.host_speed.op_time`).
* **share**: the part of the rounds' wall time the measuring thread spent on a CPU rather
  than waiting for one (``/proc/thread-self/schedstat``: run time over run time plus
  run-queue wait). A neighbour on the same core halves it; a benchmark that sleeps or waits
  for the GPU does not move it (waiting is neither).
* **others**: how many of the machine's CPUs other processes kept busy during the rounds
  (``/proc/stat``'s busy time, steal included, less this process's own CPU time, over the
  rounds' wall time). A neighbour on another core leaves the share at 1 but shares the
  caches and the memory with the benchmark: a run is on a quiet host only when both say so
  (:func:`pytest_gpuperf.verdict.host_speed.quiet`).

What it does not see: torch's intra-op threads on a busy CPU machine (a parallel CPU op
whose worker waits a scheduler slice costs milliseconds at random, and a canary op split
across those threads measured that randomness, not the host); the canary's op is serial.

A run's host factor is op time / share (:mod:`pytest_gpuperf.verdict.host_speed` judges
with it). Cost: 256 tiny ops and two small file reads per benchmark (about 0.5 ms on the
2-core CPU machine; ``bench/canary_check.py cost`` measures it). torch is imported inside
functions only; without torch the ops are plain Python calls.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

#: what the canary's ops are, as recorded (a run is compared only with runs of its kind)
KIND_CUDA, KIND_CPU, KIND_PYTHON = "cuda-launch", "torch-cpu", "python-call"

#: bursts before and after the rounds, and ops per burst
BURSTS, OPS = 3, 32
#: a sample stops adding bursts after this long (a busy machine can make each op slow)
SAMPLE_CAP_S = 0.005
#: the engine's phase whose rounds the canary speaks for
PHASE = "measure"

PhaseHook = Callable[[str], AbstractContextManager[object]]


class HostCanary:
    """The canary's workload on one device, made once per process (:func:`canary_for`)."""

    def __init__(self, device: str):
        self.device = device
        self.kind = KIND_PYTHON
        self.ops = OPS
        self._op: Callable[[], Any] = _python_op
        self._sync: Callable[[], None] = _nothing
        try:
            import torch
        except ImportError:
            torch = None
        if torch is not None:
            on_cuda = device == "cuda" and torch.cuda.is_available()
            x = torch.ones(1, device="cuda" if on_cuda else "cpu")
            self._op = lambda: x.mul_(1.0)
            self._sync = torch.cuda.synchronize if on_cuda else _nothing
            self.kind = KIND_CUDA if on_cuda else KIND_CPU
        for _ in range(2):  # first calls: lazy kernel loading, dispatcher caches
            self.burst()

    def burst(self) -> float:
        """Seconds per op of one burst of :attr:`ops` ops, from an idle device queue."""
        op, clock, n = self._op, time.perf_counter, self.ops
        self._sync()
        t = clock()
        for _ in range(n):
            op()
        dt = clock() - t
        self._sync()
        return dt / n


def _python_op() -> Any:
    return abs(-1.0)


def _nothing() -> None:
    pass


_CANARIES: dict[str, HostCanary | None] = {}


def canary_for(device: str) -> HostCanary | None:
    """This process's canary for ``device`` (None if it cannot be made)."""
    if device not in _CANARIES:
        try:
            _CANARIES[device] = HostCanary(device)
        except Exception:  # a canary is evidence beside the timing, never a reason to fail
            _CANARIES[device] = None
    return _CANARIES[device]


def machine_busy_s() -> float | None:
    """CPU seconds the whole machine has spent busy since boot (``/proc/stat``: every state
    but idle and I/O wait, so a hypervisor's steal counts), or None where it cannot say."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
        if fields[0] != "cpu":
            return None
        ticks = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
        return (sum(ticks) - ticks[3] - ticks[4]) / _CLK_TCK
    except (OSError, ValueError, IndexError):
        return None


def _clock_ticks() -> float:
    try:
        return float(os.sysconf("SC_CLK_TCK"))
    except (AttributeError, ValueError, OSError):  # not POSIX: there is no /proc/stat either
        return 100.0


_CLK_TCK = _clock_ticks()

#: rounds shorter than this leave "others" unmeasured: /proc/stat counts in ticks (10 ms)
OTHERS_MIN_S = 0.05


def thread_schedstat() -> tuple[int, int] | None:
    """(ns on a CPU, ns waiting for one) of the calling thread, or None where the kernel
    does not say (``/proc/thread-self/schedstat``: Linux with scheduler statistics)."""
    try:
        with open("/proc/thread-self/schedstat", encoding="ascii") as f:
            run, wait = f.read().split()[:2]
        return int(run), int(wait)
    except (OSError, ValueError):
        return None


class CanaryWindow:
    """The canary around one benchmark's measured rounds: :meth:`phase` wraps the
    engine's phase hook; :meth:`record` is what the result keeps."""

    def __init__(self, canary: HostCanary | None):
        self.canary = canary
        self.bursts: list[float] = []
        self.cost_s = 0.0
        self._start: tuple[float, tuple[int, int] | None] | None = None
        self._machine: tuple[float, float] | None = None
        self.share: float | None = None
        self.others: float | None = None

    def _sample(self) -> None:
        if self.canary is None:
            return
        t = time.perf_counter()
        try:
            self.canary.burst()  # warms the path again: the benchmark's own work evicted it
            for _ in range(BURSTS):
                self.bursts.append(self.canary.burst())
                if time.perf_counter() - t > SAMPLE_CAP_S:
                    break
        except Exception:
            self.canary = None
        self.cost_s += time.perf_counter() - t

    def _open(self) -> None:
        self._sample()
        busy = machine_busy_s()
        self._machine = None if busy is None else (busy, time.process_time())
        self._start = (time.perf_counter(), thread_schedstat())

    def _close(self) -> None:
        end = thread_schedstat()
        wall = time.perf_counter() - self._start[0] if self._start is not None else 0.0
        busy = machine_busy_s()
        if self._start is not None and self._start[1] is not None and end is not None:
            run = end[0] - self._start[1][0]
            wait = end[1] - self._start[1][1]
            if run > 0 and wait >= 0:
                self.share = run / (run + wait)
        if self._machine is not None and busy is not None and wall >= OTHERS_MIN_S:
            own = time.process_time() - self._machine[1]
            self.others = max(0.0, (busy - self._machine[0] - own) / wall)
        self._sample()

    def phase(self, inner: PhaseHook) -> PhaseHook:
        """``inner`` with the canary sampled just before and just after :data:`PHASE`."""

        @contextlib.contextmanager
        def hook(name: str) -> Iterator[object]:
            if name != PHASE:
                with inner(name) as value:
                    yield value
                return
            self._open()
            try:
                with inner(name) as value:
                    yield value
            finally:
                self._close()

        return hook

    def record(self) -> dict[str, Any] | None:
        """``Result.host_canary``: the op time (the fastest burst, seconds), the share of the
        rounds' time on a CPU, the CPUs other processes kept busy meanwhile, the bursts
        themselves and what the canary cost."""
        if self.canary is None or not self.bursts:
            return None
        op_s = min(self.bursts)
        if not op_s > 0:
            return None  # a clock that did not move (a test's virtual one): nothing measured
        out: dict[str, Any] = {
            "kind": self.canary.kind,
            "op_s": float(f"{op_s:.4g}"),
            "bursts": [float(f"{x:.4g}") for x in self.bursts],
            "cost_s": float(f"{self.cost_s:.3g}"),
        }
        if self.share is not None:
            out["share"] = round(self.share, 4)
        if self.others is not None:
            out["others"] = round(self.others, 3)
        return out


def torch_profiler_active() -> str | None:
    """``"torch.profiler"`` while a torch (autograd) profiler records in this process."""
    import sys

    torch = sys.modules.get("torch")  # a profiler that is on has torch imported already
    if torch is None:
        return None
    try:
        on = bool(torch.autograd.profiler._is_profiler_enabled)
    except AttributeError:
        return None
    return "torch.profiler" if on else None
