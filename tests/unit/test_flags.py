"""A result's notes: a run whose threads waited for a CPU (measure/flags.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pytest_gpuperf.measure.contention import CONTENDED
from pytest_gpuperf.measure.flags import contention_note, flag_notes
from pytest_gpuperf.measure.policy import MeasurePolicy
from pytest_gpuperf.model import BenchId, Run


def cpu_result(contention: dict[str, Any] | None) -> Run:
    return Run(
        id=BenchId("t.py::test_add", mode="cpu"),
        device="cpu",
        rounds=[1e-3] * 30,
        calls_per_round=1,
        first_call_s=1e-3,
        contention=contention,
    )


def test_a_wall_clock_run_whose_threads_waited_is_flagged_with_its_remedy() -> None:
    r = cpu_result({"waited": 0.93, "threads": 2.01, "clock": "wall"})
    note = next(n for n in flag_notes(r, MeasurePolicy()) if n.startswith(CONTENDED))
    assert "93 %" in note and "2.0 threads" in note and "torch.set_num_threads(1)" in note
    assert "no verdict counts them" in note


def test_waits_the_thread_clock_left_out_or_under_the_limit_are_not_flagged() -> None:
    assert contention_note(cpu_result({"waited": 0.8, "threads": 1.0, "clock": "thread"})) is None
    assert contention_note(cpu_result({"waited": 0.05, "threads": 1.0, "clock": "wall"})) is None
    assert contention_note(cpu_result(None)) is None
    one = contention_note(cpu_result({"waited": 0.3, "threads": 1.0, "clock": "wall"}))
    assert one is not None and "set_num_threads" not in one


def test_a_gpu_run_whose_host_waited_carries_no_cpu_note_but_many_threads_do() -> None:
    # No clock: the GPU timer's own figure (device time), which waits for a CPU do not enter.
    assert contention_note(cpu_result({"waited": 0.9, "threads": 1.0})) is None
    assert contention_note(cpu_result({"waited": 0.9, "threads": 3.0})) is None
    # The thread clock of a multi-threaded op counts the other threads' waits: flagged.
    many = contention_note(cpu_result({"waited": 0.6, "threads": 2.0, "clock": "thread"}))
    assert many is not None and "torch.set_num_threads(1)" in many


def test_ranks_whose_threads_waited_are_told_to_find_more_cpus() -> None:
    r = cpu_result({"waited": 0.6, "threads": 12.0, "clock": "wall"})
    r = replace(r, id=BenchId("t.py::test_all_reduce", mode="cpu-dist"))
    note = next(n for n in flag_notes(r, MeasurePolicy()) if n.startswith(CONTENDED))
    assert "more CPUs" in note and "set_num_threads" not in note and "idle" not in note
