"""The verdict on one benchmark: each of its figures against its baseline, then one answer.

Pure functions and frozen value objects (no pytest, no torch). The rule is
docs/concepts.md "Judgement". Each side's level is the median of its runs' levels,
each the log of a run's 10th-percentile round: a slow period only ever adds to a
round, so the low rounds are what the code costs, and one odd process sets neither
side. Every step is monotone in the current times: slower current rounds can only
move a verdict towards REGRESSION, never away from it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pytest_gpuperf.measure import backend
from pytest_gpuperf.measure.contention import ONE_THREAD, WAITED
from pytest_gpuperf.model import Run, printable
from pytest_gpuperf.verdict.comparison import (
    BELOW_RESOLUTION,
    DIFFERENT_ENVIRONMENT,
    IMPROVEMENT,
    INCONCLUSIVE,
    NO_BASELINE,
    NO_CHANGE,
    NOT_COMPARABLE,
    REGRESSION,
    UNCONFIRMED,
    UNMEASURABLE,
    Comparison,
    FigureVerdict,
)
from pytest_gpuperf.verdict.policy import CLASSES, DEFAULT_POLICY, DecisionPolicy, NoiseClass
from pytest_gpuperf.verdict.robust import moderate, z_of

#: Outcomes of :func:`outcome`.
FAIL, WARN, PASS, PENDING = "fail", "warn", "pass", "pending"

#: Figures of a benchmark.
DEVICE, E2E, TIME = "device", "end-to-end", "time"
#: Calls faster than this end to end are launch-bound whatever their device time.
LAUNCH_BOUND_S = 30e-6
#: bad runs of a benchmark, one the session's and one a fresh process's, make it unmeasurable
BAD_RUNS = 2
#: the quantile of a run's rounds that is its level. On the loaded 2-core CPU machine the
#: processes' 10th percentiles spread half as wide as their medians (robust SD 0.06 against
#: 0.12 over 22 benchmark/plant groups, bench/cpu_pools.py); on the H200 pools they are
#: the medians within a percent, and the zoo's replays are unchanged
LEVEL_Q = 0.1


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
    med = _median(logs)
    mad = _median([abs(y - med) for y in logs])
    return 1.2533 * 1.4826 * mad / math.sqrt(n)


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def run_level(rounds: Sequence[float]) -> float | None:
    """A run's level on a figure: the :data:`LEVEL_Q` quantile of its rounds (seconds per
    call, interpolated), or None without a positive finite round."""
    xs = sorted(x for x in rounds if x > 0 and math.isfinite(x))
    if not xs:
        return None
    pos = LEVEL_Q * (len(xs) - 1)
    i = math.floor(pos)
    j = min(i + 1, len(xs) - 1)
    return xs[i] + (xs[j] - xs[i]) * (pos - i)


def _power_capped(telemetry: Mapping[str, Any] | None, share: float = 0.5) -> bool:
    events = (telemetry or {}).get("clock_events") or {}
    return any("power" in str(k).lower() and float(v) >= share for k, v in events.items())


@dataclass(frozen=True)
class RunStat:
    """One run (process) of one benchmark, as the verdict sees it.

    ``level_s`` is the run's level on the main figure (seconds per call:
    device time for the CUDA events backend, else the backend's one time;
    :func:`run_level` of its rounds), ``e2e_s`` on the end-to-end figure where
    there is one. ``host_hidden`` says whether the
    device figure is device time alone; ``power_capped`` whether the GPU ran
    under its power cap most of the measurement; ``host_s`` the host's time to
    issue one call; ``waited``, ``threads`` and ``clock`` how the rounds had
    their CPUs (:mod:`pytest_gpuperf.measure.contention`); ``tracer`` the tracer
    active while measuring.
    """

    level_s: float
    e2e_s: float | None = None
    stability: str = "steady"
    host_hidden: bool | None = None
    within_se: float | None = None
    power_capped: bool = False
    host_s: float | None = None
    waited: float | None = None
    threads: float | None = None
    clock: str | None = None
    tracer: str | None = None

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
        contention: Mapping[str, Any] | None = None,
        tracer: str | None = None,
    ) -> RunStat:
        """From a run's rounds (a result's or a stored run's; ``median_s``, its median, is the
        level of a run without rounds)."""
        load = contention or {}
        level = run_level(rounds)
        return cls(
            level_s=median_s if level is None else level,
            e2e_s=run_level(e2e_rounds),
            stability=stability,
            host_hidden=host_hidden,
            within_se=within_run_se(rounds),
            power_capped=_power_capped(telemetry),
            host_s=host_s,
            waited=load.get("waited"),
            threads=load.get("threads"),
            clock=load.get("clock"),
            tracer=tracer or None,
        )

    @classmethod
    def from_run(cls, run: Run) -> RunStat:
        """From a :class:`~pytest_gpuperf.model.Run`, measured now or stored."""
        return cls.of(
            run.median,
            run.rounds,
            run.stability,
            e2e_rounds=run.e2e_rounds,
            host_hidden=run.host_hidden,
            telemetry=run.telemetry,
            host_s=run.host_s,
            contention=run.contention,
            tracer=run.tracer,
        )

    def pays_host(self, figure: str) -> bool:
        """Whether ``figure`` is paid at the host's speed: host time (end to end, a device
        figure with host waits in it, a CPU clock's)."""
        return (
            figure == E2E
            or (figure == DEVICE and self.host_hidden is False)
            or (figure == TIME and self.clock is not None)
        )

    def bad(self, figure: str) -> str | None:
        """Why this run's ``figure`` is no evidence (a short code), or None: it counts waits for
        a CPU and its threads waited too long for one. Host time counts them, unless it is the
        measuring thread's own CPU time of work on that thread alone (a thread clock whose
        process used more CPU than the thread did also timed other threads' waiting, as a
        default-threaded op spinning for its workers does)."""
        own = self.clock == "thread" and (self.threads or 1.0) <= ONE_THREAD
        counts_waits = self.pays_host(figure) and not own
        if self.waited is not None and self.waited > WAITED and counts_waits:
            return f"waited {self.waited:.2f}" + (
                f" threads {self.threads:.1f}" if self.threads and self.threads > 1.1 else ""
            )
        return None


