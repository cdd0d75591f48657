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
from pytest_gpuperf.measure.noise import NoiseClass
from pytest_gpuperf.measure.summary import MAD_TO_SD, mad, median, quantile
from pytest_gpuperf.model import Run
from pytest_gpuperf.outcome import (
    BELOW_RESOLUTION,
    DIFFERENT_ENVIRONMENT,
    E2E_MISSING,
    ENVIRONMENT,
    IMPROVEMENT,
    INCONCLUSIVE,
    LEFT_OUT,
    NO_BASELINE,
    NO_CHANGE,
    NOT_COMPARABLE,
    REGRESSION,
    UNCONFIRMED,
    UNMEASURABLE,
    WAITS_NO_LONGER,
    WAITS_NOW,
    Comparison,
    FigureVerdict,
    Reason,
    Terms,
    said,
)
from pytest_gpuperf.verdict.policy import CLASSES, DEFAULT_POLICY, FAIL_ON, DecisionPolicy
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
    """Standard error of the log median of ``rounds``: a floor on the between-process noise
    (rounds are autocorrelated), never an estimate of it. None with fewer than 3 rounds."""
    logs = [math.log(x) for x in rounds if x > 0]
    if len(logs) < 3:
        return None
    return 1.2533 * MAD_TO_SD * mad(logs) / math.sqrt(len(logs))


def run_level(rounds: Sequence[float]) -> float | None:
    """A run's level on a figure: the :data:`LEVEL_Q` quantile of its rounds (seconds per
    call, interpolated), or None without a positive finite round."""
    xs = sorted(x for x in rounds if x > 0 and math.isfinite(x))
    return quantile(xs, LEVEL_Q) if xs else None


def _power_capped(telemetry: Mapping[str, Any] | None, share: float = 0.5) -> bool:
    events = (telemetry or {}).get("clock_events") or {}
    return any("power" in str(k).lower() and float(v) >= share for k, v in events.items())


