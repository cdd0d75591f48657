"""The host-speed canary around the measured rounds, and the detection of tracers (CPU)."""

from __future__ import annotations

import contextlib
import os
import sys
import time as real_time
import types
from collections.abc import Iterator

import pytest

from pytest_gpuperf.baseline.schema import is_canary
from pytest_gpuperf.measure import canary
from pytest_gpuperf.measure.tracing import active_tracer
from pytest_gpuperf.verdict.host_speed import op_time


class CountingCanary:
    kind = "fake"

    def __init__(self) -> None:
        self.calls = 0

    def burst(self) -> float:
        self.calls += 1
        return 1e-6 * self.calls


def test_the_window_samples_just_before_and_after_the_measured_rounds_only() -> None:
    c = CountingCanary()
    window = canary.CanaryWindow(c)  # type: ignore[arg-type]
    seen: list[str] = []

    @contextlib.contextmanager
    def inner(name: str) -> Iterator[None]:
        seen.append(f"enter {name} after {c.calls}")
        yield
        seen.append(f"exit {name} after {c.calls}")

    phase = window.phase(inner)
    for name in ("calibrate", "warmup"):
        with phase(name):
            pass
    assert c.calls == 0  # no canary around calibration and warm-up
    with phase(canary.PHASE):
        pass
    per_sample = 1 + canary.BURSTS  # a warm-in burst, then the timed ones
    assert seen[-2:] == [f"enter measure after {per_sample}", f"exit measure after {per_sample}"]
    assert c.calls == 2 * per_sample
    record = window.record()
    assert record is not None
    assert record["kind"] == "fake" and len(record["bursts"]) == 2 * canary.BURSTS
    assert record["op_s"] == pytest.approx(min(record["bursts"]), rel=1e-3)  # the fastest burst
    assert is_canary(record)


def test_the_canary_is_cheap_and_its_record_is_what_a_baseline_accepts() -> None:
    pytest.importorskip("torch")
    c = canary.canary_for("cpu")
    assert c is not None and c.kind == canary.KIND_CPU
    assert canary.canary_for("cpu") is c  # one per process
    window = canary.CanaryWindow(c)
    with window.phase(lambda name: contextlib.nullcontext())(canary.PHASE):
        sum(range(10_000))
    record = window.record()
    assert record is not None and is_canary(record)
    assert 0 < record["op_s"] < 1e-3
    assert record["cost_s"] < 0.2  # 256 tiny ops (a loaded 2-core machine: well under that)
    share = record.get("share")
    assert share is None or 0 < share <= 1


def test_a_canary_that_cannot_run_records_nothing_and_raises_nothing() -> None:
    class Broken:
        kind = "broken"

        def burst(self) -> float:
            raise RuntimeError("no device")

    window = canary.CanaryWindow(Broken())  # type: ignore[arg-type]
    with window.phase(lambda name: contextlib.nullcontext())(canary.PHASE):
        pass
    assert window.record() is None
    assert canary.CanaryWindow(None).record() is None


@pytest.mark.parametrize(
    "bad",
    [{"kind": "x"}, {"kind": "x", "op_s": 0}, {"kind": "x", "op_s": 1e-6, "share": 1.5},
     {"kind": "x", "op_s": 1e-6, "bursts": [-1]}, {"op_s": 1e-6}, [1e-6]],
)  # fmt: skip
def test_a_baseline_refuses_a_canary_that_is_not_one(bad: object) -> None:
    assert not is_canary(bad)


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


def test_a_clock_that_did_not_move_records_no_canary(monkeypatch: pytest.MonkeyPatch) -> None:
    """A frozen clock (a test's virtual one) gives 0 s per op: that is no measurement of the
    host, so the run carries no canary (not one that reads infinitely fast)."""
    import time as real_time

    frozen = types.SimpleNamespace(perf_counter=lambda: 1.0, process_time=lambda: 1.0)
    monkeypatch.setattr(canary, "time", frozen)
    window = canary.CanaryWindow(canary.canary_for("cpu"))
    with window.phase(lambda name: contextlib.nullcontext())(canary.PHASE):
        real_time.sleep(0.001)
    assert window.bursts and max(window.bursts) == 0.0
    assert window.record() is None


def test_the_op_time_is_the_fastest_burst_so_slow_bursts_do_not_move_it() -> None:
    # the CPU checks' save of 2026-12-04: 3 of 6 bursts interrupted (8-12 us against 2.5-3.2 us)
    # moved the median to 5.9 us while the host ran as fast as ever
    bursts = [2.542e-06, 8.541e-06, 2.83e-06, 3.201e-06, 1.187e-05, 8.617e-06]
    assert op_time({"kind": "torch-cpu", "op_s": 5.871e-06, "bursts": bursts}) == 2.542e-06
    assert op_time({"kind": "torch-cpu", "op_s": 3e-06}) == 3e-06  # no bursts kept
    assert op_time(None) is None and op_time({"kind": "x"}) is None


def test_the_window_reads_the_cpus_other_processes_kept_busy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``others``: the machine's busy CPU seconds during the rounds, less this process's own,
    over the rounds' wall time (here 1 s of rounds, 2.5 busy CPU-seconds, 1 s of our own)."""
    clock = iter([0.0, 1.0])
    busy = iter([100.0, 102.5])
    own = iter([5.0, 6.0])
    fake = types.SimpleNamespace(perf_counter=lambda: next(clock), process_time=lambda: next(own))
    monkeypatch.setattr(canary, "time", fake)
    monkeypatch.setattr(canary, "machine_busy_s", lambda: next(busy))
    window = canary.CanaryWindow(None)
    window._open()
    window._close()
    assert window.others == pytest.approx(1.5)


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="needs Linux's /proc/stat")
def test_a_busy_neighbour_process_shows_in_others() -> None:
    import subprocess
    import sys

    window = canary.CanaryWindow(canary.canary_for("cpu"))
    neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        real_time.sleep(0.3)  # the neighbour is running
        with window.phase(lambda name: contextlib.nullcontext())(canary.PHASE):
            real_time.sleep(0.5)
    finally:
        neighbour.kill()
        neighbour.wait()
    record = window.record()
    assert record is not None and record["others"] >= 0.7, record
