"""Options: every one on --help and as an ini key; bad values name where they came from."""

from __future__ import annotations

import pytest

from pytest_gpuperf.shell.options import OPTIONS


def test_help_lists_every_option(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    out = result.stdout.str()
    for opt in OPTIONS:
        if opt.cli:
            assert opt.flag_name in out, opt.flag_name
            assert opt.ini_name in out, opt.ini_name


def test_bad_command_line_value_names_the_flag(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--gpuperf-round-ms=fast")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gpuperf-round-ms: expected a number, got 'fast'*"])


def test_bad_ini_value_names_the_ini_key(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ngpuperf_rounds = 2\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*gpuperf_rounds in the ini file: expected a whole number >= 5, got '2'*"]
    )


def test_command_line_beats_ini(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ngpuperf_rounds = 12\ngpuperf_round_ms = 0.5\n")
    pytester.makepyfile("def test_b(gpu_bench):\n    gpu_bench(lambda: None)\n")
    result = pytester.runpytest(
        "--gpuperf-rounds=6", "--gpuperf-warmup-ms=20", "--gpuperf-json=o.json"
    )
    result.assert_outcomes(passed=1)
    import json

    (r,) = json.loads((pytester.path / "o.json").read_text())["results"]
    assert r["policy"]["rounds"] == 6 and r["policy"]["round_ms"] == 0.5


def test_plugin_can_be_disabled(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_b(gpu_bench):\n    pass\n")
    result = pytester.runpytest("-p", "no:gpuperf")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'gpu_bench' not found*"])


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--gpuperf-disable", "--gpuperf-save=main"],
            "*--gpuperf-save (from the command line) saves measurements, and --gpuperf-disable "
            "(from the command line) turns measuring off: nothing would be saved; drop one*",
        ),
        (
            ["--gpuperf-disable", "--gpuperf-baseline=main"],
            "*--gpuperf-baseline (from the command line) compares measurements, and "
            "--gpuperf-disable (from the command line) turns measuring off*",
        ),
        (
            ["--gpuperf-only", "--gpuperf-skip"],
            "*--gpuperf-only (from the command line) and --gpuperf-skip (from the command line) "
            "together deselect every test; drop one*",
        ),
        (
            ["--gpuperf-capture-skip=nsys,bogus"],
            "*--gpuperf-capture-skip: no capture tool named 'bogus'; the tools are torch_profiler, "
            "torch_trace, nsys, ncu*",
        ),
    ],
)
def test_contradictions_and_silent_no_ops_are_usage_errors(
    pytester: pytest.Pytester, args: list[str], message: str
) -> None:
    """Each of these was accepted, and did nothing or nothing useful."""
    pytester.makepyfile("def test_b(gpu_bench):\n    gpu_bench(lambda: None)\n")
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_a_contradiction_names_the_ini_file_where_it_comes_from(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ngpuperf_disable = true\n")
    result = pytester.runpytest("--gpuperf-save=main")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gpuperf-disable (gpuperf_disable in the ini file)*"])


def test_capture_skip_accepts_the_names_of_collectors_from_hooks(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        class Smi:
            name = "nvidia_smi"

            def available(self):
                return "not here"

            def collect(self, ctx):
                raise AssertionError

        def pytest_gpuperf_collectors(config):
            return [Smi()]
        """
    )
    pytester.makepyfile("def test_b(gpu_bench):\n    gpu_bench(lambda: None)\n")
    result = pytester.runpytest("--gpuperf-capture-skip=nvidia_smi,ncu", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_the_documented_capture_tools_are_the_built_in_collectors() -> None:
    from pytest_gpuperf.shell.capture import default_collectors
    from pytest_gpuperf.shell.options import CAPTURE_TOOLS

    assert tuple(c.name for c in default_collectors()) == CAPTURE_TOOLS
