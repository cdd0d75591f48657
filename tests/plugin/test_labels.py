"""Three honest labels in the terminal row, each with its resolution: "no change" (with the
threshold in force), "INCONCLUSIVE / below resolution" (with what it would catch), and
REGRESSION. On the virtual clock (tests/conftest.py), so the planted factor is exact."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import FAST, VIRTUAL_TIME_CONFTEST, run_with_env, slowed_bench
from tests.plugin.test_baselines import QUIET

BENCH = slowed_bench("test_loop", 40_000)


def _run(pytester: pytest.Pytester, *args: str, slowdown: float = 1.0) -> pytest.RunResult:
    env = {"SLOWDOWN": str(slowdown)}
    return run_with_env(pytester, env, "-p", "no:cacheprovider", *FAST, *QUIET, *args)


def _row(result: pytest.RunResult) -> str:
    return next(ln for ln in result.stdout.lines if ln.startswith("test_loop "))


def test_no_change_below_resolution_and_fail_on_inconclusive(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(VIRTUAL_TIME_CONFTEST)
    pytester.makepyfile(test_l=BENCH)
    for _ in range(3):
        _run(pytester, "--gpuperf-save=main").assert_outcomes(passed=1)
    compare = ("--gpuperf-baseline=main", "--gpuperf-reruns=0", "--gpuperf-json=o.json")
    # unchanged: "no change", with the threshold in force in the same row
    same = _run(pytester, *compare)
    same.assert_outcomes(passed=1)
    assert re.search(r"no change \(threshold \d+\.\d %\)", _row(same)), _row(same)
    # 1.3x: under the cpu class's 42.9 % threshold in force, but its interval reaches past
    # it (1.2x is ruled out, 1.6x is above the threshold: unconfirmed): never "no change"
    slow = _run(pytester, *compare, slowdown=1.3)
    slow.assert_outcomes(passed=1)
    row = _row(slow)
    assert "no change" not in row
    assert re.search(r"INCONCLUSIVE / below resolution \(would catch >= \S+", row), row
    c = json.loads((pytester.path / "o.json").read_text())["results"][0]["comparison"]
    assert (c["kind"], c["why"]) == ("inconclusive", "below-resolution")
    assert c["ratio_high"] - 1 >= c["threshold_in_force"]
    # and --gpuperf-fail-on=inconclusive fails it
    _run(pytester, *compare, "--gpuperf-fail-on=inconclusive", slowdown=1.3).assert_outcomes(
        failed=1
    )
