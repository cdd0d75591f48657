"""Numerics beside time, end to end on the CPU backend: an output change is reported, and
fails the test only when numerics are gated; unseeded inputs are detected."""

from __future__ import annotations

import json

import pytest

from tests.conftest import FAST, VIRTUAL_TIME_CONFTEST, run_with_env

#: ``CHANGE`` picks what differs from the baseline's run: nothing, a shift of every value by
#: 1e-2 (relative ~1e-3 to 1e-2 here), a dtype (float64), a shape (the transpose of a
#: non-square result).
BENCH = """
import os
import torch

def test_seeded(clock, gpu_bench):
    torch.manual_seed(0)
    a = torch.randn(48, 32)
    b = torch.randn(32, 40)
    change = os.environ.get("CHANGE", "none")
    # every variant does the same work, so that only the output changes, never the time
    shift = 1e-2 if change == "shift" else 0.0
    dtype = torch.float64 if change == "dtype" else torch.float32

    def f(a, b):
        clock.ns += 20_000  # virtual time: the verdict on time is "no change", whatever the load
        out = (a @ b + shift).to(dtype)
        out = out.t().contiguous() if change == "shape" else out.clone()
        return out, {"scale": out.abs().mean(), "note": "not a tensor"}

    gpu_bench(f, a, b)
"""

UNSEEDED = """
import torch

def test_unseeded(clock, gpu_bench):
    x = torch.randn(64, 64)

    def f(x):
        clock.ns += 20_000
        return torch.tanh(x)

    gpu_bench(f, x)
"""


@pytest.fixture(autouse=True)
def _virtual_time(pytester: pytest.Pytester) -> None:
    """Time moves only when the benchmark runs: these tests are about numerics, and a loaded
    machine must not turn an unchanged time into a regression."""
    pytester.makeconftest(VIRTUAL_TIME_CONFTEST)


QUIET = ["--gpuperf-capture=never", "--gpuperf-inventory=never", "--gpuperf-reruns=0"]


def run(pytester: pytest.Pytester, *args: str, change: str = "none") -> pytest.RunResult:
    env = {"CHANGE": change}
    return run_with_env(pytester, env, "-p", "no:cacheprovider", *FAST, *QUIET, *args)


def _numerics(pytester: pytest.Pytester, path: str = "o.json") -> dict[str, object]:
    results = json.loads((pytester.path / path).read_text())["results"]
    (r,) = results
    assert r["numerics"], "the result carries the output's fingerprint"
    out: dict[str, object] = r["comparison"]["numerics"]
    return out


def test_an_output_change_fails_only_when_numerics_are_gated(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bench=BENCH)
    run(pytester, "--gpuperf-save=main").assert_outcomes(passed=1)
    doc = json.loads((pytester.path / ".gpuperf/baselines/main.json").read_text())
    seg = next((pytester.path / ".gpuperf/baselines/main.runs").glob("*.json"))
    assert '"numerics"' in seg.read_text() and doc["schema_version"] == 1

    # unchanged, gated: passes and says nothing about numerics
    same = run(
        pytester, "--gpuperf-baseline=main", "--gpuperf-numerics=gate", "--gpuperf-json=o.json"
    )
    same.assert_outcomes(passed=1)
    assert "output changed" not in same.stdout.str()
    assert _numerics(pytester)["kind"] == "same"

    # changed, reported by default: passes, with the change and its size in the summary
    shifted = run(pytester, "--gpuperf-baseline=main", "--gpuperf-json=o.json", change="shift")
    shifted.assert_outcomes(passed=1)
    shifted.stdout.fnmatch_lines(["numerics:", "*test_seeded: output changed: largest relative*"])
    n = _numerics(pytester)
    assert n["kind"] == "changed" and not n["gated"]
    assert isinstance(n["max_rel"], float) and n["max_rel"] > 1e-3

    # changed and gated (command line): fails, with the numbers in the failure text
    gated = run(pytester, "--gpuperf-baseline=main", "--gpuperf-numerics=gate", change="shift")
    gated.assert_outcomes(failed=1)
    gated.stdout.fnmatch_lines(
        ["gpuperf: output changed: test_seeded [[]cpu[]]*largest relative difference*"]
    )
    # a tolerance wider than the change: passes
    run(
        pytester,
        "--gpuperf-baseline=main",
        "--gpuperf-numerics=gate",
        "--gpuperf-numerics-tolerance=0.5",
        change="shift",
    ).assert_outcomes(passed=1)


