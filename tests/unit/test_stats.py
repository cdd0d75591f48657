"""The maths of the verdict (pytest_gpuperf.stats), on synthetic data whose truth is known."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special
from scipy import stats as st

from pytest_gpuperf import stats

#: The default policy's levels for a session of 8 gated benchmarks (verdict.DecisionPolicy).
LEVELS = {
    "threshold": 0.03,
    "detect": 0.05,
    "alpha_regression": 0.01 / 8,
    "alpha_improvement": 0.01 / 24,
    "clear_error": 0.01,
    "looks": 3,
    "power": 0.95,
    "shared": 0.25,
    "ci_level": 0.90,
    "consistency_alpha": 0.01,
}


def _binomial_ok(hits: int, n: int, rate: float, q: float = 0.999) -> bool:
    """Whether ``hits`` of ``n`` is consistent with a true rate of at most ``rate``."""
    return hits <= st.binom.ppf(q, n, rate)


@pytest.mark.parametrize("r", [1, 2, 3, 4, 5, 9, 12])
def test_median_variance_matches_simulation(r: int) -> None:
    rng = np.random.default_rng(r)
    x = np.median(rng.standard_normal((400_000, r)), axis=1)
    # SE of a sample variance of n normal-ish values: var * sqrt(2 / n).
    tol = 6 * math.sqrt(2 / x.size)
    if r <= len(stats.MEDIAN_VARIANCE):
        assert stats.median_variance(r) == pytest.approx(x.var(), rel=tol)
    else:  # the asymptotic pi / (2 r) errs high, i.e. towards a wider test
        assert x.var() * (1 - tol) <= stats.median_variance(r) <= x.var() * 1.15


def test_location_is_mean_up_to_two_runs_then_median() -> None:
    assert stats.location([1.0, 3.0]) == 2.0
    assert stats.location([0.0, 0.1, 5.0]) == pytest.approx(0.1)  # one slow run ignored


def test_location_variance_keeps_the_shared_share() -> None:
    assert stats.location_variance(1, 0.25) == pytest.approx(1.0)
    assert stats.location_variance(3, 0.0) == pytest.approx(stats.MEDIAN_VARIANCE[2])
    assert stats.location_variance(50, 0.25) > 0.25


def test_trigamma_inverse_inverts_trigamma() -> None:
    y = np.array([0.05, 0.3, 1.0, 4.0, 40.0, 1e4])
    assert stats.trigamma_inverse(special.polygamma(1, y)) == pytest.approx(y, rel=1e-6)


def test_default_noise_anchors_and_monotone() -> None:
    t = np.array([1e-6, 20e-6, 63e-6, 200e-6, 1e-2])
    g = stats.default_noise(t, small=0.25, large=0.01, small_s=20e-6, large_s=200e-6)
    assert g[0] == g[1] == pytest.approx(0.25)
    assert g[3] == g[4] == pytest.approx(0.01)
    assert g[1] > g[2] > g[3]
    # log-log interpolation: halfway in log time is halfway in log noise
    assert g[2] == pytest.approx(math.sqrt(0.25 * 0.01), rel=0.01)


def _prior_draws(
    rng: np.random.Generator, sessions: int, m: int, k: int, scale: float, nu0: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per-benchmark run SDs drawn from a scaled inverse chi-square prior, and their s_K."""
    t = rng.uniform(1e-5, 1e-3, size=(sessions, m))
    ref = stats.default_noise(t)
    sigma = scale * ref * np.sqrt(nu0 / rng.chisquare(nu0, size=(sessions, m)))
    s_k = sigma * np.sqrt(rng.chisquare(k - 1, size=(sessions, m)) / (k - 1))
    return s_k, ref


def test_fit_prior_recovers_a_homogeneous_runner() -> None:
    """All benchmarks at 0.6x the default curve: the scale is found and nu0 is capped."""
    rng = np.random.default_rng(1)
    s_k, ref = _prior_draws(rng, 400, 60, 6, 0.6, 1e6)
    fit = stats.fit_prior(s_k, np.full(s_k.shape, 5.0), ref, nu0_max=10)
    assert np.median(fit.scale) == pytest.approx(0.6, rel=0.03)
    assert np.median(fit.nu0) == 10
    assert (fit.n == 60).all()