@dataclass(frozen=True)
class RunStat:
    """One run (process) of one benchmark, as the verdict sees it.

    ``level_s`` and ``e2e_s``: :func:`run_level` of the main and end-to-end figures' rounds;
    ``host_hidden``: the device figure is device time alone; ``power_capped``: the GPU ran
    under its power cap most of the time; ``host_s``: the host's time to issue one call;
    ``waited``, ``threads``, ``clock``: :mod:`pytest_gpuperf.measure.contention`'s.
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
        """From a run's rounds (``median_s``: the level of a run without rounds)."""
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
        kept = ("e2e_rounds", "host_hidden", "telemetry", "host_s", "contention", "tracer")
        return cls.of(run.median, run.rounds, run.stability, **{k: getattr(run, k) for k in kept})

    def pays_host(self, figure: str) -> bool:
        """Whether ``figure`` is host time (end to end, device with host waits, a CPU clock)."""
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
    """Each figure's noise class: its mode's, or for two figures, what the baseline shows."""
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
    """One figure's verdict on its runs' levels (log seconds); ``floor`` raises the noise.

    ``like_for_like`` False: the current runs were measured another way than the
    baseline's (host hidden or not); one run is then decisive only ``allowance`` (log: what
    the host's own time could add; inf: never) beyond the one-run bar.
    """
    k, r = len(base), len(cur)
    if not k or not r:
        raise ValueError("decide_figure() needs baseline and current runs")
    s, prior, own, df = _noise(base, klass, policy, floor)
    se = s * math.sqrt(median_var(k) + median_var(r))
    level = median(base)
    d = median(cur) - level
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
        numbers = {"slower": _exp(d) - 1, "high": _exp(d + half) - 1, "cutoff": _exp(cutoff) - 1}
        numbers.update(resolution=resolution, level=policy.ci_level)
        reasons.append(Reason(BELOW_RESOLUTION, numbers))
    return FigureVerdict(
        figure=figure,
        klass=klass.name,
        kind=kind,
        final=final,
        k=k,
        r=r,
        baseline_s=_exp(level),
        current_s=_exp(median(cur)),
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


def _noise(
    ys: Sequence[float], klass: NoiseClass, policy: DecisionPolicy, floor: float
) -> tuple[float, float, float, int]:
    """(noise, class prior, baseline's own spread, its df) of one run's log time. The spread,
    the levels' robust MAD, is widened by runs spread wide, not by one odd process; it raises
    the prior at most ``policy.own_cap`` times (noisier belongs to another class)."""
    level = median(ys)
    prior = klass.prior(math.exp(level))
    own = min(MAD_TO_SD * mad(ys), policy.own_cap * prior)
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
) -> tuple[str, bool, list[Reason], str]:
    """(kind, final, reasons, which inconclusive); sizes are log ratios, ``last``: no more runs."""
    reasons: list[Reason] = []
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
            numbers: dict[str, Any] = {"slower": _exp(slower) - 1, "r": r, "klass": klass.name}
            numbers.update(cutoff=_exp(cutoff) - 1, runs=klass.runs, decisive=_exp(decisive) - 1)
            reasons.append(Reason(UNCONFIRMED, {**numbers, "mode": klass.mode - 1}))
    elif faster > cutoff:
        kind, final = IMPROVEMENT, True
    else:
        kind, final = NO_CHANGE, True
    return kind, final, reasons, why


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
    """:func:`decide_stats` on :class:`~pytest_gpuperf.model.Run` s."""
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
    """The verdict on one benchmark's ``current`` runs against its ``baseline`` runs.

    ``mode``: the timing backend, by name or description (it picks the noise classes).
    ``last``: no further run can be added, so a suspect becomes inconclusive.
    ``environment_reason``: why the conditions differ (telemetry); it holds back a
    regression that is not decisive. ``environment_diff``: hard differences; non-empty
    means "different environment", not gated.
    """
    cur = list(current)
    if not cur:
        raise ValueError("decide() needs at least one current run")
    base = [x for x in baseline if x.level_s > 0 and math.isfinite(x.level_s)]
    look = len(cur) if look is None else look
    last = last or len(cur) >= policy.max_runs
    terms = Terms(policy.max_runs, policy.threshold, policy.alpha, policy.ci_level)
    common: dict[str, Any] = {"look": look, "terms": terms, "name": name}
    notes = _hidden_notes(base, cur, mode)
    if not base:
        runs = tuple(x.level_s for x in cur)
        return Comparison(NO_BASELINE, True, runs=runs, notes=tuple(notes), **common)
    classes = classes_for(base, mode, policy)
    group = _described(mode).group  # ranks in processes of their own
    verdicts = tuple(_figures(base, cur, classes, policy, last, notes, group))
    if environment_diff:
        diff = tuple(map(said, environment_diff))
        return Comparison(
            DIFFERENT_ENVIRONMENT, True, **common, lead=verdicts[0], figures=verdicts, reasons=diff
        )
    lead = _combine(verdicts)
    # A confirmed regression of one figure settles the benchmark; otherwise every figure must.
    final = lead.final if lead.kind == REGRESSION else all(v.final for v in verdicts)
    kind = lead.kind
    reasons = list(lead.reasons)
    env = Reason(ENVIRONMENT, {"text": environment_reason})
    if kind == REGRESSION and environment_reason and lead.slower <= lead.decisive:
        # A clock regime the baseline never saw can explain a non-decisive slowdown.
        reasons.append(env)
        kind, final = (INCONCLUSIVE, True) if last else (REGRESSION, False)
    elif environment_reason:
        notes.append(env)
    if kind == REGRESSION and final:
        numbers = {"figure": lead.figure, "slower": lead.slower, "cutoff": lead.cutoff}
        numbers.update(klass=lead.klass, r=lead.r, decisive=lead.decisive, one_run=lead.one_run)
        reasons.insert(0, Reason(REGRESSION, numbers))
    return Comparison(
        kind,
        final,
        **common,
        lead=lead,
        figures=verdicts,
        reasons=tuple(reasons),
        notes=tuple(notes),
    )


