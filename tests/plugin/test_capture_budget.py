"""The session's capture budget end to end on the CPU: first diagnoses at the verdicts, the
rest after the last verdict (the largest slowdowns first), leftovers with a command that works.

nsys and ncu do not run on the CPU, so the "later" tool here is a collector of a
``pytest_gpuperf_collectors`` hook: it waits for the pass after the verdicts as they do.
Time is virtual (the ``clock`` fixture): the verdicts do not depend on the machine's load.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FAST, VIRTUAL_TIME_CONFTEST, run_with_env

BENCH = """
import os


def _bench(clock, gpu_bench, factor):
    def call():
        clock.ns += int(200_000 * factor)

    gpu_bench(call)


def test_small(clock, gpu_bench):
    _bench(clock, gpu_bench, float(os.environ.get("SLOW_SMALL", "1")))


def test_big(clock, gpu_bench):
    _bench(clock, gpu_bench, float(os.environ.get("SLOW_BIG", "1")))


def test_same(clock, gpu_bench):
    _bench(clock, gpu_bench, 1.0)
"""

LATER_TOOL = """

from pytest_gpuperf.artifacts import CollectorResult


class Later:
    name = "later_tool"

    def available(self):
        return None

    def collect(self, ctx):
        with open(ctx.config.rootpath / "order.txt", "a") as f:
            f.write(ctx.nodeid.rsplit("::", 1)[-1] + "\\n")
        out = ctx.folder(self.name) / "seen.txt"
        out.write_text("profiles: " + ",".join(sorted(ctx.state.get("profiles") or {})))
        return CollectorResult(self.name, files=[out])


def pytest_gpuperf_collectors(config):
    return [Later()]
"""

PLANT = {"SLOW_SMALL": "15", "SLOW_BIG": "40"}


def _project(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(VIRTUAL_TIME_CONFTEST + LATER_TOOL)
    pytester.makepyfile(test_b=BENCH)
    # one saved run: slowdowns of 15x and 40x are settled by one run of each side (no
    # confirmation process)
    saved = run_with_env(pytester, {}, "-p", "no:cacheprovider", *FAST, "--gpuperf-save=main")
    saved.assert_outcomes(passed=3)


def _compare(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict[str, Any]]:
    result = run_with_env(
        pytester, PLANT, "-p", "no:cacheprovider", *FAST, "--gpuperf-baseline=main",
        "--gpuperf-json=o.json", *args,
    )  # fmt: skip
    result.assert_outcomes(failed=2, passed=1)
    return result, json.loads((pytester.path / "o.json").read_text())


def test_first_diagnoses_at_the_verdicts_the_rest_after_the_last_largest_first(
    pytester: pytest.Pytester,
) -> None:
    _project(pytester)
    result, doc = _compare(pytester)
    # up to pytest's short summary, which repeats each failure's text where CI is set
    out = result.stdout.str().split("short test summary info")[0]
    # each failure opens with its diagnosis, made at its verdict; the hook's tool waited
    assert out.count("later_tool: deferred: runs after the session's last verdict") == 2
    assert (
        "test_small is slower than its baseline: " in out
        and "test_big is slower than its baseline: " in out
    )
    # after the last verdict, the largest slowdown first (test_small failed first)
    order = (pytester.path / "order.txt").read_text().split()
    assert order == ["test_big", "test_small"]
    summary = out[out.index("gpuperf capture: 2 test(s)") :]
    assert "first diagnosis after the verdict: median" in summary
    assert summary.index("test_big (") < summary.index("test_small (")
    assert "later_tool ok" in summary and "left over" not in summary
    capture = doc["session"]["capture"]
    assert [p["phase"] for p in capture["passes"]] == [1, 1, 2, 2]
    assert capture["spent_s"] <= capture["budget_s"] == 180.0
    for t in capture["tests"]:
        assert t["first_diagnosis_s"] is not None and t["first_diagnosis_s"] > 0
        assert t["tools"]["torch_profiler"]["status"] == "ok"
        assert t["tools"]["later_tool"]["status"] == "ok"
    results = {r["id"]["nodeid"].rsplit("::", 1)[-1]: r for r in doc["results"]}
    assert results["test_big"]["comparison"]["diagnosis"]["paragraph"].startswith("test_big is")
    # the later pass continued in the test's folder, from the first pass's profile
    (manifest,) = Path(pytester.path / ".gpuperf" / "artifacts").glob("*/*test_big*/manifest.json")
    m = json.loads(manifest.read_text())
    assert {c["name"]: c["status"] for c in m["collectors"]}["later_tool"] == "ok"
    seen = (manifest.parent / "later_tool" / "seen.txt").read_text()
    assert seen == "profiles: test_b.py::test_big@cpu"
    assert len(m["timing"]["passes"]) == 2


def test_with_no_budget_every_regression_is_left_over_with_a_command_that_captures_it(
    pytester: pytest.Pytester,
) -> None:
    _project(pytester)
    result, doc = _compare(pytester, "--gpuperf-capture-session-budget=0")
    # up to pytest's short summary, which repeats each failure's text where CI is set
    out = result.stdout.str().split("short test summary info")[0]
    assert out.count("no diagnosis: the session's capture budget is 0 s") == 2
    assert "left over: 2 test(s) the budget did not reach" in out
    assert not (pytester.path / "order.txt").exists()
    left_big, left_small = doc["session"]["capture"]["left_over"]
    assert left_big["nodeid"].endswith("test_big")  # the largest slowdown first
    assert left_small["nodeid"].endswith("test_small")
    assert set(left_big["tools"]) == {"torch_profiler", "torch_trace", "later_tool"}
    command = left_big["command"]
    assert command in out
    args = shlex.split(command)
    assert args[1:4] == ["-m", "pytest", "test_b.py::test_big"]
    assert "--gpuperf-baseline=main" in args and "--gpuperf-capture=always" in args
    assert "--gpuperf-rounds=10" in args  # the session's options come along
    assert not any(a.startswith(("--gpuperf-json", "--gpuperf-capture-session")) for a in args)
    # the command works: run from where the session ran, in its environment, it captures
    with pytest.MonkeyPatch.context() as mp:
        for k, v in PLANT.items():
            mp.setenv(k, v)
        mp.delenv("PYTEST_ADDOPTS", raising=False)
        later = subprocess.run(
            ["python3" if args[0].startswith("python3") else args[0], *args[1:]],
            cwd=pytester.path, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
    assert later.returncode == 1, later.stdout[-3000:]
    assert (
        "test_big is slower than its baseline: " in later.stdout
    )  # its diagnosis opens the failure
    assert (pytester.path / "order.txt").read_text().split() == ["test_big"]


def test_under_xdist_workers_diagnose_and_the_controller_runs_the_later_passes(
    pytester: pytest.Pytester,
) -> None:
    _project(pytester)
    result, doc = _compare(pytester, "-n", "2")
    # up to pytest's short summary, which repeats each failure's text where CI is set
    out = result.stdout.str().split("short test summary info")[0]
    assert out.count("gpuperf capture: 2 test(s)") == 1  # the controller's summary
    assert (pytester.path / "order.txt").read_text().split() == ["test_big", "test_small"]
    passes = doc["session"]["capture"]["passes"]
    assert sorted(p["phase"] for p in passes) == [1, 1, 2, 2]  # one ledger for all processes
    assert all(t["first_diagnosis_s"] for t in doc["session"]["capture"]["tests"])


#: Records each SparePool.take() ("spare" or "none") of the session's process, and the state
#: of its next spare when each test's body starts ("starting": beside a measurement).
TAKES = """

