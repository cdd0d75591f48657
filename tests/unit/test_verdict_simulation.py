"""A/A and A/B simulations: the decision rule against a noise model whose truth is known.

The model (pytest_gpuperf.simulation) is statistics.md §1 at the run level:
process offsets shared by all benchmarks of a process, a job offset shared
by the current runs of a session, and each benchmark's own run noise, at the
levels GPU-MACHINE.md measured on the H200: ~0.3 % between processes for
large kernels (up to ~1 %), several % for launch-bound ones. Every bound
asserted here follows from what the rule promises (alpha, power), with a
binomial tolerance; no simulated outcome is hard-coded.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as st

from pytest_gpuperf import stats
from pytest_gpuperf.simulation import Scenario, SimResult, binomial_lower, simulate
from pytest_gpuperf.verdict import (
    DEFAULT_POLICY,
    IMPROVEMENT,
    INCONCLUSIVE,
    NO_CHANGE,
    REGRESSION,
    DecisionPolicy,
    RunStat,
    decide,
    needs_confirmation,
    pool_noise,
)

ALPHA = DEFAULT_POLICY.alpha
#: Share of the run-to-run variance common to a session's current runs, as the policy assumes.
SESSION_SHARE = DEFAULT_POLICY.shared
#: A GPU-MACHINE-like session: large kernels at 0.3-1 %, launch-bound ones at 5-10 %.
MIXED = {
    "sd": [0.003, 0.003, 0.01, 0.01, 0.05, 0.05, 0.10, 0.10],
    "median_s": [500e-6, 200e-6, 200e-6, 180e-6, 10e-6, 5e-6, 20e-6, 3e-6],
}


def _time_for(sd: float) -> float:
    """A time per call that goes with a noise level (GPU-MACHINE.md: noise falls with time)."""
    return 200e-6 if sd <= 0.01 else 50e-6 if sd <= 0.03 else 10e-6


def _consistent_with_at_most(hits: int, n: int, rate: float) -> bool:
    """``hits`` of ``n`` sessions is consistent (one-sided, 99.9 %) with a true rate <= ``rate``."""
    return hits <= st.binom.ppf(0.999, n, rate)


@pytest.mark.parametrize("m", [8, 100])
@pytest.mark.parametrize("sd", [0.003, 0.01, 0.03, 0.10])
def test_aa_session_false_failures_at_most_alpha(sd: float, m: int) -> None:
    sessions = 3000 if m == 8 else 400
    scenario = Scenario(sd=[sd] * m, median_s=[_time_for(sd)] * m, session_share=SESSION_SHARE)
    res = simulate(scenario, sessions=sessions, k=5, seed=int(sd * 1e4) + m)
    hits, n = res.session_false_failure()
    assert _consistent_with_at_most(hits, n, ALPHA), (hits, n)


@pytest.mark.parametrize("looks", [1, 2, 3])
def test_aa_mixed_session_false_failures_at_most_alpha(looks: int) -> None:
    """Large and launch-bound kernels in one session, the prior pooled over both, r = 1..3."""
    policy = DecisionPolicy(looks=looks)
    res = simulate(
        Scenario(**MIXED, session_share=SESSION_SHARE),
        sessions=6000,
        k=5,
        policy=policy,
        seed=looks,
    )
    hits, n = res.session_false_failure()
    assert _consistent_with_at_most(hits, n, ALPHA), (hits, n)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_aa_short_baselines_at_most_alpha(k: int) -> None:
    """K = 1..3: the default prior (K = 1) or a prior pooled from 2-run spreads."""
    res = simulate(Scenario(**MIXED, session_share=SESSION_SHARE), sessions=4000, k=k, seed=10 + k)
    hits, n = res.session_false_failure()
    assert _consistent_with_at_most(hits, n, ALPHA), (hits, n)


def test_aa_p_values_at_look_one_are_not_anti_conservative() -> None:
    """The noise estimate is sound if p_slow of unchanged benchmarks has no heavy low tail."""
    res = simulate(Scenario(**MIXED, session_share=SESSION_SHARE), sessions=3000, k=5, seed=7)
    p = res.p_first.ravel()
    for q in (0.05, 0.01, 0.001):
        assert _consistent_with_at_most(int((p < q).sum()), p.size, q), q


def _detection(res: SimResult, where: slice | list[int] = slice(None)) -> tuple[int, int]:
    hits = int((res.code[:, where] == stats.REGRESSION).sum())
    return hits, int(res.code[:, where].size)


@pytest.mark.parametrize("slowdown", [0.05, 0.10])
@pytest.mark.parametrize("sd", [0.003, 0.005])
def test_ab_power_at_least_95_percent_for_quiet_kernels(sd: float, slowdown: float) -> None:
    scenario = Scenario(
        sd=[sd] * 8, median_s=[200e-6] * 8, slowdown=slowdown, session_share=SESSION_SHARE
    )
    res = simulate(scenario, sessions=1500, k=5, seed=int(slowdown * 100 + sd * 1e4))
    hits, n = _detection(res)
    # Comparisons of one session are correlated: count confidence in sessions, not comparisons.
    assert binomial_lower(round(hits / n * 1500), 1500, 0.999) >= 0.95, hits / n


@pytest.mark.parametrize("slowdown", [0.05, 0.10])
def test_ab_quiet_kernels_keep_their_power_in_a_mixed_session(slowdown: float) -> None:
    res = simulate(
        Scenario(**MIXED, slowdown=slowdown, session_share=SESSION_SHARE),
        sessions=3000,
        k=5,
        seed=20,
    )
    hits, n = _detection(res, [0, 1])  # the 0.3 % kernels
    assert binomial_lower(round(hits / n * 3000), 3000, 0.999) >= 0.95, hits / n


@pytest.mark.parametrize(
    ("sd", "k", "looks"), [(0.02, 10, 1), (0.01, 5, 3), (0.005, 5, 3), (0.08, 10, 3)]
)
def test_reported_mde_is_detected_with_the_promised_probability(
    sd: float, k: int, looks: int
) -> None:
    """Slow every benchmark down by the MDE its own baseline reports: >= 95 % are caught."""
    policy = DecisionPolicy(looks=looks)
    scenario = Scenario(sd=[sd] * 8, median_s=[_time_for(sd)] * 8, session_share=SESSION_SHARE)
    sessions = 2500
    res = simulate(scenario, sessions=sessions, k=k, policy=policy, seed=30, at_mde=True)
    rate = float((res.code == stats.REGRESSION).mean())
    # detection_probability() is a lower bound (exact for one look): allow 3 binomial SEs.
    assert rate >= policy.power - 3 * math.sqrt(policy.power * (1 - policy.power) / sessions)


def test_decide_replays_the_simulation_exactly() -> None:
    """The vectorised simulation and decide() + needs_confirmation() reach the same verdicts."""
    policy = DEFAULT_POLICY
    scenario = Scenario(
        **MIXED, slowdown=[-0.2, 0.05, 0.1, 0, 0.3, 0, 0, 0], session_share=SESSION_SHARE
    )
    res = simulate(scenario, sessions=30, k=5, seed=40, keep_runs=True)
    assert res.baseline_s is not None and res.current_s is not None
    kinds = {
        stats.REGRESSION: REGRESSION,
        stats.IMPROVEMENT: IMPROVEMENT,
        stats.NO_CHANGE: NO_CHANGE,
        stats.INCONCLUSIVE: INCONCLUSIVE,
    }
    seen = set()
    for s in range(30):
        prior = pool_noise([list(b) for b in res.baseline_s[s]], policy)
        for i in range(scenario.m):
            base = [RunStat(float(x)) for x in res.baseline_s[s, i]]
            for look in range(1, policy.looks + 1):
                cur = [float(x) for x in res.current_s[s, i, :look]]
                c = decide(base, cur, policy=policy, m=scenario.m, look=look, prior=prior)
                if not needs_confirmation(c):
                    break
            assert (c.kind, c.look) == (kinds[int(res.code[s, i])], int(res.look[s, i]))
            seen.add(c.kind)
    assert seen == {REGRESSION, IMPROVEMENT, NO_CHANGE, INCONCLUSIVE}  # every path exercised


def test_one_run_in_a_slow_mode_does_not_fail_a_benchmark() -> None:
    """GPU-MACHINE.md saw one process of eight at 2x: the median of three runs ignores it."""
    t = 200e-6
    base = [t * (1 + x) for x in (0.002, -0.003, 0.001, -0.001, 0.0015)]
    c = decide(base, [t, t * 2.0, t * 1.001], m=8, look=3)
    assert c.kind != REGRESSION
    assert np.isclose(c.ratio, 1.0, atol=0.01)