def _figures(
    base: Sequence[RunStat],
    cur: Sequence[RunStat],
    classes: Mapping[str, NoiseClass],
    policy: DecisionPolicy,
    last: bool,
    notes: list[Reason],
    group: bool = False,
) -> list[FigureVerdict]:
    """Each figure's verdict on both sides' good runs (tracers and bad runs taken into
    account); what the reader should know goes to ``notes``."""
    floor = max([x.within_se for x in (*base, *cur) if x.within_se is not None] or [0.0])
    allowance = _unlike_allowance(base)
    then, now = {x.tracer for x in base}, {x.tracer for x in cur}  # tracers of each side
    tracers = {"then": sorted(filter(None, then)), "now": sorted(filter(None, now))}
    verdicts = []
    for figure, klass in classes.items():
        b, c = _levels(base, figure), _levels(cur, figure)
        if b is None or c is None:
            if figure != E2E:
                raise ValueError(f"figure {figure!r} missing from a run")
            notes.append(Reason(E2E_MISSING))
            continue
        bad_b = [x.bad(figure) for x in base]
        bad_c = [x.bad(figure) for x in cur]
        good_b = [y for y, why in zip(b, bad_b, strict=True) if why is None]
        good_c = [y for y, why in zip(c, bad_c, strict=True) if why is None]
        like = figure != DEVICE or _same_hiding(base, cur)
        kw: dict[str, Any] = {"klass": klass, "policy": policy, "floor": min(floor, 0.05)}
        kw.update(like_for_like=like, allowance=allowance)
        if not good_b or not good_c:  # as measured, for what it shows; never a verdict
            v = decide_figure(figure, b, c, last=True, **kw)
            verdicts.append(_unmeasurable(v, bad_b, bad_c, cur, figure, last, group))
            continue
        if any(bad_b) or any(bad_c):
            notes.append(Reason(LEFT_OUT, {"figure": figure, "baseline": bad_b, "current": bad_c}))
        v = decide_figure(figure, good_b, good_c, last=last, **kw)
        if then != now and any(x.pays_host(figure) for x in (*base, *cur)):
            why = Reason(NOT_COMPARABLE, {"figure": figure, **tracers})
            v = replace(v, kind=INCONCLUSIVE, final=True, why=NOT_COMPARABLE, reasons=(why,))
        verdicts.append(v)
    return verdicts


def _unmeasurable(
    v: FigureVerdict,
    bad_base: Sequence[str | None],
    bad_cur: Sequence[str | None],
    cur: Sequence[RunStat],
    figure: str,
    last: bool,
    group: bool = False,
) -> FigureVerdict:
    """A figure with no good run on a side: "unmeasurable" once a fresh process was bad too
    (or no run can be added, or the baseline has none); until then a suspect, measured
    again. ``group``: ranks in processes of their own, whose threads wait for each other's
    CPUs where there are too few, idle or not (the gloo examples on 2 CPUs)."""
    no_base = all(bad_base)
    bad_cur = [b for b in bad_cur if b]
    final = last or no_base or len(bad_cur) >= BAD_RUNS
    threads = max((x.threads or 1.0) for x in cur)
    side, codes = ("baseline", bad_base) if no_base else ("current", bad_cur)
    numbers = {"side": side, "codes": list(codes), "threads": threads, "group": group}
    line = Reason(UNMEASURABLE, numbers)
    return replace(v, kind=INCONCLUSIVE, final=final, why=UNMEASURABLE, reasons=(line,))


def _unlike_allowance(base: Sequence[RunStat]) -> float:
    """What the host adds to a call (log end-to-end over device time): how much more a device
    figure with the host not hidden may show of the same code."""
    e2e = [x.e2e_s for x in base if x.e2e_s is not None]
    if not e2e:
        return math.inf
    return max(0.0, math.log(min(e2e) / min(x.level_s for x in base)))


def _same_hiding(base: Sequence[RunStat], cur: Sequence[RunStat]) -> bool:
    """Whether every current run's device figure was measured as the baseline's were."""
    b = {x.host_hidden for x in base if x.host_hidden is not None}
    return all(x.host_hidden is None or x.host_hidden in b for x in cur) if b else True


def _hidden_notes(
    base: Sequence[RunStat], cur: Sequence[RunStat], mode: str | backend.Mode | None
) -> list[Reason]:
    if not _described(mode).hides_host:
        return []
    b = [x.host_hidden for x in base if x.host_hidden is not None]
    c = [x.host_hidden for x in cur if x.host_hidden is not None]
    if b and c and all(b) and not any(c):
        return [Reason(WAITS_NOW)]
    if b and c and not any(b) and all(c):
        return [Reason(WAITS_NO_LONGER)]
    return []


def outcome(comparison: Comparison, fail_on: str = "regression") -> str:
    """What the test item does: ``"fail"``, ``"warn"``, ``"pass"`` or ``"pending"`` (look again)."""
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
    return replace(c, notes=(*c.notes, said(note)))