def test_fit_prior_sees_heterogeneity() -> None:
    """Noise spread like nu0 = 3 around the curve: nu0 is estimated small, not capped."""
    rng = np.random.default_rng(2)
    s_k, ref = _prior_draws(rng, 400, 60, 6, 0.5, 3.0)
    fit = stats.fit_prior(s_k, np.full(s_k.shape, 5.0), ref, nu0_max=10, confidence=0.5)
    assert 2.0 < np.median(fit.nu0) < 4.5
    # The level is the geometric mean of the variances (above the inverse-chi-square centre).
    gm = 0.5 * math.sqrt(math.exp(np.mean(np.log(3.0 / rng.chisquare(3.0, 200_000)))))
    assert np.median(fit.scale) == pytest.approx(gm, rel=0.1)


def test_fit_prior_small_pool_is_cautious() -> None:
    """With few benchmarks the upper-bound rule lowers nu0 below a homogeneous pool's cap."""
    rng = np.random.default_rng(3)
    s_k, ref = _prior_draws(rng, 2000, 4, 5, 1.0, 1e6)
    fit = stats.fit_prior(s_k, np.full(s_k.shape, 4.0), ref, nu0_max=10)
    assert np.median(fit.nu0) < 10
    too_few = stats.fit_prior(s_k[:, :2], np.full((2000, 2), 4.0), ref[:, :2], min_benchmarks=3)
    assert (too_few.nu0 == 0).all() and (too_few.scale == 1).all()


def test_fit_prior_ignores_missing_benchmarks() -> None:
    fit = stats.fit_prior([0.01, np.nan, 0.012, 0.011, 0.009], [4, 4, 0, 4, 4], [0.01] * 5)
    assert int(fit.n) == 3


def test_benchmark_nu0_drops_for_a_benchmark_far_above_the_prior() -> None:
    w = stats.benchmark_nu0([0.005, 0.01, 0.05], 5, 0.01, 10.0)
    assert w[0] == 10.0  # below the prior: full weight (it pulls the noise up)
    assert 8.0 < w[1] <= 10.0
    assert w[2] < 0.1
    assert stats.benchmark_nu0(np.nan, 1, 0.01, 10.0) == 10.0


def _levels(**over: float) -> dict[str, float]:
    return {**LEVELS, **over}


def test_plain_t_test_is_exact_without_prior() -> None:
    """nu0 = 0, one current run, no shared share: T ~ t(K-1), so p_slow ~ U(0, 1)."""
    rng = np.random.default_rng(4)
    n, k = 200_000, 5
    sigma = rng.uniform(0.001, 0.2, size=n)  # any noise level
    yb = sigma[:, None] * rng.standard_normal((n, k))
    yc = sigma[:, None] * rng.standard_normal((n, 1))
    ev = stats.evaluate(
        yb.mean(1), yb.std(1, ddof=1), k, yc, 0.01, 0.0, 0.0, with_mde=False, **_levels(shared=0)
    )
    assert st.kstest(ev.p_slow, "uniform").pvalue > 1e-3
    for q in (0.05, 0.01, 0.001):
        hits = int((ev.p_slow < q).sum())
        assert _binomial_ok(hits, n, q) and hits >= st.binom.ppf(0.001, n, q)


def test_moderated_test_is_valid_under_its_own_prior() -> None:
    """Noise drawn from the prior the test assumes: no tail of p_slow is over nominal."""
    rng = np.random.default_rng(5)
    n, k, nu0, s0 = 300_000, 5, 10.0, 0.01
    sigma = s0 * np.sqrt(nu0 / rng.chisquare(nu0, n))
    yb = sigma[:, None] * rng.standard_normal((n, k))
    yc = sigma[:, None] * rng.standard_normal((n, 1))
    ev = stats.evaluate(
        yb.mean(1), yb.std(1, ddof=1), k, yc, s0, nu0, 0.0, with_mde=False, **_levels(shared=0)
    )
    for q in (0.1, 0.01, 0.001):
        assert _binomial_ok(int((ev.p_slow < q).sum()), n, q)


def test_prior_gives_power_the_plain_test_lacks() -> None:
    """Same data, prior equal to the truth: the moderated test rejects a 6 % slowdown far more."""
    rng = np.random.default_rng(6)
    n, k, sigma = 20_000, 5, 0.01
    yb = sigma * rng.standard_normal((n, k))
    yc = math.log(1.06) + sigma * rng.standard_normal((n, 3))
    lv = _levels()
    plain = stats.evaluate(yb.mean(1), yb.std(1, ddof=1), k, yc, sigma, 0.0, 0.0, **lv)
    mod = stats.evaluate(yb.mean(1), yb.std(1, ddof=1), k, yc, sigma, 10.0, 0.0, **lv)
    p_plain = (plain.code == stats.REGRESSION).mean()
    p_mod = (mod.code == stats.REGRESSION).mean()
    assert p_mod > p_plain + 0.2


