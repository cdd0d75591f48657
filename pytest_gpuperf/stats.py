"""The maths of the regression verdict, on the log of run statistics.

Pure numerics for :mod:`pytest_gpuperf.verdict`: no pytest, no torch; numpy
and scipy are imported inside the functions so that importing the plugin stays
cheap. Every function broadcasts over leading array axes, so the synthetic
A/A and A/B simulations (:mod:`pytest_gpuperf.simulation`, ``bench/``) run
the very code that decides a single test.

Notation (``research/statistics.md`` §4). One *run* is one OS process; its
statistic is the median of its rounds, and ``y = log(median)``. A benchmark
has K stable baseline runs (mean ``ybar_b``, sample SD ``s_K``, K-1 df) and
r stable candidate runs. The effect is ``d = loc(y_c) - ybar_b`` (the log of
the current/baseline ratio); its standard error comes from the baseline's
run-to-run noise, moderated towards a prior ``s0`` with weight ``nu0``
(Smyth 2004), never from the iterations inside one run (§1).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, ParamSpec, TypeVar

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike, NDArray

    Array = NDArray[np.float64]

#: Variance of the sample median of r iid N(0, 1) values, r = 1..9 (exact
#: integrals of the order-statistic densities; for even r the median is the
#: mean of the middle two, so r = 1 and 2 give the mean's 1/r).
MEDIAN_VARIANCE = (1.0, 0.5, 0.44867, 0.2982, 0.28683, 0.21474, 0.21045, 0.16818, 0.1661)

#: Verdict codes of :func:`evaluate` (mapped to strings by the verdict module).
REGRESSION, IMPROVEMENT, NO_CHANGE, INCONCLUSIVE = 0, 1, 2, 3

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _quiet(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run ``fn`` with numpy's floating-point warnings off.

    A baseline that says nothing (one run, a prior of ~0 df) gives infinite
    quantiles and MDEs: a legitimate answer ("cannot detect anything"), not
    something to warn a user's test session about.
    """

    @functools.wraps(fn)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        import numpy as np

        with np.errstate(all="ignore"):
            return fn(*args, **kwargs)

    return wrapper


def median_variance(r: int) -> float:
    """Variance factor of the candidate location: ``Var(median of r runs) / sigma^2``.

    Beyond the table, the asymptotic ``pi / (2 r)``, which is slightly larger
    than the truth (conservative).
    """
    if r < 1:
        raise ValueError(f"need at least one run, got r={r}")
    return MEDIAN_VARIANCE[r - 1] if r <= len(MEDIAN_VARIANCE) else math.pi / (2 * r)


def location_variance(r: int, shared: float) -> float:
    """``Var(loc(y_c)) / sigma^2`` when a share ``shared`` of the variance is common to the r runs.

    The candidate's runs come from one CI job, minutes apart on one GPU: a
    component they share (clock regime, the job's machine state) does not
    average away, so only ``1 - shared`` of the variance shrinks with r.
    """
    return shared + (1.0 - shared) * median_variance(r)


def location(y: ArrayLike) -> Array:
    """Candidate location along the last axis: the median of the runs' log statistics.

    For r <= 2 this is the mean; from r = 3 on it ignores one run in a slow
    mode, such as the process measured at 2x in GPU-MACHINE.md (256³ matmul,
    do_bench). Its variance factor is :func:`median_variance`.
    """
    import numpy as np

    return np.asarray(np.median(np.asarray(y, dtype=float), axis=-1), dtype=float)


def default_noise(
    median_s: ArrayLike,
    *,
    small: float = 0.25,
    large: float = 0.01,
    small_s: float = 20e-6,
    large_s: float = 200e-6,
) -> Array:
    """Run-to-run SD (log scale) to assume for a benchmark whose runs take ``median_s``.

    ``small`` for calls up to ``small_s``, ``large`` from ``large_s`` on, and
    log-log interpolation between. The defaults sit at the upper end of
    what GPU-MACHINE.md measured between fresh processes on the H200 (SD taken
    as the max-min range of 8 processes / 2.85, or of 3 processes / 1.7):
    launch-bound calls of 2-30 µs moved 4-12 % with do_bench, Timer and
    graph replay (one do_bench process at 2x) and ~27 % with per-call
    events (1M add: 15.2 / 23.7 / 25.4 µs); a 4096³ matmul (176-206 µs)
    0.1-1.3 %; a 256M-element mul (510 µs) 0.04-0.14 %. Erring high only
    widens the threshold; erring low risks false failures.
    """
    import numpy as np

    t = np.clip(np.asarray(median_s, dtype=float), small_s, large_s)
    frac = np.log(t / small_s) / math.log(large_s / small_s)
    return np.asarray(np.exp(math.log(small) + frac * (math.log(large) - math.log(small))))


