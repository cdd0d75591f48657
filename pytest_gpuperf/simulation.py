"""Synthetic sessions with a known truth, decided by the real decision rule.

Used by the unit tests and ``bench/simulate_verdicts.py`` to measure, for a
noise model, the session false-failure rate (A/A), the detection rate of
injected slowdowns (A/B), the inconclusive rate and the reported MDE. It
runs :func:`pytest_gpuperf.stats.evaluate` and :func:`~pytest_gpuperf.stats.fit_prior`
on arrays, look after look, with the same finality rule as
:func:`pytest_gpuperf.verdict.needs_confirmation`; a unit test checks that
it agrees with :func:`~pytest_gpuperf.verdict.decide` case by case.

The noise model is statistics.md §1 at the run level. The log statistic of
benchmark i in run j is ``log(1 + slowdown_i) + sd_i * (sqrt(a) P_j +
sqrt(b) J + sqrt(1 - a - b) E_ij)`` (+ a slow mode): ``P_j`` is the offset of
process j shared by every benchmark in it (share ``a``), ``J`` the offset of
the session's CI job shared by its current runs (share ``b``; each baseline
run comes from its own job, so there it is ordinary run-to-run noise), and
``E`` the benchmark's own run noise. With probability ``outlier_rate_i`` a run
lands in a slow mode, ``+U(outlier_size)`` (GPU-MACHINE.md: one of 8
processes of a 256³ matmul ran at 2x).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_gpuperf import stats
from pytest_gpuperf.verdict import DEFAULT_POLICY, DecisionPolicy

if TYPE_CHECKING:
    from numpy.typing import NDArray


@dataclass(frozen=True)
class Scenario:
    """A session's benchmarks: their true noise, time per call and slowdown."""

    sd: Sequence[float]
    median_s: Sequence[float]
    slowdown: Sequence[float] | float = 0.0
    outlier_rate: Sequence[float] | float = 0.0
    outlier_size: tuple[float, float] = (0.3, 1.0)
    process_share: float = 0.3
    session_share: float = 0.0

    @property
    def m(self) -> int:
        return len(self.sd)


@dataclass
class SimResult:
    """Final verdicts of ``sessions x m`` simulated comparisons."""

    code: NDArray[Any]  # final stats.REGRESSION / IMPROVEMENT / NO_CHANGE / INCONCLUSIVE
    look: NDArray[Any]  # look at which the verdict became final (runs used)
    mde: NDArray[Any]  # reported MDE (NaN unless simulate(with_mde=True))
    p_first: NDArray[Any]  # p_slow at look 1
    slowdown: NDArray[Any]  # true slowdown per benchmark (m,)
    #: simulate(keep_runs=True): run medians (s), (sessions, m, K) and (sessions, m, looks)
    baseline_s: NDArray[Any] | None = None
    current_s: NDArray[Any] | None = None

    def rate(self, code: int, where: NDArray[Any] | None = None) -> float:
        """Fraction of comparisons (of the benchmarks in ``where``) that ended as ``code``."""
        sel = self.code if where is None else self.code[:, where]
        return float((sel == code).mean())

    def session_false_failure(self) -> tuple[int, int]:
        """(sessions with a regression among unchanged benchmarks, sessions)."""
        null = self.slowdown == 0
        hits = (self.code[:, null] == stats.REGRESSION).any(axis=1)
        return int(hits.sum()), int(self.code.shape[0])

    def extra_runs(self) -> float:
        """Mean fresh processes per comparison (re-measurements after look 1)."""
        return float((self.look - 1).mean())


