"""The HTML report: one self-contained file (inline CSS and SVG plots, no script, no network);
everything from a test or a file is escaped."""

from __future__ import annotations

import datetime as _dt
import posixpath
from collections.abc import Callable, Mapping, Sequence
from html import escape
from typing import Any
from urllib.parse import quote

from pytest_gpuperf.model import Result
from pytest_gpuperf.reporting import svg
from pytest_gpuperf.reporting import verdicts as v
from pytest_gpuperf.reporting.activity import lines as activity_lines
from pytest_gpuperf.reporting.activity import memory_changes
from pytest_gpuperf.reporting.columns import MIN_CI_ROUNDS, added_columns, fmt_result_rate
from pytest_gpuperf.reporting.history import BenchHistory
from pytest_gpuperf.reporting.sweeps import sweeps
from pytest_gpuperf.units import fmt_bytes, fmt_pct, fmt_time

CSS = """
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #222;
       margin: 0 auto; max-width: 1240px; padding: 20px 28px 60px; background: #fff; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 0 0 6px; word-break: break-all; }
h3 { font-size: 14px; margin: 14px 0 4px; color: #444; }
.sub { color: #555; margin: 0 0 16px; }
table { border-collapse: collapse; margin: 6px 0 10px; }
th, td { text-align: left; padding: 4px 10px; border-bottom: 1px solid #e5e5e5;
         vertical-align: top; }
th { background: #f6f6f6; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.badge { display: inline-block; color: #fff; border-radius: 4px; padding: 1px 8px;
         font-size: 12px; font-weight: 600; white-space: nowrap; }
section.bench { border: 1px solid #ddd; border-left-width: 6px; border-radius: 6px;
                padding: 12px 16px; margin: 18px 0; }
.plots { display: flex; flex-wrap: wrap; gap: 16px; }
figure { margin: 0; }
figcaption { font-size: 12px; color: #555; max-width: 480px; }
pre { background: #f7f7f7; padding: 10px; border-radius: 4px; overflow-x: auto;
      font-size: 12.5px; white-space: pre-wrap; }
.muted { color: #777; }
.legend span { display: inline-block; width: 10px; height: 10px; border-radius: 5px;
               margin: 0 4px 0 12px; vertical-align: middle; }
a { color: #1558b0; }
.scroll { overflow-x: auto; max-width: 100%; }
table.verdicts td:nth-child(2), table.verdicts td:nth-child(3) { word-break: break-all; }
@media (max-width: 900px) {
  body { padding: 12px 10px 40px; }
  th, td { padding: 3px 5px; }
  table.verdicts { font-size: 12.5px; }
  td.num { white-space: normal; }
}
"""

#: Nothing is fetched and nothing runs: styles inline, images only as data: URLs.
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

#: An artifact's path -> the link to it from the page (None: shown, not linked).
ArtifactHref = Callable[[str], "str | None"]


def default_href(path: str) -> str | None:
    """A relative link to the artifact's path as given (relative paths only)."""
    if not path or posixpath.isabs(path.replace("\\", "/")):
        return None
    return quote(path.replace("\\", "/"))


def _badge(kind: str, label: str) -> str:
    return f'<span class="badge" style="background:{v.look(kind).color}">{escape(label)}</span>'


_HEAD = ("verdict", "benchmark", "params", "mode", "change", "interval", "baseline", "current")


def _summary_table(rows: Sequence[v.Row]) -> str:
    added = added_columns()  # the declared columns beyond this table's own (reporting/columns.py)
    head = "".join(f"<th>{escape(h)}</th>" for h in (*_HEAD, "runs", *(c.header for c in added)))
    body = []
    for i, r in enumerate(rows):
        nums = [r.change, r.interval, r.baseline, r.current, r.runs]
        nums += [c.cell(r.result) for c in added]
        body.append(
            "<tr>"
            f"<td>{_badge(r.kind, r.label)}</td>"
            f'<td><a href="#bench-{i}">{escape(r.name)}</a></td>'
            f"<td>{escape(r.params)}</td>"
            f"<td>{escape(r.result.id.mode)}</td>"
            + "".join(f'<td class="num">{escape(x)}</td>' for x in nums)
            + "</tr>"
        )
    # in a box of its own that scrolls, so a narrow window never cuts a column off
    table = f'<table class="verdicts"><tr>{head}</tr>{"".join(body)}</table>'
    return f'<div class="scroll">{table}</div>'


