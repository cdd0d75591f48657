"""A result's notes: the CPU's scheduler-tick plateaus (measure/flags.py)."""

from __future__ import annotations

import random

from pytest_gpuperf.measure.flags import PLATEAU_NOTE, flag_notes, quantum_plateau
from pytest_gpuperf.measure.policy import MeasurePolicy
from pytest_gpuperf.model import BenchId, Result


def cpu_result(
    median: float,
    *,
    threads: int = 1,
    first: float = 1e-3,
    jitter: float = 0.001,
    device: str = "cpu",
) -> Result:
    rng = random.Random(1)
    rounds = [median * (1 + rng.uniform(-jitter, jitter)) for _ in range(30)]
    return Result(
        id=BenchId("t.py::test_add", mode="cpu"),
        device=device,
        rounds=rounds,
        calls_per_round=1,
        first_call_s=first,
        environment={"torch_threads": threads},
    )


def test_a_median_on_two_ticks_with_two_threads_is_a_plateau() -> None:
    # the review's case: torch.add on 64 floats, 52.85 µs when quiet, 7.962 ms under a neighbour
    r = cpu_result(7.962e-3, threads=2, first=7.97e-3)
    assert quantum_plateau(r) == 2
    notes = flag_notes(r, MeasurePolicy())
    note = next(n for n in notes if n.startswith(PLATEAU_NOTE))
    assert "7.96 ms" in note and "2 scheduler tick(s)" in note and "2 torch threads" in note
    assert "torch.set_num_threads(1)" in note and "--gpuperf-save-plateaus" in note


def test_one_thread_is_a_plateau_only_when_a_call_was_once_much_faster() -> None:
    assert quantum_plateau(cpu_result(15.96e-3, threads=1, first=15.9e-3)) is None
    assert quantum_plateau(cpu_result(15.96e-3, threads=1, first=50e-6)) == 4


def test_times_off_the_tick_or_scattered_or_on_the_gpu_are_not_plateaus() -> None:
    assert quantum_plateau(cpu_result(6.0e-3, threads=2)) is None  # 1.5 ticks
    assert quantum_plateau(cpu_result(52.85e-6, threads=2, first=40e-6)) is None
    assert quantum_plateau(cpu_result(8.0e-3, threads=2, jitter=0.4)) is None  # wide CI
    assert quantum_plateau(cpu_result(8.0e-3, threads=2, device="cuda")) is None
    assert not any(
        n.startswith(PLATEAU_NOTE) for n in flag_notes(cpu_result(6e-3), MeasurePolicy())
    )


def test_setup_on_a_short_call_says_each_call_is_timed_alone_and_how_to_batch() -> None:
    short = cpu_result(6e-6)
    assert not any(n.startswith("setup=") for n in flag_notes(short, MeasurePolicy()))
    note = next(n for n in flag_notes(short, MeasurePolicy(), setup=True) if "setup=" in n)
    assert "timed alone" in note and "6.0 µs" in note and "time a batch" in note
    long = cpu_result(200e-6)
    assert not any("setup=" in n for n in flag_notes(long, MeasurePolicy(), setup=True))
