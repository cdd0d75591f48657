"""An output format from outside the package: a conftest returns it from
``pytest_gpuperf_output_formats`` and adds its option; the session writes it at its end."""

from __future__ import annotations

import pytest

from tests.conftest import FAST

CONFTEST = """
from pytest_gpuperf.reporting.outputs import Output


def pytest_addoption(parser):
    parser.addoption("--gpuperf-tsv", default=None)


def tsv(ctx, target):
    return "".join(f"{r.id.key}\\t{r.id.mode}\\t{len(r.run.rounds)}\\n" for r in ctx.results)


def pytest_gpuperf_output_formats():
    return [Output("tsv", "TSV", tsv)]
"""

TESTS = """
def test_sum(gpu_bench):
    assert gpu_bench(sum, [1, 2, 3]) == 6
"""


def test_a_plugins_output_format_is_written_when_its_option_is_given(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_tsv=TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider", *FAST, "--gpuperf-tsv=out.tsv")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*TSV written to *out.tsv*"])
    (line,) = (pytester.path / "out.tsv").read_text().splitlines()
    key, mode, rounds = line.split("\t")
    assert (key, mode) == ("test_tsv.py::test_sum@cpu", "cpu") and int(rounds) > 0
    # without its option, nothing is written
    (pytester.path / "out.tsv").unlink()
    pytester.runpytest("-p", "no:cacheprovider", *FAST).assert_outcomes(passed=1)
    assert not list(pytester.path.glob("*.tsv"))
