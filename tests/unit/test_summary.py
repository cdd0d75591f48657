from __future__ import annotations

import math
import random

import pytest

from pytest_gpuperf.measure.summary import mad, median, median_ci_ranks, quantile, summarize


def test_quantile_matches_linear_interpolation():
    xs = [1.0, 2.0, 3.0, 4.0]
    assert quantile(xs, 0.5) == 2.5
    assert quantile(xs, 0.25) == pytest.approx(1.75)
    assert quantile(xs, 0.0) == 1.0 and quantile(xs, 1.0) == 4.0


def test_median_and_mad():
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert mad([1.0, 2.0, 3.0, 4.0, 100.0]) == 1.0


def test_empty_summary_is_nan():
    s = summarize([])
    assert s.n == 0 and math.isnan(s.median)


def test_median_ci_ranks_are_symmetric_and_inside():
    for n in (5, 10, 20, 30, 100):
        lo, hi = median_ci_ranks(n)
        assert 0 <= lo <= hi <= n - 1
        assert lo == n - 1 - hi


def test_median_ci_covers_true_median_at_least_95_percent():
    """Coverage on a skewed distribution whose median is known (lognormal: median = 1)."""
    rng = random.Random(1)
    trials, covered = 2000, 0
    for _ in range(trials):
        xs = [math.exp(rng.gauss(0, 0.5)) for _ in range(20)]
        s = summarize(xs)
        covered += s.ci_low <= 1.0 <= s.ci_high
    # Order-statistic intervals are conservative: nominal >= 95 %; allow binomial noise.
    assert covered / trials >= 0.93


def test_relative_spread():
    s = summarize([1.0, 1.0, 1.1, 1.2, 1.2])
    assert s.median == 1.1
    assert s.rel_iqr == pytest.approx(0.2 / 1.1)
