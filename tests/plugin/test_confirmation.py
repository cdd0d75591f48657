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
    # every benchmark judged on 2 runs, from one child in all: the later benchmarks took
    # their second run from test a's child, none started one of its own.  (The progress
    # line naming the look-ahead shows only when the child lasts over 2 s: not asserted.)
    results = json.loads((pytester.path / "o.json").read_text())["results"]
    assert [r["comparison"]["r"] for r in results] == [2, 2, 2]
    result.stdout.fnmatch_lines(["confirmation: 1 fresh-process re-measurement(s)*"])
