"""The text of a verdict: what a user reads in a failed test and in the summary.

:func:`explain` gives the multi-line explanation (the failure message of a
regression): which figure decided, the two sides' levels and their runs, the
slowdown with its interval, the threshold in force and why it is that wide,
what would have been decisive, the noise and where it came from, the
smallest slowdown the benchmark could have caught, and every figure's
verdict. :func:`summary_line` gives one line that says the same in short:
an inconclusive line names its threshold and that smallest slowdown.
"""

from __future__ import annotations

import math
from typing import Any

from pytest_gpuperf.measure import backend
from pytest_gpuperf.outcome import BELOW_RESOLUTION, NOT_COMPARABLE, UNMEASURABLE
from pytest_gpuperf.units import RATIO_FROM, fmt_change, fmt_pct, fmt_time
from pytest_gpuperf.verdict import (
    DIFFERENT_ENVIRONMENT,
    IMPROVEMENT,
    INCONCLUSIVE,
    NO_BASELINE,
    NO_CHANGE,
    REGRESSION,
    Comparison,
    FigureVerdict,
)

_TITLE = {
    REGRESSION: "REGRESSION",
    IMPROVEMENT: "improvement",
    NO_CHANGE: "no change",
    INCONCLUSIVE: "INCONCLUSIVE",
    NO_BASELINE: "no baseline",
    DIFFERENT_ENVIRONMENT: "different environment",
}


def _pct(x: float | None) -> str:
    """A size (a threshold, a resolution, a noise level), unsigned: percent with one decimal,
    two below 1 % (noise levels of 0.25 % matter); from 2x on a ratio, as a change reads."""
    if x is not None and (not math.isfinite(x) or x + 1 >= RATIO_FROM):
        return fmt_change(x + 1)
    if x is not None and abs(x) < 0.01:
        return fmt_pct(x, digits=2)
    return fmt_pct(x, digits=1)


def _signed(x: float | None) -> str:
    """A change (a slowdown as a fraction), as every output writes it (units.fmt_change)."""
    return "-" if x is None else fmt_change(x + 1)


#: What each figure of a verdict is, as the outputs name it (``Comparison.figure``).
FIGURE_NAMES = {"device": "device time", "end-to-end": "end-to-end time", "time": "time"}


def figure_name(
    figure: str | None, mode: str | None = None, modes: backend.Modes | None = None
) -> str:
    """The name of the figure a verdict compared: ``device time``, ``end-to-end time``, or
    the one time of a mode that times one (its ``figure_name`` in ``modes``, default the
    built-in ones: ``graph replay``)."""
    if figure in (None, "time") and mode:
        named = backend.get(mode, modes)
        if named.figure_name:
            return named.figure_name
    return FIGURE_NAMES.get(figure or "time", f"{figure} time")


def change_text(comparison: Any, mode: str | None = None) -> str:
    """The change the gate used, with its figure: ``2.96x device time``, ``+4.1 % time``
    (``-`` without one). Every output writes a verdict's change with this."""
    ratio = getattr(comparison, "ratio", None)
    if ratio is None:
        return "-"
    return f"{fmt_change(ratio)} {figure_name(comparison.figure, mode)}"


def _runs(n: int) -> str:
    return f"{n} run" if n == 1 else f"{n} runs"


def _figure(name: str | None, mode: str | None = None) -> str:
    return figure_name(name, mode)


def _interval(c: Comparison | FigureVerdict) -> str:
    """`` (90 % CI +4.8 % to +7.5 %)``, or ``""`` without one."""
    if c.ratio_low is None or c.ratio_high is None:
        return ""
    level = getattr(c, "ci_level", 0.90)
    return f" ({100 * level:.0f} % CI {_signed(c.ratio_low - 1)} to {_signed(c.ratio_high - 1)})"


def _change(c: Comparison | FigureVerdict) -> str:
    """``+6.1 % (90 % CI +4.8 % to +7.5 %)``."""
    if c.ratio is None:
        return "-"
    return f"{_signed(c.ratio - 1)}{_interval(c)}"


