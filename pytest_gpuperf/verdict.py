"""The regression verdict: is this benchmark slower than its baseline, and how sure are we?

Pure functions and frozen value objects (no pytest, no torch); the maths is
in :mod:`pytest_gpuperf.stats`, the text a user reads in
:mod:`pytest_gpuperf.reporting.explain`. The plugin calls, per benchmark:

1. :func:`pool_noise` once per baseline (the runner's noise level, from
   every benchmark of the baseline with the same environment);
2. :func:`decide` when the benchmark's test runs (look 1), and again for
   each fresh process that re-measures it while :func:`needs_confirmation`
   says so (looks 2 and 3);
3. :func:`outcome` to fail, warn or pass the test item.

Design (``research/statistics.md``, with the changes argued below):

* The unit of evidence is the run (one OS process): its statistic is the
  median of its rounds, analysed on a log scale (§1, §3.1). Noise is the
  baseline's run-to-run SD, moderated towards a prior (§4.2), never the
  scatter of the iterations inside a run.
* A regression needs significance at the session-adjusted level *and* a
  slowdown above ``threshold`` (§4.3): the threshold in force is
  ``max(threshold, noise-driven cutoff)`` and the verdict says which one won.
* Family-wise control per test: a regression can only become final at the
  last look, so the event "false failure of benchmark i" is contained in
  "the final-look test of i rejects", whose probability is ``alpha / m``;
  summing over the m gated benchmarks bounds the session's false-failure
  rate by ``alpha`` under any dependence between benchmarks (Bonferroni, i.e.
  Holm's first step). Unlike statistics.md §4.4 no alpha is spent on the
  earlier looks: they can only send a benchmark to another look, never fail
  it. BH is not used: it needs every p-value of the session before any test
  may fail, and under a clean PR (the case to protect) its error rate is the
  same. Improvements can become final at any look, so they are tested at
  ``alpha / (m * looks)``.
* "No change" is a claim too: it needs the one-sided upper bound of the
  slowdown below ``detect``, at a level that clears a true ``detect``
  slowdown with probability at most ``clear_error`` over all looks. With the
  usual 95 % bound a 5 % slowdown would be waved through 5 % of the time
  per look, which alone breaks "≥95 % detected at 5 %".
* Noise that GPU-MACHINE.md shows to be uneven is respected: the prior's
  shape falls with the time per call, its level and weight are fitted to
  the runner's baseline, a benchmark noisier than the prior gets less of it
  (:func:`pytest_gpuperf.stats.benchmark_nu0`), the current runs are
  summarised by their median from three on (one process at 2x was seen),
  and current runs that scatter more than the noise allows make the verdict
  inconclusive.
* The MDE reported is that of the whole procedure (all looks), and is
  detected with at least ``power`` probability given the baseline (checked
  by simulation, ``bench/simulate_verdicts.py``).

Known limit: the error control assumes run-to-run noise near normal on the
log scale. A benchmark whose processes sometimes land in a slow mode
(launch-bound calls; one process in 8 at 2x) can fail falsely more often
than ``alpha / m``: 0.2 % of comparisons instead of 0.125 % at m = 8 with
two confirmation runs, 4.5 % without any (bench table 1). More baseline
runs do not cure it (the mode inflates the noise estimate but not enough);
measuring such calls without the slow mode (CUDA-graph replay) or a
distribution-free check once K >= 20 would.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from pytest_gpuperf import stats
from pytest_gpuperf.measure.steady_state import MAD_TO_SD
from pytest_gpuperf.model import Result, _json_safe
from pytest_gpuperf.summary import mad

REGRESSION = "regression"
IMPROVEMENT = "improvement"
NO_CHANGE = "no-change"
INCONCLUSIVE = "inconclusive"
NO_BASELINE = "no-baseline"
DIFFERENT_ENVIRONMENT = "different-environment"
KINDS = (REGRESSION, IMPROVEMENT, NO_CHANGE, INCONCLUSIVE, NO_BASELINE, DIFFERENT_ENVIRONMENT)
#: Kinds that were gated, i.e. counted in the session's family of m comparisons.
GATED_KINDS = (REGRESSION, IMPROVEMENT, NO_CHANGE, INCONCLUSIVE)
_CODES = {
    stats.REGRESSION: REGRESSION,
    stats.IMPROVEMENT: IMPROVEMENT,
    stats.NO_CHANGE: NO_CHANGE,
    stats.INCONCLUSIVE: INCONCLUSIVE,
}

#: Outcomes of :func:`outcome`.
FAIL, WARN, PASS, PENDING = "fail", "warn", "pass", "pending"
FAIL_ON = ("regression", "inconclusive")


@dataclass(frozen=True)
class DecisionPolicy:
    """How verdicts are decided; built once from the settings (:meth:`from_settings`).

    Defaults and why:

    * ``threshold`` 3 %: the smallest slowdown that may fail. GPU-MACHINE.md
      saw 8 fresh processes of one 4096³ matmul span 2.2-3.6 % (max - min),
      so one process at the edge of that range sits ~1.8 % from the centre;
      3 % keeps a single unlucky process of a large kernel from failing on
      size alone even if the baseline's runs happened to bunch, and leaves
      2 points below ``detect`` for power. (statistics.md's 2 % lies inside
      the observed process-to-process range.)
    * ``detect`` 5 %: the slowdown the issue asks to catch with ≥95 %
      probability; it bounds "no change" and defines the reported MDE's goal.
    * ``alpha`` 1 %: family-wise false-failure rate of a session.
    * ``looks`` 3: the session's run plus up to 2 fresh processes.
    * ``clear_error`` 1 %: chance, over all looks, that a slowdown of exactly
      ``detect`` is cleared as "no change".
    * ``nu0_max`` 10, ``pool_confidence`` 0.75, ``min_pool`` 3: see
      :func:`pytest_gpuperf.stats.fit_prior`.
    * ``noise_floor`` 0.25 %: no benchmark is trusted to be quieter between
      processes (statistics.md §4.2; timer resolution, 4-figure storage).
    * ``shared`` 0.25: share of the run-to-run variance common to the
      candidate's runs (one CI job, minutes apart), which re-runs cannot
      average away. Not yet measured: the A/A campaign (statistics.md §6.1,
      calibration of T at r = 3) should set it.
    * ``consistency_alpha`` 1 %: candidate runs that scatter more than the
      noise allows (F-test) make any claim inconclusive.
    * ``default_*``: the prior when nothing could be pooled from the
      runner (:func:`pytest_gpuperf.stats.default_noise`): 25 % up to 20 µs,
      1 % from 200 µs, log-log between, with weight ``default_nu0`` = 4 df.
      The measured SDs at one duration spread ~10x, so the prior is vague
      and set at the upper end of GPU-MACHINE.md's range. It is also the
      *shape* of the pooled prior, whose level is fitted.
    * ``graph_noise_small`` 3 %: the small-call end of that curve for
      CUDA-graph replay, which removes the launch overhead that makes eager
      small calls noisy. Measured on the H200 (bench/measurement_accuracy.py,
      bench/verdict_campaign.py): graph replays of 2-3 µs kernels moved
      0.2-0.7 % between fresh processes, with one kernel showing two
      placement modes 6 % apart (SD ~3 %). With the eager curve's 25 %, a
      5-run baseline of a 0.2 %-quiet graph benchmark was judged at 17.7 %
      noise and could detect nothing.
    * ``cpu_noise_large`` 5 %: the large-call end for the CPU backend. Host
      timings of torch CPU work share the machine's cores with everything
      else (on the 2-core CI machine, a parallel pytest moved the same
      matmul by 2-10x); a 1 % prior would let one busy moment fail a test.
    """

    threshold: float = 0.03
    detect: float = 0.05
    alpha: float = 0.01
    power: float = 0.95
    clear_error: float = 0.01
    looks: int = 3
    ci_level: float = 0.90
    nu0_max: float = 10.0
    pool_confidence: float = 0.75
    min_pool: int = 3
    noise_floor: float = 0.0025
    shared: float = 0.25
    consistency_alpha: float = 0.01
    default_nu0: float = 4.0
    default_noise_small: float = 0.25
    default_noise_large: float = 0.01
    graph_noise_small: float = 0.03
    cpu_noise_large: float = 0.05
    default_small_s: float = 20e-6
    default_large_s: float = 200e-6
    fail_on: str = "regression"

    def __post_init__(self) -> None:
        if not 0 <= self.threshold < self.detect:
            raise ValueError(f"need 0 <= threshold < detect, got {self.threshold}, {self.detect}")
        if not 0 < self.alpha < 0.5 or not 0.5 < self.power < 1:
            raise ValueError(f"need 0 < alpha < 0.5 < power < 1, got {self.alpha}, {self.power}")
        if self.looks < 1:
            raise ValueError(f"need looks >= 1, got {self.looks}")
        if self.fail_on not in FAIL_ON:
            raise ValueError(f"fail_on must be one of {FAIL_ON}, got {self.fail_on!r}")

    @classmethod
    def from_settings(cls, values: Mapping[str, Any]) -> DecisionPolicy:
        """From resolved option values (``threshold``, ``alpha``, ``fail_on``, ``reruns``)."""
        policy = cls()
        kw: dict[str, Any] = {}
        if "alpha" in values:
            kw["alpha"] = float(values["alpha"])
        if "fail_on" in values:
            kw["fail_on"] = str(values["fail_on"])
        if "reruns" in values:
            kw["looks"] = int(values["reruns"]) + 1
        policy = replace(policy, **kw)
        if "threshold" in values:
            policy = policy.with_threshold(float(values["threshold"]))
        return policy

    def with_threshold(self, threshold: float) -> DecisionPolicy:
        """This policy with another threshold; ``detect`` keeps its distance above it.

        The gap ``detect - threshold`` is what power is bought with (the MDE
        is the cutoff plus ``t_power * se``), so a per-test ``threshold=0.10``
        gives ``detect`` 12 %, and ``threshold=0.01`` gives 3 %.
        """
        return replace(self, threshold=threshold, detect=threshold + (self.detect - self.threshold))

    def default_noise(self, median_s: float, mode: str | None = None) -> float:
        """The prior SD at ``median_s`` per call, on the curve of the timing ``mode``."""
        small = self.graph_noise_small if mode == "cuda-graph" else self.default_noise_small
        large = self.cpu_noise_large if mode == "cpu" else self.default_noise_large
        return float(
            stats.default_noise(
                median_s,
                small=small,
                large=large,
                small_s=self.default_small_s,
                large_s=self.default_large_s,
            )
        )

    def test_levels(self, m: int) -> dict[str, Any]:
        """Keyword arguments of :func:`pytest_gpuperf.stats.evaluate` for a session of m."""
        if m < 1:
            raise ValueError(f"m (gated comparisons in the session) must be >= 1, got {m}")
        return {
            "threshold": self.threshold,
            "detect": self.detect,
            "alpha_regression": self.alpha / m,
            "alpha_improvement": self.alpha / (m * self.looks),
            "clear_error": self.clear_error,
            "looks": self.looks,
            "power": self.power,
            "shared": self.shared,
            "ci_level": self.ci_level,
            "consistency_alpha": self.consistency_alpha,
        }


DEFAULT_POLICY = DecisionPolicy()


@dataclass(frozen=True)
class RunStat:
    """One run (process) of one benchmark, as the verdict sees it.

    ``median_s`` is the run statistic (median of the run's rounds, seconds
    per call). ``unstable`` runs (level shift, no steady state, throttled)
    never count as evidence. ``within_se`` is the standard error of
    ``log(median_s)`` from the run's own rounds (:func:`within_run_se`): a
    lower bound on the run-to-run noise, since a run's median can never be
    better known than its rounds allow.
    """

    median_s: float
    unstable: bool = False
    stability: str = "steady"
    within_se: float | None = None

    @classmethod
    def from_result(cls, result: Result) -> RunStat:
        return cls(
            median_s=result.median,
            unstable=result.unstable,
            stability=result.stability,
            within_se=within_run_se(result.rounds),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunStat:
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


def within_run_se(rounds: Sequence[float]) -> float | None:
    """Standard error of the log median of ``rounds``: ``1.2533 * 1.4826 * MAD(log) / sqrt(n)``.

    Rounds are autocorrelated, so this understates the run's own noise: use
    it only as a lower bound. None with fewer than 3 positive rounds.
    """
    logs = [math.log(x) for x in rounds if x > 0]
    if len(logs) < 3:
        return None
    return 1.2533 * MAD_TO_SD * mad(logs) / math.sqrt(len(logs))


@dataclass(frozen=True)
class NoisePrior:
    """What the runner's other benchmarks say about run-to-run noise.

    The prior SD at a benchmark taking ``t`` seconds per call is
    ``scale * policy.default_noise(t)``, with weight ``nu0`` degrees of
    freedom. ``source`` is ``"pooled"`` (fitted by :func:`pool_noise` from
    ``benchmarks`` benchmarks with ``runs`` runs in all) or ``"default"``.
    """

    scale: float
    nu0: float
    benchmarks: int = 0
    runs: int = 0
    source: str = "pooled"

    def s0(
        self, median_s: float, policy: DecisionPolicy = DEFAULT_POLICY, mode: str | None = None
    ) -> float:
        """The prior SD for a call of ``median_s`` timed in ``mode`` (the curve's shape)."""
        return self.scale * policy.default_noise(median_s, mode)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NoisePrior:
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})

    @classmethod
    def default(cls, policy: DecisionPolicy = DEFAULT_POLICY) -> NoisePrior:
        return cls(scale=1.0, nu0=policy.default_nu0, source="default")


