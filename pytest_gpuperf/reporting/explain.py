"""The text of a verdict: what a user reads in a failed test and in the summary."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from pytest_gpuperf.measure import backend
from pytest_gpuperf.measure.flags import contention_remedy
from pytest_gpuperf.model import printable
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
    NUMERICS_SAME,
    NUMERICS_UNSEEDED,
    REGRESSION,
    UNCONFIRMED,
    UNMEASURABLE,
    WAITS_NO_LONGER,
    WAITS_NOW,
    Comparison,
    FigureVerdict,
    NumericsComparison,
    Reason,
    SecondaryComparison,
    Terms,
)
from pytest_gpuperf.units import RATIO_FROM, fmt_bytes, fmt_change, fmt_pct, fmt_time
from pytest_gpuperf.verdict import secondary
from pytest_gpuperf.verdict.robust import z_of


def _title(kind: str) -> str:
    """``REGRESSION``, ``INCONCLUSIVE`` (shouted), ``no change`` ..."""
    return kind.upper() if kind in (REGRESSION, INCONCLUSIVE) else kind.replace("-", " ")


def _pct(x: float | None) -> str:
    """A size (threshold, resolution, noise): one decimal, two below 1 %; from 2x a ratio."""
    if x is not None and (not math.isfinite(x) or x + 1 >= RATIO_FROM):
        return fmt_change(x + 1)
    if x is not None and abs(x) < 0.01:
        return fmt_pct(x, digits=2)
    return fmt_pct(x, digits=1)


def _size(x: float | None) -> str:
    """A size in the rule's reasons: percent, a ratio from 2x on (null read back: inf)."""
    if x is None or not math.isfinite(x):
        return "inf %"
    return fmt_change(x + 1) if x + 1 >= RATIO_FROM else fmt_pct(x)


#: What each figure of a verdict is, as the outputs name it (``Comparison.figure``), and
#: inside a reason.
FIGURE_NAMES = {"device": "device time", "end-to-end": "end-to-end time", "time": "time"}
_NAMES = {**FIGURE_NAMES, "end-to-end": "end-to-end"}
_SAID = {
    E2E_MISSING: "end-to-end time missing from some runs (older baseline): not compared",
    WAITS_NOW: "the current code waits for the GPU inside the call (.item(), .cpu(), a sync), "
    "so its device time includes those waits; the baseline's did not wait",
    WAITS_NO_LONGER: "the baseline waited for the GPU inside the call; the current code no "
    "longer does",
}


def words(reason: Reason) -> str:
    """The sentence of a verdict's reason or note: the rule gives its code and numbers."""
    n, code = reason.numbers, reason.code
    if code == BELOW_RESOLUTION:
        return (
            f"below resolution: {_size(n['slower'])} slower, its {n['level']:.0%} interval "
            f"reaches {_size(n['high'])}, beyond the {_size(n['cutoff'])} threshold in force; "
            f"it would catch >= {_size(n['resolution'])} (more baseline runs, or a quieter "
            "machine, catch less)"
        )
    if code == UNCONFIRMED:
        return (
            f"at least {_size(n['slower'])} slower in all {_runs(n['r'])}, above its "
            f"{_size(n['cutoff'])} threshold, but not confirmed: its class ({n['klass']}) needs "
            f"{n['runs']} fresh-process runs below {_size(n['decisive'])} (process modes alone "
            f"reach {_size(n['mode'])}), and no more could be run"
        )
    if code == REGRESSION:
        return _why_regression(n)
    if code == UNMEASURABLE:
        return _unmeasurable(n)
    if code == NOT_COMPARABLE:
        return (
            f"{_NAMES.get(n['figure'], n['figure'])} not comparable: {_tracers(n)}; a tracer "
            "slows host work several times, by how much Python it runs, so this is never a "
            "regression. Compare runs measured alike (save a baseline under the same tracer, "
            "or run without it)"
        )
    if code == LEFT_OUT:
        parts = []
        for side in ("baseline", "current"):
            bad = n[side]
            if codes := [b for b in bad if b]:
                parts.append(f"{side} {len(codes)} of {len(bad)} ({'; '.join(sorted(set(codes)))})")
        return f"{_NAMES.get(n['figure'], n['figure'])}: bad evidence left out: {', '.join(parts)}"
    if code == ENVIRONMENT:
        return f"environment: {n['text']}"
    return _SAID.get(code) or str(n.get("text", code))