def _levels(runs: Sequence[RunStat], figure: str) -> list[float] | None:
    """Each run's level on ``figure`` (log seconds), or None when a run lacks the figure."""
    out = []
    for x in runs:
        value = x.e2e_s if figure == E2E else x.level_s
        if value is None or not (value > 0 and math.isfinite(value)):
            return None
        out.append(math.log(value))
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
    fast_dev = min(x.level_s for x in baseline)
    e2es = [x.e2e_s for x in baseline if x.e2e_s is not None]
    # Host-bound: the end-to-end time exceeds the device time, or is launch-scale, or the
    # host's own time per call is close enough to the device's that a slow period of the
    # host (1.3-2x) makes the host the bottleneck (an H200 run of 16 chained kernels,
    # device-bound at 125 us in its baseline, ran 5-15 % slower end to end in such a period).
    close = any(
        x.host_s is not None and x.host_s >= policy.host_share * x.level_s for x in baseline
    )
    host = bool(e2es) and (
        min(e2es) >= policy.host_bound * fast_dev or min(e2es) < LAUNCH_BOUND_S or close
    )
    power = sum(x.power_capped for x in baseline) >= policy.power_share * len(baseline)
    device = CLASSES["launches" if host else "power" if power else "device"]
    e2e = CLASSES["host" if host else "power" if power else "device"]
    return {DEVICE: device, E2E: e2e}


def median_var(n: int) -> float:
    """The variance of the median of ``n`` standard normal draws: ``1/n`` up to 2 (a median
    of two is their mean), ``pi / (2 n)`` beyond (its large-n value, 4-17 % above the exact
    one for 3 to 10: conservative)."""
    if n < 1:
        raise ValueError(f"need at least one run, got {n}")
    return 1.0 / n if n <= 2 else math.pi / (2 * n)