def pool_noise(
    benchmarks: Iterable[Sequence[float | RunStat]],
    policy: DecisionPolicy = DEFAULT_POLICY,
    modes: Sequence[str | None] | None = None,
) -> NoisePrior | None:
    """The runner's noise prior from the baseline runs of many benchmarks.

    ``benchmarks`` holds, per benchmark, its baseline runs (run medians in
    seconds, or :class:`RunStat`; unstable ones are skipped), all of one
    environment fingerprint and measurement mode. Benchmarks with fewer than
    two stable runs say nothing about spread and are skipped. Returns None
    when fewer than ``policy.min_pool`` benchmarks contributed: then
    :func:`decide` uses the default prior and says so.

    Pass every benchmark of the baseline, the one being decided included
    (empirical Bayes, as limma does; one prior per session), or leave it out:
    with ≥ 8 benchmarks the difference is small.
    """
    sds: list[float] = []
    dfs: list[float] = []
    refs: list[float] = []
    runs = 0
    for i, runs_of_one in enumerate(benchmarks):
        logs = [math.log(x.median_s) for x in map(_as_run, runs_of_one) if _usable(x)]
        if len(logs) < 2:
            continue
        mean = sum(logs) / len(logs)
        sds.append(math.sqrt(sum((y - mean) ** 2 for y in logs) / (len(logs) - 1)))
        dfs.append(len(logs) - 1)
        refs.append(policy.default_noise(math.exp(mean), modes[i] if modes else None))
        runs += len(logs)
    if len(sds) < policy.min_pool:
        return None
    fit = stats.fit_prior(
        sds,
        dfs,
        refs,
        nu0_max=policy.nu0_max,
        confidence=policy.pool_confidence,
        min_benchmarks=policy.min_pool,
    )
    return NoisePrior(scale=float(fit.scale), nu0=float(fit.nu0), benchmarks=len(sds), runs=runs)


