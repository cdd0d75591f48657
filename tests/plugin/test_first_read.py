"""What a person reads first, end to end on the CPU: lines that fit, and a short ``-q``
run."""

from __future__ import annotations

import pytest

from tests.conftest import FAST, VIRTUAL_TIME_CONFTEST

QUIET = ["-p", "no:cacheprovider", "--gpuperf-capture=never", "--gpuperf-inventory=never"]

SEVEN = """
import os
import pytest

SLOWDOWN = float(os.environ.get("SLOWDOWN", "1"))

def work(clock, us, slower=1.0):
    def call():
        clock.ns += int(us * 1000 * slower)
    return call

@pytest.mark.parametrize("n", [16, 32, 64, 128, 256, 512])
def test_matmul_of_a_rather_long_name_for_a_benchmark_of_square_shapes(clock, gpu_bench, n):
    gpu_bench(work(clock, 10 + n))

def test_layer_norm_over_the_last_dimension_with_a_planted_loop(clock, gpu_bench):
    gpu_bench(work(clock, 300, SLOWDOWN))
"""

#: pytest's own lines, which the plugin does not write
PYTESTS = ("platform ", "rootdir:", "plugins:", "benchmark:", "cachedir:", "configfile:")


def plugin_lines(result: pytest.RunResult, root: object) -> list[str]:
    return [
        ln
        for ln in result.stdout.lines
        if not ln.startswith(PYTESTS) and str(root) not in ln and not ln.startswith("running:")
    ]


def saved_seven(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(VIRTUAL_TIME_CONFTEST)
    pytester.makepyfile(test_seven=SEVEN)
    for _ in range(3):
        pytester.runpytest_subprocess(*QUIET, *FAST, "-q", "--gpuperf-save=main")


def test_a_passing_quiet_run_of_seven_benchmarks_fits_in_15_lines(
    pytester: pytest.Pytester,
) -> None:
    saved_seven(pytester)
    result = pytester.runpytest_subprocess(*QUIET, *FAST, "-q", "--gpuperf-baseline=main")
    result.assert_outcomes(passed=7)
    lines = result.stdout.lines
    assert len(lines) <= 15, "\n".join(lines)
    assert all(len(ln) <= 120 for ln in lines)
    assert sum("test_layer_norm" in ln for ln in lines) == 1  # its row, no detail


def test_the_header_fits_120_columns_on_a_cpu_asked_for(pytester: pytest.Pytester) -> None:
    """A newcomer's header was 129 characters: an 8-character CPU model ("AMD EPYC"), which
    the line could shorten no further, 2 threads, --gpuperf-device=cpu, 10 rounds."""
    pytester.makeconftest(
        VIRTUAL_TIME_CONFTEST + "\nimport torch\ntorch.set_num_threads(2)\n"
        "from pytest_gpuperf.measure import environment\n"
        "_real = environment.collect_environment\n"
        "environment.collect_environment = lambda *a, **k: {**_real(*a, **k), "
        "'cpu_model': 'AMD EPYC'}\n"
    )
    pytester.makepyfile(
        test_one="def test_one(clock, gpu_bench):\n"
        "    def work():\n"
        "        clock.ns += 100_000\n"
        "    gpu_bench(work)\n"
    )
    result = pytester.runpytest_subprocess(*QUIET, *FAST, "--gpuperf-device=cpu", timeout=300)
    result.assert_outcomes(passed=1)
    header = [ln for ln in result.stdout.lines if ln.startswith("gpuperf: ")][:2]
    assert header[0].startswith("gpuperf: measuring on the CPU: AMD EPYC, 2 threads, torch ")
    assert "(--gpuperf-device=cpu)" in header[0] and "10 rounds of 1 ms" in " ".join(header)
    assert all(len(ln) <= 120 for ln in header), header


def test_every_line_of_a_failing_compare_fits_120_columns(pytester: pytest.Pytester) -> None:
    """The failure text (diagnosis headline, verdict block, details), the progress lines,
    the summary: what the plugin writes, in 120 columns; a long path may stay whole."""
    saved_seven(pytester)
    env = {"SLOWDOWN": "3"}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        result = pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", *FAST, "--gpuperf-baseline=main",
            "--gpuperf-capture-skip=nsys,ncu,torch_trace", "--gpuperf-progress=on",
        )  # fmt: skip
    result.assert_outcomes(passed=6, failed=1)
    out = result.stdout.str()
    assert "REGRESSION" in out and "test_layer_norm" in out
    lines = plugin_lines(result, pytester.path)
    too_wide = [ln for ln in lines if len(ln) > 120 and not ln.startswith("FAILED ")]
    assert too_wide == [], "\n".join(too_wide)


def test_the_readmes_first_code_block_finishes_on_the_cpu(pytester: pytest.Pytester) -> None:
    """What a newcomer pastes first: its two commands, save then compare, finish on a
    machine without a GPU (a 4096³ bf16 matmul there did not return in 300 s)."""
    import re
    from pathlib import Path

    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", readme, re.S)
    assert code is not None
    commands = re.findall(r"^pytest (--gpuperf-\S+)", readme, re.M)
    assert commands[:2] == ["--gpuperf-save=main", "--gpuperf-baseline=main"]
    pytester.makepyfile(test_readme=code.group(1))
    for flag in commands[:2]:
        result = pytester.runpytest_subprocess(*QUIET, flag, timeout=240)
        result.assert_outcomes(passed=1)
    assert "no change" in result.stdout.str() or "INCONCLUSIVE" in result.stdout.str()


GROUPED = """
import pytest

@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_add(clock, gpu_bench, dtype):
    def call():
        clock.ns += 1000
    gpu_bench(call)
"""


def test_group_by_an_unknown_parameter_is_an_error_that_names_the_known_ones(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(VIRTUAL_TIME_CONFTEST)
    pytester.makepyfile(test_grouped=GROUPED)
    result = pytester.runpytest_subprocess(*QUIET, *FAST, "--gpuperf-group-by=param:dtpye")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--gpuperf-group-by=param:dtpye: no collected benchmark has a parameter 'dtpye'"
         " (their parameters are dtype)*"]
    )  # fmt: skip
    result = pytester.runpytest_subprocess(*QUIET, *FAST, "--gpuperf-group-by=param:dtype")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["param:dtype=f32", "*", "param:dtype=f64"], consecutive=False)
