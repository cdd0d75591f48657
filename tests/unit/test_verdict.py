"""decide() and its value objects: how verdict kinds respond to runs, flags, priors and looks."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from pytest_gpuperf.model import SHIFT, BenchId, Result
from pytest_gpuperf.reporting.explain import explain
from pytest_gpuperf.verdict import (
    DEFAULT_POLICY,
    DIFFERENT_ENVIRONMENT,
    FAIL,
    IMPROVEMENT,
    INCONCLUSIVE,
    NO_BASELINE,
    NO_CHANGE,
    PASS,
    PENDING,
    REGRESSION,
    WARN,
    Comparison,
    DecisionPolicy,
    NoisePrior,
    RunStat,
    decide,
    needs_confirmation,
    outcome,
    pool_noise,
    within_run_se,
)

T = 200e-6  # a large kernel: 200 µs per call


def runs(center: float, rel: list[float]) -> list[float]:
    return [center * (1 + x) for x in rel]


BASE = runs(T, [0.002, -0.003, 0.001, -0.001, 0.0015])  # ~0.2 % between runs
QUIET_PRIOR = NoisePrior(scale=0.3, nu0=10.0, benchmarks=12, runs=60)  # 0.3 % at 200 µs


def test_clear_regression_is_suspect_until_the_last_look() -> None:
    cur = runs(T * 1.10, [0.001, -0.002, 0.0])
    seen = []
    for look in (1, 2, 3):
        c = decide(BASE, cur[:look], m=8, look=look, prior=QUIET_PRIOR)
        seen.append((c.kind, c.final, needs_confirmation(c), outcome(c)))
    assert seen == [
        (REGRESSION, False, True, PENDING),
        (REGRESSION, False, True, PENDING),
        (REGRESSION, True, False, FAIL),
    ]


def test_without_reruns_a_regression_is_final_at_once() -> None:
    policy = DecisionPolicy.from_settings({"reruns": 0})
    c = decide(BASE, [T * 1.10], m=8, policy=policy, prior=QUIET_PRIOR)
    assert (c.kind, c.final, outcome(c)) == (REGRESSION, True, FAIL)


def test_regression_numbers_are_consistent() -> None:
    c = decide(BASE, runs(T * 1.10, [0.001, -0.002, 0.0]), m=8, look=3, prior=QUIET_PRIOR)
    assert c.ratio == pytest.approx(c.current_s / c.baseline_s)
    assert c.ratio_low < c.ratio < c.ratio_high
    assert c.p_slow <= c.alpha == pytest.approx(DEFAULT_POLICY.alpha / 8)
    assert c.ratio - 1 > c.threshold_in_force >= c.threshold
    assert c.threshold_reason == "threshold"  # quiet kernel: the configured 3 % rules
    assert c.mde is not None and c.threshold < c.mde < c.detect
    assert (c.k, c.r) == (5, 3)
    assert c.current_s == pytest.approx(T * 1.10)  # median of the three runs


@pytest.mark.parametrize(
    ("factor", "kind"), [(1.0, NO_CHANGE), (1.01, NO_CHANGE), (0.85, IMPROVEMENT)]
)
def test_final_at_look_one_when_nothing_is_suspect(factor: float, kind: str) -> None:
    c = decide(BASE, [T * factor], m=8, look=1, prior=QUIET_PRIOR)
    assert (c.kind, c.final, needs_confirmation(c), outcome(c)) == (kind, True, False, PASS)


def test_noisy_benchmark_is_inconclusive_and_reports_what_it_can_detect() -> None:
    base = runs(20e-6, [0.08, -0.1, 0.05, -0.02, 0.12])  # launch-bound: ~9 % between runs
    c = decide(base, [20e-6 * 1.06], m=8, look=3)
    assert c.kind == INCONCLUSIVE and c.final
    assert outcome(c) == WARN
    assert outcome(c, fail_on="inconclusive") == FAIL
    assert c.mde is not None and c.mde > c.detect
    assert c.threshold_reason == "noise" and c.threshold_in_force > c.threshold


def test_unstable_current_run_is_never_a_regression() -> None:
    bad = RunStat(T * 1.5, unstable=True, stability=SHIFT)
    c = decide(BASE, [bad], m=8, look=1, prior=QUIET_PRIOR)
    assert c.kind == INCONCLUSIVE and not c.final and needs_confirmation(c)
    assert "shift" in c.reasons[0]
    last = decide(BASE, [bad], m=8, look=3, prior=QUIET_PRIOR)
    assert last.kind == INCONCLUSIVE and last.final


def test_unstable_runs_are_dropped_not_trusted() -> None:
    cur = [RunStat(T * 3.0, unstable=True, stability=SHIFT), RunStat(T), RunStat(T * 1.001)]
    c = decide(BASE, cur, m=8, look=3, prior=QUIET_PRIOR)
    assert c.kind == NO_CHANGE and c.r == 2
    assert any("1 of 3 current runs unstable (shift)" in n for n in c.notes)


def test_all_baseline_runs_unstable_is_inconclusive_and_final() -> None:
    base = [RunStat(x, unstable=True, stability=SHIFT) for x in BASE]
    c = decide(base, [T * 1.5], m=8, look=1)
    assert c.kind == INCONCLUSIVE and c.final  # re-measuring cannot repair the baseline
    assert "baseline" in c.reasons[0]


def test_environment_reason_turns_a_regression_into_inconclusive() -> None:
    cur = runs(T * 1.10, [0.0, 0.001, -0.001])
    c = decide(BASE, cur, m=8, look=3, prior=QUIET_PRIOR, environment_reason="SM clock 1590 MHz")
    assert c.kind == INCONCLUSIVE and c.final
    assert any("SM clock 1590 MHz" in r for r in c.reasons)
    same = decide(BASE, [T], m=8, prior=QUIET_PRIOR, environment_reason="SM clock 1590 MHz")
    assert same.kind == NO_CHANGE and any("SM clock" in n for n in same.notes)


def test_different_environment_is_reported_not_gated() -> None:
    c = decide(BASE, [T * 1.3], m=8, environment_diff=["torch 2.11.0 -> 2.12.0"])
    assert c.kind == DIFFERENT_ENVIRONMENT and c.final and not c.gated
    assert c.environment == ("torch 2.11.0 -> 2.12.0",)
    assert c.ratio == pytest.approx(1.3, rel=0.01)
    assert outcome(c) == PASS


def test_no_baseline() -> None:
    c = decide([], [T], m=8)
    assert (c.kind, c.final, c.gated, outcome(c)) == (NO_BASELINE, True, False, PASS)
    assert c.current_s == pytest.approx(T)


def test_one_baseline_run_uses_the_default_prior() -> None:
    c = decide([T], [T * 1.02], m=8)
    assert c.k == 1 and c.noise_runs is None
    assert c.prior_source == "default" and c.prior_df == DEFAULT_POLICY.default_nu0
    assert c.noise == pytest.approx(DEFAULT_POLICY.default_noise(T))
    # The prior is vague: a 10 % slowdown cannot be told from noise with one baseline run.
    assert decide([T], [T * 1.10], m=8, look=3).kind == INCONCLUSIVE


def test_one_baseline_run_with_a_pooled_prior() -> None:
    c = decide([T], [T * 1.10], m=8, look=3, prior=QUIET_PRIOR)
    assert c.prior_source == "pooled" and c.prior_benchmarks == 12
    assert c.kind == REGRESSION


def test_a_benchmark_noisier_than_the_prior_leans_on_its_own_runs() -> None:
    noisy = runs(T, [0.04, -0.05, 0.03, -0.02, 0.05])  # ~4 % against a 0.3 % prior
    c = decide(noisy, [T], m=8, prior=QUIET_PRIOR)
    assert c.prior_df_runner == 10.0 and c.prior_df < 1.0
    assert c.noise == pytest.approx(c.noise_runs, rel=0.1)
    assert "lowered from 10" in explain(c)


def test_noise_floors() -> None:
    flat = [T] * 5
    c = decide(flat, [T], m=8, prior=QUIET_PRIOR)
    assert c.noise_runs == 0.0
    assert c.noise >= DEFAULT_POLICY.noise_floor
    jittery = [RunStat(T, within_se=0.03) for _ in range(5)]
    w = decide(jittery, [RunStat(T, within_se=0.03)], m=8, prior=QUIET_PRIOR)
    assert w.noise_reason == "within-run" and w.noise == pytest.approx(0.03)
    tiny = decide(flat, [T], m=8, prior=NoisePrior(scale=1e-3, nu0=10))
    assert tiny.noise_reason == "floor" and tiny.noise == DEFAULT_POLICY.noise_floor


def test_the_session_size_widens_the_test() -> None:
    """The same data, a bigger session: alpha / m shrinks and the noise-driven cutoff grows."""
    base = runs(T, [0.01, -0.012, 0.004, -0.006, 0.009])
    few = decide(base, [T * 1.06], m=2, look=3)
    many = decide(base, [T * 1.06], m=500, look=3)
    assert many.alpha < few.alpha
    assert many.threshold_in_force > few.threshold_in_force
    assert many.mde > few.mde


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="m"):
        decide(BASE, [T], m=0)
    with pytest.raises(ValueError, match="look"):
        decide(BASE, [T], look=0)
    with pytest.raises(ValueError, match="current run"):
        decide(BASE, [])
    with pytest.raises(ValueError, match="fail_on"):
        outcome(decide(BASE, [T]), fail_on="always")


def test_policy_from_settings_and_threshold() -> None:
    p = DecisionPolicy.from_settings(
        {"threshold": 0.10, "alpha": 0.05, "fail_on": "inconclusive", "reruns": 1}
    )
    assert (p.threshold, p.alpha, p.fail_on, p.looks) == (0.10, 0.05, "inconclusive", 2)
    assert p.detect == pytest.approx(0.12)  # keeps its 2 points above the threshold
    assert DecisionPolicy.from_settings({}) == DEFAULT_POLICY
    with pytest.raises(ValueError):
        DecisionPolicy(threshold=0.06, detect=0.05)
    with pytest.raises(ValueError):
        DecisionPolicy(fail_on="never")


def test_comparison_round_trips_through_json() -> None:
    for c in (
        decide(BASE, runs(T * 1.1, [0, 0.001, -0.001]), m=8, look=3, prior=QUIET_PRIOR),
        decide([T], [T], m=1),  # K = 1: no noise_runs
        decide([], [T], m=1),
        decide(BASE, [T], environment_diff=["driver 580 -> 590"]),
        decide([T * 1e-3], [T], m=1),  # an absurd slowdown: bounds overflow to inf -> null
    ):
        text = json.dumps(c.to_dict(), allow_nan=False)
        back = Comparison.from_dict(json.loads(text))
        assert back.to_dict() == c.to_dict()


def test_run_stat_from_result() -> None:
    rng = np.random.default_rng(0)
    rounds = list(T * np.exp(0.01 * rng.standard_normal(30)))
    res = Result(id=BenchId("t.py::test_x"), device="cuda", rounds=rounds, calls_per_round=10,
                 first_call_s=0.5, stability=SHIFT)  # fmt: skip
    r = RunStat.from_result(res)
    assert r.unstable and r.stability == SHIFT and r.median_s == pytest.approx(res.median)
    assert r.within_se == pytest.approx(1.2533 * 0.01 / math.sqrt(30), rel=0.4)
    assert RunStat.from_dict(r.to_dict()) == r


def test_within_run_se_estimates_the_median_standard_error() -> None:
    """Independent rounds: the estimate averages to the true SE of the median (1.2533 sd/sqrt n)."""
    rng = np.random.default_rng(1)
    n, sd = 25, 0.02
    est = [within_run_se(list(np.exp(sd * rng.standard_normal(n)))) for _ in range(2000)]
    assert np.mean(est) == pytest.approx(1.2533 * sd / math.sqrt(n), rel=0.05)
    assert within_run_se([1.0, 2.0]) is None


def test_pool_noise() -> None:
    rng = np.random.default_rng(2)
    # 20 large kernels at 0.5 % (half the default curve's 1 %), 6 runs each.
    benches = [list(T * np.exp(0.005 * rng.standard_normal(6))) for _ in range(20)]
    prior = pool_noise(benches)
    assert prior is not None and prior.benchmarks == 20 and prior.runs == 120
    assert prior.scale == pytest.approx(0.5, rel=0.25)
    assert prior.s0(T) == pytest.approx(prior.scale * 0.01)
    assert NoisePrior.from_dict(prior.to_dict()) == prior
    # Too few benchmarks with two or more stable runs: no prior.
    unstable = [[RunStat(T, unstable=True)] * 5]
    assert pool_noise([benches[0], benches[1], [T], *unstable]) is None


def test_graph_mode_prior_is_not_the_eager_launch_bound_one() -> None:
    """A quiet 2 µs CUDA-graph benchmark (0.2 % between runs, measured on the H200) can be
    judged; under the eager curve's 25 % prior the same data could detect nothing."""
    from pytest_gpuperf.verdict import DecisionPolicy, NoisePrior, decide

    base = [2.07e-6 * (1 + d) for d in (0.0, 0.002, -0.002, 0.001, -0.001)]
    policy = DecisionPolicy()
    eager = decide(base, [2.07e-6 * 1.20], policy=policy, m=8, look=3, mode="cuda-events")
    graph = decide(base, [2.07e-6 * 1.20], policy=policy, m=8, look=3, mode="cuda-graph")
    assert eager.kind == "inconclusive"
    assert graph.kind == "regression"
    assert NoisePrior.default(policy).s0(2e-6, policy, "cuda-graph") == pytest.approx(0.03)
    assert NoisePrior.default(policy).s0(2e-6, policy, None) == pytest.approx(0.25)


def test_pooled_prior_measures_each_benchmark_against_its_own_mode_curve() -> None:
    from pytest_gpuperf.verdict import DecisionPolicy, pool_noise

    policy = DecisionPolicy()
    quiet = [[t * (1 + d) for d in (0.0, 0.003, -0.003, 0.001)] for t in (2e-6, 3e-6, 300e-6)]
    as_graph = pool_noise(quiet, policy, modes=["cuda-graph", "cuda-graph", "cuda-events"])
    as_eager = pool_noise(quiet, policy, modes=["cuda-events"] * 3)
    assert as_graph is not None and as_eager is not None
    # The same spreads are a smaller fraction of the eager curve (25 % at 2 µs) than of the
    # graph curve (3 %), so the fitted scale of the runner is lower.
    assert as_eager.scale < as_graph.scale