def trigamma_inverse(x: ArrayLike) -> Array:
    """Solve ``trigamma(y) = x`` for y > 0 (Newton's method, as limma's ``trigammaInverse``)."""
    import numpy as np
    from scipy import special

    x = np.asarray(x, dtype=float)
    y = 0.5 + 1.0 / np.where(x > 0, x, np.nan)
    for _ in range(50):
        tri = special.polygamma(1, y)
        dif = tri * (1.0 - tri / x) / special.polygamma(2, y)
        y = y + dif
        if np.nanmax(np.atleast_1d(-dif / y), initial=0.0) < 1e-8:
            break
    y = np.where(x > 1e7, 1.0 / np.sqrt(np.maximum(x, 1e-300)), y)
    y = np.where(x < 1e-6, 1.0 / np.maximum(x, 1e-300), y)
    return np.asarray(y)


class PriorFit(NamedTuple):
    """Runner noise relative to :func:`default_noise`: ``s0 = scale * default_noise(t)``."""

    scale: Any  # float or array
    nu0: Any  # prior degrees of freedom, capped
    n: Any  # benchmarks that contributed


@_quiet
def fit_prior(
    sd: ArrayLike,
    df: ArrayLike,
    reference: ArrayLike,
    *,
    nu0_max: float = 10.0,
    confidence: float = 0.75,
    min_benchmarks: int = 3,
    sd_floor: float = 2.5e-4,
) -> PriorFit:
    """Empirical-Bayes prior for run-to-run noise from other benchmarks' baselines.

    ``sd[..., i]`` is benchmark i's between-run SD (log scale) with ``df[..., i]``
    degrees of freedom (K - 1; NaN or df < 1 = absent), ``reference[..., i]``
    its :func:`default_noise`. The ratios ``sd / reference`` are treated as
    draws of a scaled inverse chi-square prior and fitted by Smyth's (2004)
    moments of ``log sd^2`` (limma's ``fitFDist``): the spread of the log
    variances beyond what their own df explain gives ``nu0``.

    Why relative to the default curve: GPU-MACHINE.md shows run-to-run noise
    falling 10-100x from launch-bound calls to ≥100 µs kernels. A flat prior
    would pull a tiny kernel's noise down to the runner median (false
    failures) or, fitted honestly, have nu0 near 0 (no help). Dividing by the
    curve removes that trend; what is left is fitted.

    Three departures from limma, each towards fewer false failures when the
    pool is small or mixed (checked by simulation, ``bench/simulate_verdicts.py``):

    * the excess variance is taken at its one-sided ``confidence`` upper
      bound (chi-square on n - 1 df), which lowers nu0 when few benchmarks
      contributed;
    * nu0 is capped at ``nu0_max`` (statistics.md §8's default 10): with 8
      benchmarks of 5 runs, nu0 = 10 and nu0 = inf cannot be told apart;
    * the prior's level is the geometric mean of the variances, corrected
      for their chi-square bias (``exp(mean(e))``), not limma's
      inverse-chi-square centre, which lies below it by
      ``exp(digamma(nu0/2) - log(nu0/2))`` (x0.5 at nu0 = 2) and is set by the
      quietest benchmarks; it pulled the noisiest benchmarks of a mixed pool
      down and doubled their false failures. For a homogeneous pool (large
      nu0) the two agree.

    With fewer than ``min_benchmarks`` contributors the result has
    ``nu0 = 0`` and ``scale = 1``: use the default prior instead.
    """
    import numpy as np
    from scipy import special, stats

    sd = np.asarray(sd, dtype=float)
    df = np.asarray(df, dtype=float)
    ref = np.asarray(reference, dtype=float)
    sd, df, ref = np.broadcast_arrays(sd, df, ref)
    ok = np.isfinite(sd) & np.isfinite(ref) & (ref > 0) & np.isfinite(df) & (df >= 1)
    n = ok.sum(axis=-1)
    safe_df = np.where(ok, df, 1.0)
    x = np.where(ok, np.maximum(sd, sd_floor) ** 2 / np.where(ok, ref, 1.0) ** 2, 1.0)
    e = np.log(x) - special.digamma(safe_df / 2) + np.log(safe_df / 2)
    nn = np.maximum(n, 1)
    e_mean = np.where(ok, e, 0.0).sum(axis=-1) / nn
    dev2 = np.where(ok, (e - e_mean[..., None]) ** 2, 0.0).sum(axis=-1)
    var_e = dev2 / np.maximum(n - 1, 1)
    dof = np.maximum(n - 1, 1)
    var_e_upper = var_e * dof / stats.chi2.ppf(1.0 - confidence, dof)
    tri_mean = np.where(ok, special.polygamma(1, safe_df / 2), 0.0).sum(axis=-1) / nn
    excess = var_e_upper - tri_mean
    nu0_fit = np.where(
        excess > 0, 2.0 * trigamma_inverse(np.where(excess > 0, excess, 1.0)), np.inf
    )
    scale = np.sqrt(np.exp(e_mean))
    nu0 = np.minimum(nu0_fit, nu0_max)
    enough = n >= min_benchmarks
    return PriorFit(
        scale=np.where(enough, scale, 1.0),
        nu0=np.where(enough, nu0, 0.0),
        n=n,
    )


