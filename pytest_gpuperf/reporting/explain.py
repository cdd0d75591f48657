"""The text of a verdict: what a user reads in a failed test and in the summary.

:func:`explain` gives the multi-line explanation (the failure message of a
regression: both medians, the ratio with its interval, the p-value against
the level it had to reach, the threshold in force and why it is that wide,
the noise and where it came from, and what the benchmark can detect);
:func:`summary_line` one line for the terminal summary.
"""

from __future__ import annotations

import math

from pytest_gpuperf.reporting.units import fmt_pct, fmt_time
from pytest_gpuperf.verdict import (
    DIFFERENT_ENVIRONMENT,
    IMPROVEMENT,
    INCONCLUSIVE,
    NO_BASELINE,
    NO_CHANGE,
    REGRESSION,
    Comparison,
)

_TITLE = {
    REGRESSION: "REGRESSION",
    IMPROVEMENT: "improvement",
    NO_CHANGE: "no change",
    INCONCLUSIVE: "INCONCLUSIVE",
    NO_BASELINE: "no baseline",
    DIFFERENT_ENVIRONMENT: "different environment",
}


def _p(x: float | None) -> str:
    return "-" if x is None else f"{x:.2g}"


#: Beyond ±1000 % a percentage says nothing more than "huge".
_HUGE = 10.0


def _pct(x: float | None) -> str:
    """Percent with one decimal, two below 1 % (noise levels of 0.25 % matter)."""
    if x is not None and (not math.isfinite(x) or abs(x) >= _HUGE):
        return "> 1000 %" if x > 0 else "< -1000 %"
    if x is not None and abs(x) < 0.01:
        return fmt_pct(x, digits=2)
    return fmt_pct(x, digits=1)


def _signed(x: float | None) -> str:
    if x is not None and (not math.isfinite(x) or abs(x) >= _HUGE):
        return "> +1000 %" if x > 0 else "< -1000 %"
    return fmt_pct(x, digits=1, sign=True)


def _runs(n: int) -> str:
    return f"{n} run" if n == 1 else f"{n} runs"


def _change(c: Comparison) -> str:
    """``+6.1 % (90 % CI +4.8 % to +7.5 %)``."""
    if c.ratio is None:
        return "-"
    ci = ""
    if c.ratio_low is not None and c.ratio_high is not None:
        ci = (
            f" ({100 * c.ci_level:.0f} % CI {_signed(c.ratio_low - 1)} to "
            f"{_signed(c.ratio_high - 1)})"
        )
    return f"{_signed(c.ratio - 1)}{ci}"


def summary_line(c: Comparison) -> str:
    """One line: kind, change with interval, and the number that decided it."""
    who = f"{c.name}: " if c.name else ""
    title = _TITLE.get(c.kind, c.kind)
    if not c.final:
        title += f" (suspect, look {c.look} of {c.looks})"
    if c.kind == NO_BASELINE:
        return f"{who}{title}, current {fmt_time(c.current_s)}"
    if c.kind == DIFFERENT_ENVIRONMENT:
        differs = "; ".join(c.environment)
        return f"{who}{title} ({differs}), not gated: {_change(c)}"
    line = f"{who}{title} {_change(c)}"
    if c.kind == REGRESSION:
        line += f", p = {_p(c.p_slow)} <= {_p(c.alpha)}, threshold {_pct(c.threshold_in_force)}"
    elif c.kind == INCONCLUSIVE:
        if _finite(c.mde) and abs(c.mde or 0.0) < _HUGE:
            line += f", detectable >= {_pct(c.mde)}"
        else:
            line += ", no slowdown is detectable with this noise"
        if c.reasons:
            line += f": {c.reasons[0]}"
    return line


def explain(c: Comparison) -> str:
    """The multi-line explanation of a verdict, for the test's failure text or a warning."""
    lines = [_headline(c)]
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
    lines.append(f"  current    {fmt_time(c.current_s)}  {_current_from(c)}")
    lines.append(f"  baseline   {fmt_time(c.baseline_s)}  geometric mean of {_runs(c.k)}")
    lines.append(f"  ratio      {c.ratio:.3f}  {_change(c)}")
    side, p = ("faster", c.p_fast) if c.kind == IMPROVEMENT else ("slower", c.p_slow)
    lines.append(
        f"  p-value    {_p(p)} (one-sided, {side}); a regression needs p <= {c.alpha or 0:.3g} "
        f"= alpha {_pct(c.alpha_family)} / {c.m} gated benchmark{'s' if c.m != 1 else ''}"
    )
    lines.append(f"  threshold  {_threshold(c)}")
    lines.append(f"  noise      {_noise(c)}")
    lines.append(f"  power      {_power(c)}")
    if not c.final:
        lines.append(
            f"  next       re-measure in a fresh process (look {c.look + 1} of {c.looks}) "
            "before the verdict stands"
        )
    return "\n".join(lines + _notes(c))