def test_threshold_in_force_and_its_reason() -> None:
    lv = _levels()
    quiet = stats.evaluate(0.0, 0.002, 20, [0.0], 0.002, 10.0, 0.0, **lv)
    noisy = stats.evaluate(0.0, 0.05, 20, [0.0], 0.05, 10.0, 0.0, **lv)
    assert float(quiet.cutoff) == pytest.approx(math.log1p(lv["threshold"]))
    assert not bool(quiet.noise_bound)
    assert float(noisy.cutoff) > math.log1p(lv["threshold"]) and bool(noisy.noise_bound)


def test_regression_needs_both_size_and_significance() -> None:
    lv = _levels()
    # 2 % slower, overwhelming significance: below the 3 % threshold, so no change.
    small = stats.evaluate(0.0, 0.001, 30, [math.log(1.02)], 0.001, 10.0, 0.0, **lv)
    assert float(small.p_slow) < 1e-6 and int(small.code) == stats.NO_CHANGE
    # 20 % slower but the noise is 20 %: not significant, and not ruled out either.
    noisy = stats.evaluate(0.0, 0.2, 5, [math.log(1.2)], 0.2, 10.0, 0.0, **lv)
    assert int(noisy.code) == stats.INCONCLUSIVE
    big = stats.evaluate(0.0, 0.005, 10, [math.log(1.2)], 0.005, 10.0, 0.0, **lv)
    assert int(big.code) == stats.REGRESSION
    fast = stats.evaluate(0.0, 0.005, 10, [math.log(0.8)], 0.005, 10.0, 0.0, **lv)
    assert int(fast.code) == stats.IMPROVEMENT


def test_disagreeing_runs_are_inconclusive() -> None:
    """Two runs in a 2x mode and one normal: the median says slower, the F-test objects."""
    lv = _levels()
    runs = [0.0, math.log(2.0), math.log(2.1)]
    ev = stats.evaluate(0.0, 0.01, 10, runs, 0.01, 10.0, 0.0, **lv)
    assert float(ev.d) > math.log(1.9)
    assert float(ev.p_disagree) < lv["consistency_alpha"]
    assert int(ev.code) == stats.INCONCLUSIVE


def test_single_look_mde_is_the_closed_form() -> None:
    lv = _levels(looks=1)
    s, nu, k = 0.02, 14.0, 5
    se = s * math.sqrt(1 + 1 / k)
    t_a, t_b = st.t.isf(lv["alpha_regression"], nu), st.t.isf(1 - lv["power"], nu)
    expected = math.expm1(max(math.log1p(lv["threshold"]), t_a * se) + t_b * se)
    assert float(stats.detectable(s, nu, k, **lv)) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("s", [0.002, 0.01, 0.04])
def test_mde_is_where_detection_probability_reaches_power(s: float) -> None:
    lv = _levels()
    mde = float(stats.detectable(s, 12.0, 5, **lv))
    at = float(stats.detection_probability(math.log1p(mde), s, 12.0, 5, **lv))
    below = float(stats.detection_probability(math.log1p(mde) * 0.97, s, 12.0, 5, **lv))
    assert at >= lv["power"] - 1e-6 > below
    # Never below the closed form at the last look's se alone.
    se3 = s * math.sqrt(stats.location_variance(3, lv["shared"]) + 1 / 5)
    t_a, t_b = st.t.isf(lv["alpha_regression"], 12.0), st.t.isf(1 - lv["power"], 12.0)
    assert mde >= math.expm1(max(math.log1p(lv["threshold"]), t_a * se3) + t_b * se3)


def test_runs_needed_reaches_detect() -> None:
    lv = _levels()
    r = stats.runs_needed(0.012, 10, 19.0, **lv)
    assert r is not None and r > 1
    assert float(stats.detectable(0.012, 19.0, 10, **{**lv, "looks": r})) <= lv["detect"]
    assert float(stats.detectable(0.012, 19.0, 10, **{**lv, "looks": r - 1})) > lv["detect"]
    # A 10 %-noise baseline of 3 runs: no number of current runs will do.
    assert stats.runs_needed(0.10, 3, 6.0, **lv) is None