@dataclass(frozen=True)
class Comparison:
    """The verdict on one benchmark at one look, with every number that explains it.

    Times are seconds per call; fractions are plain (0.03 = 3 %); SDs are
    on the log scale (≈ relative). ``ratio`` is current / baseline:
    ``current_s`` is the median of the current stable runs' medians (their
    geometric mean for r ≤ 2), ``baseline_s`` the geometric mean of the
    stable baseline runs' medians. ``ratio_low``/``ratio_high`` are its
    ``ci_level`` (90 %) two-sided interval. ``alpha`` is the per-test level a
    regression's ``p_slow`` must reach (``alpha_family / m``).
    ``threshold_in_force`` is the slowdown the estimate had to exceed;
    ``threshold_reason`` is ``"threshold"`` when the configured minimum set
    it and ``"noise"`` when the noise widened it. ``noise`` is the run-to-run
    SD used, from ``k`` runs with SD ``noise_runs`` moderated towards
    ``prior_noise`` (``prior_source`` pooled over ``prior_benchmarks``
    benchmarks, or the default curve) with weight ``prior_df`` (the prior's
    ``prior_df_runner``, lowered when this benchmark is noisier than the
    prior), then raised to ``noise_floor`` if lower (``noise_reason``: runs,
    floor or within-run); ``df`` is the t reference's. ``mde`` is the
    slowdown the whole procedure (up to ``looks`` current runs) detects with
    ``power`` (95 %) probability given this baseline; ``runs_needed`` how
    many current runs would bring it to ``detect`` (None: more baseline runs
    are needed instead). ``current_runs`` lists every current run's median,
    unstable ones included; ``r`` counts the stable ones used.
    """

    kind: str
    final: bool
    look: int
    looks: int
    m: int
    name: str | None = None
    k: int = 0
    r: int = 0
    baseline_s: float | None = None
    current_s: float | None = None
    ratio: float | None = None
    ratio_low: float | None = None
    ratio_high: float | None = None
    ci_level: float = 0.90
    p_slow: float | None = None
    p_fast: float | None = None
    alpha: float | None = None
    alpha_family: float = 0.01
    threshold: float = 0.03
    threshold_in_force: float | None = None
    threshold_reason: str | None = None
    detect: float = 0.05
    noise: float | None = None
    noise_runs: float | None = None
    noise_reason: str | None = None
    noise_floor: float | None = None
    prior_noise: float | None = None
    prior_df: float | None = None
    prior_df_runner: float | None = None
    prior_source: str | None = None
    prior_benchmarks: int = 0
    df: float | None = None
    se: float | None = None
    mde: float | None = None
    runs_needed: int | None = None
    p_disagree: float | None = None
    reasons: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    environment: tuple[str, ...] = ()
    current_runs: tuple[float, ...] = field(default=())

    @property
    def gated(self) -> bool:
        return self.kind in GATED_KINDS

    @property
    def slowdown(self) -> float | None:
        return None if self.ratio is None else self.ratio - 1.0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = _json_safe(asdict(self))
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Comparison:
        kw = {f.name: d[f.name] for f in fields(cls) if f.name in d}
        for key in ("reasons", "notes", "environment", "current_runs"):
            if key in kw:
                kw[key] = tuple(kw[key])
        return cls(**kw)


