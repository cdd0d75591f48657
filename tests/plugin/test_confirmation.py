"""Confirmation re-runs: a child process re-measures a suspect and the benchmarks after it."""

from __future__ import annotations

import json

import pytest

from tests.conftest import VIRTUAL_TIME_CONFTEST
from tests.plugin.test_baselines import run

# On a virtual clock: a call costs 0.4 ms times SLOWDOWN whatever the machine does.
BENCH = """
import os
import pytest

@pytest.mark.parametrize("which", ["a", "b", "c"])
def test_spin(clock, gpu_bench, which):
    factor = float(os.environ.get("SLOWDOWN", "1"))

    def call():
        clock.ns += int(400_000 * factor)

    gpu_bench(call)
"""


def test_one_child_confirms_a_suspect_and_measures_the_later_benchmarks_ahead(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(VIRTUAL_TIME_CONFTEST)
    pytester.makepyfile(test_spin=BENCH)
    for _ in range(3):
        run(pytester, "--gpuperf-save=main").assert_outcomes(passed=3)
    # 5x on the CPU: beyond what process modes produce, below what one run settles: 2 runs
    result = run(pytester, "--gpuperf-baseline=main", "--gpuperf-json=o.json", slowdown=5.0)
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(["*re-measuring*test_spin?a? and 2 later benchmark(s) ahead*"])
    # the later benchmarks took their runs from test a's children: no child of their own
    assert "re-measuring test_spin.py::test_spin[b]" not in result.stdout.str()
    assert "re-measuring test_spin.py::test_spin[c]" not in result.stdout.str()
    results = json.loads((pytester.path / "o.json").read_text())["results"]
    assert [r["comparison"]["r"] for r in results] == [2, 2, 2]
    result.stdout.fnmatch_lines(["confirmation: 1 fresh-process re-measurement(s)*"])