def change_of(c: Comparison, mode: str | None = None) -> str:
    """The change and the figure it is of: ``77.7x end-to-end time``, ``+12.0 % time``."""
    return change_text(c, mode)


def resolution_of(c: Comparison) -> str:
    """What the verdict could tell, for the same line as its label: a regression's and a
    no change's threshold in force, an inconclusive verdict's resolution."""
    if c.kind == NO_CHANGE:
        return f"threshold {_pct(c.threshold_in_force)}"
    if c.kind == INCONCLUSIVE:
        # the runs could not be compared, or are no evidence: a resolution beside such a
        # change (5.1x, "would catch >= 3.5x") would read as a contradiction
        if c.why == NOT_COMPARABLE:
            return "not comparable: a tracer on one side"
        if c.why == UNMEASURABLE:
            return "unmeasurable now"
        return f"would catch >= {_pct(c.resolution)}"
    if c.kind == REGRESSION:
        return f"threshold {_pct(c.threshold_in_force)}"
    return ""


def label_of(c: Comparison) -> str:
    """The verdict's label with its resolution: ``no change (threshold 8.0 %)``,
    ``INCONCLUSIVE / below resolution (would catch >= 2.04x)``, ``REGRESSION (threshold
    61.3 %)``; the others by their title."""
    title = _TITLE.get(c.kind, c.kind)
    if c.kind == INCONCLUSIVE and c.why == BELOW_RESOLUTION:
        title += " / below resolution"
    more = resolution_of(c)
    return f"{title} ({more})" if more else title


def summary_line(c: Comparison, mode: str | None = None) -> str:
    """One line: kind, change with the figure and its interval, and what decided it."""
    who = f"{c.name}: " if c.name else ""
    title = _TITLE.get(c.kind, c.kind)
    if not c.final:
        title += f" (suspect after {_runs(c.r)})"
    if c.kind == NO_BASELINE:
        return f"{who}{title}, current {fmt_time(c.current_s)}"
    if c.kind == DIFFERENT_ENVIRONMENT:
        differs = "; ".join(c.environment)
        return f"{who}{title} ({differs}), not gated: {change_of(c, mode)}{_interval(c)}"
    line = f"{who}{title}" + (f" {change_of(c, mode)}{_interval(c)}" if c.ratio is not None else "")
    if c.kind == REGRESSION:
        line += f", {_runs(c.r)}, threshold {_pct(c.threshold_in_force)}"
    elif c.kind == INCONCLUSIVE and c.why in (UNMEASURABLE, NOT_COMPARABLE) and c.reasons:
        line += f": {c.reasons[0]}"  # what it would catch means nothing on these runs
    elif c.kind == INCONCLUSIVE:
        below = " below resolution:" if c.why == BELOW_RESOLUTION else ""
        line += (
            f":{below} threshold {_pct(c.threshold_in_force)}, would catch >= {_pct(c.resolution)}"
        )
        if c.reasons and c.why != BELOW_RESOLUTION:
            line += f"; {c.reasons[0]}"
    elif c.kind == NO_CHANGE:
        line += f": threshold {_pct(c.threshold_in_force)}"
        if c.resolution is not None:
            line += f", would have caught >= {_pct(c.resolution)}"
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
        for diff in c.environment:
            lines.append(f"  differs    {diff}")
        lines.append("  not gated: a time measured elsewhere is not comparable")
        if c.ratio is None:
            return "\n".join(lines + _notes(c))
    for reason in c.reasons:
        lines.append(f"  why        {reason}")
    if c.ratio is None:
        return "\n".join(lines + _notes(c))
    lines.append(f"  figure     {_figure(c.figure, mode)} (noise class {c.klass})")
    lines.append(f"  current    {fmt_time(c.current_s)}  {_side(c.current_runs)}")
    lines.append(f"  baseline   {fmt_time(c.baseline_s)}  {_side(c.baseline_runs)}")
    lines.append(f"  change     {_change(c)}")
    lines.append(f"  threshold  {_threshold(c)}")
    lines.append(f"  confirm    {_confirm(c)}")
    lines.append(f"  noise      {_noise(c)}")
    lines.append(f"  resolution {_resolution(c)}")
    others = [f for f in c.figures if f.figure != c.figure]
    for f in others:
        lines.append(f"  also       {_figure_line(f)}")
    if not c.final:
        lines.append("  next       re-measure in a fresh process (a suspect, not yet a verdict)")
    return "\n".join(lines + _notes(c))