def simulate(
    scenario: Scenario,
    *,
    sessions: int,
    k: int,
    policy: DecisionPolicy = DEFAULT_POLICY,
    pooled: bool = True,
    seed: int = 0,
    at_mde: bool = False,
    with_mde: bool = False,
    keep_runs: bool = False,
) -> SimResult:
    """Simulate ``sessions`` sessions: a K-run baseline, then up to ``policy.looks`` current runs.

    The noise prior is pooled per session from all m benchmarks' baselines
    (as :func:`pytest_gpuperf.verdict.pool_noise` does) when ``pooled``,
    else the default prior. m, the session's family size, is the number of
    benchmarks. ``at_mde``: instead of ``scenario.slowdown``, slow each
    benchmark of each session down by the MDE its own baseline reports for
    the last look, to check that the reported MDE is detected with the
    promised probability. ``with_mde``: also compute each comparison's
    reported MDE (slow for large arrays). ``keep_runs``: keep the simulated
    run medians, to replay them through :func:`~pytest_gpuperf.verdict.decide`.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    m, s_n, looks = scenario.m, sessions, policy.looks
    sd = np.asarray(scenario.sd, dtype=float)
    med = np.asarray(scenario.median_s, dtype=float)
    theta = np.broadcast_to(np.asarray(scenario.slowdown, dtype=float), (m,))
    q = np.broadcast_to(np.asarray(scenario.outlier_rate, dtype=float), (m,))
    a, b = scenario.process_share, scenario.session_share
    e = max(0.0, 1.0 - a - b)

    def runs(n: int, shared_job: bool) -> NDArray[Any]:
        proc = rng.standard_normal((s_n, 1, n))
        job = rng.standard_normal((s_n, 1, 1 if shared_job else n))
        own = rng.standard_normal((s_n, m, n))
        y = sd[None, :, None] * (np.sqrt(a) * proc + np.sqrt(b) * job + np.sqrt(e) * own)
        slow = rng.random((s_n, m, n)) < q[None, :, None]
        bump = np.log1p(rng.uniform(*scenario.outlier_size, size=(s_n, m, n)))
        return np.asarray(y + np.where(slow, bump, 0.0))

    yb = runs(k, shared_job=False)
    yc = runs(looks, shared_job=True) + np.log1p(theta)[None, :, None]
    mean_b = yb.mean(axis=-1)
    sd_b = yb.std(axis=-1, ddof=1) if k >= 2 else np.full((s_n, m), np.nan)
    curve = stats.default_noise(
        med[None, :] * np.exp(mean_b),
        small=policy.default_noise_small,
        large=policy.default_noise_large,
        small_s=policy.default_small_s,
        large_s=policy.default_large_s,
    )
    scale = np.ones(s_n)
    nu0 = np.full(s_n, policy.default_nu0)
    if pooled and k >= 2 and m >= policy.min_pool:
        fit = stats.fit_prior(
            sd_b,
            np.full((s_n, m), k - 1.0),
            curve,
            nu0_max=policy.nu0_max,
            confidence=policy.pool_confidence,
            min_benchmarks=policy.min_pool,
        )
        scale, nu0 = np.asarray(fit.scale), np.asarray(fit.nu0)
    s0 = scale[:, None] * curve
    levels = policy.test_levels(m)
    ref = stats.reference(
        mean_b, sd_b, k, s0, nu0[:, None], policy.noise_floor, with_mde=with_mde or at_mde, **levels
    )
    mde = np.zeros((s_n, m)) + np.asarray(ref.mde, dtype=np.float64)
    if at_mde:
        yc = yc - np.log1p(theta)[None, :, None] + np.log1p(mde)[..., None]
        theta = np.full(m, np.nan)

    code = np.full((s_n, m), stats.INCONCLUSIVE)
    at = np.full((s_n, m), looks)
    p_first = np.full((s_n, m), np.nan)
    active = np.ones((s_n, m), dtype=bool)
    for look in range(1, looks + 1):
        ev = stats.judge(ref, yc[..., :look], **levels)
        if look == 1:
            p_first = np.asarray(ev.p_slow)
        suspect = (ev.code == stats.REGRESSION) | (ev.code == stats.INCONCLUSIVE)
        done = active & (~suspect | (look == looks))
        code = np.where(done, ev.code, code)
        at = np.where(done, look, at)
        active &= ~done
    return SimResult(
        code=code,
        look=at,
        mde=np.array(mde),
        p_first=p_first,
        slowdown=np.array(theta),
        baseline_s=med[None, :, None] * np.exp(yb) if keep_runs else None,
        current_s=med[None, :, None] * np.exp(yc) if keep_runs else None,
    )


def binomial_upper(successes: int, n: int, confidence: float = 0.95) -> float:
    """Clopper-Pearson upper bound of a rate."""
    from scipy import stats as st

    if successes >= n:
        return 1.0
    return float(st.beta.ppf(confidence, successes + 1, n - successes))


def binomial_lower(successes: int, n: int, confidence: float = 0.95) -> float:
    """Clopper-Pearson lower bound of a rate."""
    from scipy import stats as st

    if successes <= 0:
        return 0.0
    return float(st.beta.ppf(1 - confidence, successes, n - successes + 1))