def _why_regression(n: Mapping[str, Any]) -> str:
    runs, klass = _runs(n["r"]), n["klass"]
    slower = n["slower"]
    if slower > (math.inf if n["one_run"] is None else n["one_run"]):
        how = f"far beyond what process modes of its class ({klass}) produce: one run settles it"
    elif slower > n["decisive"]:
        how = (
            f"beyond what process modes of its class ({klass}) produce "
            f"({_size(n['decisive'])}), in both of {runs}"
        )
    else:
        how = f"in every one of {runs}, as its class ({klass}) requires"
    what = figure_name(n["figure"])
    # ``slower`` is the fastest current run's slowdown, not the change the outputs show (the
    # levels' ratio): said as what it is
    return (
        f"{what} at least {_size(slower)} slower (its fastest run), above its "
        f"{_size(n['cutoff'])} threshold, {how}"
    )


def _unmeasurable(n: Mapping[str, Any]) -> str:
    codes, many = n["codes"], len(n["codes"]) != 1
    return (
        f"unmeasurable: {len(codes)} {n['side']} run{'s' if many else ''} "
        f"{'are' if many else 'is'} no evidence ({'; '.join(c or '' for c in codes)}: "
        f"their threads waited that share of the time for a CPU); this benchmark cannot be "
        f"measured on this machine now: {contention_remedy(n['threads'], bool(n.get('group')))}"
    )


def _tracers(n: Mapping[str, Any]) -> str:
    """What differs in tracers between the two sides (names escaped: a conftest names them)."""
    now = sorted(printable(t) for t in n["now"])
    then = sorted(printable(t) for t in n["then"])
    if now and not then:
        return f"a tracer ({'; '.join(now)}) was active in this run, in none of the baseline's"
    if then and not now:
        return f"the baseline's runs were measured under a tracer ({'; '.join(then)}), this one not"
    return (
        f"tracers differ: {', '.join(then) or 'none'} in the baseline, "
        f"{', '.join(now) or 'none'} now"
    )


def figure_name(figure: str | None, mode: str | None = None) -> str:
    """``device time``, ``end-to-end time``, or a mode's own name (``graph replay``)."""
    if figure in (None, "time") and mode:
        named = backend.get(mode)
        if named.figure_name:
            return named.figure_name
    return FIGURE_NAMES.get(figure or "time", f"{figure} time")


def change_text(c: Comparison, mode: str | None = None) -> str:
    """``2.96x device time``: the change the gate used, as every output writes it."""
    f = c.shown
    return "-" if f is None else f"{fmt_change(f.ratio)} {figure_name(f.figure, mode)}"


def _runs(n: int) -> str:
    return f"{n} run" if n == 1 else f"{n} runs"


def _ci(f: FigureVerdict, level: float) -> str:
    return f"({100 * level:.0f} % CI {fmt_change(f.ratio_low)} to {fmt_change(f.ratio_high)})"


def _shown(c: Comparison, mode: str | None) -> str:
    """`` 77.7x end-to-end time (90 % CI ...)``, or ``""`` when no change is shown."""
    f = c.shown
    return "" if f is None else f" {change_text(c, mode)} {_ci(f, c.terms.ci_level)}"


def _cut(c: Comparison) -> tuple[float | None, float | None]:
    """The threshold in force and the resolution of the lead figure (None without one)."""
    return (None, None) if c.lead is None else (c.lead.cutoff, c.lead.resolution)


