"""Options: every one on --help and as an ini key; bad values name where they came from."""

from __future__ import annotations

import pytest

from pytest_gpuperf.options import OPTIONS


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
