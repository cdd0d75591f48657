"""Whether the measured rounds had their CPUs (contention), the CPU timer's clock, and the
detection of tracers (CPU)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time

import pytest

from pytest_gpuperf.baseline.codec import is_contention
from pytest_gpuperf.measure import contention
from pytest_gpuperf.measure.backend import Invocation
from pytest_gpuperf.measure.cpu import THREAD, WALL, CpuTimer
from pytest_gpuperf.measure.tracing import active_tracer

linux_schedstat = pytest.mark.skipif(
    contention.thread_schedstat() is None, reason="needs Linux's /proc/thread-self/schedstat"
)


def _measured(fn, seconds: float = 0.3) -> dict:  # type: ignore[no-untyped-def, type-arg]
    window = contention.ContentionWindow()
    with window.phase(lambda name: contextlib.nullcontext())(contention.PHASE):
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            fn()
    record = window.record()
    assert record is not None and is_contention(record), record
    return record


def _py_loop() -> float:
    total = 0.0
    for i in range(2000):
        total += i * 0.5
    return total


def _clock(fn) -> str:  # type: ignore[no-untyped-def]
    timer = CpuTimer(Invocation(fn, (), {}))
    calls = 1
    while timer.clock is None:
        timer.time_round(calls)
        calls *= 2
    return timer.clock


def test_the_window_reads_only_the_measured_phase() -> None:
    seen: list[str] = []
    window = contention.ContentionWindow()

    @contextlib.contextmanager
    def inner(name: str):  # type: ignore[no-untyped-def]
        seen.append(f"{name} open={window._start is not None}")
        yield

    phase = window.phase(inner)
    for name in ("calibrate", "warmup"):
        with phase(name):
            pass
    assert window._start is None and window.record() is None  # nothing read around those
    with phase(contention.PHASE):
        _py_loop()
    assert seen[-1] == "measure open=True"
    record = window.record("thread")
    assert record is not None and record["clock"] == "thread" and record["threads"] >= 1


@linux_schedstat
def test_a_neighbour_on_the_core_shows_as_waiting_for_a_cpu() -> None:
    """A busy loop pinned to the measuring thread's CPU takes about half of it: the process
    waited for a CPU a large share of the rounds, whatever else runs on the machine."""
    cpu = sorted(os.sched_getaffinity(0))[0]
    before = os.sched_getaffinity(0)
    neighbour = subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-c", "while 1: pass"])
    try:
        os.sched_setaffinity(0, {cpu})
        time.sleep(0.2)  # the neighbour is running
        record = _measured(_py_loop)
    finally:
        os.sched_setaffinity(0, before)
        neighbour.kill()
        neighbour.wait()
    assert record["waited"] >= 0.2, record
    assert record["threads"] < 1.1, record


def test_a_sleeping_benchmark_is_timed_on_the_wall_clock() -> None:
    assert _clock(lambda: time.sleep(0.002)) == WALL


def test_work_on_the_measuring_thread_alone_is_timed_on_its_cpu_clock() -> None:
    assert _clock(_py_loop) == THREAD


def test_an_op_split_over_threads_is_timed_on_the_wall_clock() -> None:
    torch = pytest.importorskip("torch")
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs two CPUs")
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    a = torch.randn(384, 384)
    try:
        assert _clock(lambda: a @ a) == WALL
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize(
    "bad",
    [{"waited": -0.1}, {"threads": 0.5}, {"clock": "cpu"}, {"waited": "x"}, [0.1]],
)
def test_a_baseline_refuses_a_contention_record_that_is_not_one(bad: object) -> None:
    assert not is_contention(bad)


def test_a_trace_function_is_found_and_named() -> None:
    def tracer(frame, event, arg):  # type: ignore[no-untyped-def]
        return tracer

    before = sys.gettrace()
    if before is not None:
        pytest.skip(f"this run is traced already ({active_tracer()})")
    sys.settrace(tracer)
    try:
        found = active_tracer()
    finally:
        sys.settrace(before)
    assert found is not None and found.startswith("sys.settrace (")
    assert "tracer" in found
    assert active_tracer() is None


def test_a_profile_function_is_found() -> None:
    import cProfile

    if sys.getprofile() is not None or sys.gettrace() is not None:
        pytest.skip("this run is traced or profiled already")
    prof = cProfile.Profile()
    prof.enable()
    try:
        found = active_tracer()
    finally:
        prof.disable()
    assert found is not None
    assert "cProfile" in found or "sys.monitoring profiler" in found