def _headline(c: Comparison) -> str:
    who = c.name or "benchmark"
    change = "" if c.ratio is None else f" {_signed(c.ratio - 1)}"
    if c.kind == REGRESSION:
        state = "confirmed" if c.final else f"suspect at look {c.look} of {c.looks}"
        return f"gpuperf: {who} is slower than its baseline:{change} (REGRESSION, {state})"
    if c.kind == IMPROVEMENT:
        return (
            f"gpuperf: {who} is faster than its baseline:{change} (improvement; "
            "refresh the baseline once this is merged)"
        )
    if c.kind == NO_CHANGE:
        return (
            f"gpuperf: {who}: no change{change}; a slowdown of {_pct(c.detect)} or more is "
            "ruled out"
        )
    if c.kind == INCONCLUSIVE:
        state = "" if c.final else f", look {c.look} of {c.looks}"
        return f"gpuperf: {who}: INCONCLUSIVE{change}{state}"
    if c.kind == NO_BASELINE:
        return f"gpuperf: {who}: no baseline"
    return f"gpuperf: {who}: different environment, not gated{change}"


def _current_from(c: Comparison) -> str:
    if c.r <= 1:
        return "this run"
    runs = ", ".join(fmt_time(x) for x in c.current_runs)
    how = "geometric mean" if c.r == 2 else "median"
    return f"{how} of {c.r} runs ({runs})"


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def _threshold(c: Comparison) -> str:
    configured = _pct(c.threshold)
    if not _finite(c.threshold_in_force):
        return (
            "none can be reached: with this little information about the noise no "
            "slowdown is significant"
        )
    if c.threshold_reason == "noise":
        t = math.log1p(c.threshold_in_force or 0.0) / c.se if c.se else math.nan
        return (
            f"{_pct(c.threshold_in_force)} in force, widened by the noise above the configured "
            f"{configured}: {t:.3g} standard errors of {_pct(c.se)}, the distance at which a "
            "slowdown becomes significant at this alpha"
        )
    return (
        f"{_pct(c.threshold_in_force)} in force: the configured minimum (threshold=); the "
        "noise alone would allow less"
    )


def _noise(c: Comparison) -> str:
    weight = f"weight {c.prior_df or 0:.3g} df"
    if c.prior_df_runner and (c.prior_df or 0) < 0.9 * c.prior_df_runner:
        weight += (
            f", lowered from {c.prior_df_runner:.3g} because this benchmark is noisier than "
            "the prior"
        )
    if c.prior_source == "pooled":
        prior = (
            f"the runner's level {_pct(c.prior_noise)} for a {fmt_time(c.baseline_s)} call, "
            f"pooled from {c.prior_benchmarks} benchmarks ({weight})"
        )
    else:
        prior = (
            f"the default prior {_pct(c.prior_noise)} for a {fmt_time(c.baseline_s)} call "
            f"({weight}; measured on an H200: ≤1 % for ≥200 µs kernels, up to 25 % for "
            "launch-bound calls; nothing could be pooled from the runner)"
        )
    if c.k >= 2:
        text = (
            f"{_pct(c.noise)} between runs: {c.k} baseline runs (SD {_pct(c.noise_runs)}) "
            f"combined with {prior}"
        )
    else:
        text = f"{_pct(c.noise)} between runs: only 1 baseline run, so {prior} alone"
    if c.noise_reason == "floor":
        text += f"; raised to the {_pct(c.noise_floor)} floor"
    elif c.noise_reason == "within-run":
        text += f"; raised to the runs' own within-run spread {_pct(c.noise_floor)}"
    if c.df is not None:
        text += f"; t with {c.df:.3g} df"
    return text


def _power(c: Comparison) -> str:
    if c.mde is None or not math.isfinite(c.mde):
        return "this baseline cannot detect any slowdown: add baseline runs"
    text = (
        f"slowdowns of {_pct(c.mde)} or more are caught 95 % of the time "
        f"(with up to {_runs(c.looks)} of the current code)"
    )
    if c.mde > c.detect:
        if c.runs_needed is not None:
            text += f"; {_runs(c.runs_needed)} would be needed to catch {_pct(c.detect)}"
        else:
            text += f"; catching {_pct(c.detect)} needs more baseline runs than the {c.k} there are"
    return text


def _notes(c: Comparison) -> list[str]:
    return [f"  note       {n}" for n in c.notes]
