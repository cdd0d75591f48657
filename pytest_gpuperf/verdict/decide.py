"""The verdict on one benchmark: each of its figures against its baseline, then one answer.

Pure functions and frozen value objects (no pytest, no torch). The rule, per
figure (device time, end-to-end time, or the one time of a CUDA-graph or CPU
benchmark), with K baseline runs and r current runs, each a fresh process:

1. Every run gives a level, the log of its median round. A run that did not
   hold a steady level still counts: its rounds bound its level, and the
   bound that favours "no change" is used (the current run's 10th percentile,
   the baseline run's 90th). Instability widens the uncertainty; it never
   throws the run away.
2. Each side's fast mode is its fastest run, corrected by the expected minimum
   of that many draws (:mod:`.robust`). The slowdown is the difference of the
   two fast modes; one slow process on either side does not move it.
3. The noise is the figure's :class:`~.policy.NoiseClass` prior, moderated by
   the spread of the baseline's faster half; its standard error follows from
   the variance of a minimum of K and of r draws.
4. REGRESSION when the slowdown exceeds ``max(threshold, z * se)`` and either
   it is decisive (beyond the largest process mode of the class, plus
   ``z * se``) or every one of the class's ``runs`` fresh processes showed it.
   Until then it is a suspect, and the gate measures it again in a fresh
   process; if no run can be added (budget, reruns), INCONCLUSIVE, saying what
   was seen and what it would have taken.
5. IMPROVEMENT by the mirror rule (final at once); otherwise NO CHANGE, with
   the smallest slowdown the figure would have caught (its resolution).

A figure paid at the host's speed is judged so twice, as measured and with each run's
host taken out, and the two verdicts made one; a tracer on one side only leaves it
inconclusive. The hosts of both sides are read once per benchmark
(:class:`.host_speed.HostReading`, whose module says why and how).

The benchmark's verdict: a regression if any figure is one, else inconclusive
if any is, else an improvement if any is, else no change. Every step is
monotone in the current times: slower current rounds can only move a verdict
towards REGRESSION, never away from it. One choice looks at how the current
runs spread among themselves, not at how slow they are: a CPU figure on a quiet
host is in the quieter class only while its runs lie within 1.2x of each other
(:func:`.host_speed.quiet_class`); a slowdown that moves every run alike
keeps that spread, so a larger one is never judged more leniently.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from pytest_gpuperf.measure import backend
from pytest_gpuperf.model import Result
from pytest_gpuperf.verdict.comparison import (
    BELOW_RESOLUTION,
    DIFFERENT_ENVIRONMENT,
    IMPROVEMENT,
    INCONCLUSIVE,
    NO_BASELINE,
    NO_CHANGE,
    REGRESSION,
    UNCONFIRMED,
    UNSTEADY,
    Comparison,
    FigureVerdict,
)
from pytest_gpuperf.verdict.host_speed import (
    AB_HINT,
    CANARY_NOISE,
    HOST_CLASSES,
    HOST_SLOWER,
    NOT_COMPARABLE,
    RUNS_BEFORE_HOST_SLOWER,
    HostReading,
    HostSpeed,
    quiet_class,
)
from pytest_gpuperf.verdict.policy import CLASSES, DEFAULT_POLICY, DecisionPolicy, NoiseClass
from pytest_gpuperf.verdict.robust import fast_spread, min_mean, min_var, moderate, z_of

#: Outcomes of :func:`outcome`.
FAIL, WARN, PASS, PENDING = "fail", "warn", "pass", "pending"

#: Figures of a benchmark.
DEVICE, E2E, TIME = "device", "end-to-end", "time"
#: Calls faster than this end to end are launch-bound whatever their device time.
LAUNCH_BOUND_S = 30e-6
#: The quantiles of a run's rounds that bound the level of a run without a steady level.
LOW_Q, HIGH_Q = 0.1, 0.9


def _quantile(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    pos = q * (len(s) - 1)
    i = math.floor(pos)
    j = min(i + 1, len(s) - 1)
    return s[i] + (s[j] - s[i]) * (pos - i)


def _bounds(rounds: Sequence[float]) -> tuple[float, float] | None:
    xs = [x for x in rounds if x > 0 and math.isfinite(x)]
    return (_quantile(xs, LOW_Q), _quantile(xs, HIGH_Q)) if len(xs) >= 2 else None


def within_run_se(rounds: Sequence[float]) -> float | None:
    """Standard error of the log median of ``rounds`` (1.2533 * 1.4826 * MAD / sqrt(n)).

    Rounds are autocorrelated, so this understates a run's own noise: a floor
    on the between-process noise, never an estimate of it. None with fewer
    than 3 positive rounds.
    """
    logs = sorted(math.log(x) for x in rounds if x > 0)
    n = len(logs)
    if n < 3:
        return None
    med = logs[n // 2] if n % 2 else 0.5 * (logs[n // 2 - 1] + logs[n // 2])
    dev = sorted(abs(y - med) for y in logs)
    mad = dev[n // 2] if n % 2 else 0.5 * (dev[n // 2 - 1] + dev[n // 2])
    return 1.2533 * 1.4826 * mad / math.sqrt(n)


def _power_capped(telemetry: Mapping[str, Any] | None, share: float = 0.5) -> bool:
    events = (telemetry or {}).get("clock_events") or {}
    return any("power" in str(k).lower() and float(v) >= share for k, v in events.items())


@dataclass(frozen=True)
class RunStat:
    """One run (process) of one benchmark, as the verdict sees it.

    ``median_s`` is the main figure (seconds per call: device time for the
    CUDA events backend, else the backend's one time), ``e2e_s`` the
    end-to-end figure where there is one. ``bounds`` / ``e2e_bounds`` are the
    10th and 90th percentiles of the rounds of a run that did not hold a
    steady level (None for a steady run). ``host_hidden`` says whether the
    device figure is device time alone; ``power_capped`` whether the GPU ran
    under its power cap most of the measurement; ``host_s`` the host's time to
    issue one call.
    """

    median_s: float
    e2e_s: float | None = None
    stability: str = "steady"
    bounds: tuple[float, float] | None = None
    e2e_bounds: tuple[float, float] | None = None
    host_hidden: bool | None = None
    within_se: float | None = None
    power_capped: bool = False
    host_s: float | None = None
    #: the host-speed canary around the run's rounds (measure/canary.py): its kind, seconds
    #: per op and share of the rounds' time on a CPU; and the tracer active while measuring
    canary_kind: str | None = None
    canary_op_s: float | None = None
    canary_share: float | None = None
    #: CPUs other processes kept busy during the rounds (None: not measured)
    canary_others: float | None = None
    tracer: str | None = None

    @property
    def unstable(self) -> bool:
        from pytest_gpuperf.measure.names import UNSTABLE_CLASSES

        return self.stability in UNSTABLE_CLASSES

    @classmethod
    def of(
        cls,
        median_s: float,
        rounds: Sequence[float],
        stability: str,
        *,
        e2e_rounds: Sequence[float] = (),
        host_hidden: bool | None = None,
        telemetry: Mapping[str, Any] | None = None,
        host_s: float | None = None,
        canary: Mapping[str, Any] | None = None,
        tracer: str | None = None,
    ) -> RunStat:
        """From a run's rounds (a result's or a stored run's)."""
        from pytest_gpuperf.measure.names import UNSTABLE_CLASSES
        from pytest_gpuperf.measure.summary import median
        from pytest_gpuperf.verdict.host_speed import op_time

        unstable = stability in UNSTABLE_CLASSES
        e2e = [x for x in e2e_rounds if x > 0 and math.isfinite(x)]
        canary = canary or {}
        return cls(
            median_s=median_s,
            e2e_s=median(e2e) if e2e else None,
            stability=stability,
            bounds=_bounds(rounds) if unstable else None,
            e2e_bounds=_bounds(e2e) if unstable and e2e else None,
            host_hidden=host_hidden,
            within_se=within_run_se(rounds),
            power_capped=_power_capped(telemetry),
            host_s=host_s,
            canary_kind=canary.get("kind"),
            canary_op_s=op_time(canary),
            canary_share=canary.get("share"),
            canary_others=canary.get("others"),
            tracer=tracer or None,
        )

    @classmethod
    def from_run(cls, run: Result | Any) -> RunStat:
        """From a :class:`~pytest_gpuperf.model.Result` or a stored run (``RunRecord``): both
        hold ``median``, ``rounds``, ``stability``, ``e2e_rounds``, ``host_hidden``,
        ``host_s``, ``telemetry``, ``host_canary`` and ``tracer``."""
        return cls.of(
            run.median,
            run.rounds,
            run.stability,
            e2e_rounds=run.e2e_rounds,
            host_hidden=run.host_hidden,
            telemetry=run.telemetry,
            host_s=run.host_s,
            canary=getattr(run, "host_canary", None),
            tracer=getattr(run, "tracer", None),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Level:
    """One run's level on one figure: log seconds, with the bounds of an unsteady run."""

    y: float
    lo: float
    hi: float


def _levels(runs: Sequence[RunStat], figure: str) -> list[Level] | None:
    out = []
    for x in runs:
        value, bounds = (x.e2e_s, x.e2e_bounds) if figure == E2E else (x.median_s, x.bounds)
        if value is None or not (value > 0 and math.isfinite(value)):
            return None
        y = math.log(value)
        lo, hi = (math.log(bounds[0]), math.log(bounds[1])) if bounds else (y, y)
        out.append(Level(y, min(lo, y), max(hi, y)))
    return out


def _exp(x: float) -> float:
    return math.inf if x > 700 else math.exp(x)


def _described(mode: str | backend.Mode | None) -> backend.Mode:
    """A mode's description: given, or a built-in mode's by name (a plugin's mode is known
    to the run's registry only: its caller passes the description, as the Judge does)."""
    return mode if isinstance(mode, backend.Mode) else backend.get(mode)


def classes_for(
    baseline: Sequence[RunStat],
    mode: str | backend.Mode | None,
    policy: DecisionPolicy = DEFAULT_POLICY,
) -> dict[str, NoiseClass]:
    """The noise class of each figure of a benchmark: its mode's (:mod:`..measure.backend`),
    or for a mode of two figures, from what its baseline runs show."""
    klass = _described(mode).noise_class
    if klass is not None:
        return {TIME: CLASSES[klass] if isinstance(klass, str) else klass}
    fast_dev = min(x.median_s for x in baseline)
    e2es = [x.e2e_s for x in baseline if x.e2e_s is not None]
    # Host-bound: the end-to-end time exceeds the device time, or is launch-scale, or the
    # host's own time per call is close enough to the device's that a slow period of the
    # host (1.3-2x) makes the host the bottleneck (an H200 run of 16 chained kernels,
    # device-bound at 125 us in its baseline, ran 5-15 % slower end to end in such a period).
    close = any(
        x.host_s is not None and x.host_s >= policy.host_share * x.median_s for x in baseline
    )
    host = bool(e2es) and (
        min(e2es) >= policy.host_bound * fast_dev or min(e2es) < LAUNCH_BOUND_S or close
    )
    power = sum(x.power_capped for x in baseline) >= policy.power_share * len(baseline)
    device = CLASSES["launches" if host else "power" if power else "device"]
    e2e = CLASSES["host" if host else "power" if power else "device"]
    return {DEVICE: device, E2E: e2e}


@dataclass(frozen=True)
class _Location:
    """Where a side's runs lie (log scale), and the variance factor of that estimate."""

    center: Callable[[Sequence[float], float], float]
    var: Callable[[int], float]


def _median(ys: Sequence[float]) -> float:
    from pytest_gpuperf.measure.summary import median

    return median(list(ys))


#: "fast": the fastest run, corrected by the expected minimum of n draws (the rule);
#: "median" and "mean" of the runs: the alternatives bench/zoo_replay.py compares with.
_LOCATIONS: dict[str, _Location] = {
    "fast": _Location(lambda ys, s: min(ys) - s * min_mean(len(ys)), min_var),
    "median": _Location(lambda ys, s: _median(ys), lambda n: math.pi / (2 * n) if n > 2 else 1 / n),
    "mean": _Location(lambda ys, s: sum(ys) / len(ys), lambda n: 1.0 / n),
}


def decide_figure(
    figure: str,
    base: Sequence[Level],
    cur: Sequence[Level],
    klass: NoiseClass,
    *,
    policy: DecisionPolicy = DEFAULT_POLICY,
    last: bool = False,
    floor: float = 0.0,
    like_for_like: bool = True,
    allowance: float = math.inf,
    extra_noise: float = 0.0,
) -> FigureVerdict:
    """One figure's verdict (module docstring, steps 1-5); ``floor`` raises the noise, and
    ``extra_noise`` adds to it (the error of levels corrected by another measurement).

    ``like_for_like`` False: the current runs were measured another way than
    the baseline's (the device figure with and without the host hidden); then
    one run is decisive only beyond the one-run bar by ``allowance`` (log: how much
    the host's own time could add to the same code measured so; inf: never).
    """
    k, r = len(base), len(cur)
    if not k or not r:
        raise ValueError("decide_figure() needs baseline and current runs")
    ys = [x.y for x in base]
    s, prior, own, df = _noise(ys, klass, policy, floor)
    s = math.hypot(s, extra_noise)
    loc = _LOCATIONS[policy.location]
    se = s * math.sqrt(loc.var(k) + loc.var(r))
    d = loc.center([x.y for x in cur], s) - loc.center(ys, s)
    slower = loc.center([x.lo for x in cur], s) - loc.center([x.hi for x in base], s)
    faster = loc.center([x.lo for x in base], s) - loc.center([x.hi for x in cur], s)
    upper = -faster  # the largest slowdown the runs' ranges allow
    z, floor_log = policy.z, math.log1p(policy.threshold)
    cutoff = max(floor_log, z * se)
    # Beyond the class's process modes, two runs settle a regression; beyond their square
    # (at least 2.25x), one does: a mode larger than measured is then still no failure.
    decisive = max(cutoff, math.log(klass.mode) + z * se)
    one_run = max(decisive, 2 * math.log(max(klass.mode, 1.5)) + z * se)
    # The resolution once the class's runs are in: caught with `power` probability.
    se_full = s * math.sqrt(min_var(k) + min_var(max(klass.runs, r)))
    cut_full = max(floor_log, z * se_full)
    resolution = _exp(cut_full + z_of(1 - policy.power) * se_full) - 1.0
    half = z_of((1 - policy.ci_level) / 2) * se
    one_run += 0.0 if like_for_like else allowance  # measured another way: counts its host
    kind, final, reasons, why = _classify(
        slower, faster, upper, cutoff, floor_log, decisive, one_run, r, klass, last=last
    )
    if kind == NO_CHANGE and d + half >= cutoff:  # not ruled out: too small to tell
        kind, final, why = INCONCLUSIVE, True, BELOW_RESOLUTION
        reasons.append(_below_resolution(d, d + half, cutoff, resolution, policy.ci_level))
    return FigureVerdict(
        figure=figure,
        klass=klass.name,
        kind=kind,
        final=final,
        k=k,
        r=r,
        baseline_s=_exp(min(ys)),
        current_s=_exp(min(x.y for x in cur)),
        ratio=_exp(d),
        ratio_low=_exp(d - half),
        ratio_high=_exp(d + half),
        slower=_exp(slower) - 1.0,
        cutoff=_exp(cutoff) - 1.0,
        cutoff_reason="noise" if z * se > floor_log else "threshold",
        decisive=_exp(decisive) - 1.0,
        one_run=_exp(one_run) - 1.0,
        noise=s,
        noise_prior=prior,
        noise_own=own if df else None,
        se=se,
        z=slower / se if se > 0 else math.inf,
        resolution=resolution,
        runs_needed=klass.runs,
        reasons=tuple(reasons),
        baseline_runs=tuple(math.exp(y) for y in ys),
        current_runs=tuple(math.exp(x.y) for x in cur),
        why=why,
    )


def _below_resolution(d: float, high: float, cutoff: float, resolution: float, level: float) -> str:
    """Why a figure is inconclusive, not "no change": no slowdown beyond the threshold was
    seen, but the interval's upper end (``high``, log) does not rule one out (a 1.6x
    slowdown on a noisy CPU baseline is too small to tell, never "no change")."""
    return (
        f"below resolution: {_pct(_exp(d) - 1)} slower, its {level:.0%} interval reaches "
        f"{_pct(_exp(high) - 1)}, beyond the {_pct(_exp(cutoff) - 1)} threshold in force; it "
        f"would catch >= {_pct(resolution)} (more baseline runs, or a quieter machine, "
        "catch less)"
    )


def _noise(
    ys: Sequence[float], klass: NoiseClass, policy: DecisionPolicy, floor: float
) -> tuple[float, float, float, int]:
    """The noise of one run's log time: (noise, class prior, baseline's own spread, its df)."""
    median_s = math.exp(min(ys))
    prior = klass.prior(median_s)
    own, df = fast_spread(ys)
    # The baseline's own spread may raise the prior, up to own_cap times: with few runs its
    # faster half can hold a slow process, which the minimum already ignores.
    own = min(own, policy.own_cap * prior)
    s = max(moderate(prior, policy.prior_weight, own, df), policy.noise_floor, floor)
    return s, prior, own, df


def _classify(
    slower: float,
    faster: float,
    upper: float,
    cutoff: float,
    floor_log: float,
    decisive: float,
    one_run: float,
    r: int,
    klass: NoiseClass,
    *,
    last: bool,
) -> tuple[str, bool, list[str], str]:
    """The figure's kind, whether it is final, and the reasons and which kind of inconclusive
    it is (all sizes as log ratios; ``r`` current runs; ``last``: no more runs can be made)."""
    reasons: list[str] = []
    why = ""
    suspect = slower > max(floor_log, cutoff / 2)
    if slower > cutoff or (suspect and not last):
        # Above the cutoff: a regression, final once decisive or confirmed. Between half the
        # cutoff and the cutoff: a suspect that another fresh process may confirm or clear.
        kind = REGRESSION
        final = slower > cutoff and (
            slower > one_run or (r >= 2 and slower > decisive) or r >= klass.runs
        )
        if not final and last and slower <= cutoff:
            kind, final = NO_CHANGE, True
        elif not final and last:
            kind, final, why = INCONCLUSIVE, True, UNCONFIRMED
            reasons.append(
                f"at least {_pct(_exp(slower) - 1)} slower in all {r} run{'s' if r != 1 else ''} "
                f"(their conservative bound), above "
                f"its {_pct(_exp(cutoff) - 1)} threshold, but not confirmed: its class "
                f"({klass.name}) needs {klass.runs} fresh-process runs below "
                f"{_pct(_exp(decisive) - 1)} (process modes alone reach "
                f"{_pct(klass.mode - 1)}), and no more could be run"
            )
    elif faster > cutoff:
        kind, final = IMPROVEMENT, True
    elif upper > cutoff:
        # Runs without a steady level leave room for a slowdown above the cutoff (their rounds
        # span it): undecidable on these runs; a fresh process may hold a steady level.
        kind, final, why = INCONCLUSIVE, last, UNSTEADY
        reasons.append(
            f"runs without a steady level: their rounds allow anything from "
            f"{_pct(_exp(slower) - 1)} to {_pct(_exp(upper) - 1)} slower, across the "
            f"{_pct(_exp(cutoff) - 1)} threshold"
        )
    else:
        kind, final = NO_CHANGE, True
    return kind, final, reasons, why


def _pct(x: float) -> str:
    if not math.isfinite(x):
        return "inf %"
    return f"{100 * x:.1f} %" if x < 1 else f"{x + 1:.3g}x"


_ORDER = {REGRESSION: 0, INCONCLUSIVE: 1, IMPROVEMENT: 2, NO_CHANGE: 3}


def _combine(figures: Sequence[FigureVerdict]) -> FigureVerdict:
    """The figure that decides: the worst kind, and within it the clearest case."""

    def key(f: FigureVerdict) -> tuple[int, int, float]:
        margin = f.slower - f.cutoff if f.kind in (REGRESSION, INCONCLUSIVE) else 0.0
        return (_ORDER[f.kind], 0 if f.final else 1, -margin)

    worst = min(figures, key=key)
    if worst.kind == NO_CHANGE:
        return figures[0]  # the main figure speaks for a benchmark that did not change
    return worst


def decide(
    baseline: Sequence[RunStat],
    current: Sequence[RunStat],
    *,
    policy: DecisionPolicy = DEFAULT_POLICY,
    mode: str | backend.Mode | None = None,
    look: int | None = None,
    last: bool = False,
    name: str | None = None,
    environment_reason: str | None = None,
    environment_diff: Sequence[str] = (),
) -> Comparison:
    """The verdict on one benchmark's ``current`` runs against its ``baseline`` runs.

    ``mode`` is the timing backend, by name or description (it picks the figures' noise
    classes).
    ``last``: no further run can be added, so a suspect becomes inconclusive.
    ``environment_reason``: why the current run's conditions differ from the
    baseline's (telemetry); it holds back a regression that is not decisive.
    ``environment_diff``: hard differences of the environment; non-empty means
    "different environment", not gated.
    """
    cur = list(current)
    if not cur:
        raise ValueError("decide() needs at least one current run")
    base = [x for x in baseline if x.median_s > 0 and math.isfinite(x.median_s)]
    look = len(cur) if look is None else look
    last = last or len(cur) >= policy.max_runs
    common: dict[str, Any] = {
        "look": look,
        "looks": policy.max_runs,
        "name": name,
        "threshold": policy.threshold,
        "alpha": policy.alpha,
        "ci_level": policy.ci_level,
        "current_runs": tuple(x.median_s for x in cur),
    }
    notes = [n for n in (_unsteady(base, "baseline"), _unsteady(cur, "current")) if n]
    notes += _hidden_notes(base, cur, mode)
    if not base:
        fast = min(x.median_s for x in cur)
        return Comparison(
            kind=NO_BASELINE, final=True, current_s=fast, r=len(cur), notes=tuple(notes), **common
        )
    classes = classes_for(base, mode, policy)
    verdicts = _figures(base, cur, classes, policy, last, notes)
    if environment_diff:
        lead = verdicts[0]
        diff = tuple(environment_diff)
        return _compare(lead, verdicts, DIFFERENT_ENVIRONMENT, True, common, notes, diff)
    lead = _combine(verdicts)
    # A confirmed regression of one figure settles the benchmark; otherwise every figure must.
    final = lead.final if lead.kind == REGRESSION else all(v.final for v in verdicts)
    kind = lead.kind
    reasons = _benchmark_reasons(lead, verdicts)
    if kind == REGRESSION and environment_reason and lead.slower <= lead.decisive:
        # A clock regime the baseline never saw can explain a non-decisive slowdown.
        reasons.append(f"environment: {environment_reason}")
        kind, final = (INCONCLUSIVE, True) if last else (REGRESSION, False)
    elif environment_reason:
        notes.append(f"environment: {environment_reason}")
    if kind == REGRESSION and final:
        reasons.insert(0, _why_regression(lead))
    return _compare(lead, verdicts, kind, final, common, notes, (), reasons)


def _figures(
    base: Sequence[RunStat],
    cur: Sequence[RunStat],
    classes: Mapping[str, NoiseClass],
    policy: DecisionPolicy,
    last: bool,
    notes: list[str],
) -> list[FigureVerdict]:
    """Each figure's verdict (:func:`decide_figure`), with the tracers and the host's speed,
    read once for all figures (:class:`.host_speed.HostReading`), taken into account
    (:func:`_with_host`); what the reader should know goes to ``notes``."""
    host = HostReading.of(base, cur, [k.name for k in classes.values()])
    floor = max([x.within_se for x in (*base, *cur) if x.within_se is not None] or [0.0])
    allowance = _unlike_allowance(base, host.speed)
    if host.note:
        notes.append(host.note)
    verdicts = []
    for figure, klass in classes.items():
        b, c = _levels(base, figure), _levels(cur, figure)
        if b is None or c is None:
            if figure != E2E:
                raise ValueError(f"figure {figure!r} missing from a run")
            notes.append("end-to-end time missing from some runs (older baseline): not compared")
            continue
        klass = quiet_class(klass, host.all_quiet, [x.y for x in b], [x.y for x in c])
        rule = functools.partial(
            decide_figure, figure, klass=klass, policy=policy, last=last,
            floor=min(floor, 0.05), like_for_like=figure != DEVICE or _same_hiding(base, cur),
            allowance=allowance,
        )  # fmt: skip
        verdicts.append(_with_host(figure, klass, b, c, rule, host, last=last))
    return verdicts


def _unlike_allowance(base: Sequence[RunStat], speed: HostSpeed | None) -> float:
    """How much more (log) a device figure measured with its host not hidden may show of the
    same code: the baseline's end-to-end over device time (what the host adds to a call),
    times the host's slowdown where the canary knows it (``speed``)."""
    e2e = [x.e2e_s for x in base if x.e2e_s is not None]
    if not e2e:
        return math.inf
    extra = max(0.0, math.log(min(e2e) / min(x.median_s for x in base)))
    return extra + (max(0.0, math.log(speed.ratio)) if speed is not None else 0.0)


# --- a figure paid at the host's speed: the rule as measured and with the host out --------

#: how a figure is named in a sentence
_NAMES = {"device": "device time", "end-to-end": "end-to-end", "time": "time"}


def _with_host(
    figure: str,
    klass: NoiseClass,
    base: Sequence[Level],
    cur: Sequence[Level],
    rule: Callable[..., FigureVerdict],
    host: HostReading,
    *,
    last: bool,
) -> FigureVerdict:
    """One figure's verdict (``rule``: :func:`decide_figure` on two sides' levels), with the
    tracers and the host's speed of the runs (``host``) taken into account
    (:mod:`.host_speed`'s docstring): the rule on the levels as measured and, where the
    hosts ran at different speeds, on the levels with the host taken out, as one."""
    if host.tracers and host.paid_by_host(figure, klass):
        v = rule(base, cur)
        why = (
            f"{_NAMES.get(figure, figure)} not comparable: {host.tracers}; a tracer slows host "
            "work several times, by how much Python it runs, so this is never a regression. "
            "Compare runs measured alike (save a baseline under the same tracer, or run "
            "without it)"
        )
        return replace(v, kind=INCONCLUSIVE, final=True, why=NOT_COMPARABLE, reasons=(why,))
    speed = host.speed if klass.name in HOST_CLASSES else None
    raw = rule(base, cur)
    if speed is None:
        return raw
    sb, sc = host.shifts
    if not any(sb) and not any(sc):
        return raw
    b, c = _shifted(base, sb), _shifted(cur, sc)
    loose = rule(b, c)
    band = speed.band
    if raw.kind == REGRESSION and raw.ratio / loose.ratio <= band:
        return raw  # the runs compared (the fast modes) ran on hosts alike: nothing to explain
    # To fail, the slowdown must stand with the host out even if each factor missed by
    # CANARY_NOISE; to say that the host may hide one, the factors as measured are enough.
    strict = rule(b, c, extra_noise=CANARY_NOISE)
    if raw.kind != REGRESSION and not _may_hide(raw, loose, band) and any(sb):
        # The baseline's slow hosts taken out and the current runs as measured: a canary
        # that over-states a current run's host must not cancel a slowdown the baseline hid.
        mixed = rule(b, cur, extra_noise=CANARY_NOISE)
        if _may_hide(raw, mixed, band):
            loose = mixed
    return _as_one(figure, raw, strict, loose, last, math.exp(max(sb, default=0.0)), band)


def _shifted(levels: Sequence[Level], by: Sequence[float]) -> list[Level]:
    """The levels, each lowered by its run's shift (:attr:`.host_speed.HostReading.shifts`)."""
    return [
        replace(x, y=x.y - d, lo=x.lo - d, hi=x.hi - d) for x, d in zip(levels, by, strict=True)
    ]


def _may_hide(raw: FigureVerdict, corrected: FigureVerdict, band: float) -> bool:
    """Whether the runs with (some) host taken out show, or cannot rule out, a slowdown that
    the runs as measured do not: a regression, or a larger ratio whose interval reaches above
    its threshold."""
    if corrected.kind == REGRESSION:
        return True
    return corrected.ratio > raw.ratio * band and (
        corrected.kind == INCONCLUSIVE
        or (corrected.kind == NO_CHANGE and corrected.ratio_high > 1 + corrected.cutoff)
    )


def _as_one(
    figure: str,
    raw: FigureVerdict,
    corr: FigureVerdict,
    loose: FigureVerdict,
    last: bool,
    worst_base: float,
    band: float,
) -> FigureVerdict:
    """The verdict as measured (``raw``) and with the host taken out (``corr``, its noise
    widened by the canary's; ``loose``, not widened), as one; the host's slowdown it states
    is what taking the host out changed in the runs compared (``worst_base``: the slowest
    host of the baseline's runs, over the fastest host)."""
    if raw.kind == INCONCLUSIVE and raw.final:
        return raw
    name, h = _NAMES.get(figure, figure), raw.ratio / loose.ratio
    if raw.kind == REGRESSION and corr.kind == REGRESSION:
        final = raw.final and corr.final
        if not final or abs(math.log(h)) <= math.log(band):
            return replace(raw, final=final)
        line = (
            f"the host ran {_ratio(h)} than when the baseline was saved; {name} "
            f"{_change(raw.ratio)} is {_change(loose.ratio)} beyond that"
        )
        return replace(raw, reasons=(*raw.reasons, line))
    if raw.kind == REGRESSION:
        if not last and raw.r < RUNS_BEFORE_HOST_SLOWER:
            return replace(raw, final=False)  # one more fresh process: a short slow period ends
        line = f"the host ran {_ratio(h)} than when the baseline was saved; {name} " + (
            f"{_change(raw.ratio)} is within that"
            if corr.slower <= corr.cutoff / 2
            else f"{_change(raw.ratio)} is {_change(loose.ratio)} with the host taken out, but "
            f"with the canary's own error its interval reaches down to "
            f"{_change(corr.ratio_low)}, under the {_change(1 + corr.cutoff)} threshold; "
            "--gpuperf-ab=REF measures both sides on one host"
        )
        return replace(raw, kind=INCONCLUSIVE, final=True, why=HOST_SLOWER, reasons=(line,))
    if _may_hide(raw, loose, band):
        if loose.kind == REGRESSION and not loose.final:
            # a suspect with the host taken out: look again (inconclusive until then, not a
            # regression: the runs as measured are not slower)
            return replace(raw, kind=INCONCLUSIVE, final=False, why=HOST_SLOWER)
        if abs(math.log(h)) > math.log(band):
            line = (
                f"the host ran {_ratio(h)} than when the baseline was saved; {name} "
                f"{_change(raw.ratio)} as measured may hide a slowdown of {_change(loose.ratio)}"
            )
        else:  # the baseline's slow hosts widened its spread
            line = (
                f"some of the baseline's runs ran on a host up to {_ratio(worst_base)}; with "
                f"the host taken out their spread is narrower, and {name} "
                f"{_change(raw.ratio)} may be a slowdown"
            )
        return replace(raw, kind=INCONCLUSIVE, final=True, why=HOST_SLOWER, reasons=(line,))
    if raw.kind == IMPROVEMENT and corr.kind != IMPROVEMENT:
        return replace(raw, kind=NO_CHANGE)  # faster only as the host was
    return raw


def _ratio(h: float) -> str:
    if h >= 1:
        return f"{h:.2g}x slower" if h < 10 else f"{h:.3g}x slower"
    return f"{1 / h:.2g}x faster"


def _change(ratio: float) -> str:
    """``+80 %``, ``-3.1 %``, ``4.2x``."""
    if not math.isfinite(ratio):
        return "inf"
    if ratio >= 2:
        return f"{ratio:.3g}x"
    pct = 100 * (ratio - 1)
    return f"{pct:+.0f} %" if abs(pct) >= 10 else f"{pct:+.1f} %"


def _benchmark_reasons(lead: FigureVerdict, figures: Sequence[FigureVerdict]) -> list[str]:
    """The benchmark's reasons: the deciding figure's, and where the host or a tracer
    decided it, the other figures' verdicts in the same line and what to run instead."""
    reasons = list(lead.reasons)
    if lead.why not in (HOST_SLOWER, NOT_COMPARABLE) or not reasons:
        return reasons
    others = [
        f"{_NAMES.get(f.figure, f.figure)} {_change(f.ratio)}, {f.kind.replace('-', ' ')}"
        for f in figures
        if f is not lead
    ]
    line = "; ".join([reasons[0], *others])
    if lead.why == HOST_SLOWER:
        line += AB_HINT
    return [line, *reasons[1:]]


def _compare(
    lead: FigureVerdict,
    verdicts: Sequence[FigureVerdict],
    kind: str,
    final: bool,
    common: Mapping[str, Any],
    notes: Sequence[str],
    environment: Sequence[str],
    reasons: Sequence[str] = (),
) -> Comparison:
    return Comparison(
        kind=kind,
        final=final,
        figure=lead.figure,
        klass=lead.klass,
        k=lead.k,
        r=lead.r,
        baseline_s=lead.baseline_s,
        current_s=lead.current_s,
        ratio=lead.ratio,
        ratio_low=lead.ratio_low,
        ratio_high=lead.ratio_high,
        slower=lead.slower,
        threshold_in_force=lead.cutoff,
        threshold_reason=lead.cutoff_reason,
        decisive=lead.decisive,
        noise=lead.noise,
        noise_prior=lead.noise_prior,
        noise_own=lead.noise_own,
        se=lead.se,
        z=lead.z,
        resolution=lead.resolution,
        runs_needed=lead.runs_needed,
        reasons=tuple(reasons),
        notes=tuple(notes),
        environment=tuple(environment),
        baseline_runs=lead.baseline_runs,
        figures=tuple(verdicts),
        why=lead.why if kind == INCONCLUSIVE else "",
        **{**common, "current_runs": lead.current_runs},
    )


def _why_regression(f: FigureVerdict) -> str:
    runs = f"{f.r} run{'s' if f.r != 1 else ''}"
    if f.slower > f.one_run:
        how = f"far beyond what process modes of its class ({f.klass}) produce: one run settles it"
    elif f.slower > f.decisive:
        how = (
            f"beyond what process modes of its class ({f.klass}) produce "
            f"({_pct(f.decisive)}), in both of {runs}"
        )
    else:
        how = f"in every one of {runs}, as its class ({f.klass}) requires"
    what = "time" if f.figure == TIME else f"{f.figure} time"
    # ``slower`` is the runs' conservative bound, not the change the outputs show (the fast
    # modes' ratio): said as what it is
    return (
        f"{what} at least {_pct(f.slower)} slower (the runs' conservative bound), above its "
        f"{_pct(f.cutoff)} threshold, {how}"
    )


def _unsteady(runs: Sequence[RunStat], side: str) -> str | None:
    bad = [x for x in runs if x.unstable]
    if not bad:
        return None
    classes = ", ".join(sorted({x.stability for x in bad}))
    return (
        f"{len(bad)} of {len(runs)} {side} run{'s' if len(runs) != 1 else ''} without a steady "
        f"level ({classes}): counted by the range of their rounds"
    )


def _same_hiding(base: Sequence[RunStat], cur: Sequence[RunStat]) -> bool:
    """Whether every current run's device figure was measured as the baseline's were."""
    b = {x.host_hidden for x in base if x.host_hidden is not None}
    return all(x.host_hidden is None or x.host_hidden in b for x in cur) if b else True


def _hidden_notes(
    base: Sequence[RunStat], cur: Sequence[RunStat], mode: str | backend.Mode | None
) -> list[str]:
    if not _described(mode).hides_host:
        return []
    b = [x.host_hidden for x in base if x.host_hidden is not None]
    c = [x.host_hidden for x in cur if x.host_hidden is not None]
    if b and c and all(b) and not any(c):
        return [
            "the current code waits for the GPU inside the call (.item(), .cpu(), a sync), so "
            "its device time includes those waits; the baseline's did not wait"
        ]
    if b and c and not any(b) and all(c):
        return ["the baseline waited for the GPU inside the call; the current code no longer does"]
    return []


def needs_confirmation(comparison: Comparison) -> bool:
    """Whether the benchmark should be measured again in a fresh process before it stands."""
    return not comparison.final


def outcome(comparison: Comparison, fail_on: str = "regression") -> str:
    """What the test item does: ``"fail"``, ``"warn"``, ``"pass"`` or ``"pending"`` (look again)."""
    from pytest_gpuperf.verdict.policy import FAIL_ON

    if fail_on not in FAIL_ON:
        raise ValueError(f"fail_on must be one of {FAIL_ON}, got {fail_on!r}")
    if not comparison.final:
        return PENDING
    if comparison.kind == REGRESSION:
        return FAIL
    if comparison.kind == INCONCLUSIVE:
        return FAIL if fail_on == "inconclusive" else WARN
    return PASS


def with_note(c: Comparison, note: str) -> Comparison:
    return replace(c, notes=(*c.notes, note))
