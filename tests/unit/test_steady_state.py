"""Steady-state detection on synthetic series whose truth is known."""

from __future__ import annotations

import math
import random

import pytest

from pytest_gpuperf.measure.names import NO_STEADY_STATE, SHIFT, STEADY, WARMUP_CAPPED
from pytest_gpuperf.measure.steady_state import (
    changepoints,
    classify,
    mser_cut,
    settled,
    spearman_trend,
    steady_tail,
)


def noisy(level: float, n: int, sd: float, rng: random.Random) -> list[float]:
    return [level * math.exp(rng.gauss(0, sd)) for _ in range(n)]


def test_spearman_trend_detects_monotone_series():
    assert spearman_trend([1, 2, 3, 4, 5]) == 1.0
    assert spearman_trend([5, 4, 3, 2, 1]) == -1.0
    assert spearman_trend([1, 1, 1]) == 0.0


def test_settled_on_flat_noise_and_not_on_a_ramp():
    rng = random.Random(0)
    flat_hits = sum(settled(noisy(1e-3, 12, 0.01, rng)) for _ in range(200))
    assert flat_hits >= 180  # flat series settle (the trend test may rarely veto)
    ramp = [1e-3 * (1 + 0.01 * i) for i in range(12)]  # 1 % per round, 11 % over 12 rounds
    assert not settled(ramp)


def test_settled_accepts_jittery_but_flat_series():
    """A tiny kernel can jitter by 5 % between rounds; that is noise, not a transient."""
    rng = random.Random(3)
    hits = sum(settled(noisy(2e-6, 12, 0.05, rng)) for _ in range(200))
    assert hits >= 170


def test_settled_rejects_a_step_inside_the_window():
    series = [1e-3] * 6 + [1.1e-3] * 6
    assert not settled(series)


def test_mser_cuts_a_decaying_transient():
    rng = random.Random(1)
    transient = [1e-3 * (1 + 0.5 * math.exp(-i / 2)) for i in range(8)]
    series = transient + noisy(1e-3, 40, 0.005, rng)
    cut = mser_cut(series)
    assert 4 <= cut <= 12


def test_mser_keeps_a_stationary_series_nearly_whole():
    rng = random.Random(2)
    cuts = [mser_cut(noisy(1e-3, 30, 0.01, rng)) for _ in range(100)]
    assert sum(c >= 15 for c in cuts) <= 3  # the bound (n/2) is almost never reached


def test_changepoints_find_a_level_shift_and_ignore_noise():
    rng = random.Random(4)
    flat = noisy(1e-3, 40, 0.01, rng)
    assert changepoints(flat) == []
    shifted = noisy(1e-3, 20, 0.005, rng) + noisy(1.08e-3, 20, 0.005, rng)
    cps = changepoints(shifted)
    assert cps and abs(cps[0] - 20) <= 2


def test_steady_tail_trims_a_one_off_step():
    """A clock settling under a power cap: fast, then slower for good. Keep the new level."""
    rng = random.Random(5)
    series = noisy(1e-3, 12, 0.003, rng) + noisy(1.12e-3, 30, 0.003, rng)
    start, changes = steady_tail(series)
    assert changes <= 1 and abs(start - 12) <= 2


def test_steady_tail_counts_a_moving_level():
    rng = random.Random(6)
    series = (
        noisy(1e-3, 12, 0.003, rng) + noisy(1.1e-3, 12, 0.003, rng) + noisy(1e-3, 12, 0.003, rng)
    )
    _, changes = steady_tail(series)
    assert changes >= 2


def test_steady_tail_ignores_a_variance_change_with_the_same_level():
    rng = random.Random(7)
    series = noisy(1e-3, 20, 0.001, rng) + noisy(1e-3, 20, 0.02, rng)
    assert steady_tail(series)[1] == 0


def test_classify():
    assert classify(30, 30, 0, warmup_settled=True) == STEADY
    assert classify(30, 30, 0, warmup_settled=False) == WARMUP_CAPPED
    assert classify(30, 30, 2, warmup_settled=True) == SHIFT
    assert classify(10, 30, 1, warmup_settled=True) == NO_STEADY_STATE


def test_spearman_trend_agrees_with_scipy_on_random_series_with_ties():
    stats = pytest.importorskip("scipy.stats")
    rng = random.Random(7)
    for n in (3, 5, 12, 40):
        for _ in range(20):
            xs = [float(rng.randint(0, n // 2 + 1)) for _ in range(n)]  # many ties
            if len(set(xs)) == 1:  # constant: undefined; scipy warns and says nan, we say 0
                assert spearman_trend(xs) == 0.0
                continue
            ref = stats.spearmanr(range(n), xs).statistic
            assert spearman_trend(xs) == pytest.approx(ref, abs=1e-12)
