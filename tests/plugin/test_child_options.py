"""Every option reaches a confirmation child as the user gave it, and a child that fails is
an error the user sees.

The benchmarks run on the virtual clock (tests/conftest.py): a planted slowdown is the same in
every process whatever the machine does. The project's conftest also records each child
pytest the plugin starts (its command, exit status and how many results it gave back).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gpuperf.shell.options import OPTIONS
from pytest_gpuperf.shell.rerun import _NOT_FORWARDED
from tests.conftest import FAST, VIRTUAL_TIME_CONFTEST, run_with_env, slowed_bench
from tests.plugin.test_baselines import QUIET

#: The conftest's addition: each child the plugin starts, one JSON line in $CHILD_LOG.
RECORD_CHILDREN = """

import os as _os
import json as _json
from pytest_gpuperf.shell import rerun as _rerun

_started = _rerun.run_pytest_child


def _recorded(targets, **kw):
    child = _started(targets, **kw)
    with open(_os.environ["CHILD_LOG"], "a") as f:
        line = {"cmd": child.command, "rc": child.returncode, "results": len(child.results)}
        f.write(_json.dumps(line) + "\\n")
    return child


_rerun.run_pytest_child = _recorded
"""

BENCH = slowed_bench("test_pkg", 400_000)

#: A command-line value of every option a child inherits, as a user would type it; a new
#: option gets one here (or is one a child never inherits: rerun._NOT_FORWARDED).
GIVEN: dict[str, str | None] = {
    "lock_timeout": "12.5",
    "dist_timeout": "45",
    "cuda_graph": "false",
    "l2_flush": "false",
    "warmup_ms": "30",
    "min_warmup_ms": "5",
    "round_ms": "1",
    "rounds": "10",
    "noise_threshold": "0.1",
    "baseline_dir": "perf/baselines",
    "keep_runs": "3",
    "threshold": "0.1",
    "alpha": "0.001",
    "fail_on": "inconclusive",
    "reruns": "3",
    "confirm_budget": "0.5",
    "gate_secondary": "memory",
    "memory_tolerance": "0.2",
    "first_call_tolerance": "1.5",
    "numerics": "gate",
    "numerics_tolerance": "0.01",
    "telemetry": "false",
    "telemetry_interval_ms": "20",
    "telemetry_raw": None,  # a flag
    "nvtx": "false",
    "activity": "false",
    "sort": "name",
    "columns": "median,verdict",
    "group_by": "func,mode",
    "progress": "off",
}


def _arg(name: str, value: str | None) -> str:
    flag = "--gpuperf-" + name.replace("_", "-")
    return flag if value is None else f"{flag}={value}"


def _project(pytester: pytest.Pytester) -> Path:
    pytester.makeconftest(VIRTUAL_TIME_CONFTEST + RECORD_CHILDREN)
    pytester.makepyfile(test_c=BENCH)
    return pytester.path / "children.jsonl"


def _run(
    pytester: pytest.Pytester, log: Path, *args: str, slowdown: float = 1.0
) -> pytest.RunResult:
    env = {"SLOWDOWN": str(slowdown), "CHILD_LOG": str(log)}
    return run_with_env(pytester, env, "-p", "no:cacheprovider", *QUIET, *args)


def _children(log: Path) -> list[dict[str, object]]:
    return [json.loads(ln) for ln in log.read_text().splitlines()] if log.exists() else []


def test_every_option_of_the_table_reaches_a_confirmation_child_as_given(
    pytester: pytest.Pytester,
) -> None:
    cli = [o.name for o in OPTIONS if o.cli]
    # the walk covers the whole table: each option is given here, or a child never gets it
    assert sorted(n for n in cli if n not in _NOT_FORWARDED) == sorted(GIVEN)
    log = _project(pytester)
    args = [_arg(n, v) for n, v in GIVEN.items()]
    for _ in range(3):
        _run(pytester, log, "--gpuperf-save=main", *args).assert_outcomes(passed=1)
    assert not _children(log), "saving starts no child"
    # 3x on the virtual clock: one run does not settle it (beyond ~4x), two do (beyond ~2.3x)
    result = _run(pytester, log, "--gpuperf-baseline=main", *args, slowdown=3.0)
    children = _children(log)
    assert children, result.stdout.str()
    for child in children:
        assert child["rc"] == 0 and child["results"] == 1, child
        for arg in args:
            assert arg in child["cmd"], f"{arg} not given to the child as the user gave it"
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*REGRESSION*"])
    assert "ERROR" not in result.stdout.str()


@pytest.mark.parametrize(
    "options",
    [
        ["--gpuperf-columns=median,verdict"],
        ["--gpuperf-group-by=func"],
        ["--gpuperf-columns=median,verdict", "--gpuperf-group-by=func"],
    ],
    ids=["columns", "group-by", "both"],
)
def test_a_3x_slowdown_fails_with_table_options(
    pytester: pytest.Pytester, options: list[str]
) -> None:
    log = _project(pytester)
    for _ in range(3):
        _run(pytester, log, *FAST, "--gpuperf-save=main").assert_outcomes(passed=1)
    result = _run(pytester, log, *FAST, "--gpuperf-baseline=main", *options, slowdown=3.0)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*REGRESSION, confirmed*"])
    assert [c["rc"] for c in _children(log)] == [0] * len(_children(log))
    assert "INCONCLUSIVE" not in result.stdout.str()


#: In a child only: a conftest that stops it at once, as a bad option would.
BROKEN_CHILD = """

def pytest_configure(config):
    if config.getoption("gpuperf_child"):
        raise pytest.UsageError("--gpuperf-made-up: this child cannot start")
"""


def test_a_confirmation_child_that_fails_is_an_error_never_a_silent_inconclusive(
    pytester: pytest.Pytester,
) -> None:
    log = _project(pytester)
    pytester.makeconftest(VIRTUAL_TIME_CONFTEST + RECORD_CHILDREN + BROKEN_CHILD)
    for _ in range(3):
        _run(pytester, log, *FAST, "--gpuperf-save=main").assert_outcomes(passed=1)
    result = _run(pytester, log, *FAST, "--gpuperf-baseline=main", slowdown=3.0)
    assert [c["rc"] for c in _children(log)] == [4]
    # the test fails, saying why, with the child's own words and the way out
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR: the fresh confirmation process failed (exit 4)*",
            "*--gpuperf-made-up: this child cannot start*",
            "*run it alone to see all of it: *--gpuperf-child*",
            "*--gpuperf-reruns=0*",
        ]
    )
    # and the terminal summary says it too
    result.stdout.fnmatch_lines(
        ["gpuperf: ERROR: test_c.py::test_pkg: the fresh confirmation process failed*"]
    )
