"""What a person reads first, end to end on the CPU (issue 23, part B): lines that fit,
a short ``-q`` run, and a save that keeps scheduler-tick plateaus out of the baseline."""

from __future__ import annotations

import json

import pytest

from tests.conftest import FAST, VIRTUAL_TIME_CONFTEST

QUIET = ["-p", "no:cacheprovider", "--gpuperf-capture=never", "--gpuperf-inventory=never"]

PLATEAU = """
calls = []

def test_plateau(clock, gpu_bench):
    # 50 µs once, then 7.96 ms a call: what a 2-thread op does while a neighbour holds a core
    def on_the_tick():
        calls.append(1)
        clock.ns += 50_000 if len(calls) == 1 else 7_960_000
    gpu_bench(on_the_tick)

def test_fine(clock, gpu_bench):
    def work():
        clock.ns += 200_000
    gpu_bench(work)
"""


def benchmarks(pytester: pytest.Pytester) -> dict[str, list]:
    doc = json.loads((pytester.path / ".gpuperf" / "baselines" / "main.json").read_text())
    return {k.split("::")[-1].split("|")[0]: v["runs"] for k, v in doc["benchmarks"].items()}


def test_a_save_keeps_plateaus_out_and_says_why_in_one_line(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(VIRTUAL_TIME_CONFTEST)  # load cannot change what is measured
    pytester.makepyfile(test_tick=PLATEAU)
    result = pytester.runpytest_subprocess(*QUIET, *FAST, "--gpuperf-save=main")
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert "PLATEAU" in out  # the table's flag column
    line = next(ln for ln in result.stdout.lines if ln.startswith("not saved:"))
    assert len(line) <= 120 and "1 result on scheduler-tick plateaus" in line
    assert "1 torch thread" in line and "--gpuperf-save-plateaus" in line
    saved = benchmarks(pytester)
    assert not any("test_plateau" in k for k in saved) and any("test_fine" in k for k in saved)

    result = pytester.runpytest_subprocess(
        *QUIET, *FAST, "--gpuperf-save=main", "--gpuperf-save-plateaus"
    )
    result.assert_outcomes(passed=2)
    assert not any(ln.startswith("not saved:") for ln in result.stdout.lines)
    assert any("test_plateau" in k for k in benchmarks(pytester))
