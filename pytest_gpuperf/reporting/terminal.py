"""The terminal summary: the table of every benchmark, then each block once (``verdicts:``,
``inconclusive``, ``numerics:``, ``memory:``, ``activity:`` under ``-v``, ``flags:``). A
failure's detail is in its test's failure text, never repeated here.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_gpuperf.measure import backend
from pytest_gpuperf.measure.peaks import describe as describe_peak
from pytest_gpuperf.model import Result, printable
from pytest_gpuperf.outcome import (
    NOT_COMPARABLE,
    NUMERICS_CHANGED,
    NUMERICS_UNSEEDED,
    NumericsComparison,
)
from pytest_gpuperf.reporting.activity import activity_line, memory_changes, memory_line
from pytest_gpuperf.reporting.columns import (
    COLUMNS,
    OWN_COLUMNS,
    added_columns,
    flag_text,
    params_text,
    summary_stat,
)
from pytest_gpuperf.reporting.explain import numerics_words
from pytest_gpuperf.reporting.verdicts import (
    NOT_COMPARED,
    explanation,
    kind_of,
    order_of,
    summary_line,
)
from pytest_gpuperf.units import fmt_pct, fmt_time

#: The widest table at the default verbosity (a common wide terminal; CI logs wrap beyond).
WIDTH = 120
#: A benchmark name is never shortened below this.
MIN_NAME = 28
#: ``-v``'s columns: all but mean, min and max (the added ones go before ``flag``).
FULL_COLUMNS = tuple(k for k in COLUMNS if k in OWN_COLUMNS - {"mean", "min", "max"})
#: The default verbosity's columns (``mode`` too when a session mixes timing modes).
DEFAULT_COLUMNS = ("name", "median", "ci", "spread", "first_call", "throughput", "flag", "verdict")
#: Dropped in this order while a default table is wider than the terminal's width.
DROP_ORDER = ("first_call", "spread", "throughput", "mode")


_LABELLED = re.compile(r"^(\s*)(\S[^:]*?(?::|\s{2,})\s*)?")


def fold(text: str, width: int = WIDTH) -> str:
    """Every line of ``text`` in ``width`` columns, continued under its value after a label
    of up to 16 columns (else 4 in); a long word and a command to copy are kept whole."""
    out = []
    for line in text.splitlines():
        if len(line) <= width or " -m pytest " in line:
            out.append(line)
            continue
        m = _LABELLED.match(line)
        lead = len(m.group(1)) if m else 0
        label = len(m.group(2) or "") if m else 0
        indent = lead + label if 0 < label <= 16 else lead + 4
        out.extend(
            textwrap.wrap(
                line,
                width,
                subsequent_indent=" " * indent,
                break_long_words=False,
                break_on_hyphens=False,
            )
        )
    return "\n".join(out)


def _fastest(stat: str) -> Callable[[Result], float]:
    """A statistic of the rounds as a sort key: fastest first, none last."""
    of = summary_stat(stat)
    return lambda r: x if (x := of(r)) is not None and math.isfinite(x) else math.inf


def _change(r: Result) -> float:
    """Minus the change against the baseline: the largest slowdown first."""
    ratio = r.comparison.ratio if r.comparison is not None else None
    return -float(ratio) if ratio is not None else math.inf


#: ``--gpuperf-sort`` keys: by verdict (regressions first, collection order within), by
#: name, statistics fastest first, the others largest first.
SORT_KEYS: dict[str, Callable[[Result], Any]] = {
    "verdict": lambda r: order_of(kind_of(r)),
    "collection": lambda r: 0,
    "name": lambda r: r.id.display,
    **{k: _fastest(k) for k in ("median", "mean", "min", "max")},
    "change": _change,
    "first_call": lambda r: -(r.run.first_call_s or 0.0),
    "memory": lambda r: -(r.run.peak_memory_bytes or 0),
    "throughput": lambda r: -(r.run.tflops or (r.run.gbps or 0.0) / 1e3 or 0.0),
}


def _base_test(r: Result) -> str:
    return r.id.nodeid.split("[", 1)[0]


_GROUPS: dict[str, Callable[[Result], str]] = {
    "func": lambda r: _base_test(r).rsplit("::", 1)[-1],
    "fullfunc": _base_test,
    "file": lambda r: r.id.nodeid.split("::", 1)[0],
    "mode": lambda r: r.id.mode,
    "name": lambda r: r.id.name or "-",
    "param": lambda r: params_text(r.id),
}
#: ``--gpuperf-group-by`` keys, as in pytest-benchmark (``param:NAME``: one parameter).
GROUP_KEYS = (*_GROUPS, "param:NAME")


def _group_value(r: Result, key: str) -> str:
    if key.startswith("param:"):
        return next((v for k, v in r.id.params if k == key.removeprefix("param:")), "-")
    return _GROUPS[key](r)


@dataclass(frozen=True)
class TableSpec:
    """How to draw the summary: which columns, in which order, in which groups."""

    #: None: by verbosity (:data:`DEFAULT_COLUMNS`, or every column under ``-v``)
    columns: tuple[str, ...] | None = None
    sort: str = "verdict"
    group_by: tuple[str, ...] = ()
    #: -v: every column, names unshortened, every note of every benchmark
    verbose: bool = False
    #: -q: no inconclusive block (the verdict lines stay)
    quiet: bool = False
    width: int = WIDTH
    #: the session's --gpuperf-fail-on: whose detail went into a failure text
    fail_on: str = "regression"
    #: the run's timing modes (pytest_gpuperf.registry); None: the built-in ones
    modes: backend.Modes | None = None


def _shorten(text: str, width: int | None) -> str:
    """``test_a_very_long_na…shape=4096]``: the middle goes, the start and the ids stay."""
    if width is None or len(text) <= width:
        return text
    keep = width - 1
    head = keep - keep // 2
    return text[:head] + "…" + text[len(text) - keep // 2 :]


def _columns_for(results: Sequence[Result], spec: TableSpec) -> tuple[list[str], int | None]:
    """The columns to draw, and the width names are shortened to (None: not shortened)."""
    with_verdict = any(r.comparison is not None for r in results)
    if spec.columns is not None:
        cols = ["name", *(c for c in spec.columns if c != "name")]
    elif spec.verbose:
        cols = list(FULL_COLUMNS)
        at = cols.index("flag")
        cols[at:at] = [c.key for c in added_columns()]  # before flag and verdict
    else:
        cols = list(DEFAULT_COLUMNS)
        if _mixed(results):
            cols.insert(1, "mode")
    if not with_verdict and spec.columns is None:
        cols.remove("verdict")
    if spec.columns is None and not spec.verbose:
        return _fit(results, cols, spec.width)
    return cols, None


def _fit(results: Sequence[Result], cols: list[str], width: int) -> tuple[list[str], int | None]:
    """The columns and the name width that fit ``width``: empty columns go, names shrink
    down to :data:`MIN_NAME`, then columns are dropped in :data:`DROP_ORDER`."""
    rows = {c: [COLUMNS[c].cell(r) for r in results] for c in cols}
    cols = [c for c in cols if c in ("name", "verdict") or any(rows[c])]
    longest = max((len(x) for x in rows["name"]), default=0)

    def col_width(c: str) -> int:
        return max([len(COLUMNS[c].header) + 2, *(len(x) for x in rows[c])])

    candidates = [list(cols)]
    for drop in DROP_ORDER:
        if drop in candidates[-1]:
            candidates.append([c for c in candidates[-1] if c != drop])
    for cs in candidates:
        others = sum(col_width(c) + 2 for c in cs if c != "name")
        room = width - others
        if room >= min(longest, MIN_NAME):
            return cs, (None if room >= longest else max(room, len(COLUMNS["name"].header) + 2))
    return candidates[-1], MIN_NAME


def sort_results(results: Sequence[Result], key: str) -> list[Result]:
    """``results`` in the order of ``--gpuperf-sort`` (stable: ties keep collection order)."""
    return sorted(results, key=SORT_KEYS[key])


def group_results(results: Sequence[Result], keys: Sequence[str]) -> list[tuple[str, list[Result]]]:
    """Groups in order of first appearance; the title names each key's value."""
    if not keys:
        return [("", list(results))]
    groups: dict[str, list[Result]] = {}
    for r in results:
        title = ", ".join(f"{k}={_group_value(r, k)}" for k in keys)
        groups.setdefault(title, []).append(r)
    return list(groups.items())


