"""Contention and tracers, end to end: saved with each run, read back, judged, said.

Deterministic: the benchmarks run on a virtual clock (every call costs 0.5 ms x SLOWDOWN)
judged in the CPU class, timed on the clock CLOCK ("wall" unless set), and each run's
contention record says its threads waited WAITED of the rounds' time for a CPU; both are
environment variables that the confirmation children inherit. The tracer test uses the
real CPU backend: whatever its timings, a run under a tracer is never compared with one
without.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import pytest

from tests.conftest import FAST, run_with_env
from tests.plugin.virtual_clock import TIMER

CONFTEST = f"""
import os

import pytest

from pytest_gpuperf.measure import backend, contention


{TIMER}

class Clocked(VirtualClockTimer):
    clock = os.environ.get("CLOCK", "wall")


VIRTUAL = backend.Mode(
    "virtual-cpu",
    device="cpu",
    selected=lambda policy: True,
    factory=lambda call, policy: Clocked(call),
    comparable=("noise_threshold",),
    record=(("clock", "virtual"),),
    noise_class="cpu",
    replaces="cpu",
)


def pytest_gpuperf_timing_modes():
    return [VIRTUAL]


@pytest.fixture(autouse=True)
def contended(monkeypatch):
    waited = float(os.environ.get("WAITED", "0"))
    def close(window):
        window.waited, window.threads = waited, 1.0

    monkeypatch.setattr(contention.ContentionWindow, "_close", close)
"""

TESTS = """
def test_sum(gpu_bench):
    assert gpu_bench(sum, [1, 2, 3]) == 6
"""


def gpuperf(pytester: pytest.Pytester, env: Mapping[str, str], *args: str) -> pytest.RunResult:
    return run_with_env(
        pytester, env, "-p", "no:cacheprovider", "--gpuperf-capture=never",
        "--gpuperf-json=out.json", *FAST, *args,
    )  # fmt: skip


def result(pytester: pytest.Pytester) -> dict:
    (r,) = json.loads((pytester.path / "out.json").read_text())["results"]
    return r


@pytest.fixture
def saved(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_virtual=TESTS)
    for _ in range(2):
        gpuperf(pytester, {}, "--gpuperf-save=main").assert_outcomes(passed=1)
    return pytester


def test_each_run_carries_its_contention_into_the_baseline(saved: pytest.Pytester) -> None:
    r = result(saved)
    assert r["contention"] == {"clock": "wall", "waited": 0.0, "threads": 1.0}
    assert r["tracer"] is None
    runs = [
        run
        for seg in (saved.path / ".gpuperf" / "baselines" / "main.runs").glob("*.json")
        for by_key in json.loads(seg.read_text())["runs"].values()
        for run in by_key.values()
    ]
    assert len(runs) == 2 and all(x["contention"]["waited"] == 0.0 for x in runs)


def test_runs_that_waited_for_a_cpu_are_unmeasurable_never_a_regression(
    saved: pytest.Pytester,
) -> None:
    """Unchanged code 2x slower on the wall clock of a run whose threads waited 60 % of the
    time for a CPU: measured again in one fresh process, then inconclusive with the remedy;
    it passes, unless inconclusive verdicts fail."""
    env = {"SLOWDOWN": "2", "WAITED": "0.6"}
    out = gpuperf(saved, env, "--gpuperf-baseline=main")
    out.assert_outcomes(passed=1)
    c = result(saved)["comparison"]
    assert (c["kind"], c["why"], c["r"]) == ("inconclusive", "unmeasurable", 2)
    out.stdout.fnmatch_lines(["*cannot be measured on this machine now*", "*--gpuperf-ab=REF*"])
    assert "CONTENDED" in out.stdout.str()  # the table's flag column
    strict = gpuperf(saved, env, "--gpuperf-baseline=main", "--gpuperf-fail-on=inconclusive")
    strict.assert_outcomes(failed=1)


def test_the_thread_clock_is_judged_whatever_the_waits(saved: pytest.Pytester) -> None:
    """The thread clock leaves waits for a CPU out of the figure: a 40x slowdown measured so
    beside a neighbour fails against a baseline saved on the wall clock of a quiet host."""
    out = gpuperf(saved, {"SLOWDOWN": "40", "WAITED": "0.6", "CLOCK": "thread"},
                  "--gpuperf-baseline=main")  # fmt: skip
    out.assert_outcomes(failed=1)
    assert result(saved)["comparison"]["kind"] == "regression"


def test_with_no_confirmations_a_20x_slowdown_fails(saved: pytest.Pytester) -> None:
    out = gpuperf(saved, {"SLOWDOWN": "20"}, "--gpuperf-baseline=main", "--gpuperf-reruns=0")
    out.assert_outcomes(failed=1)
    c = result(saved)["comparison"]
    assert (c["kind"], c["r"]) == ("regression", 1)


TRACED_CONFTEST = """
import os
import sys