import os

import pytest_gpuperf.shell.capture as _capture

_take = _capture.SparePool.take


def _logged_take(self):
    spare = _take(self)
    with open(os.path.join(os.path.dirname(__file__), "takes.txt"), "a") as f:
        f.write("none\\n" if spare is None else "spare\\n")
    return spare


_capture.SparePool.take = _logged_take
_capture.SparePool.EARLY_CORES = int(os.environ.get("EARLY_CORES", "1"))


def pytest_runtest_call(item):
    plugin = item.config.pluginmanager.get_plugin("gpuperf-capture")
    if plugin is None:  # a save
        return
    spare = plugin.spares._next
    state = "none" if spare is None else "ready" if spare.ready else "starting"
    with open(os.path.join(os.path.dirname(__file__), "states.txt"), "a") as f:
        f.write(state + "\\n")
"""


def test_a_first_capture_takes_the_spare_started_at_the_session_s_start_none_on_few_cores(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(VIRTUAL_TIME_CONFTEST + TAKES)
    pytester.makepyfile(test_b=BENCH)
    run_with_env(pytester, {}, "-p", "no:cacheprovider", *FAST, "--gpuperf-save=main")
    takes, states = pytester.path / "takes.txt", pytester.path / "states.txt"
    # 40x: a regression on one run (no suspect, no confirmation) takes the session's spare
    args = ["-p", "no:cacheprovider", *FAST, "--gpuperf-baseline=main"]
    run_with_env(pytester, {"SLOW_BIG": "40"}, *args).assert_outcomes(failed=1, passed=2)
    assert takes.read_text().split() == ["spare"]
    # each test measured with the next spare started and idle, never still starting
    assert states.read_text().split() == ["ready"] * 3
    takes.unlink()
    # 1.8x: a suspect confirmed in a fresh process, then captured in the spare
    result = run_with_env(pytester, {"SLOW_SMALL": "1.8"}, *args)
    result.assert_outcomes(failed=1, passed=2)
    assert "confirmed" in result.stdout.str()
    assert takes.read_text().split() == ["spare"]
    takes.unlink()
    # where the machine has no cores to spare: none beside the collection, the capture cold
    result = run_with_env(pytester, {"SLOW_SMALL": "1.8", "EARLY_CORES": "4096"}, *args)
    result.assert_outcomes(failed=1, passed=2)
    assert takes.read_text().split() == ["none"]