def _as_run(x: float | RunStat) -> RunStat:
    return x if isinstance(x, RunStat) else RunStat(float(x))


def _usable(x: RunStat) -> bool:
    return not x.unstable and x.median_s > 0 and math.isfinite(x.median_s)


def _unstable_note(runs: Sequence[RunStat], side: str) -> str | None:
    bad = [x for x in runs if not _usable(x)]
    if not bad:
        return None
    classes = sorted({x.stability for x in bad})
    return f"{len(bad)} of {len(runs)} {side} runs unstable ({', '.join(classes)}), not used"


def decide(
    baseline: Sequence[float | RunStat],
    current: Sequence[float | RunStat],
    *,
    policy: DecisionPolicy = DEFAULT_POLICY,
    m: int = 1,
    look: int = 1,
    prior: NoisePrior | None = None,
    environment_reason: str | None = None,
    environment_diff: Sequence[str] = (),
    name: str | None = None,
    mode: str | None = None,
) -> Comparison:
    """The verdict on one benchmark at one look.

    ``baseline``: the benchmark's K past runs (same environment fingerprint
    and measurement settings), as run medians in seconds or
    :class:`RunStat`. ``current``: its r runs so far in this session (look
    ``look``: the session's run, then each fresh process). ``m``: gated
    comparisons in the session (benchmarks in the baseline that were
    collected). ``prior``: :func:`pool_noise` of the baseline, or None for the
    default prior. ``environment_reason``: why the current run's conditions
    are not comparable (telemetry: clocks differ...); it turns a would-be
    regression into inconclusive. ``environment_diff``: what differs in a
    hard fingerprint key; non-empty means "different-environment", not gated.

    Unstable runs never count as evidence: they are dropped, and with no
    stable run on a side the verdict is inconclusive. A regression or
    inconclusive verdict before the last look is not final
    (:func:`needs_confirmation`).
    """
    if m < 1:
        raise ValueError(f"m (gated comparisons in the session) must be >= 1, got {m}")
    if look < 1:
        raise ValueError(f"look must be >= 1, got {look}")
    base = [_as_run(x) for x in baseline]
    cur = [_as_run(x) for x in current]
    if not cur:
        raise ValueError("decide() needs at least one current run")
    last = look >= policy.looks
    common: dict[str, Any] = {
        "look": look,
        "looks": policy.looks,
        "m": m,
        "name": name,
        "alpha_family": policy.alpha,
        "threshold": policy.threshold,
        "detect": policy.detect,
        "ci_level": policy.ci_level,
        "current_runs": tuple(x.median_s for x in cur),
    }
    base_ok = [x for x in base if _usable(x)]
    cur_ok = [x for x in cur if _usable(x)]
    notes = [n for n in (_unstable_note(base, "baseline"), _unstable_note(cur, "current")) if n]
    if environment_reason and not environment_diff:
        notes.append(f"environment: {environment_reason}")

    # Numbers for the report even when no verdict can rest on them.
    use_base = base_ok or [x for x in base if x.median_s > 0]
    use_cur = cur_ok or [x for x in cur if x.median_s > 0]
    kind, numbers = (
        _numbers(use_base, use_cur, prior, policy, m, mode) if use_base and use_cur else (None, {})
    )

    if environment_diff:
        return Comparison(
            kind=DIFFERENT_ENVIRONMENT,
            final=True,
            environment=tuple(environment_diff),
            notes=tuple(notes),
            **common,
            **numbers,
        )
    if not base:
        cs = [x.median_s for x in use_cur]
        return Comparison(
            kind=NO_BASELINE,
            final=True,
            current_s=_geomean(cs) if cs else None,
            r=len(cs),
            notes=tuple(notes),
            **common,
        )
    if not base_ok:
        reason = f"all {len(base)} baseline runs are unstable: refresh the baseline"
        return Comparison(
            kind=INCONCLUSIVE,
            final=True,
            reasons=(reason,),
            notes=tuple(notes),
            **common,
            **numbers,
        )
    if not cur_ok:
        classes = ", ".join(sorted({x.stability for x in cur}))
        reason = (
            f"the current run{'s' if len(cur) > 1 else ''} did not hold a steady level ({classes})"
        )
        return Comparison(
            kind=INCONCLUSIVE,
            final=last,
            reasons=(reason,),
            notes=tuple(notes),
            **common,
            **numbers,
        )

    assert kind is not None
    reasons: list[str] = []
    if kind == INCONCLUSIVE:
        if (numbers["p_disagree"] or 1.0) < policy.consistency_alpha:
            reasons.append(
                "the current runs disagree more than the baseline's noise allows "
                f"(F-test p = {numbers['p_disagree']:.2g}): the benchmark has modes the "
                "baseline did not show"
            )
        else:
            reasons.append(
                "too noisy: it neither shows a slowdown above the threshold nor rules out "
                f"one of {100 * policy.detect:g} %"
            )
    if kind == REGRESSION and environment_reason:
        kind = INCONCLUSIVE
        reasons.append(f"environment: {environment_reason}")
        notes = [n for n in notes if not n.startswith("environment: ")]
    final = last or kind not in (REGRESSION, INCONCLUSIVE)
    return Comparison(
        kind=kind, final=final, reasons=tuple(reasons), notes=tuple(notes), **common, **numbers
    )