def _trace(frame, event, arg):  # a line tracer, as coverage.py's Python tracer is
    return _trace


if os.environ.get("TRACE") == "1":
    sys.settrace(_trace)
"""


def test_timings_under_a_tracer_are_not_comparable_and_never_a_regression(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(TRACED_CONFTEST)
    pytester.makepyfile(
        test_py="""
        def spin():
            return sum(i * i for i in range(200))

        def test_spin(gpu_bench):
            gpu_bench(spin)
        """
    )
    cpu = ("--gpuperf-device=cpu",)
    for _ in range(2):
        gpuperf(pytester, {}, *cpu, "--gpuperf-save=main").assert_outcomes(passed=1)
    out = gpuperf(pytester, {"TRACE": "1"}, *cpu, "--gpuperf-baseline=main")
    out.assert_outcomes(passed=1)
    r = result(pytester)
    assert r["tracer"].startswith("sys.settrace (conftest._trace")
    c = r["comparison"]
    assert (c["kind"], c["why"], c["r"]) == ("inconclusive", "not-comparable", 1)
    out.stdout.fnmatch_lines(["*time not comparable: a tracer (sys.settrace*) was active in this*"])
    strict = gpuperf(
        pytester, {"TRACE": "1"}, *cpu, "--gpuperf-baseline=main", "--gpuperf-fail-on=inconclusive"
    )
    strict.assert_outcomes(failed=1)


HOSTILE_TRACER = """
import os
import sys


def _trace(frame, event, arg):
    return None


_trace.__qualname__ = _trace.__module__ = "evil\\x1b[31m\\n::error::tracer\\r"
if os.environ.get("TRACE") == "1":
    sys.settrace(_trace)
"""


def test_a_tracers_name_is_escaped_in_every_output(pytester: pytest.Pytester) -> None:
    """R11: the name of a trace function (any conftest sets it) reached the terminal, the
    Markdown report and the step summary raw: 7 ESC bytes, and lines starting
    ``::error::tracer``, which GitHub runs as a workflow command."""
    pytester.makeconftest(HOSTILE_TRACER)
    pytester.makepyfile(test_py="def test_spin(gpu_bench):\n    gpu_bench(sum, range(50))\n")
    cpu = ("--gpuperf-device=cpu",)
    gpuperf(pytester, {}, *cpu, "--gpuperf-save=main").assert_outcomes(passed=1)
    env = {"TRACE": "1", "GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": "summary.md"}
    out = gpuperf(pytester, env, *cpu, "--gpuperf-baseline=main", "--gpuperf-markdown=m.md", "-v")
    out.assert_outcomes(passed=1)
    assert "evil\\x1b[31m\\n::error::tracer\\r" in out.stdout.str()
    for name, text in [
        ("terminal", out.stdout.str() + out.stderr.str()),
        ("markdown", (pytester.path / "m.md").read_text()),
        ("step summary", (pytester.path / "summary.md").read_text()),
    ]:
        assert "\x1b" not in text and "\r" not in text, name
        assert not [ln for ln in text.splitlines() if ln.startswith("::error")], name
