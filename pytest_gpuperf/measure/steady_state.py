"""Steady-state detection over a series of round times: during warm-up, has the transient
ended (:func:`settled`)? After measuring, how many leading rounds are still transient
(:func:`mser_cut`, MSER), and did the level move (:func:`changepoints`, PELT)? All work on
the log of the round times, so tolerances are relative.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from pytest_gpuperf.measure.names import NO_STEADY_STATE, SHIFT, STEADY, WARMUP_CAPPED
from pytest_gpuperf.measure.summary import MAD_TO_SD, mad, median


def _logs(values: Sequence[float]) -> list[float]:
    return [math.log(v) for v in values if v > 0]


def _ranks(xs: Sequence[float]) -> list[float]:
    """0-based ranks, ties given their mean rank."""
    first: dict[float, int] = {}
    last: dict[float, int] = {}
    for i, v in enumerate(sorted(xs)):
        first.setdefault(v, i)
        last[v] = i
    return [(first[v] + last[v]) / 2.0 for v in xs]


def spearman_trend(xs: Sequence[float]) -> float:
    """Spearman's rho between the values and their position (0 where undefined); not scipy's:
    importing it costs 0.6-1 s in the measuring process (a test checks that both agree)."""
    n = len(xs)
    if n < 3:
        return 0.0
    rx, ry = range(n), _ranks(xs)  # positions have no ties
    mx, my = sum(rx) / n, sum(ry) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=False))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    if sxx == 0 or syy == 0:
        return 0.0
    return sxy / math.sqrt(sxx * syy)


def settled(values: Sequence[float], window: int = 6, tol: float = 0.01) -> bool:
    """Whether the last ``2 * window`` warm-up rounds show a settled level: the medians of
    their two halves agree within ``tol`` or three standard errors (so jittery but flat
    series settle too), and they show no monotone trend (``|Spearman rho| < 0.8``)."""
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


def mser_cut(values: Sequence[float]) -> int:
    """MSER truncation point: the ``d <= n / 2`` leading rounds to drop that minimise the
    squared standard error of the mean of what is kept."""
    z = _logs(values)
    n = len(z)
    if n < 4:
        return 0
    bound = int(0.5 * n)
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


def changepoints(values: Sequence[float], min_size: int = 5) -> list[int]:
    """Level changes by PELT with a mean-shift cost; returns segment start indices (>0).

    The noise SD comes from successive differences (robust to the shifts themselves), values
    are winsorised so one slow round cannot open a segment, and the penalty is ``3 ln n``
    noise variances per change.
    """
    z = _logs(values)
    n = len(z)
    if n < 2 * min_size:
        return []
    diffs = [abs(b - a) for a, b in itertools.pairwise(z)]  # immune to the shifts themselves
    sd = max(MAD_TO_SD * median(diffs) / math.sqrt(2.0), 5e-4)
    mid = median(z)
    z = [min(max(v, mid - 40 * sd), mid + 40 * sd) for v in z]  # clamp gross outliers
    # Winsorise at 4 SD around a running median of 5: keeps shifts, trims spikes.
    local = [median(z[max(0, i - 2) : i + 3]) for i in range(n)]
    z = [min(max(v, m - 4 * sd), m + 4 * sd) for v, m in zip(z, local, strict=True)]
    pen = 3.0 * math.log(n)
    inv_var = 1.0 / (sd * sd)
    c1 = [0.0] * (n + 1)
    c2 = [0.0] * (n + 1)
    for i, v in enumerate(z):
        c1[i + 1] = c1[i] + v
        c2[i + 1] = c2[i] + v * v

    def cost(a: int, b: int) -> float:
        m = b - a
        s1 = c1[b] - c1[a]
        return (c2[b] - c2[a] - s1 * s1 / m) * inv_var

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


#: The fewest steady rounds a measurement is called steady on (:func:`classify`).
MIN_KEPT = 5


def steady_tail(values: Sequence[float], tol: float = 0.01) -> tuple[int, int]:
    """Where the final steady level starts, and how many material level changes came before.

    MSER removes a decaying start; PELT then finds level changes in the rest, material when
    the medians on either side differ by more than ``tol`` or three times the rounds' own
    scatter. A one-off step is trimmed as leftover transient; two or more mean the level moves.
    """
    cut = mser_cut(values)
    if 0 < len(values) - cut < MIN_KEPT:
        # MSER trims scatter too: in a short series, a cut that leaves too few rounds, of a
        # head within tol of the level, is no transient
        level = median(_logs(values[cut:]))
        if all(abs(z - level) <= math.log1p(tol) for z in _logs(values[:cut])):
            cut = 0
    tail = list(values[cut:])
    cps = changepoints(tail)
    if not cps:
        return cut, 0
    bounds = [0, *cps, len(tail)]
    segs = [tail[a:b] for a, b in itertools.pairwise(bounds)]
    levels = [median(_logs(seg)) for seg in segs]
    within = median([MAD_TO_SD * mad(_logs(seg)) for seg in segs])
    limit = max(math.log1p(tol), 3.0 * within)
    changes = [i for i in range(1, len(segs)) if abs(levels[i] - levels[i - 1]) > limit]
    if not changes:
        return cut, 0
    return cut + bounds[changes[-1]], len(changes)


def drifting(values: Sequence[float], tol: float = 0.01) -> bool:
    """A gradual drift that no single change point captures: the Theil-Sen slope moves the
    level by more than ``tol`` and three standard errors end to end, and the series trends
    monotonically (|Spearman| > 0.5)."""
    z = _logs(values)
    n = len(z)
    if n < 6:
        return False
    slopes = [(z[j] - z[i]) / (j - i) for i in range(n) for j in range(i + 1, n)]
    slope = median(slopes)
    change = slope * (n - 1)
    resid = [v - slope * i for i, v in enumerate(z)]
    sd = MAD_TO_SD * mad(resid)
    se_change = sd * math.sqrt(12.0 / n)
    return abs(change) > max(math.log1p(tol), 3.0 * se_change) and abs(spearman_trend(z)) > 0.5


def classify(
    kept: int, wanted: int, changes: int, *, warmup_settled: bool, drift: bool = False
) -> str:
    """Stability class from :func:`steady_tail` and :func:`drifting` (``kept`` of ``wanted``)."""
    if changes >= 2:
        return SHIFT
    if drift or kept < max(MIN_KEPT, wanted // 2):
        return NO_STEADY_STATE
    return STEADY if warmup_settled else WARMUP_CAPPED