def _plots(r: v.Row, hist: BenchHistory | None) -> str:
    res = r.result
    c = res.comparison
    comparable = list(hist.comparable) if hist else []
    current_runs = [
        float(x)
        for x in (c.current_runs if c is not None else ())
        if isinstance(x, (int, float)) and x > 0
    ]
    if not current_runs and res.run.rounds:
        current_runs = [res.run.median]
    medians = [
        svg.Group(f"baseline ({len(comparable)})", [x.median for x in comparable], svg.BASELINE),
        svg.Group(f"current ({len(current_runs)})", current_runs, svg.CURRENT),
    ]
    base_s = c.baseline_s if c is not None else None
    reference = float(base_s) if base_s is not None and not comparable else None
    caption = "Per-run medians: each dot is one process (run); the verdict compares these."
    if reference is not None:
        caption += " Dashed: the baseline's level."
    title = f"per-run medians of {res.id.display}"
    figs = [_figure(svg.strip_box(medians, title=title, reference=reference), caption)]
    base_rounds = [x for run in comparable[-1:] for x in run.rounds]
    rounds = [
        svg.Group("baseline", base_rounds, svg.BASELINE),
        svg.Group("current", list(res.run.rounds), svg.CURRENT),
    ]
    figs.append(
        _figure(
            svg.strip_box(rounds, title=f"rounds of {res.id.display}"),
            "Rounds of the newest comparable baseline run and of this run "
            "(per-call time of each round).",
        )
    )
    if hist is not None and (hist.runs or current_runs):
        figs.append(_history(res, hist))
    return f'<div class="plots">{"".join(figs)}</div>'


def _history(res: Result, hist: BenchHistory) -> str:
    """The median of each stored run by date and commit, then this run's."""
    points = []
    for run in hist.runs:
        same = run.fingerprint_id == hist.fingerprint_id
        commit = run.commit
        points.append(
            svg.Point(
                run.median,
                f"{run.timestamp} run {run.run_id}"
                + (f" commit {commit}" if commit else "")
                + f": {fmt_time(run.median)}"
                + ("" if same else " (other environment)"),
                svg.BASELINE if same else svg.OTHER,
                when=run.timestamp or None,
                commit=commit[:7] if commit else None,
            )
        )
    if res.run.rounds:
        points.append(
            svg.Point(
                res.run.median,
                f"this run: {fmt_time(res.run.median)}",
                svg.CURRENT,
                True,
                when=_run_date(res.run.run_id),
                commit="this run",
            )
        )
    return _figure(
        svg.history(points, title=f"history of {res.id.display}"),
        f"History: the median of each run stored in baseline {hist.baseline!r}, by date "
        "and commit (grey: another environment), then this run.",
    )


def _run_date(run_id: str | None) -> str | None:
    """``2025-11-29T19:38`` from a run id ``20251129T193800Z-abc123``."""
    if not run_id or len(run_id) < 13 or not run_id[:8].isdigit():
        return None
    return f"{run_id[:4]}-{run_id[4:6]}-{run_id[6:8]}T{run_id[9:11]}:{run_id[11:13]}"


def _figure(body: str, caption: str) -> str:
    return f"<figure>{body}<figcaption>{escape(caption)}</figcaption></figure>"


def _list(items: Sequence[str]) -> str:
    return "<ul>" + "".join(f"<li>{escape(x)}</li>" for x in items) + "</ul>" if items else ""


def _h3(title: str, body: str) -> str:
    """A titled part of a benchmark's section; nothing without a body."""
    return f"<h3>{title}</h3>{body}" if body else ""