def resolution_of(c: Comparison) -> str:
    """Beside the label: the threshold in force, or an inconclusive verdict's resolution."""
    cutoff, resolution = _cut(c)
    if c.kind in (NO_CHANGE, REGRESSION):
        return f"threshold {_pct(cutoff)}"
    if c.kind == INCONCLUSIVE:
        # the runs could not be compared, or are no evidence: a resolution beside such a
        # change (5.1x, "would catch >= 3.5x") would read as a contradiction
        if c.why == NOT_COMPARABLE:
            return "not comparable: a tracer on one side"
        if c.why == UNMEASURABLE:
            return "unmeasurable now"
        return f"would catch >= {_pct(resolution)}"
    return ""


def label_of(c: Comparison) -> str:
    """``INCONCLUSIVE / below resolution (would catch >= 2.04x)``: label and resolution."""
    title = _title(c.kind)
    if c.kind == INCONCLUSIVE and c.why == BELOW_RESOLUTION:
        title += " / below resolution"
    more = resolution_of(c)
    return f"{title} ({more})" if more else title


def summary_line(c: Comparison, mode: str | None = None) -> str:
    """One line: kind, change with the figure and its interval, and what decided it."""
    who = f"{c.name}: " if c.name else ""
    title = _title(c.kind)
    cutoff, resolution = _cut(c)
    if not c.final:
        title += f" (suspect after {_runs(c.r)})"
    if c.kind == NO_BASELINE:
        return f"{who}{title}, current {fmt_time(c.current_s)}"
    if c.kind == DIFFERENT_ENVIRONMENT:
        differs = "; ".join(map(words, c.environment))
        return f"{who}{title} ({differs}), not gated:{_shown(c, mode) or ' -'}"
    line = f"{who}{title}{_shown(c, mode)}"
    if c.kind == REGRESSION:
        line += f", {_runs(c.r)}, threshold {_pct(cutoff)}"
    elif c.kind == INCONCLUSIVE and c.why in (UNMEASURABLE, NOT_COMPARABLE) and c.reasons:
        line += f": {words(c.reasons[0])}"  # what it would catch means nothing on these runs
    elif c.kind == INCONCLUSIVE:
        below = " below resolution:" if c.why == BELOW_RESOLUTION else ""
        line += f":{below} threshold {_pct(cutoff)}, would catch >= {_pct(resolution)}"
        if c.reasons and c.why != BELOW_RESOLUTION:
            line += f"; {words(c.reasons[0])}"
    elif c.kind == NO_CHANGE:
        line += f": threshold {_pct(cutoff)}"
        if resolution is not None:
            line += f", would have caught >= {_pct(resolution)}"
    return line


def explain(c: Comparison, mode: str | None = None) -> str:
    """The multi-line explanation of a verdict, for the test's failure text or a warning."""
    lines = [_headline(c, mode)]
    if c.kind == NO_BASELINE:
        lines.append(
            f"  current    {fmt_time(c.current_s)} ({_runs(c.r)}); no baseline runs in this "
            "environment: save a baseline to gate this benchmark"
        )
        return "\n".join(lines + _notes(c))
    if c.kind == DIFFERENT_ENVIRONMENT:
        lines += [f"  differs    {words(diff)}" for diff in c.environment]
        lines.append("  not gated: a time measured elsewhere is not comparable")
    else:
        lines += [f"  why        {words(reason)}" for reason in c.reasons]
    f = c.shown
    if f is None:
        return "\n".join(lines + _notes(c))
    lines.append(f"  figure     {figure_name(f.figure, mode)} (noise class {f.klass})")
    lines.append(f"  current    {fmt_time(f.current_s)}  {_side(f.current_runs)}")
    lines.append(f"  baseline   {fmt_time(f.baseline_s)}  {_side(f.baseline_runs)}")
    lines.append(f"  change     {fmt_change(f.ratio)} {_ci(f, c.terms.ci_level)}")
    lines.append(f"  threshold  {_threshold(f, c.terms)}")
    lines.append(f"  confirm    {_confirm(f)}")
    lines.append(f"  noise      {_noise(f)}")
    lines.append(f"  resolution {_resolution(f)}")
    for other in c.figures:
        if other.figure != f.figure:
            lines.append(f"  also       {_figure_line(other, c.terms.ci_level)}")
    if not c.final:
        lines.append("  next       re-measure in a fresh process (a suspect, not yet a verdict)")
    return "\n".join(lines + _notes(c))