@_quiet
def benchmark_nu0(s_k: ArrayLike, k: ArrayLike, s0: ArrayLike, nu0: ArrayLike) -> Array:
    """The prior's weight for one benchmark: ``nu0``, less if its own spread contradicts the prior.

    Empirical Bayes is exact only on average over benchmarks: one that is
    truly noisier than the prior (a launch-bound call among large kernels)
    gets its noise pulled down and its df raised, and fails falsely far more
    often than ``alpha / m`` (x5 at 2.3x the prior SD, x37 at 5x with
    nu0 = 10, K = 5, alpha' = 0.00125; derived by simulation). Following
    Phipson et al. (2016, "robust hyperparameter estimation protects against
    hypervariable genes"), simplified: with ``p = P(F(K-1, nu0) >= s_K^2 / s0^2)``
    the weight is ``nu0 * min(1, 2 p)``: full below the prior's centre,
    ~0.9 nu0 at it, falling to 0 for a benchmark far above it (x2.5 and x3.1 in
    the cases above, for 10-15 % less power at the prior's centre). K = 1:
    nothing to check, full weight.
    """
    import numpy as np
    from scipy import special

    k = np.asarray(k, dtype=float)
    nu0 = np.asarray(nu0, dtype=float)
    s0 = np.asarray(s0, dtype=float)
    ratio = np.asarray(s_k, dtype=float) ** 2 / s0**2
    safe = (k >= 2) & np.isfinite(ratio) & (nu0 > 0)
    p = special.fdtrc(
        np.where(safe, k - 1, 1.0), np.where(safe, nu0, 1.0), np.where(safe, ratio, 1.0)
    )
    return np.asarray(np.where(safe, nu0 * np.minimum(1.0, 2.0 * p), nu0))


@_quiet
def moderate(s_k: ArrayLike, k: ArrayLike, s0: ArrayLike, nu0: ArrayLike) -> tuple[Array, Array]:
    """Moderated SD and its df: ``((nu0 s0^2 + (K-1) s_K^2) / (nu0 + K - 1))^0.5``, ``nu0 + K - 1``.

    With K = 1 there is no ``s_K`` (pass NaN): the prior alone.
    """
    import numpy as np

    k = np.asarray(k, dtype=float)
    s_k = np.where(k >= 2, np.asarray(s_k, dtype=float), 0.0)
    s0 = np.asarray(s0, dtype=float)
    nu0 = np.asarray(nu0, dtype=float)
    nu = nu0 + k - 1.0
    var = (nu0 * s0**2 + (k - 1.0) * s_k**2) / np.where(nu > 0, nu, np.nan)
    return np.sqrt(var), nu


