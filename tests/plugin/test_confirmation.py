"""Confirmation re-runs: a child process re-measures a suspect, and from a session's second
suspect on, the benchmarks after it."""

from __future__ import annotations

import json

import pytest

from tests.conftest import VIRTUAL_TIME_CONFTEST
from tests.plugin.test_baselines import FAST, QUIET, run, run_with_env

# On a virtual clock: a call costs 0.4 ms times SLOWDOWN whatever the machine does.
BENCH = """
import os
import pytest

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


def test_the_first_suspect_is_re_measured_alone_and_a_later_one_with_the_benchmarks_after_it(
    pytester: pytest.Pytester,
) -> None:
    _save_three(pytester)
    # 3x on the CPU: two runs settle it (beyond ~2.4x), one does not (beyond 4.1x): 2 runs
    result = run(pytester, "--gpuperf-baseline=main", "--gpuperf-json=o.json", slowdown=3.0)
    result.assert_outcomes(failed=3)
    # every benchmark judged on 2 runs, from two children in all: test a's measured it alone,
    # test b's also measured c, which took its second run from there and started none
    results = json.loads((pytester.path / "o.json").read_text())["results"]
    assert [r["comparison"]["r"] for r in results] == [2, 2, 2]
    result.stdout.fnmatch_lines(["confirmation: 2 fresh-process re-measurement(s)*"])
    measured = _measured(pytester)
    session = measured["a"][0]
    a_child, b_child = measured["a"][1], measured["b"][1]
    assert len(measured["a"]) == len(measured["b"]) == len(measured["c"]) == 2
    assert len({session, a_child, b_child}) == 3 and sorted(measured["c"]) == sorted(
        [session, b_child]
    )


def test_one_suspect_among_unchanged_benchmarks_costs_one_child_of_one_benchmark(
    pytester: pytest.Pytester,
) -> None:
    _save_three(pytester)
    # 3x: a suspect one run does not settle (test above): one child confirms it
    result = run_with_env(
        pytester, {"SLOWDOWN": "3.0", "SLOWED": "a"}, "-p", "no:cacheprovider", *FAST, *QUIET,
        "--gpuperf-baseline=main", "--gpuperf-json=o.json",
    )  # fmt: skip
    result.assert_outcomes(failed=1, passed=2)
    result.stdout.fnmatch_lines(["confirmation: 1 fresh-process re-measurement(s)*"])
    measured = _measured(pytester)
    # the child measured test a alone: b and c were measured once, by the session
    assert len(measured["a"]) == 2 and measured["b"] == measured["c"] == [measured["a"][0]]
