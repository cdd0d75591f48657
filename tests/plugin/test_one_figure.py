"""One change, one figure: a failure shows the change the gate used, written alike, in the
failure's headline and diagnosis, the table, the verdicts block, the JSON, HTML, CSV,
Markdown, JUnit and GitHub outputs, and in ``pytest-gpuperf compare``.

On the virtual clock (tests/conftest.py): the planted 30x slowdown is the same in every
process whatever the machine does, and one run settles it.
"""

from __future__ import annotations

import io
import json
import math

import pytest

from pytest_gpuperf.cli.main import main as cli
from pytest_gpuperf.units import fmt_change, fmt_pct
from tests.conftest import FAST, VIRTUAL_TIME_CONFTEST, run_with_env, slowed_bench

BENCH = slowed_bench("test_pkg", 400_000)


def _run(pytester: pytest.Pytester, *args: str, slowdown: float = 1.0) -> pytest.RunResult:
    env = {"SLOWDOWN": str(slowdown), "GITHUB_STEP_SUMMARY": str(pytester.path / "summary.md")}
    return run_with_env(
        pytester, env, "-p", "no:cacheprovider", *FAST, "--gpuperf-inventory=never", *args
    )


def test_one_failure_shows_the_same_change_in_every_output(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(VIRTUAL_TIME_CONFTEST)
    pytester.makepyfile(test_c=BENCH)
    for _ in range(3):
        _run(pytester, "--gpuperf-save=main", "--gpuperf-capture=never").assert_outcomes(passed=1)
    result = _run(
        pytester,
        "--gpuperf-baseline=main",
        "--gpuperf-json=o.json",
        "--gpuperf-html=o.html",
        "--gpuperf-csv=o.csv",
        "--gpuperf-markdown=o.md",
        "--gpuperf-github=on",
        "--junitxml=o.xml",
        "--gpuperf-reruns=0",  # so that the JSON holds every run the gate judged (the CLI's)
        slowdown=30.0,
    )
    result.assert_outcomes(failed=1)
    doc = json.loads((pytester.path / "o.json").read_text())
    (res,) = doc["results"]
    c = res["comparison"]
    assert c["kind"] == "regression"
    figure = fmt_change(c["ratio"])  # the figure the gate used, as every output writes it
    assert figure.endswith("x") and 20 < c["ratio"] < 40
    assert c["change"] == f"{figure} time"
    out = result.stdout.str()
    lines = result.stdout.lines
    # the failure's headline (the diagnosis), the verdict's headline, the table and verdicts
    start = next(i for i, ln in enumerate(lines) if ln.startswith("____") and "test_pkg" in ln)
    assert f"is slower than its baseline: {figure} time" in lines[start + 1]
    assert f"gpuperf: test_pkg is slower than its baseline: {figure} time (REGRESSION" in out
    assert f"  change     {figure} (90 % CI" in out
    row = next(ln for ln in lines if ln.startswith("test_pkg ") and "REGRESSION" in ln)
    assert f"{figure} REGRESSION" in row
    assert f"test_pkg: REGRESSION {figure} time" in out  # the verdicts block
    files = {
        name: (pytester.path / name).read_text()
        for name in ("o.html", "o.csv", "o.md", "o.xml", "summary.md")
    }
    for name, text in files.items():
        assert figure in text, f"{name} does not show {figure}"
    # and no other rendering of the same change anywhere (the old percent form)
    other = fmt_pct(c["ratio"] - 1, sign=True)
    for name, text in {**files, "stdout": out}.items():
        assert other not in text, f"{name} shows {other} beside {figure}"
    # the command line's compare, on the same runs
    buf = io.StringIO()
    code = cli(
        ["compare", "main", "o.json", "--dir", str(pytester.path / ".gpuperf/baselines")], buf
    )
    assert code == 1 and f"{figure} REGRESSION" in buf.getvalue(), buf.getvalue()
    assert math.isfinite(c["ratio"])


def test_the_change_format_switches_to_a_ratio_at_twice_as_slow() -> None:
    assert [fmt_change(x) for x in (1.0004, 1.0612, 0.7, 1.999, 2.0, 2.964, 76.61, 8512.0)] == [
        "+0.04 %",
        "+6.1 %",
        "-30.0 %",
        "+99.9 %",
        "2x",
        "2.96x",
        "76.6x",
        "8512x",
    ]
    assert fmt_change(None) == "-" and fmt_change(math.inf) == "inf"