class Evaluation(NamedTuple):
    """Everything :func:`evaluate` derives for one comparison (arrays broadcast alike)."""

    d: Any  # log ratio current / baseline
    se: Any  # its standard error
    nu: Any  # degrees of freedom of the t reference
    s: Any  # run-to-run SD in force (log scale), after floors
    p_slow: Any  # one-sided p-value for "current is slower"
    p_fast: Any  # one-sided p-value for "current is faster"
    ci_low: Any  # CI of d at ci_level
    ci_high: Any
    cutoff: Any  # log threshold in force: max(log1p(threshold), t_{1-alpha} se)
    noise_bound: Any  # True where the noise, not the threshold, sets the cutoff
    upper: Any  # one-sided upper bound of d used for "no change"
    mde: Any  # slowdown (fraction) the whole procedure detects with probability `power`
    p_disagree: Any  # F-test p-value that the candidate runs agree with s (NaN for r = 1)
    code: Any  # REGRESSION / IMPROVEMENT / NO_CHANGE / INCONCLUSIVE


class Reference(NamedTuple):
    """What a baseline (with its prior) fixes before any current run is seen."""

    mean: Any  # mean log statistic of the baseline runs
    k: Any  # baseline runs
    s: Any  # run-to-run SD in force, after floors
    nu: Any  # df of the t reference
    t_alpha: Any  # t_{1-alpha_regression}
    t_fast: Any  # t_{1-alpha_improvement}
    t_clear: Any  # t_{1-clear_error/looks}
    t_ci: Any  # t_{(1+ci_level)/2}
    mde: Any  # detectable(): NaN when not asked for


@_quiet
def reference(
    base_mean: ArrayLike,
    base_sd: ArrayLike,
    k: ArrayLike,
    s0: ArrayLike,
    nu0: ArrayLike,
    floor: ArrayLike,
    *,
    with_mde: bool = True,
    **levels: Any,
) -> Reference:
    """The baseline's side of :func:`evaluate`: moderated noise, df, quantiles and MDE.

    ``s`` is the moderated run-to-run SD (prior weight from
    :func:`benchmark_nu0`), raised to ``floor``. The MDE depends on the
    baseline only, so it is computed here (``with_mde=False`` skips it: it
    is the slow part on large arrays).
    """
    import numpy as np
    from scipy import special

    k = np.asarray(k, dtype=float)
    s_mod, nu = moderate(base_sd, k, s0, benchmark_nu0(base_sd, k, s0, nu0))
    s = np.maximum(s_mod, np.asarray(floor, dtype=float))
    mde = detectable(s, nu, k, **levels) if with_mde else np.nan
    return Reference(
        mean=np.asarray(base_mean, dtype=float),
        k=k,
        s=s,
        nu=nu,
        t_alpha=-special.stdtrit(nu, levels["alpha_regression"]),
        t_fast=-special.stdtrit(nu, levels["alpha_improvement"]),
        t_clear=-special.stdtrit(nu, levels["clear_error"] / levels["looks"]),
        t_ci=-special.stdtrit(nu, (1.0 - levels["ci_level"]) / 2),
        mde=mde,
    )


def evaluate(
    base_mean: ArrayLike,
    base_sd: ArrayLike,
    k: ArrayLike,
    cand: ArrayLike,
    s0: ArrayLike,
    nu0: ArrayLike,
    floor: ArrayLike,
    *,
    with_mde: bool = True,
    **levels: Any,
) -> Evaluation:
    """The decision rule of statistics.md §4.3, on arrays: :func:`judge` of :func:`reference`.

    ``levels`` are :meth:`pytest_gpuperf.verdict.DecisionPolicy.test_levels`:
    ``threshold``, ``detect``, ``alpha_regression``, ``alpha_improvement``,
    ``clear_error``, ``looks``, ``power``, ``shared``, ``ci_level``,
    ``consistency_alpha``.
    """
    ref = reference(base_mean, base_sd, k, s0, nu0, floor, with_mde=with_mde, **levels)
    return judge(ref, cand, **levels)