def _exp(x: float) -> float:
    """``exp`` that saturates to inf instead of raising (no-information priors give huge bounds)."""
    return math.inf if x > 700 else math.exp(x)


def _geomean(xs: Sequence[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def _numbers(
    base: Sequence[RunStat],
    cur: Sequence[RunStat],
    prior: NoisePrior | None,
    policy: DecisionPolicy,
    m: int,
    mode: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """The statistical kind and the numbers of :class:`Comparison`, via :func:`stats.evaluate`."""
    yb = [math.log(x.median_s) for x in base]
    yc = [math.log(x.median_s) for x in cur]
    k = len(yb)
    mean_b = sum(yb) / k
    sd_b = math.sqrt(sum((y - mean_b) ** 2 for y in yb) / (k - 1)) if k >= 2 else math.nan
    pri = prior if prior is not None else NoisePrior.default(policy)
    if k == 1 and pri.nu0 <= 0:  # no spread of its own and a prior without weight
        pri = NoisePrior.default(policy)
    s0 = pri.s0(math.exp(mean_b), policy, mode)
    within = [x.within_se for x in (*base, *cur) if x.within_se is not None]
    within_rms = math.sqrt(sum(w * w for w in within) / len(within)) if within else 0.0
    floor = max(policy.noise_floor, within_rms)
    levels = policy.test_levels(m)
    ev = stats.evaluate(mean_b, sd_b, k, yc, s0, pri.nu0, floor, **levels)
    s = float(ev.s)
    s_mod = float(stats.moderate(sd_b, k, s0, pri.nu0)[0])
    if s_mod >= floor:
        noise_reason = "runs"
    else:
        noise_reason = "within-run" if within_rms > policy.noise_floor else "floor"
    nu = float(ev.nu)
    return _CODES[int(ev.code)], {
        "k": k,
        "r": len(yc),
        "baseline_s": math.exp(mean_b),
        "current_s": math.exp(float(stats.location(yc))),
        "ratio": _exp(float(ev.d)),
        "ratio_low": _exp(float(ev.ci_low)),
        "ratio_high": _exp(float(ev.ci_high)),
        "p_slow": float(ev.p_slow),
        "p_fast": float(ev.p_fast),
        "alpha": levels["alpha_regression"],
        "threshold_in_force": _exp(float(ev.cutoff)) - 1.0,
        "threshold_reason": "noise" if bool(ev.noise_bound) else "threshold",
        "noise": s,
        "noise_runs": sd_b if k >= 2 else None,
        "noise_reason": noise_reason,
        "noise_floor": floor,
        "prior_noise": s0,
        "prior_df": float(stats.benchmark_nu0(sd_b, k, s0, pri.nu0)),
        "prior_df_runner": pri.nu0,
        "prior_source": pri.source,
        "prior_benchmarks": pri.benchmarks,
        "df": nu,
        "se": float(ev.se),
        "mde": float(ev.mde),
        "runs_needed": stats.runs_needed(
            s,
            k,
            nu,
            detect=policy.detect,
            power=policy.power,
            threshold=policy.threshold,
            alpha_regression=levels["alpha_regression"],
            clear_error=policy.clear_error,
            shared=policy.shared,
            consistency_alpha=policy.consistency_alpha,
        ),
        "p_disagree": None if math.isnan(float(ev.p_disagree)) else float(ev.p_disagree),
    }


def needs_confirmation(comparison: Comparison) -> bool:
    """Whether this benchmark should be re-measured in a fresh process before its verdict stands.

    True for a regression or an inconclusive verdict before the last look
    (the issue: "a suspect benchmark is re-measured in fresh processes before
    its verdict is final"). Improvements, no change, no baseline and
    different environments are final at once, as is an inconclusive verdict
    whose cause is the baseline (re-measuring cannot help).
    """
    return not comparison.final


def outcome(comparison: Comparison, fail_on: str = "regression") -> str:
    """What the test item does: ``"fail"``, ``"warn"``, ``"pass"`` or ``"pending"`` (look again).

    A final regression fails. A final inconclusive verdict warns, or fails
    with ``fail_on="inconclusive"`` (``--gpuperf-fail-on=inconclusive``).
    Everything else passes and is reported.
    """
    if fail_on not in FAIL_ON:
        raise ValueError(f"fail_on must be one of {FAIL_ON}, got {fail_on!r}")
    if not comparison.final:
        return PENDING
    if comparison.kind == REGRESSION:
        return FAIL
    if comparison.kind == INCONCLUSIVE:
        return FAIL if fail_on == "inconclusive" else WARN
    return PASS