def render_table(
    results: Sequence[Result], spec: TableSpec | None = None, legend: bool = False
) -> str:
    """The table (one per group), sorted, with the columns of ``spec``; with ``legend``,
    what the shown columns mean, wrapped to the table's width."""
    from tabulate import tabulate

    spec = spec or TableSpec()
    ordered = sort_results(results, spec.sort)
    cols, name_w = _columns_for(ordered, spec)
    blocks = []
    for title, members in group_results(ordered, spec.group_by):
        rows = [[COLUMNS[c].cell(r) for c in cols] for r in members]
        for row in rows:  # the name is the first column
            row[0] = _shorten(row[0], name_w)
        headers = [COLUMNS[c].header for c in cols]
        table = tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)
        blocks.append(f"{title}\n{table}" if title else table)
    parts = [COLUMNS[c].legend for c in cols if legend and COLUMNS[c].legend]
    if "flag" in cols and not any(r.notes for r in results):
        parts = [p for p in parts if not p.startswith("flag:")]
    return "\n".join(["\n\n".join(blocks), *textwrap.wrap("; ".join(parts), spec.width)])


#: Verdict kinds listed one line each under ``verdicts:``, in this order (inconclusive ones
#: that passed have their own block instead).
NOTABLE = ("regression", "inconclusive", "different-environment", "improvement")