@_quiet
def judge(ref: Reference, cand: ArrayLike, **levels: Any) -> Evaluation:
    """The current runs' side: estimate, test and verdict code.

    ``cand`` holds the r current log statistics on its last axis;
    ``se = s * sqrt(location_variance(r) + 1/K)`` and ``T = d / se ~ t(nu)``
    under no change (a prediction-interval test: the current runs are new
    draws from the baseline's run distribution).

    * regression: ``d > cutoff = max(log(1 + threshold), t_{1-alpha_regression} se)``,
      i.e. significant at the session-adjusted level *and* bigger than the threshold;
    * improvement: the mirror image at ``alpha_improvement``;
    * no change: neither, and the one-sided ``1 - clear_error / looks`` upper
      bound of d is below ``log(1 + detect)``: over all looks, a slowdown of
      ``detect`` is cleared with probability at most ``clear_error``;
    * inconclusive: the rest; also any of the above when r >= 2 and the
      current runs scatter more than ``s`` allows (F-test p below
      ``consistency_alpha``: a mode the baseline never showed).
    """
    import numpy as np
    from scipy import special

    cand = np.asarray(cand, dtype=float)
    r = cand.shape[-1]
    d = location(cand) - ref.mean
    se = ref.s * np.sqrt(location_variance(r, levels["shared"]) + 1.0 / ref.k)
    t_stat = d / se
    floor_log = math.log1p(levels["threshold"])
    crit = ref.t_alpha * se
    cutoff = np.maximum(floor_log, crit)
    crit_fast = np.maximum(floor_log, ref.t_fast * se)
    upper = d + ref.t_clear * se
    half = ref.t_ci * se
    if r >= 2:
        spread = np.var(cand, axis=-1, ddof=1)
        p_disagree = special.fdtrc(r - 1, ref.nu, spread / ref.s**2)
    else:
        p_disagree = np.full(np.shape(d), np.nan)

    code = np.full(np.shape(d), INCONCLUSIVE)
    code = np.where(upper < math.log1p(levels["detect"]), NO_CHANGE, code)
    code = np.where(-d > crit_fast, IMPROVEMENT, code)
    code = np.where(d > cutoff, REGRESSION, code)
    disagree = np.nan_to_num(p_disagree, nan=1.0) < levels["consistency_alpha"]
    code = np.where(disagree, INCONCLUSIVE, code)
    return Evaluation(
        d=d,
        se=se,
        nu=ref.nu,
        s=ref.s,
        p_slow=special.stdtr(ref.nu, -t_stat),
        p_fast=special.stdtr(ref.nu, t_stat),
        ci_low=d - half,
        ci_high=d + half,
        cutoff=cutoff,
        noise_bound=crit > floor_log,
        upper=upper,
        mde=ref.mde,
        p_disagree=p_disagree,
        code=code,
    )


@_quiet
def detection_probability(
    theta: ArrayLike,
    s: ArrayLike,
    nu: ArrayLike,
    k: ArrayLike,
    looks: int,
    *,
    threshold: float,
    detect: float,
    alpha_regression: float,
    clear_error: float,
    shared: float,
    consistency_alpha: float,
    **_: Any,
) -> Array:
    """Lower bound on P(final regression) for a true log slowdown ``theta``.

    A regression becomes final only at the last look, so it is missed if it
    is cleared as "no change" at an earlier look (estimate below both the
    cutoff and the clearing bound), or if the last look's estimate falls
    short of the cutoff, or if the candidate runs fail the consistency test
    there. By the union bound, ``P >= P(last look rejects) - sum of early
    clearings``, times ``1 - consistency_alpha`` when there are several runs.
    ``(d - theta) / se`` is taken as ``t(nu)`` at every look.
    """
    import numpy as np

    plan = _Plan(s, nu, k, looks, threshold, detect, alpha_regression, clear_error, shared)
    return plan.probability(np.asarray(theta, dtype=float), consistency_alpha)


