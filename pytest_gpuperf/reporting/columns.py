"""The outputs' columns, declared once (:data:`COLUMNS`): the terminal table draws them; the
HTML summary, the CSV and the JSON show :data:`OWN_COLUMNS` their own way and add every other
declared column (:func:`added_columns`), so a new column is one entry in :data:`COLUMNS`."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytest_gpuperf.model import BenchId, Result
from pytest_gpuperf.reporting.explain import figure_name, label_of
from pytest_gpuperf.units import fmt_bytes, fmt_change, fmt_pct, fmt_rate, fmt_time

#: Fewer kept rounds than this have no distribution-free 95 % interval of their median.
MIN_CI_ROUNDS = 6


def fmt_result_rate(result: Any) -> str:
    """A result's throughput: a collective's algbw and busbw, else its FLOP/s and bytes/s."""
    from pytest_gpuperf.measure.collectives import rate_text

    run = result.run
    return rate_text(run) or fmt_rate(run.tflops, run.gbps)


def _text(x: Any) -> str:
    return "" if x is None else str(x)


@dataclass(frozen=True)
class Column:
    """One column of every table-like output."""

    key: str
    header: str
    #: its value for one result: a number in SI units (seconds, bytes), a text, or None
    value: Callable[[Result], Any]
    #: the value as the terminal and the HTML show it
    fmt: Callable[[Any], str] = _text
    #: what the column means, for the legend under the terminal's table ("" for none)
    legend: str = ""

    def cell(self, r: Result) -> str:
        return self.fmt(self.value(r))

    def raw(self, r: Result) -> Any:
        """The value for the CSV and the JSON: a finite number or a text, else None."""
        x = self.value(r)
        if isinstance(x, float) and not math.isfinite(x):
            return None
        return x if x is None or isinstance(x, (bool, int, float, str)) else str(x)


def summary_stat(name: str) -> Callable[[Result], Any]:
    """A statistic of the rounds (``median``, ``q1``, ``rel_iqr``, ...); None without rounds."""
    return lambda r: getattr(r.run.summary, name) if r.run.rounds else None


def params_text(ident: BenchId) -> str:
    return ", ".join(f"{k}={v}" for k, v in ident.params) or "-"


def flag_text(r: Result) -> str:
    flags = []
    if r.run.unstable:
        flags.append("UNSTABLE")
    elif r.run.stability == "warmup-capped":
        flags.append("warm-up capped")
    if any(n.startswith("noisy") for n in r.notes):
        flags.append("NOISY")
    if any(n.startswith("contended:") for n in r.notes):
        flags.append("CONTENDED")
    return ", ".join(flags)


def verdict_cell(r: Result) -> str:
    """``2.96x REGRESSION (threshold 61.3 %)``: the change, the verdict, its resolution."""
    c = r.comparison
    if c is None:
        return "-"
    label = "other environment" if c.kind == "different-environment" else label_of(c)
    f = c.shown
    if f is None or c.kind == "no-baseline":
        return label
    name = figure_name(f.figure, r.id.mode)  # a plain "time" goes without saying
    return f"{fmt_change(f.ratio)}{'' if name == 'time' else ' ' + name} {label}"


COLUMNS: dict[str, Column] = {
    c.key: c
    for c in (
        Column("name", "benchmark", lambda r: r.id.display),
        Column("params", "params", lambda r: params_text(r.id)),
        Column("mode", "mode", lambda r: r.id.mode),
        Column(
            "median",
            "median",
            summary_stat("median"),
            fmt_time,
            "median: per-call time of the steady state",
        ),
        Column("mean", "mean", summary_stat("mean"), fmt_time, "mean: of the rounds"),
        Column("min", "min", summary_stat("min"), fmt_time, "min: the fastest round"),
        Column("max", "max", summary_stat("max"), fmt_time, "max: the slowest round"),
        Column(
            "spread",
            "spread",
            lambda r: r.run.summary.rel_iqr,
            fmt_pct,
            "spread: IQR of the rounds over the median",
        ),
        Column(
            "ci",
            "95% CI",
            lambda r: r.run.summary.rel_ci if r.run.summary.n >= MIN_CI_ROUNDS else None,
            lambda x: "-" if x is None else "±" + fmt_pct(x),
            "95% CI: of the median, from the rounds kept ('-' with fewer than "
            f"{MIN_CI_ROUNDS} rounds, where no such interval exists)",
        ),
        Column(
            "rounds",
            "rounds",
            lambda r: f"{r.run.summary.n}x{r.run.calls_per_round}",
            legend="rounds: rounds kept x calls per round (leading rounds that were still "
            "settling are dropped)",
        ),
        Column(
            "first_call",
            "first call",
            lambda r: r.run.first_call_s,
            fmt_time,
            "first call: compile, autotune and lazy init land there, never in the median",
        ),
        Column("memory", "memory", lambda r: r.run.peak_memory_bytes, fmt_bytes, "memory: peak"),
        Column("throughput", "throughput", fmt_result_rate),
        Column("flag", "flag", flag_text, legend="flag: see flags below"),
        Column("verdict", "vs baseline", verdict_cell),
    )
}
#: The columns the HTML, the CSV and the JSON show their own way (they had them before this
#: declaration); every other column of :data:`COLUMNS` is added to them (:func:`added_columns`).
OWN_COLUMNS: frozenset[str] = frozenset(
    {"name", "params", "mode", "median", "mean", "min", "max", "spread", "ci", "rounds"}
    | {"first_call", "memory", "throughput", "flag", "verdict"}
)


def added_columns() -> list[Column]:
    """The declared columns beyond :data:`OWN_COLUMNS`, read when an output is drawn."""
    return [c for k, c in COLUMNS.items() if k not in OWN_COLUMNS]
