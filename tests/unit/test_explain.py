"""The text of a verdict: what a user reads when a benchmark fails, warns or passes."""

from __future__ import annotations

import re

from pytest_gpuperf.reporting.explain import explain, summary_line
from pytest_gpuperf.verdict import NoisePrior, decide

T = 200e-6
BASE = [T * (1 + x) for x in (0.002, -0.003, 0.001, -0.001, 0.0015)]
PRIOR = NoisePrior(scale=0.3, nu0=10.0, benchmarks=12, runs=60)


def test_regression_message_has_every_number_the_issue_asks_for() -> None:
    c = decide(BASE, [T * 1.1, T * 1.102, T * 1.099], m=8, look=3, prior=PRIOR, name="test_mm")
    text = explain(c)
    assert text.startswith("gpuperf: test_mm is slower than its baseline: +10.0 % (REGRESSION")
    assert "confirmed" in text
    assert "current    220.0 µs  median of 3 runs" in text  # current median
    assert "baseline   200.0 µs  geometric mean of 5 runs" in text  # baseline median
    assert re.search(r"ratio      1\.100  \+10\.0 % \(90 % CI \+9\.\d % to \+10\.\d %\)", text)
    assert "p <= 0.00125 = alpha 1.0 % / 8 gated benchmarks" in text  # p and its level
    assert "threshold  3.0 % in force: the configured minimum" in text  # threshold and why
    assert "pooled from 12 benchmarks" in text and "5 baseline runs" in text  # the noise
    assert "95 % of the time" in text  # what it could detect


def test_noise_widened_threshold_says_so() -> None:
    base = [20e-6 * (1 + x) for x in (0.08, -0.1, 0.05, -0.02, 0.12)]
    c = decide(base, [20e-6 * 1.06] * 3, m=8, look=3, name="test_add")
    text = explain(c)
    assert "INCONCLUSIVE" in text and "widened by the noise" in text
    assert "standard errors of" in text
    assert "default prior" in text and "nothing could be pooled" in text
    assert "needs more baseline runs" in text or "would be needed" in text


def test_one_baseline_run_is_explained() -> None:
    text = explain(decide([T], [T * 1.02], m=8, name="k1"))
    assert "only 1 baseline run" in text and "default prior" in text
    assert "re-measure in a fresh process (look 2 of 3)" in text


def test_other_kinds_read_well() -> None:
    assert "no change" in explain(decide(BASE, [T], m=8, prior=PRIOR))
    assert "ruled out" in explain(decide(BASE, [T], m=8, prior=PRIOR))
    fast = explain(decide(BASE, [T * 0.8], m=8, prior=PRIOR))
    assert "faster than its baseline" in fast and "(one-sided, faster)" in fast
    new = explain(decide([], [T], name="new"))
    assert "no baseline" in new and "save a baseline" in new
    env = explain(decide(BASE, [T * 1.3], environment_diff=["torch 2.11.0 -> 2.12.0"]))
    assert "differs    torch 2.11.0 -> 2.12.0" in env and "not gated" in env
    clk = decide(BASE, [T * 1.1] * 3, m=8, look=3, prior=PRIOR, environment_reason="clock 1590")
    assert "why        environment: clock 1590" in explain(clk)


def test_summary_lines() -> None:
    reg = decide(BASE, [T * 1.1] * 3, m=8, look=3, prior=PRIOR, name="mm")
    assert summary_line(reg).startswith("mm: REGRESSION +10.0 % (90 % CI")
    assert "threshold 3.0 %" in summary_line(reg)
    pending = decide(BASE, [T * 1.1], m=8, look=1, prior=PRIOR, name="mm")
    assert "(suspect, look 1 of 3)" in summary_line(pending)
    noisy = decide([T], [T * 1.02], m=8, look=3, name="k1")
    assert "detectable >=" in summary_line(noisy)
    assert "\n" not in summary_line(noisy)
    assert summary_line(decide([], [T], name="n")) == "n: no baseline, current 200.0 µs"


def test_a_baseline_that_says_nothing_is_explained_without_warnings() -> None:
    """One baseline run and a prior of almost no weight: infinite bounds, plain words."""
    c = decide([T], [T * 1.2], m=8, look=3, prior=NoisePrior(scale=1.0, nu0=0.05))
    text = explain(c)
    assert c.kind == "inconclusive"
    assert "none can be reached" in text and "cannot detect any slowdown" in text
    assert not re.search(r"\binf\b", text)