_METRICS = (
    ("sm_clock_mhz", "SM clock", "MHz"),
    ("mem_clock_mhz", "memory clock", "MHz"),
    ("power_w", "power", "W"),
    ("temperature_c", "temperature", "°C"),
    ("gpu_util_pct", "GPU utilisation", "%"),
    ("mem_util_pct", "memory utilisation", "%"),
)
#: The columns of the telemetry table: statistics of each metric over the measurement.
_STATS = ("median", "min", "max")
_SCALARS = (
    ("sm_clock_max_mhz", "SM clock max", "MHz"),
    ("power_limit_w", "power limit", "W"),
    ("samples", "samples in the measurement", ""),
    ("interval_ms", "sampling interval", "ms"),
)


def _fmt_num(x: Any, unit: str) -> str:
    return "-" if (n := v._num(x)) is None else f"{n:.4g} {unit}".rstrip()


def _telemetry(t: Mapping[str, Any] | None) -> str:
    if not t:
        return ""
    if t.get("available") is False:
        return f'<p class="muted">Telemetry unavailable: {escape(str(t.get("reason", "")))}</p>'
    rows = [
        f"<tr><td>{label}</td>"
        + "".join(f"<td class='num'>{escape(_fmt_num(m.get(x), unit))}</td>" for x in _STATS)
        + "</tr>"
        for key, label, unit in _METRICS
        if isinstance(m := t.get(key), Mapping) and "median" in m
    ]
    head = "<table><tr><th>metric</th><th>median</th><th>min</th><th>max</th></tr>"
    table = head + "".join(rows) + "</table>" if rows else ""
    facts = [
        f"{label}: {_fmt_num(t.get(key), unit)}"
        for key, label, unit in _SCALARS
        if t.get(key) is not None
    ]
    share = t.get("throttled_share")
    if isinstance(share, (int, float)):
        facts.append(f"time with a clock slowdown: {fmt_pct(float(share))}")
    events = t.get("clock_events")
    if isinstance(events, Mapping) and events:
        facts.append(
            "clock events: "
            + ", ".join(
                f"{k} {fmt_pct(float(x))}" for k, x in events.items() if isinstance(x, (int, float))
            )
        )
    for key, label in (
        ("throttled_rounds", "rounds throttled"),
        ("low_clock_rounds", "rounds at a low clock"),
    ):
        marks = t.get(key)
        if isinstance(marks, (list, tuple)) and t.get("rounds_checked"):
            facts.append(f"{label}: {len(marks)} of {t['rounds_checked']}")
    others = t.get("other_processes")
    if isinstance(others, (list, tuple)) and others:
        facts.append(f"other processes on the GPU: {len(others)}")
    return table + _list(facts)


def _measurement(res: Result) -> str:
    s = res.run.summary
    ci = f"- (fewer than {MIN_CI_ROUNDS} rounds: no such interval exists)"
    facts = [
        ("median", fmt_time(s.median if res.run.rounds else None)),
        ("spread (IQR / median)", fmt_pct(s.rel_iqr)),
        ("95 % CI of the median", "±" + fmt_pct(s.rel_ci) if s.n >= MIN_CI_ROUNDS else ci),
        ("rounds", f"{s.n} x {res.run.calls_per_round} calls"),
        ("first call", fmt_time(res.run.first_call_s)),
        ("stability", res.run.stability),
        ("peak memory", fmt_bytes(res.run.peak_memory_bytes)),
        ("throughput", fmt_result_rate(res)),
    ]
    cells = "".join(f"<tr><th>{escape(k)}</th><td>{escape(x)}</td></tr>" for k, x in facts)
    return f"<table>{cells}</table>"


def _artifacts(res: Result, href: ArtifactHref) -> str:
    items = []
    for a in v.artifacts(res):
        link = href(a.path) if a.path else None
        name = escape(a.name)
        text = f'<a href="{escape(link, quote=True)}">{name}</a>' if link else name
        if a.kind:
            text += f" <span class='muted'>({escape(a.kind)})</span>"
        if a.path and not link:
            text += f" <span class='muted'>{escape(a.path)}</span>"
        if a.note:
            text += f" <span class='muted'>— {escape(a.note)}</span>"
        items.append(f"<li>{text}</li>")
    return "<ul>" + "".join(items) + "</ul>" if items else ""