def test_a_numerics_failure_says_the_output_changed_and_nothing_about_speed(
    pytester: pytest.Pytester,
) -> None:
    """With the capture on (the default): the failure opens with what failed, the output,
    and neither the headline nor the short summary speaks of a slowdown."""
    pytester.makepyfile(test_bench=BENCH)
    run(pytester, "--gpuperf-save=main").assert_outcomes(passed=1)
    gated = run_with_env(
        pytester, {"CHANGE": "shift"}, "-p", "no:cacheprovider", *FAST,
        "--gpuperf-reruns=0", "--gpuperf-inventory=never", "--gpuperf-capture=on-failure",
        "--gpuperf-baseline=main", "--gpuperf-numerics=gate", "-rf",
    )  # fmt: skip
    gated.assert_outcomes(failed=1)
    lines = gated.stdout.lines
    start = next(i for i, ln in enumerate(lines) if ln.startswith("____") and "test_seeded" in ln)
    headline = lines[start + 1]
    assert headline.startswith("gpuperf: output changed: test_seeded [cpu]"), headline
    # the headline is folded at 120 columns: its continuation lines are indented
    cont = [ln.strip() for ln in lines[start + 2 : start + 4] if ln.startswith(" ")]
    headline = " ".join([headline, *cont])
    assert "largest relative difference" in headline and "tolerance 0.001" in headline
    short = next(ln for ln in lines if ln.startswith("FAILED test_bench.py::test_seeded"))
    assert "output changed" in short, short
    failure = "\n".join(lines[start : lines.index(next(ln for ln in lines if "gpuperf" in ln
                                                        and ln.startswith("=")))])  # fmt: skip
    for word in ("slower", "faster", "likely cause", "regression"):
        assert word not in failure.lower(), (word, failure)


def test_the_marker_gates_numerics(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_bench=BENCH.replace(
            "def test_seeded", "@pytest.mark.gpuperf(numerics='gate')\ndef test_seeded"
        ).replace("import os", "import os\nimport pytest")
    )
    run(pytester, "--gpuperf-save=main").assert_outcomes(passed=1)
    run(pytester, "--gpuperf-baseline=main", change="shift").assert_outcomes(failed=1)
    # off: no fingerprint, no comparison
    off = run(pytester, "--gpuperf-baseline=main", "--gpuperf-numerics=off", change="shift")
    off.assert_outcomes(failed=1)  # the marker wins over the command line


@pytest.mark.parametrize(
    ("change", "text"),
    [
        ("dtype", "out[[]0[]] dtype float32 -> float64"),
        ("shape", "out[[]0[]] shape (48, 40) -> (40, 48)"),
    ],
)
def test_dtype_and_shape_changes_are_reported(
    pytester: pytest.Pytester, change: str, text: str
) -> None:
    pytester.makepyfile(test_bench=BENCH)
    run(pytester, "--gpuperf-save=main").assert_outcomes(passed=1)
    result = run(pytester, "--gpuperf-baseline=main", "--gpuperf-json=o.json", change=change)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"*{text}*"])
    n = _numerics(pytester)
    assert n["kind"] == "changed" and n["changes"]


def test_unseeded_inputs_are_detected_and_never_fail(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_unseeded=UNSEEDED)
    for _ in range(2):
        run(pytester, "--gpuperf-save=main").assert_outcomes(passed=1)
    result = run(
        pytester, "--gpuperf-baseline=main", "--gpuperf-numerics=gate", "--gpuperf-json=o.json"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["numerics:", "*the output differs between runs of the same code: seed the inputs*"]
    )
    n = _numerics(pytester)
    assert n["kind"] == "unseeded" and n["baseline_runs"] == 2