def _headline(c: Comparison, mode: str | None = None) -> str:
    who = c.name or "benchmark"
    change = "" if c.ratio is None else f" {change_of(c, mode)}"
    if c.kind == REGRESSION:
        state = "confirmed" if c.final else f"suspect after {_runs(c.r)}"
        return f"gpuperf: {who} is slower than its baseline:{change} (REGRESSION, {state})"
    if c.kind == IMPROVEMENT:
        return (
            f"gpuperf: {who} is faster than its baseline:{change} (improvement; "
            "refresh the baseline once this is merged)"
        )
    if c.kind == NO_CHANGE:
        return (
            f"gpuperf: {who}: no change{change} (threshold {_pct(c.threshold_in_force)}); a "
            f"slowdown of {_pct(c.resolution)} or more would have been caught"
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


def _threshold(c: Comparison) -> str:
    configured = _pct(c.threshold)
    if c.threshold_in_force is None or not math.isfinite(c.threshold_in_force):
        return "none can be reached with this little information about the noise"
    if c.threshold_reason == "noise":
        return (
            f"{_pct(c.threshold_in_force)} in force, widened by the noise above the configured "
            f"{configured}: {_z(c)} standard errors of {_pct(c.se)}"
        )
    return f"{_pct(c.threshold_in_force)} in force: the configured minimum (threshold=)"


def _confirm(c: Comparison) -> str:
    """How many fresh-process runs a regression of this size needs."""
    lead = c.figure_verdict(c.figure or "")
    one = lead.one_run if lead else math.inf
    two = c.decisive if c.decisive is not None else math.inf
    parts = []
    if math.isfinite(one):
        parts.append(f"beyond {_pct(one)} one run settles a regression")
    if math.isfinite(two):
        parts.append(f"beyond {_pct(two)} two runs")
    parts.append(f"below, every one of {_runs(c.runs_needed or 1)} (process modes of its class)")
    return "; ".join(parts)


def _z(c: Comparison) -> str:
    from pytest_gpuperf.verdict.robust import z_of

    return f"{z_of(c.alpha):.2g}"


def _noise(c: Comparison) -> str:
    text = f"{_pct(c.noise)} between processes: class {c.klass} prior {_pct(c.noise_prior)}"
    if c.noise_own is not None:
        text += f", the baseline's runs {_pct(c.noise_own)} (their median deviation)"
    else:
        text += " (one baseline run: the prior alone)"
    return text


def _resolution(c: Comparison) -> str:
    if c.resolution is None or not math.isfinite(c.resolution):
        return "this baseline cannot catch any slowdown: add baseline runs"
    return (
        f"slowdowns of {_pct(c.resolution)} or more are caught 95 % of the time "
        f"(with {_runs(max(c.runs_needed or 1, c.r))} of the current code)"
    )


def _figure_line(f: FigureVerdict) -> str:
    title = _TITLE.get(f.kind, f.kind)
    if not f.final:
        title += " (suspect)"
    return (
        f"{_figure(f.figure)}: {title} {_change(f)}; threshold {_pct(f.cutoff)}, would have "
        f"caught >= {_pct(f.resolution)} (class {f.klass})"
    )


def _notes(c: Comparison) -> list[str]:
    return [f"  note       {n}" for n in c.notes] + _numerics(c)


def _numerics(c: Comparison) -> list[str]:
    """The output's numerics against the baseline, when they were compared."""
    if c.numerics is None:
        return []
    from pytest_gpuperf.verdict.numerics import explain

    text = explain(c.numerics)
    return [f"  numerics   {text.removeprefix('numerics: ')}"] if text else []