def decide_figure(
    figure: str,
    base: Sequence[float],
    cur: Sequence[float],
    klass: NoiseClass,
    *,
    policy: DecisionPolicy = DEFAULT_POLICY,
    last: bool = False,
    floor: float = 0.0,
    like_for_like: bool = True,
    allowance: float = math.inf,
) -> FigureVerdict:
    """One figure's verdict on its runs' levels (log seconds; module docstring, steps 2-5);
    ``floor`` raises the noise.

    ``like_for_like`` False: the current runs were measured another way than
    the baseline's (the device figure with and without the host hidden); then
    one run is decisive only beyond the one-run bar by ``allowance`` (log: how much
    the host's own time could add to the same code measured so; inf: never).
    """
    k, r = len(base), len(cur)
    if not k or not r:
        raise ValueError("decide_figure() needs baseline and current runs")
    s, prior, own, df = _noise(base, klass, policy, floor)
    se = s * math.sqrt(median_var(k) + median_var(r))
    level = _median(base)
    d = _median(cur) - level
    slower = min(cur) - level  # every current run is at least this much slower
    faster = level - max(cur)  # ... or at least this much faster
    z, floor_log = policy.z, math.log1p(policy.threshold)
    cutoff = max(floor_log, z * se)
    # Beyond the class's process modes, two runs settle a regression; beyond their square
    # (at least 2.25x), one does: a mode larger than measured is then still no failure.
    decisive = max(cutoff, math.log(klass.mode) + z * se)
    one_run = max(decisive, 2 * math.log(max(klass.mode, 1.5)) + z * se)
    # The resolution once the class's runs are in: caught with `power` probability.
    se_full = s * math.sqrt(median_var(k) + median_var(max(klass.runs, r)))
    cut_full = max(floor_log, z * se_full)
    resolution = _exp(cut_full + z_of(1 - policy.power) * se_full) - 1.0
    half = z_of((1 - policy.ci_level) / 2) * se
    one_run += 0.0 if like_for_like else allowance  # measured another way: counts its host
    kind, final, reasons, why = _classify(
        slower, faster, cutoff, floor_log, decisive, one_run, r, klass, last=last
    )
    if kind == NO_CHANGE and d + half >= cutoff:  # not ruled out: too small to tell
        # ... unless two current runs disagree: their median is their mean, which a slow one
        # pulls; a third run's median is robust to it
        kind, final, why = INCONCLUSIVE, last or r != 2, BELOW_RESOLUTION
        reasons.append(_below_resolution(d, d + half, cutoff, resolution, policy.ci_level))
    return FigureVerdict(
        figure=figure,
        klass=klass.name,
        kind=kind,
        final=final,
        k=k,
        r=r,
        baseline_s=_exp(level),
        current_s=_exp(_median(cur)),
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
        baseline_runs=tuple(math.exp(y) for y in base),
        current_runs=tuple(math.exp(y) for y in cur),
        why=why,
    )


def _below_resolution(d: float, high: float, cutoff: float, resolution: float, level: float) -> str:
    """Why a figure is inconclusive, not "no change": no slowdown beyond the threshold was
    seen, but the interval's upper end (``high``, log) does not rule one out."""
    return (
        f"below resolution: {_pct(_exp(d) - 1)} slower, its {level:.0%} interval reaches "
        f"{_pct(_exp(high) - 1)}, beyond the {_pct(_exp(cutoff) - 1)} threshold in force; it "
        f"would catch >= {_pct(resolution)} (more baseline runs, or a quieter machine, "
        "catch less)"
    )


def _noise(
    ys: Sequence[float], klass: NoiseClass, policy: DecisionPolicy, floor: float
) -> tuple[float, float, float, int]:
    """The noise of one run's log time: (noise, class prior, baseline's own spread, its df).
    The spread is 1.4826 times the median absolute deviation of all the baseline's levels
    from their median: runs spread wide widen it, one slow or lucky-fast process among
    them does not (nor does it move the level). It raises the class prior at most
    ``policy.own_cap`` times: a benchmark noisier than that belongs to another class."""
    level = _median(ys)
    prior = klass.prior(math.exp(level))
    own = min(1.4826 * _median([abs(y - level) for y in ys]), policy.own_cap * prior)
    df = len(ys) - 1
    s = max(moderate(prior, policy.prior_weight, own, df), policy.noise_floor, floor)
    return s, prior, own, df


def _classify(
    slower: float,
    faster: float,
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
                f"at least {_pct(_exp(slower) - 1)} slower in all {r} run{'s' if r != 1 else ''}"
                f", above its {_pct(_exp(cutoff) - 1)} threshold, but not confirmed: its class "
                f"({klass.name}) needs {klass.runs} fresh-process runs below "
                f"{_pct(_exp(decisive) - 1)} (process modes alone reach "
                f"{_pct(klass.mode - 1)}), and no more could be run"
            )
    elif faster > cutoff:
        kind, final = IMPROVEMENT, True
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


