"""Confirmation re-runs: a child process re-measures a suspect, and with it as many of the
benchmarks after it as the session measures in the time a process takes to start."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest

from pytest_gpuperf.shell import gate as gate_module
from pytest_gpuperf.shell.gate import ConfirmBudget, Gate
from pytest_gpuperf.shell.gating import GatePlugin
from tests.conftest import VIRTUAL_TIME_CONFTEST
from tests.plugin.test_baselines import FAST, QUIET, run, run_with_env

# On a virtual clock: a call costs 0.4 ms times SLOWDOWN whatever the machine does.
BENCH = """
import os
import time
import pytest

time.sleep(float(os.environ.get("IMPORT_S", "0")))  # what starting a process costs

@pytest.mark.parametrize("which", ["a", "b", "c"])
def test_spin(clock, gpu_bench, which):
    factor = float(os.environ.get("SLOWDOWN", "1"))
    if which not in os.environ.get("SLOWED", "abc"):
        factor = 1.0
    with open("measured.log", "a") as log:  # which test each process measured
        log.write(f"{which} {os.getpid()}\\n")

    def call():
        clock.ns += int(400_000 * factor)

    gpu_bench(call)
"""


def _measured(pytester: pytest.Pytester) -> dict[str, list[int]]:
    """The processes that measured each test (the session's first, then the children's)."""
    out: dict[str, list[int]] = {}
    for line in (pytester.path / "measured.log").read_text().splitlines():
        which, pid = line.split()
        out.setdefault(which, []).append(int(pid))
    return out


def _save_three(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(VIRTUAL_TIME_CONFTEST)
    pytester.makepyfile(test_spin=BENCH)
    for _ in range(3):
        run(pytester, "--gpuperf-save=main").assert_outcomes(passed=3)
    (pytester.path / "measured.log").unlink()


def test_a_process_slow_to_start_measures_the_later_benchmarks_with_the_first_suspect(
    pytester: pytest.Pytester,
) -> None:
    _save_three(pytester)
    # 3x on the CPU: two runs settle it (beyond ~2.4x), one does not (beyond 4.1x): 2 runs.
    # A module that takes 2 s to import: a test (virtual time) measures in far less, so the
    # first suspect's child measures every benchmark after it too
    result = run_with_env(
        pytester, {"SLOWDOWN": "3.0", "IMPORT_S": "2"}, "-p", "no:cacheprovider", *FAST,
        *QUIET, "--gpuperf-baseline=main", "--gpuperf-json=o.json",
    )  # fmt: skip
    result.assert_outcomes(failed=3)
    # every benchmark judged on 2 runs, from one child in all: b and c took theirs from it
    results = json.loads((pytester.path / "o.json").read_text())["results"]
    assert [r["comparison"]["r"] for r in results] == [2, 2, 2]
    result.stdout.fnmatch_lines(["confirmation: 1 fresh-process re-measurement(s)*"])
    measured = _measured(pytester)
    session, child = measured["a"]
    assert session != child and sorted(measured["b"]) == sorted(measured["c"]) == sorted(
        [session, child]
    )


def test_one_suspect_with_no_benchmark_after_it_costs_one_child_of_one_benchmark(
    pytester: pytest.Pytester,
) -> None:
    _save_three(pytester)
    # 3x: a suspect one run does not settle (test above): one child confirms it, and measures
    # nothing else (no benchmark comes after it)
    result = run_with_env(
        pytester, {"SLOWDOWN": "3.0", "SLOWED": "c"}, "-p", "no:cacheprovider", *FAST, *QUIET,
        "--gpuperf-baseline=main", "--gpuperf-json=o.json",
    )  # fmt: skip
    result.assert_outcomes(failed=1, passed=2)
    result.stdout.fnmatch_lines(["confirmation: 1 fresh-process re-measurement(s)*"])
    measured = _measured(pytester)
    assert len(measured["c"]) == 2 and measured["a"] == measured["b"] == [measured["c"][0]]


@pytest.mark.parametrize(
    ("start_s", "plain_s", "done", "ahead"),
    [(3.0, 7.4, 4, 2), (3.0, 3.4, 1, 7), (0.5, 4.5, 2, 0)],
)
def test_a_child_looks_ahead_as_many_benchmarks_as_the_session_measures_in_a_start(
    start_s: float, plain_s: float, done: int, ahead: int
) -> None:
    # a session that started its tests start_s after the gate opened and has measured `done`
    # benchmarks in plain_s - start_s since
    budget = ConfirmBudget(started=time.perf_counter() - plain_s, start_s=start_s, done=done)
    assert budget.ahead() == ahead


def test_a_process_start_leaves_out_the_parent_s_baseline_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # start_s is what a fresh process costs until its tests are collected; a confirmation
    # child reads no baseline, so a slow read of the collected tests' runs is no part of it
    clock = SimpleNamespace(now=2.0)  # collection ends 2 s after the gate opened
    monkeypatch.setattr(gate_module, "time", SimpleNamespace(perf_counter=lambda: clock.now))
    gate = object.__new__(Gate)
    gate.budget = ConfirmBudget(started=0.0)
    gate.read_runs = lambda nodeids: setattr(clock, "now", clock.now + 30.0)  # type: ignore[method-assign]
    plugin = object.__new__(GatePlugin)
    plugin.gate = gate
    plugin.pytest_collection_finish(SimpleNamespace(items=[]))  # type: ignore[arg-type]
    assert gate.budget.start_s == 2.0