class _Plan:
    """The per-look standard errors and boundaries of one procedure, computed once."""

    def __init__(
        self,
        s: ArrayLike,
        nu: ArrayLike,
        k: ArrayLike,
        looks: int,
        threshold: float,
        detect: float,
        alpha_regression: float,
        clear_error: float,
        shared: float,
    ) -> None:
        import numpy as np
        from scipy import special

        self.nu = np.asarray(nu, dtype=float)
        s = np.asarray(s, dtype=float)
        k = np.asarray(k, dtype=float)
        self.looks = looks
        t_a = -special.stdtrit(self.nu, alpha_regression)
        t_c = -special.stdtrit(self.nu, clear_error / looks)
        floor_log = math.log1p(threshold)
        self.se = [s * np.sqrt(location_variance(r, shared) + 1.0 / k) for r in range(1, looks + 1)]
        self.cutoff = np.maximum(floor_log, t_a * self.se[-1])
        self.stops = [
            np.minimum(np.maximum(floor_log, t_a * se), math.log1p(detect) - t_c * se)
            for se in self.se[:-1]
        ]

    def probability(self, theta: Array, consistency_alpha: float) -> Array:
        import numpy as np
        from scipy import special

        hit = special.stdtr(self.nu, (theta - self.cutoff) / self.se[-1])
        for stop, se in zip(self.stops, self.se, strict=False):
            hit = hit - special.stdtr(self.nu, (stop - theta) / se)
        keep = 1.0 - consistency_alpha if self.looks >= 2 else 1.0
        return np.asarray(np.clip(hit, 0.0, 1.0) * keep)


@_quiet
def detectable(
    s: ArrayLike,
    nu: ArrayLike,
    k: ArrayLike,
    looks: int,
    *,
    power: float,
    threshold: float,
    detect: float,
    alpha_regression: float,
    clear_error: float,
    shared: float,
    consistency_alpha: float,
    **_: Any,
) -> Array:
    """The MDE: the slowdown (a fraction) caught with probability ``power``; inf if none.

    For a single look it is statistics.md's ``exp(cutoff + t_{power} se) - 1``.
    With re-runs it is found by bisection on :func:`detection_probability`:
    a slowdown just above the threshold can be cleared at look 1, where se
    is wider, so the MDE is larger than that formula at the last look's se
    (a 0.3 %-noise benchmark was cleared 7 % of the time at the naive MDE).
    """
    import numpy as np
    from scipy import special

    plan = _Plan(s, nu, k, looks, threshold, detect, alpha_regression, clear_error, shared)
    t_b = -special.stdtrit(plan.nu, 1.0 - power)
    # The last look alone gives a lower bracket; the widest se bounds the early misses.
    lo = plan.cutoff + t_b * plan.se[-1]
    if looks == 1:
        return np.asarray(np.expm1(lo))
    t_wide = -special.stdtrit(plan.nu, (1.0 - power) / (2 * looks))
    hi = np.maximum(lo, plan.cutoff) + t_wide * plan.se[0] * 2.0
    reach = plan.probability(hi, consistency_alpha) >= power
    for _step in range(20):
        mid = (lo + hi) / 2
        ok = plan.probability(mid, consistency_alpha) >= power
        hi = np.where(ok, mid, hi)
        lo = np.where(ok, lo, mid)
    return np.asarray(np.where(reach, np.expm1(hi), np.inf))


def runs_needed(
    s: float,
    k: int,
    nu: float,
    *,
    detect: float,
    power: float,
    max_runs: int = 10,
    **levels: float,
) -> int | None:
    """Fewest candidate runs (looks) whose MDE is at most ``detect``, with this baseline.

    None if even ``max_runs`` would not do: the baseline itself is too short
    or too noisy (its 1/K term, or the candidate runs' shared share, alone
    exceeds the budget), so more baseline runs are the remedy. (Each extra
    run is a fresh process of 5-20 s; beyond 10 the baseline is the place.)
    """

    def ok(looks: int) -> bool:
        rest = {key: v for key, v in levels.items() if key != "looks"}
        mde = detectable(s, nu, k, looks, power=power, detect=detect, **rest)
        return bool(mde <= detect)

    if not ok(max_runs):
        return None
    lo, hi = 0, max_runs  # ok(hi) holds; find the smallest
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi
