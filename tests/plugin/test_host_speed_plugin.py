"""The host's speed and tracers, end to end: saved with each run, read back, judged, said.

Deterministic: the benchmarks run on a virtual clock (every call costs 0.5 ms x SLOWDOWN)
judged in the CPU class, and the host-speed canary is a fake whose time per op is HOST x
2 µs (the share of a CPU is left out), both set by environment variables that the
confirmation children inherit. The tracer test uses the real CPU backend: whatever its
timings, a run under a tracer is never compared with one without.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

import pytest

from tests.conftest import FAST, run_with_env
from tests.plugin.virtual_clock import TIMER

CONFTEST = f"""
import os

import pytest

from pytest_gpuperf.measure import backend, canary


{TIMER}

class FakeCanary:
    kind = canary.KIND_CPU

    def burst(self):
        return 2e-6 * float(os.environ.get("HOST", "1"))


VIRTUAL = backend.Mode(
    "virtual-cpu",
    device="cpu",
    selected=lambda policy: True,
    factory=lambda call, policy: VirtualClockTimer(call),
    comparable=("noise_threshold",),
    record=(("clock", "virtual"),),
    noise_class="cpu",
    replaces="cpu",
)


def pytest_gpuperf_timing_modes():
    return [VIRTUAL]


@pytest.fixture(autouse=True)
def virtual_host(monkeypatch):
    fake = None if os.environ.get("HOST") == "none" else FakeCanary()
    monkeypatch.setitem(canary._CANARIES, "cpu", fake)
    monkeypatch.setattr(canary, "thread_schedstat", lambda: None)
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


def test_each_run_carries_its_canary_into_the_baseline(saved: pytest.Pytester) -> None:
    r = result(saved)
    assert r["host_canary"]["kind"] == "torch-cpu"
    assert r["host_canary"]["op_s"] == pytest.approx(2e-6)
    assert len(r["host_canary"]["bursts"]) == 6
    assert r["tracer"] is None
    runs = [
        run
        for seg in (saved.path / ".gpuperf" / "baselines" / "main.runs").glob("*.json")
        for by_key in json.loads(seg.read_text())["runs"].values()
        for run in by_key.values()
    ]
    assert len(runs) == 2 and all(x["host_canary"]["op_s"] == pytest.approx(2e-6) for x in runs)


def test_a_slower_host_is_not_a_regression_and_the_summary_says_why(
    saved: pytest.Pytester,
) -> None:
    out = gpuperf(saved, {"SLOWDOWN": "2", "HOST": "2"}, "--gpuperf-baseline=main")
    out.assert_outcomes(passed=1)
    c = result(saved)["comparison"]
    assert (c["kind"], c["why"], c["r"]) == ("inconclusive", "host-slower", 2)
    out.stdout.fnmatch_lines(
        ["*the host ran 2x slower than when the baseline was saved; time 2x is within that*"]
    )
    out.stdout.fnmatch_lines(["*--gpuperf-ab=REF*"])
    strict = gpuperf(
        saved, {"SLOWDOWN": "2", "HOST": "2"}, "--gpuperf-baseline=main",
        "--gpuperf-fail-on=inconclusive",
    )  # fmt: skip
    strict.assert_outcomes(failed=1)


def test_a_slowdown_well_beyond_the_host_s_fails(saved: pytest.Pytester) -> None:
    out = gpuperf(saved, {"SLOWDOWN": "40", "HOST": "2"}, "--gpuperf-baseline=main")
    out.assert_outcomes(failed=1)
    assert result(saved)["comparison"]["kind"] == "regression"
    out.stdout.fnmatch_lines(["*the host ran 2x slower*beyond that*"])


def test_with_no_confirmations_a_20x_slowdown_fails(saved: pytest.Pytester) -> None:
    out = gpuperf(saved, {"SLOWDOWN": "20"}, "--gpuperf-baseline=main", "--gpuperf-reruns=0")
    out.assert_outcomes(failed=1)
    c = result(saved)["comparison"]
    assert (c["kind"], c["r"]) == ("regression", 1)


def test_a_baseline_saved_before_the_canary_says_once_that_a_new_save_adds_it(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_virtual=TESTS)
    for _ in range(2):
        gpuperf(pytester, {"HOST": "none"}, "--gpuperf-save=main").assert_outcomes(passed=1)
    assert result(pytester)["host_canary"] is None
    out = gpuperf(pytester, {"SLOWDOWN": "1.05", "HOST": "2"}, "--gpuperf-baseline=main")
    out.assert_outcomes(passed=1)
    # one line, folded to 120 columns: its continuation lines joined back
    text = re.sub(r"\n {4,}", " ", out.stdout.str())
    lines = [ln for ln in text.splitlines() if "a new --gpuperf-save adds it" in ln]
    assert len(lines) == 1, out.stdout.str()
    assert "host-speed canary" in lines[0]


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
