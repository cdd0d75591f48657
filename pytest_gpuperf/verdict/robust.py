"""The statistics of the verdict that scipy would bring with an import of a second or more.

Nothing here imports numpy or scipy: the rule runs in every pytest process that gates.
"""

from __future__ import annotations

import math
from statistics import NormalDist

_N = NormalDist()


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
    # p by the regularized incomplete beta function; 1 when own is 0 (whatever the weight)
    x = own**2 / prior**2
    p = 1.0 if x <= 0 else betainc(weight / 2.0, df / 2.0, weight / (weight + df * x))
    w = weight * min(1.0, 2.0 * p)
    return math.sqrt((w * prior**2 + df * own**2) / (w + df))


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


def z_of(alpha: float) -> float:
    """The z with P(Z > z) = alpha."""
    return -_N.inv_cdf(alpha)
