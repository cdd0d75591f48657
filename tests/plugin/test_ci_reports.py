"""CI outputs end to end: step summary, annotations, Markdown, HTML and JUnit properties.

These run once the session calls reporting.ci.write_ci_outputs and adds
junit_properties (docs/ci.md); until then they are skipped.
"""

from __future__ import annotations

import re

import pytest

from tests.plugin.test_baselines import BENCH, run


def test_regression_under_github_actions(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_spin=BENCH)
    for _ in range(3):
        run(pytester, "--gpuperf-save=main", "--gpuperf-github=off").assert_outcomes(passed=2)
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    monkeypatch.setenv("GITHUB_WORKSPACE", str(pytester.path))
    result = run(
        pytester,
        "--gpuperf-baseline=main",
        "--gpuperf-markdown=out/report.md",
        "--gpuperf-html=out/report.html",
        "--junitxml=out/junit.xml",
        slowdown=10.0,  # settled by one run on the CPU: no confirmation processes
    )
    result.assert_outcomes(passed=1, failed=1)
    errors = [ln for ln in result.stdout.lines if ln.startswith("::error ")]
    assert len(errors) == 1
    assert re.match(
        r"::error file=test_spin\.py,line=\d+,title=gpuperf regression%3A "
        r"test_spin\[changed\] \[cpu\] (\+\d+\.\d %25|\S+x) time::gpuperf: test_spin\[changed\] "
        r"is slower",
        errors[0],
    ), errors[0]
    result.stdout.fnmatch_lines(
        ["*Markdown report written to*report.md", "*HTML report written to*report.html"]
    )
    text = summary.read_text()
    assert text.startswith("## gpuperf: 1 regression")
    assert "test\\_spin\\[changed\\]" in text.splitlines()[6]  # first row: the regression
    assert (pytester.path / "out/report.md").read_text().strip() == text.strip()
    page = (pytester.path / "out/report.html").read_text()
    assert "history of test_spin[changed]" in page and "baseline (3)" in page
    junit = (pytester.path / "out/junit.xml").read_text()
    assert '<property name="gpuperf.verdict" value="regression" />' in junit


def test_no_github_outputs_outside_actions(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    pytester.makepyfile(test_spin=BENCH)
    result = run(pytester, "--gpuperf-save=main", "--junitxml=j.xml")
    result.assert_outcomes(passed=2)
    assert not any(ln.startswith("::") for ln in result.stdout.lines)
    junit = (pytester.path / "j.xml").read_text()
    assert '<property name="gpuperf.verdict" value="not compared" />' in junit