def _listed(r: Result, spec: TableSpec) -> bool:
    """Whether the verdict gets a line under ``verdicts:`` (inconclusive: when it fails)."""
    kind = kind_of(r)
    return kind in NOTABLE and (kind != "inconclusive" or spec.fail_on == "inconclusive")


def _mixed(results: Sequence[Result]) -> bool:
    return len({r.id.mode for r in results}) > 1


def _who(r: Result, mixed_modes: bool) -> str:
    return f"{r.id.display} [{r.id.mode}]" if mixed_modes else r.id.display


def _wrap(text: str, spec: TableSpec) -> list[str]:
    """An item of a block: two columns in, its continuation six."""
    return textwrap.wrap(
        text, spec.width, initial_indent="  ", subsequent_indent="      ", break_on_hyphens=False
    )


def _items(
    said: Sequence[tuple[Result, str]], results: Sequence[Result], spec: TableSpec
) -> list[str]:
    """``benchmark: text`` for each ``(result, text)``, wrapped."""
    mixed = _mixed(results)
    return [ln for r, text in said for ln in _wrap(f"{_who(r, mixed)}: {text}", spec)]


def _titled(title: str, lines: list[str]) -> list[str]:
    return [title, *lines] if lines else []


def overhead_lines(results: Sequence[Result], spec: TableSpec) -> list[str]:
    """Each measurement timed in a mode and its ``launch_free`` twin: the overhead's share."""
    by_key: dict[tuple[str, str | None], dict[str, Result]] = {}
    for r in results:
        by_key.setdefault((r.id.nodeid, r.id.name), {})[r.id.mode] = r
    lines = []
    for of_mode in by_key.values():
        for mode, ev in of_mode.items():
            twin = backend.get(mode, spec.modes).launch_free
            gr = of_mode.get(twin) if twin else None
            if gr and ev.run.median > 0:
                share = max(0.0, (ev.run.median - gr.run.median) / ev.run.median)
                lines.append(
                    f"  {ev.id.display}: {fmt_pct(share)} of the eager time "
                    f"(events {fmt_time(ev.run.median)}, graph {fmt_time(gr.run.median)})"
                )
    return _titled("launch overhead (CUDA events vs graph replay):", lines)


def verdict_lines(results: Sequence[Result], spec: TableSpec) -> list[str]:
    """``verdicts:`` (a line per notable verdict, then how many others), and ``inconclusive``:
    each inconclusive verdict that passed, with its detail."""
    judged = [r for r in results if r.comparison is not None]
    if not judged:
        return []
    prefix = (lambda r: f"[{r.id.mode}] ") if _mixed(results) else (lambda r: "")
    listed = sorted(
        (r for r in judged if _listed(r, spec)), key=lambda r: NOTABLE.index(kind_of(r))
    )
    passed = [r for r in judged if kind_of(r) == "inconclusive" and not _listed(r, spec)]
    lines = ["verdicts:"]
    lines += [fold(f"  {prefix(r)}{summary_line(r)}", spec.width) for r in listed]
    if others := [r for r in judged if kind_of(r) not in NOTABLE]:
        kinds = sorted({kind_of(r).replace("-", " ") for r in others})
        n = len(others)
        lines.append(f"  {n} benchmark{'' if n == 1 else 's'}: {' or '.join(kinds)}")
    if passed:
        lines.append(
            f"  {len(passed)} inconclusive, passed (below; "
            "--gpuperf-fail-on=inconclusive fails them)"
        )
        lines += ["", "inconclusive (passed: not enough evidence for a verdict):"]
        for r in passed:
            for i, ln in enumerate(explanation(r).splitlines()):
                lines.append(fold(f"  {prefix(r)}{ln}" if i == 0 else f"  {ln}", spec.width))
    return lines


def flag_lines(results: Sequence[Result], spec: TableSpec) -> list[str]:
    """``flags:``: each distinct note once, after its benchmarks (all of them under ``-v``)."""
    if spec.verbose:
        return _titled("flags:", _items([(r, n) for r in results for n in r.notes], results, spec))
    by_note: dict[str, list[str]] = {}
    mixed = _mixed(results)
    for r in results:
        for note in r.notes:
            by_note.setdefault(note, []).append(_who(r, mixed))
    lines = []
    for note, who in by_note.items():
        names = ", ".join(who[:3]) + (f" and {len(who) - 3} more" if len(who) > 3 else "")
        lines += _wrap(f"{names}: {note}", spec)
    return _titled("flags:", lines)


