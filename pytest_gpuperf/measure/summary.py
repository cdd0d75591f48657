"""Descriptive statistics (pure Python): the one home of median, quantile and MAD.

The median is a measurement's headline number; its noise is given twice: the
interquartile range relative to the median (how much rounds scatter), and a
distribution-free 95 % confidence interval of the median from order
statistics (how well the median itself is known).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from statistics import median
from typing import Any

__all__ = ["MAD_TO_SD", "Summary", "mad", "median", "median_ci_ranks", "quantile", "summarize"]

#: 1.4826 * MAD estimates the standard deviation of a normal sample.
MAD_TO_SD = 1.4826


def quantile(sorted_xs: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default) of an already sorted sequence."""
    if not sorted_xs:
        return math.nan
    pos = (len(sorted_xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def mad(xs: Sequence[float]) -> float:
    """Median absolute deviation (unscaled)."""
    if not xs:
        return math.nan
    m = median(xs)
    return median([abs(x - m) for x in xs])


def median_ci_ranks(n: int, confidence: float = 0.95) -> tuple[int, int]:
    """0-based ranks (lo, hi) of the order statistics whose interval covers the true median
    with probability ``confidence`` or more for any continuous distribution (binomial
    argument); for very small n, the full range."""
    if n <= 0:
        return (0, 0)
    alpha = 1.0 - confidence
    # Largest k with P(Binomial(n, 1/2) <= k - 1) <= alpha / 2 (ranks are 1-based k..n-k+1).
    cdf = 0.0
    k = 0
    for j in range(n + 1):
        p = math.comb(n, j) / 2.0**n
        if cdf + p > alpha / 2:
            break
        cdf += p
        k = j + 1
    lo = max(k - 1, 0)
    hi = min(n - k, n - 1)
    if lo > hi:
        lo, hi = 0, n - 1
    return (lo, hi)


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    mean: float
    min: float
    max: float
    q1: float
    q3: float
    ci_low: float
    ci_high: float

    @property
    def rel_iqr(self) -> float:
        """IQR over median: the spread of the rounds."""
        return (self.q3 - self.q1) / self.median if self.median > 0 else math.nan

    @property
    def rel_ci(self) -> float:
        """Half-width of the median's 95 % interval, relative to the median."""
        if self.median <= 0:
            return math.nan
        return max(self.median - self.ci_low, self.ci_high - self.median) / self.median

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["rel_iqr"] = self.rel_iqr
        d["rel_ci"] = self.rel_ci
        return d


def summarize(xs: Sequence[float]) -> Summary:
    s = sorted(xs)
    n = len(s)
    if n == 0:
        nan = math.nan
        return Summary(0, nan, nan, nan, nan, nan, nan, nan, nan)
    lo, hi = median_ci_ranks(n)
    return Summary(
        n=n,
        median=quantile(s, 0.5),
        mean=sum(s) / n,
        min=s[0],
        max=s[-1],
        q1=quantile(s, 0.25),
        q3=quantile(s, 0.75),
        ci_low=s[lo],
        ci_high=s[hi],
    )
