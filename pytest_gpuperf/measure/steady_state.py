"""Steady-state detection over a series of round times (pure Python).

Three questions, each a small pure function:

* ``settled``: during warm-up, has the transient ended? (online)
* ``mser_cut``: after measuring, how many leading rounds are still transient? (MSER)
* ``changepoints``: did the level move during the measurement? (PELT)

``classify`` turns the answers into one of the stability classes of
:mod:`pytest_gpuperf.model`. All work on the log of the round times, so
tolerances are relative.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from pytest_gpuperf.model import NO_STEADY_STATE, SHIFT, STEADY, WARMUP_CAPPED
from pytest_gpuperf.summary import mad, median

#: 1.4826 * MAD estimates the standard deviation of a normal sample.
MAD_TO_SD = 1.4826


def _logs(values: Sequence[float]) -> list[float]:
    return [math.log(v) for v in values if v > 0]


def _ranks(xs: Sequence[float]) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0
        i = j + 1
    return ranks


def spearman_trend(xs: Sequence[float]) -> float:
    """Spearman's rho between the values and their position (0 where undefined)."""
    n = len(xs)
    if n < 3:
        return 0.0
    rx = _ranks(list(range(n)))
    ry = _ranks(xs)
    mx, my = sum(rx) / n, sum(ry) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=False))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    if sxx == 0 or syy == 0:
        return 0.0
    return sxy / math.sqrt(sxx * syy)


def settled(values: Sequence[float], window: int = 6, tol: float = 0.01) -> bool:
    """Whether the last ``2 * window`` warm-up rounds show a settled level.

    Settled means both: the median of the newest ``window`` rounds agrees with
    the median of the ``window`` before them, within ``tol`` or three standard
    errors of that difference (whichever is larger, so jittery but flat series
    settle too); and the ``2 * window`` rounds show no monotone trend
    (``|Spearman rho| < 0.8``).
    """
    if len(values) < 2 * window:
        return False
    tail = _logs(values[-2 * window :])
    if len(tail) < 2 * window:
        return False
    older, newer = tail[:window], tail[window:]
    diff = abs(median(newer) - median(older))
    sd = MAD_TO_SD * mad(tail)
    # Standard error of a median ~ 1.2533 sd / sqrt(n); of a difference of two, sqrt(2) x that.
    se = 1.2533 * sd * math.sqrt(2.0 / window)
    if diff > max(math.log1p(tol), 3.0 * se):
        return False
    return abs(spearman_trend(tail)) < 0.8


def mser_cut(values: Sequence[float], max_fraction: float = 0.5) -> int:
    """MSER truncation point: the number of leading rounds to drop.

    Minimises the squared standard error of the mean of what is kept,
    ``sum((z - mean)^2) / (n - d)^2``, over ``d <= max_fraction * n``. A
    result equal to the bound means the transient did not visibly end.
    """
    z = _logs(values)
    n = len(z)
    if n < 4:
        return 0
    bound = int(max_fraction * n)
    best_d, best = 0, math.inf
    # Suffix sums make each candidate O(1).
    s1 = [0.0] * (n + 1)
    s2 = [0.0] * (n + 1)
    for i in range(n - 1, -1, -1):
        s1[i] = s1[i + 1] + z[i]
        s2[i] = s2[i + 1] + z[i] * z[i]
    for d in range(bound + 1):
        m = n - d
        sse = s2[d] - s1[d] * s1[d] / m
        score = sse / (m * m)
        if score < best - 1e-18:
            best, best_d = score, d
    return best_d


def changepoints(
    values: Sequence[float], penalty: float | None = None, min_size: int = 5
) -> list[int]:
    """PELT with a Gaussian mean-and-variance cost; returns segment start indices (>0).

    The penalty defaults to ``15 * ln(n)`` (warmup_stats' default), so only a
    clear change of level or variance splits the series. Variances are
    floored at a 0.05 % relative SD so that near-identical rounds (timer
    resolution) do not create segments.
    """
    z = _logs(values)
    n = len(z)
    if n < 2 * min_size:
        return []
    pen = 15.0 * math.log(n) if penalty is None else penalty
    floor = (5e-4) ** 2
    c1 = [0.0] * (n + 1)
    c2 = [0.0] * (n + 1)
    for i, v in enumerate(z):
        c1[i + 1] = c1[i] + v
        c2[i + 1] = c2[i] + v * v

    def cost(a: int, b: int) -> float:
        m = b - a
        mean = (c1[b] - c1[a]) / m
        var = max((c2[b] - c2[a]) / m - mean * mean, floor)
        return m * (math.log(2 * math.pi * var) + 1)

    f = [math.inf] * (n + 1)
    f[0] = -pen
    last = [0] * (n + 1)
    candidates = [0]
    for t in range(1, n + 1):
        scored = [(f[s] + cost(s, t) + pen, s) for s in candidates if t - s >= min_size]
        if scored:
            f[t], last[t] = min(scored)
        # PELT pruning: a start that cannot beat f[t] now never will.
        candidates = [s for s in candidates if t - s < min_size or f[s] + cost(s, t) <= f[t]]
        if math.isfinite(f[t]):
            candidates.append(t)
    cps = []
    t = n
    while t > 0:
        s = last[t]
        if s > 0:
            cps.append(s)
        t = s
    return sorted(cps)


def classify(
    measured: Sequence[float],
    *,
    warmup_settled: bool,
    cut_at_bound: bool,
    tol: float = 0.01,
) -> tuple[str, list[int]]:
    """Stability class of the retained rounds, with the change points found.

    ``measured`` are the rounds kept after MSER truncation. A change point
    whose segments' medians all lie within ``tol`` (or the rounds' own
    scatter) of the last segment's is harmless; otherwise the level shifted.
    """
    if cut_at_bound:
        return NO_STEADY_STATE, []
    cps = changepoints(measured)
    if cps:
        bounds = [0, *cps, len(measured)]
        segs = [measured[a:b] for a, b in itertools.pairwise(bounds)]
        last = median(segs[-1])
        z = _logs(measured)
        scatter = MAD_TO_SD * mad(z)
        limit = max(math.log1p(tol), scatter)
        if any(abs(math.log(median(s) / last)) > limit for s in segs[:-1]):
            return SHIFT, cps
    return (STEADY if warmup_settled else WARMUP_CAPPED), cps