def _section(i: int, r: v.Row, hist: BenchHistory | None, href: ArtifactHref) -> str:
    res = r.result
    params = "" if r.params == "-" else f" · {r.params}"
    parts = [
        f'<section class="bench kind-{escape(r.kind)}" id="bench-{i}" '
        f'style="border-left-color:{v.look(r.kind).color}">',
        f"<h2>{_badge(r.kind, r.label)} {escape(r.name)}</h2>",
        f'<p class="muted">{escape(res.id.nodeid)} · {escape(res.id.mode)}{escape(params)}</p>',
    ]
    if res.comparison is not None:
        parts.append(f"<p><strong>{escape(v.summary_line(res))}</strong></p>")
    parts += [_h3("Where the time went", _list(v.diagnosis(res))), _plots(r, hist)]
    if hist is not None and not hist.comparable and hist.reason:
        why = f"Baseline {hist.baseline}: {hist.reason}"
        parts.append(f'<p class="muted">{escape(why)}</p>')
    text = v.explanation(res)
    parts += [
        _h3("Verdict", f"<pre>{escape(text)}</pre>" if text else ""),
        _h3("Measurement", _measurement(res)),
        _h3("Telemetry", _telemetry(res.run.telemetry)),
        _h3("Activity and memory behaviour", _list([*activity_lines(res), *memory_changes(res)])),
        _h3("Artifacts", _artifacts(res, href)),
        _h3("Notes", _list(res.notes)),
        "</section>",
    ]
    return "".join(parts)


def _environment(results: Sequence[Result]) -> str:
    env = next((r.run.environment for r in results if r.run.environment), None)
    if not env:
        return ""
    cells = "".join(
        f"<tr><th>{escape(str(k))}</th><td>{escape(str(x))}</td></tr>"
        for k, x in sorted(env.items())
        if isinstance(x, (str, int, float, bool))  # what was not recorded is left out
    )
    return f"<h3>Environment</h3><table>{cells}</table>"


def _sweeps(results: Sequence[Result]) -> str:
    """One throughput-by-shape plot per ``shapes=`` sweep, as triton's ``perf_report``."""
    found = sweeps(results)
    if not found:
        return ""
    figs = []
    for sw in found:
        unit = "time per call" if sw.unit == "s" else sw.unit
        chart = svg.line_chart(
            sw.lines,
            sw.shapes,
            title=f"{unit} by shape: {sw.title}",
            y_label=unit,
            y_format="time" if sw.unit == "s" else "number",
        )
        better = "lower is better" if sw.unit == "s" else "higher is better"
        caption = f"{sw.title}: {unit} at each shape of the marker's shapes= ({better}); "
        figs.append(_figure(chart, caption + "dashed: the baseline at the same shape."))
    return '<h2>By shape</h2><div class="plots">' + "".join(figs) + "</div>"


def render(
    results: Sequence[Result],
    *,
    histories: Mapping[str, BenchHistory] | None = None,
    title: str | None = None,
    baseline: str | None = None,
    artifact_href: ArtifactHref = default_href,
    generated: _dt.datetime | None = None,
) -> str:
    """The whole page; ``histories`` (by benchmark key) feed the baseline plots."""
    rows, hist, title = v.rows(results), histories or {}, title or "gpuperf report"
    when = (generated or _dt.datetime.now(_dt.timezone.utc)).isoformat(timespec="seconds")
    sub = [v.headline(rows)]
    if baseline:
        sub.append(f"baseline {baseline}")
    sub.append(f"generated {when}")
    legend = (
        f'<p class="legend muted">plots:<span style="background:{svg.BASELINE}"></span>baseline'
        f'<span style="background:{svg.CURRENT}"></span>current'
        f'<span style="background:{svg.OTHER}"></span>other environment</p>'
    )
    body = [
        f"<h1>{escape(title)}</h1>",
        f'<p class="sub">{escape(" · ".join(sub))}</p>',
        _summary_table(rows) if rows else "<p>No benchmark ran.</p>",
        legend if rows else "",
        _sweeps(results),
        *(_section(i, r, hist.get(r.result.id.key), artifact_href) for i, r in enumerate(rows)),
        _environment(results),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head>\n<body>\n"
        + "\n".join(b for b in body if b)
        + "\n</body></html>\n"
    )