def _numerics_found(r: Result) -> NumericsComparison | None:
    """The numerics of a benchmark whose output changed, or whose runs disagree (unseeded)."""
    n = r.comparison.numerics if r.comparison is not None else None
    return n if n is not None and n.kind in (NUMERICS_CHANGED, NUMERICS_UNSEEDED) else None


def numerics_lines(results: Sequence[Result], spec: TableSpec) -> list[str]:
    """``numerics:``: each benchmark whose output changed, or whose runs disagree (unseeded)."""
    found = [(r, n) for r in results if (n := _numerics_found(r)) is not None]
    said = [(r, numerics_words(n).removeprefix("numerics: ")) for r, n in found]
    return _titled("numerics:", _items(said, results, spec))


def activity_lines(results: Sequence[Result], spec: TableSpec) -> list[str]:
    """``memory:``, each benchmark whose memory figures changed against the baseline; under
    ``-v`` also ``activity:`` (GPM, allocator, peak fractions; why GPM gave nothing, once)."""
    lines: list[str] = []
    if spec.verbose:
        reasons: dict[str, None] = {}
        said = []
        for r in results:
            a = (r.run.telemetry or {}).get("activity")
            parts = []
            if a and a.get("available"):
                parts.append(activity_line(a))
            elif a:
                reasons[str(a.get("reason"))] = None
            if r.run.memory and r.run.memory.get("available"):
                parts.append("allocator: " + memory_line(r.run.memory))
            if peak := describe_peak(r.run.of_peak):
                parts.append(peak)
            if parts:
                said.append((r, "; ".join(parts)))
        body = _items(said, results, spec)
        body += [ln for why in reasons for ln in _wrap(f"GPM activity unavailable: {why}", spec)]
        title = "activity (NVML GPM and the caching allocator, over plain calls after each "
        lines = _titled(title + "measurement):", body)
    said = [(r, text) for r in results for text in memory_changes(r)]
    return lines + _titled("memory:", _items(said, results, spec))


def quiet_lines(results: Sequence[Result], spec: TableSpec) -> list[str]:
    """Under ``-q``: each verdict that needs a look, then a line counting the other verdicts,
    one counting the flags and notes, and why timings were not comparable."""
    ranked = sorted(results, key=SORT_KEYS["verdict"])
    lines = [fold(f"  {summary_line(r)}", spec.width) for r in ranked if _listed(r, spec)]
    rest = Counter(
        "inconclusive (passed)" if k == "inconclusive" else k.replace("-", " ")
        for r in ranked
        if (k := kind_of(r)) != NOT_COMPARED and not _listed(r, spec)
    )
    if rest:
        counted = ", ".join(f"{n} {k}" for k, n in rest.items())
        lines.append(f"  {counted}" if lines else f"verdicts: {counted} (-v shows why)")
    if lines and not lines[0].startswith("verdicts:"):
        lines.insert(0, "verdicts:")
    if counts := Counter(f for r in results for f in _quiet_flags(r)):
        counted = ", ".join(f"{n} {k}" for k, n in counts.items())
        lines.append(fold(f"flags: {counted}; run without -q to see them and what to do"))
    hit = [r for r in results if r.comparison is not None and r.comparison.why == NOT_COMPARABLE]
    if hit:
        tracers = sorted({printable(r.run.tracer) for r in hit if r.run.tracer})
        what = (
            f"a tracer or profiler ({'; '.join(tracers)}) was active in this run"
            if tracers
            else "the baseline's runs were measured under a tracer or profiler, this run's not"
        )
        one = len(hit) == 1
        text = (
            f"not comparable: {what}, so {len(hit)} {'verdict is' if one else 'verdicts are'} "
            "inconclusive, never a regression; save a baseline under the same tracer, or "
            "run without it"
        )
        lines.append(fold(text, spec.width))
    return lines


def _quiet_flags(r: Result) -> list[str]:
    """What ``-q`` counts of a result: its flags (or another note), changed output, memory."""
    flags = [f for f in flag_text(r).split(", ") if f] or (["other note"] if r.notes else [])
    if (n := _numerics_found(r)) is not None:
        changed = n.kind == NUMERICS_CHANGED
        flags.append("output changed" if changed else "numerics not compared (unseeded)")
    return flags + (["memory changed"] if memory_changes(r) else [])


def render(results: Sequence[Result], spec: TableSpec | None = None) -> str:
    """The whole summary section (under ``-q``: the table and :func:`quiet_lines`)."""
    spec = spec or TableSpec()
    if spec.quiet and not spec.verbose:
        return "\n".join([render_table(results, spec), *quiet_lines(results, spec)])
    lines = [render_table(results, spec, legend=True)]
    blocks = (
        overhead_lines(results, spec),
        verdict_lines(results, spec),
        numerics_lines(results, spec),
        activity_lines(results, spec),
        flag_lines(results, spec),
    )
    for block in blocks:
        if block:
            lines.append("")
            lines.extend(block)
    return "\n".join(lines)