def _headline(c: Comparison, mode: str | None = None) -> str:
    who = c.name or "benchmark"
    change = "" if c.shown is None else f" {change_text(c, mode)}"
    if c.kind == REGRESSION:
        state = "confirmed" if c.final else f"suspect after {_runs(c.r)}"
        return f"gpuperf: {who} is slower than its baseline:{change} (REGRESSION, {state})"
    if c.kind == IMPROVEMENT:
        return (
            f"gpuperf: {who} is faster than its baseline:{change} (improvement; "
            "refresh the baseline once this is merged)"
        )
    if c.kind == NO_CHANGE:
        cutoff, resolution = _cut(c)
        return (
            f"gpuperf: {who}: no change{change} (threshold {_pct(cutoff)}); a "
            f"slowdown of {_pct(resolution)} or more would have been caught"
        )
    if c.kind == INCONCLUSIVE:
        below = " / below resolution" if c.why == BELOW_RESOLUTION else ""
        return f"gpuperf: {who}: INCONCLUSIVE{below}{change} ({resolution_of(c)})"
    if c.kind == NO_BASELINE:
        return f"gpuperf: {who}: no baseline"
    return f"gpuperf: {who}: different environment, not gated{change}"


def _side(runs: tuple[float, ...]) -> str:
    if len(runs) <= 1:
        return "one run" if runs else ""
    shown = ", ".join(fmt_time(x) for x in runs[:8]) + (", ..." if len(runs) > 8 else "")
    return f"median of {len(runs)} runs ({shown})"


def _threshold(f: FigureVerdict, terms: Terms) -> str:
    if not math.isfinite(f.cutoff):
        return "none can be reached with this little information about the noise"
    if f.cutoff_reason == "noise":
        return (
            f"{_pct(f.cutoff)} in force, widened by the noise above the configured "
            f"{_pct(terms.threshold)}: {z_of(terms.alpha):.2g} standard errors of {_pct(f.se)}"
        )
    return f"{_pct(f.cutoff)} in force: the configured minimum (threshold=)"


def _confirm(f: FigureVerdict) -> str:
    """How many fresh-process runs a regression of this size needs."""
    parts = []
    if math.isfinite(f.one_run):
        parts.append(f"beyond {_pct(f.one_run)} one run settles a regression")
    if math.isfinite(f.decisive):
        parts.append(f"beyond {_pct(f.decisive)} two runs")
    parts.append(f"below, every one of {_runs(f.runs_needed or 1)} (process modes of its class)")
    return "; ".join(parts)


def _noise(f: FigureVerdict) -> str:
    text = f"{_pct(f.noise)} between processes: class {f.klass} prior {_pct(f.noise_prior)}"
    if f.noise_own is not None:
        text += f", the baseline's runs {_pct(f.noise_own)} (their median deviation)"
    else:
        text += " (one baseline run: the prior alone)"
    return text


def _resolution(f: FigureVerdict) -> str:
    if not math.isfinite(f.resolution):
        return "this baseline cannot catch any slowdown: add baseline runs"
    return (
        f"slowdowns of {_pct(f.resolution)} or more are caught 95 % of the time "
        f"(with {_runs(max(f.runs_needed or 1, f.r))} of the current code)"
    )


def _figure_line(f: FigureVerdict, level: float) -> str:
    title = _title(f.kind)
    if not f.final:
        title += " (suspect)"
    return (
        f"{figure_name(f.figure)}: {title} {fmt_change(f.ratio)} {_ci(f, level)}; threshold "
        f"{_pct(f.cutoff)}, would have caught >= {_pct(f.resolution)} (class {f.klass})"
    )


def _notes(c: Comparison) -> list[str]:
    """The verdict's notes, then the output's numerics when they were compared."""
    lines = [f"  note       {words(n)}" for n in c.notes]
    text = "" if c.numerics is None else numerics_words(c.numerics)
    return lines + ([f"  numerics   {text.removeprefix('numerics: ')}"] if text else [])


