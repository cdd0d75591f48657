"""The statistics of the verdict: fast modes of run levels, with their order statistics (pure).

Between fresh processes, GPU timings are not normal: host-bound work has slow
periods (a process, or a few seconds of one, runs 1.3-2x slower), and power-capped
GEMMs land now and then in a lower clock regime. Slowness comes from delays, so
it is one-sided, and the *fastest* processes are the reproducible ones (timeit's
argument). The verdict therefore compares the fast modes of the two sides: the
fastest run of each, corrected by the expected minimum of that many normal draws
so that sides with different numbers of runs compare fairly. One slow process on
either side moves neither minimum; a true slowdown moves every run, and with it
the minimum. Nothing here imports numpy or scipy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

_N = NormalDist()

#: E[min of n iid N(0, 1)], n = 1..30 (numerical integration of the order-statistic density).
MIN_MEAN = (
    0.0, -0.5642, -0.8463, -1.0294, -1.163, -1.2672, -1.3522, -1.4236, -1.485, -1.5388,
    -1.5864, -1.6292, -1.668, -1.7034, -1.7359, -1.766, -1.7939, -1.82, -1.8445, -1.8675,
    -1.8892, -1.9097, -1.9292, -1.9477, -1.9653, -1.9822, -1.9983, -2.0137, -2.0285, -2.0428,
)  # fmt: skip
#: Var[min of n iid N(0, 1)], n = 1..30.
MIN_VAR = (
    1.0, 0.6817, 0.5595, 0.4917, 0.4475, 0.4159, 0.3919, 0.3729, 0.3574, 0.3443,
    0.3332, 0.3236, 0.3152, 0.3077, 0.301, 0.295, 0.2895, 0.2845, 0.2799, 0.2757,
    0.2718, 0.2681, 0.2647, 0.2615, 0.2585, 0.2557, 0.253, 0.2505, 0.2481, 0.2458,
)  # fmt: skip


def min_mean(n: int) -> float:
    """E[min of n standard normals] (Blom's approximation beyond the table)."""
    if n < 1:
        raise ValueError(f"need at least one run, got {n}")
    return MIN_MEAN[n - 1] if n <= len(MIN_MEAN) else _N.inv_cdf(0.625 / (n + 0.25))


def min_var(n: int) -> float:
    """Var[min of n standard normals] (the table's last value beyond it: conservative)."""
    if n < 1:
        raise ValueError(f"need at least one run, got {n}")
    return MIN_VAR[min(n, len(MIN_VAR)) - 1]


def order_mean(i: int, n: int) -> float:
    """E[i-th smallest of n standard normals]: exact for the extremes, Blom's otherwise."""
    if not 1 <= i <= n:
        raise ValueError(f"need 1 <= i <= n, got i={i}, n={n}")
    if i == 1:
        return min_mean(n)
    if i == n:
        return -min_mean(n)
    return _N.inv_cdf((i - 0.375) / (n + 0.25))


def fast_spread(levels: Sequence[float]) -> tuple[float, int]:
    """SD of the fast mode from the lower half of ``levels`` (log run levels), and its df.

    The gap between the fastest run and the run at the middle (the
    ``h = max(2, ceil(K / 2))``-th fastest) over its expectation for normal
    draws: the slower half, where slow processes land, is never looked at.
    ``(0, 0)`` for fewer than two levels.
    """
    k = len(levels)
    if k < 2:
        return 0.0, 0
    ys = sorted(levels)
    h = max(2, math.ceil(k / 2))
    gap = order_mean(h, k) - order_mean(1, k)
    return (ys[h - 1] - ys[0]) / gap, h - 1


def moderate(prior: float, weight: float, own: float, df: int) -> float:
    """The prior SD, learning from the runs' own SD (``df`` degrees of freedom).

    ``sqrt((w prior^2 + df own^2) / (w + df))`` (Smyth 2004), where the prior's
    weight ``w`` falls when the runs contradict it: ``w = weight * min(1, 2 p)``
    with ``p = P(F(df, weight) >= own^2 / prior^2)`` (after Phipson et al. 2016,
    robust hyperparameters). A benchmark far noisier than its class is then
    judged by its own spread, not pulled down to the class's (which would fail
    it falsely); one near or below the class keeps the prior's full weight.
    """
    if df <= 0:
        return prior
    if prior <= 0:
        return own
    w = weight * min(1.0, 2.0 * f_sf(own**2 / prior**2, df, weight))
    return math.sqrt((w * prior**2 + df * own**2) / (w + df))


def f_sf(x: float, d1: float, d2: float) -> float:
    """P(F(d1, d2) >= x), by the regularized incomplete beta function."""
    if x <= 0:
        return 1.0
    return betainc(d2 / 2.0, d1 / 2.0, d2 / (d2 + d1 * x))


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b) (continued fraction, Lentz)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbeta = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    front = math.exp(lbeta + a * math.log(x) + b * math.log1p(-x))
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - betainc(b, a, 1.0 - x)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 300):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < 1e-12:
            break
    return front * f / a


def sf(z: float) -> float:
    """P(Z > z) for a standard normal Z."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def z_of(alpha: float) -> float:
    """The z with P(Z > z) = alpha."""
    return -_N.inv_cdf(alpha)