def decide(baseline: Sequence[Run], current: Sequence[Run], **options: Any) -> Comparison:
    """The verdict on one benchmark's ``current`` runs against its ``baseline`` runs, each
    read as the :class:`RunStat` the rule judges; ``options`` as :func:`decide_stats`'s."""
    return decide_stats(
        [RunStat.from_run(r) for r in baseline], [RunStat.from_run(r) for r in current], **options
    )


def decide_stats(
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
    """The verdict on one benchmark's ``current`` runs against its ``baseline`` runs, as
    the rule reads each (a pool of runs recorded as the rule reads them is judged so).

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
    base = [x for x in baseline if x.level_s > 0 and math.isfinite(x.level_s)]
    look = len(cur) if look is None else look
    last = last or len(cur) >= policy.max_runs
    common: dict[str, Any] = {
        "look": look,
        "looks": policy.max_runs,
        "name": name,
        "threshold": policy.threshold,
        "alpha": policy.alpha,
        "ci_level": policy.ci_level,
        "current_runs": tuple(x.level_s for x in cur),
    }
    notes = _hidden_notes(base, cur, mode)
    if not base:
        fast = min(x.level_s for x in cur)
        return Comparison(
            kind=NO_BASELINE, final=True, current_s=fast, r=len(cur), notes=tuple(notes), **common
        )
    classes = classes_for(base, mode, policy)
    group = _described(mode).group  # ranks in processes of their own
    verdicts = _figures(base, cur, classes, policy, last, notes, group)
    if environment_diff:
        lead = verdicts[0]
        diff = tuple(environment_diff)
        return _compare(lead, verdicts, DIFFERENT_ENVIRONMENT, True, common, notes, diff)
    lead = _combine(verdicts)
    # A confirmed regression of one figure settles the benchmark; otherwise every figure must.
    final = lead.final if lead.kind == REGRESSION else all(v.final for v in verdicts)
    kind = lead.kind
    reasons = list(lead.reasons)
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
    group: bool = False,
) -> list[FigureVerdict]:
    """Each figure's verdict (:func:`decide_figure`) on the good runs of both sides, a tracer
    on one side only and bad evidence taken into account; what the reader should know goes
    to ``notes``."""
    floor = max([x.within_se for x in (*base, *cur) if x.within_se is not None] or [0.0])
    allowance = _unlike_allowance(base)
    tracers = tracer_change(base, cur)
    verdicts = []
    for figure, klass in classes.items():
        b, c = _levels(base, figure), _levels(cur, figure)
        if b is None or c is None:
            if figure != E2E:
                raise ValueError(f"figure {figure!r} missing from a run")
            notes.append("end-to-end time missing from some runs (older baseline): not compared")
            continue
        bad_b = [x.bad(figure) for x in base]
        bad_c = [x.bad(figure) for x in cur]
        good_b = [y for y, why in zip(b, bad_b, strict=True) if why is None]
        good_c = [y for y, why in zip(c, bad_c, strict=True) if why is None]
        like = figure != DEVICE or _same_hiding(base, cur)
        kw: dict[str, Any] = {"klass": klass, "policy": policy, "floor": min(floor, 0.05)}
        kw.update(like_for_like=like, allowance=allowance)
        left_out = _left_out(bad_b, bad_c)
        if not good_b or not good_c:  # as measured, for what it shows; never a verdict
            v = decide_figure(figure, b, c, last=True, **kw)
            verdicts.append(_unmeasurable(v, bad_b, bad_c, cur, figure, last, group))
            continue
        if left_out:
            notes.append(f"{_NAMES.get(figure, figure)}: {left_out}")
        v = decide_figure(figure, good_b, good_c, last=last, **kw)
        if tracers and any(x.pays_host(figure) for x in (*base, *cur)):
            why = (
                f"{_NAMES.get(figure, figure)} not comparable: {tracers}; a tracer slows host "
                "work several times, by how much Python it runs, so this is never a "
                "regression. Compare runs measured alike (save a baseline under the same "
                "tracer, or run without it)"
            )
            v = replace(v, kind=INCONCLUSIVE, final=True, why=NOT_COMPARABLE, reasons=(why,))
        verdicts.append(v)
    return verdicts


#: how a figure is named in a sentence
_NAMES = {"device": "device time", "end-to-end": "end-to-end", "time": "time"}


def _left_out(bad_base: Sequence[str | None], bad_cur: Sequence[str | None]) -> str:
    """``bad evidence left out: baseline 1 of 3 (waited 0.31); current 1 of 2 (shift)``, or
    "" when every run counted."""
    parts = []
    for side, bad in (("baseline", bad_base), ("current", bad_cur)):
        codes = [b for b in bad if b]
        if codes:
            parts.append(f"{side} {len(codes)} of {len(bad)} ({'; '.join(sorted(set(codes)))})")
    return "bad evidence left out: " + ", ".join(parts) if parts else ""


def _unmeasurable(
    v: FigureVerdict,
    bad_base: Sequence[str | None],
    bad_cur: Sequence[str | None],
    cur: Sequence[RunStat],
    figure: str,
    last: bool,
    group: bool = False,
) -> FigureVerdict:
    """A figure with no good run on a side: inconclusive, "unmeasurable", once a fresh
    process was bad too (or no run can be added, or the baseline has no good run); a suspect
    until then, so that the gate measures it again. ``group``: the ranks of a group are
    processes of their own, whose threads (a collective's included) wait for each other's
    CPUs on a machine with too few: idle or not (the gloo examples on 2 CPUs)."""
    no_base = all(bad_base)
    bad_cur = [b for b in bad_cur if b]
    final = last or no_base or len(bad_cur) >= BAD_RUNS
    threads = max((x.threads or 1.0) for x in cur)
    remedy = (
        f"torch.set_num_threads(1) (the work ran on {threads:.1f} threads), an idle runner, "
        "or --gpuperf-ab=REF"
        if threads > ONE_THREAD
        else "an idle runner, a quieter moment, or --gpuperf-ab=REF"
    )
    if group:  # ---- issue 35 (gate2): the ranks' own threads, not the machine's load
        remedy = (
            f"its ranks' threads ({threads:.1f} CPUs' worth per measuring thread, the "
            "collectives' own among them) want more CPUs than this machine has, idle or not: "
            "a runner with more CPUs, or the ranks on GPUs"
        )
    side, codes = ("baseline", bad_base) if no_base else ("current", bad_cur)
    line = (
        f"unmeasurable: {len(codes)} {side} run{'s' if len(codes) != 1 else ''} "
        f"{'are' if len(codes) != 1 else 'is'} no evidence ({'; '.join(c or '' for c in codes)}: "
        f"their threads waited that share of the time for a CPU); this benchmark cannot be "
        f"measured on this machine now: {remedy}"
    )
    return replace(v, kind=INCONCLUSIVE, final=final, why=UNMEASURABLE, reasons=(line,))


def tracer_change(base: Sequence[RunStat], current: Sequence[RunStat]) -> str | None:
    """What differs in tracers between the two sides, or None when they were measured alike
    (their names escaped: any conftest can name a trace function, and a file any tracer)."""
    b = {x.tracer for x in base}
    c = {x.tracer for x in current}
    if b == c:
        return None
    now = sorted(printable(t) for t in c if t)
    then = sorted(printable(t) for t in b if t)
    if now and not then:
        return f"a tracer ({'; '.join(now)}) was active in this run, in none of the baseline's"
    if then and not now:
        return f"the baseline's runs were measured under a tracer ({'; '.join(then)}), this one not"
    return (
        f"tracers differ: {', '.join(then) or 'none'} in the baseline, "
        f"{', '.join(now) or 'none'} now"
    )


def _unlike_allowance(base: Sequence[RunStat]) -> float:
    """How much more (log) a device figure measured with its host not hidden may show of the
    same code: the baseline's end-to-end over device time (what the host adds to a call)."""
    e2e = [x.e2e_s for x in base if x.e2e_s is not None]
    if not e2e:
        return math.inf
    return max(0.0, math.log(min(e2e) / min(x.level_s for x in base)))


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
    # no evidence, no change: the ratio of runs that are none is not shown as one
    shown = not (kind == INCONCLUSIVE and lead.why == UNMEASURABLE)
    return Comparison(
        kind=kind,
        final=final,
        figure=lead.figure,
        klass=lead.klass,
        k=lead.k,
        r=lead.r,
        baseline_s=lead.baseline_s,
        current_s=lead.current_s,
        ratio=lead.ratio if shown else None,
        ratio_low=lead.ratio_low if shown else None,
        ratio_high=lead.ratio_high if shown else None,
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
    # ``slower`` is the fastest current run's slowdown, not the change the outputs show (the
    # levels' ratio): said as what it is
    return (
        f"{what} at least {_pct(f.slower)} slower (its fastest run), above its "
        f"{_pct(f.cutoff)} threshold, {how}"
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