# --- beside time: the secondary metrics and the numerics -----------------------------


def _count(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


#: Each secondary metric's name and how its values are written.
_METRICS: dict[str, tuple[str, Callable[[float | None], str]]] = {
    secondary.PEAK_MEMORY: ("peak memory", fmt_bytes),
    secondary.FIRST_CALL: ("first call", fmt_time),
    secondary.ALLOCATIONS: ("allocations per call", _count),
    secondary.DEVICE_ALLOCS: ("cudaMalloc calls per call", _count),
    secondary.ALLOC_RETRIES: ("allocator retries", _count),
    secondary.TRANSFERS: ("host-device transfers per call", fmt_bytes),
}


def secondary_words(s: SecondaryComparison) -> str:
    """``peak memory 1.2 GiB vs 1.0 GiB baseline (+18.6 %; band up to 1.1 GiB): higher``."""
    label, show = _METRICS.get(s.metric, (s.metric.replace("_", " "), _count))
    if s.kind == NO_BASELINE:
        return f"{label} {show(s.current)}: no baseline value"
    change = fmt_pct(None if s.ratio is None else s.ratio - 1, sign=True)
    if s.ratio is None and s.current is not None and s.baseline is not None:
        change = f"{s.current - s.baseline:+.3g}"  # from nothing: the difference says it
    lower = s.lower if s.lower is None else max(s.lower, 0.0)  # no metric is negative
    return (
        f"{label} {show(s.current)} vs {show(s.baseline)} baseline ({change}; within "
        f"{show(lower)} to {show(s.upper)} is the same): {s.kind}"
    )


def _fmt_rel(x: float | None) -> str:
    if x is None:
        return "-"
    if not math.isfinite(x):
        return "inf (a value became NaN or infinite)"
    return f"{x:.3g}"


def _value(x: float | None) -> str:
    return "-" if x is None else f"{x:.6g}"


def numerics_words(n: NumericsComparison) -> str:
    """One line (two with a change list) on the output's numerics; ``""`` when unknown."""
    if n.kind == NO_BASELINE:
        return ""
    if n.kind == NUMERICS_UNSEEDED:
        where = []
        if n.baseline_spread is not None and n.baseline_spread > n.tolerance:
            where.append(
                f"the baseline's {n.baseline_runs} runs differ by up to "
                f"{_fmt_rel(n.baseline_spread)} (relative)"
            )
        if n.current_spread is not None and n.current_spread > n.tolerance:
            where.append(
                f"this run's {n.current_runs} processes differ by up to "
                f"{_fmt_rel(n.current_spread)}"
            )
        text = (
            "numerics not compared: the output differs between runs of the same code: seed the "
            f"inputs (torch.manual_seed) for the numerics comparison to mean anything "
            f"({'; '.join(where)})"
        )
        if n.changes:
            text += "; also: " + "; ".join(n.changes)
        return text
    size = (
        f"largest relative difference {_fmt_rel(n.max_rel)} at {n.where} "
        f"({_value(n.baseline)} -> {_value(n.current)})"
        if n.max_rel
        else "values identical"
    )
    if n.kind == NUMERICS_SAME:
        return f"numerics: output unchanged ({size}; tolerance {n.tolerance:g})"
    head = "output changed" + (" (numerics gated: fails)" if n.gated else "")
    parts = [size + f", tolerance {n.tolerance:g}", *n.changes]
    remedy = "" if n.gated else "; --gpuperf-numerics=gate (or numerics='gate') fails on it"
    return f"numerics: {head}: {'; '.join(parts)}{remedy}"


def failure_words(who: str, x: SecondaryComparison | NumericsComparison) -> str:
    """What fails a test beyond its time: a gated secondary metric, or changed numerics."""
    if isinstance(x, SecondaryComparison):
        return f"{who}: {secondary_words(x)}"
    text = numerics_words(x).removeprefix("numerics: ")
    text = text.removeprefix("output changed (numerics gated: fails): ")
    return f"gpuperf: output changed: {who} (numerics gated): {text}"
