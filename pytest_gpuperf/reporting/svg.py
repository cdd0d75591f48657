"""Small inline SVG plots for the HTML report (:func:`strip_box`, :func:`history`,
:func:`line_chart`), drawn by hand: no JS, no libraries, no network; every text is escaped."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape
from itertools import groupby

from pytest_gpuperf.measure.summary import quantile
from pytest_gpuperf.units import fmt_time

#: Series colours (colour-blind safe pair), also used by the page's legend.
BASELINE = "#4c78a8"
CURRENT = "#f58518"
OTHER = "#b0b0b0"
INK = "#333333"
GRID = "#e3e3e3"


@dataclass(frozen=True)
class Group:
    label: str
    values: Sequence[float]
    color: str


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About ``n`` round tick values covering ``[lo, hi]`` (1, 2, 2.5, 5 times a power of ten)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi - lo <= 1e-9 * max(abs(lo), abs(hi)):
        # equal, or a float step or two apart: a step that small would not move the tick
        # (``t += step`` leaves ``t`` unchanged) and the axis has one value anyway
        return [lo]
    raw = (hi - lo) / max(n - 1, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    out = []
    t = first
    while t <= hi + 1e-9 * step:
        out.append(round(t, 12))
        t += step
    return out


_UNITS = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9))


def time_tick_labels(ticks: Sequence[float]) -> list[str]:
    """``2 ms``, ``2.5 ms``: in the unit of the largest, with the fewest exact decimals."""
    if not ticks:
        return []
    top = max(abs(t) for t in ticks)
    unit, scale = next(((u, sc) for u, sc in _UNITS if top >= sc), _UNITS[-1])
    return [f"{_short(t / scale, ticks, scale)} {unit}" for t in ticks]


def number_tick_labels(ticks: Sequence[float]) -> list[str]:
    """Plain numbers with the fewest decimals that keep every tick exact."""
    return [_short(t, ticks, 1.0) for t in ticks]


def _short(x: float, ticks: Sequence[float], scale: float) -> str:
    for decimals in range(7):
        if all(abs(round(t / scale, decimals) - t / scale) <= 1e-9 * max(1.0, abs(t / scale))
               for t in ticks):  # fmt: skip
            return f"{x:.{decimals}f}"
    return f"{x:.6g}"


def _x_label(x: float, y: float, label: str, width: int) -> str:
    """``label`` centred on ``x`` at ``y``, moved to stay 2 px inside the chart."""
    half = 3 * len(label)  # a sans-serif glyph at 10 px is about 6 px wide
    anchor = "end" if x + half > width - 2 else "start" if x - half < 2 else "middle"
    x = {"end": width - 2, "start": 2}.get(anchor, x)
    return _text(f'x="{x:.1f}" text-anchor="{anchor}" y="{y}"', label)


def _domain(values: Sequence[float], pad: float = 0.08) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    if hi <= lo:
        span = abs(lo) * 0.05 or 1e-9
        return lo - span, hi + span
    span = hi - lo
    return lo - pad * span, hi + pad * span


def _empty(width: int, height: int, label: str, message: str) -> str:
    """A chart with nothing to draw: ``message`` in its middle."""
    at = f'x="{width / 2:.1f}" y="{height / 2:.1f}" text-anchor="middle"'
    return _svg(width, height, label, [_text(at, message, 12)])


def _text(at: str, label: str, size: int = 10) -> str:
    """``label`` where ``at`` (its x, y and anchor attributes) puts it."""
    return f'<text {at} font-size="{size}" fill="{INK}">{escape(label)}</text>'


def _x_axis(x0: float, x1: float, y: float) -> str:
    return f'<line x1="{x0}" y1="{y}" x2="{x1}" y2="{y}" stroke="{INK}"/>'


def _y_grid(
    ticks: Sequence[float],
    labels: Sequence[str],
    sy: Callable[[float], float],
    x0: float,
    x1: float,
) -> list[str]:
    """A horizontal grid line from ``x0`` to ``x1`` at each tick, labelled left of ``x0``."""
    out = []
    for t, label in zip(ticks, labels, strict=True):
        y = sy(t)
        out.append(
            f'<line x1="{x0}" y1="{y:.1f}" x2="{x1}" y2="{y:.1f}" stroke="{GRID}"/>'
            + _text(f'x="{x0 - 6}" y="{y + 3:.1f}" text-anchor="end"', label)
        )
    return out


def _svg(width: int, height: int, label: str, body: list[str]) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(label)}">'
        f"<title>{escape(label)}</title>" + "".join(body) + "</svg>"
    )


def strip_box(
    groups: Sequence[Group],
    *,
    title: str,
    width: int = 360,
    reference: float | None = None,
) -> str:
    """One row per group: whiskers (1.5 IQR), box, median and points; ``reference``: a dashed
    line (the baseline's level when its runs are not at hand)."""
    shown = [g for g in groups if g.values]
    left, right, top, bottom, row_height = 92, 16, 8, 30, 46
    height = top + bottom + row_height * max(len(shown), 1)
    body: list[str] = []
    if not shown:
        return _empty(width, height, title, "no data")
    ref = reference if reference is not None and math.isfinite(reference) else None
    lo, hi = _domain([x for g in shown for x in g.values] + ([ref] if ref is not None else []))
    plot_w = width - left - right

    def sx(x: float) -> float:
        return left + (x - lo) / (hi - lo) * plot_w

    axis_y = top + row_height * len(shown)
    ticks = nice_ticks(lo, hi)
    for t, label in zip(ticks, time_tick_labels(ticks), strict=True):
        x = sx(t)
        body.append(
            f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{axis_y}" stroke="{GRID}"/>'
            + _x_label(x, axis_y + 16, label, width)
        )
    body.append(_x_axis(left, width - right, axis_y))
    if ref is not None:
        body.append(
            f'<line x1="{sx(ref):.1f}" y1="{top}" x2="{sx(ref):.1f}" y2="{axis_y}" '
            f'stroke="{BASELINE}" stroke-width="2" stroke-dasharray="5,3">'
            f"<title>baseline: {escape(fmt_time(ref))}</title></line>"
        )
    for i, g in enumerate(shown):
        cy = top + row_height * i + row_height / 2
        xs = sorted(g.values)
        q1, med, q3 = quantile(xs, 0.25), quantile(xs, 0.5), quantile(xs, 0.75)
        iqr = q3 - q1
        w_lo = min(x for x in xs if x >= q1 - 1.5 * iqr)
        w_hi = max(x for x in xs if x <= q3 + 1.5 * iqr)
        bh = row_height * 0.5
        body.append(
            _text(f'x="{left - 8}" y="{cy + 4:.1f}" text-anchor="end"', g.label, 11)
            + f'<line x1="{sx(w_lo):.1f}" y1="{cy:.1f}" x2="{sx(w_hi):.1f}" y2="{cy:.1f}" '
            f'stroke="{g.color}" stroke-width="1.5"/>'
            f'<rect x="{sx(q1):.1f}" y="{cy - bh / 2:.1f}" width="{max(sx(q3) - sx(q1), 1):.1f}" '
            f'height="{bh:.1f}" fill="{g.color}" fill-opacity="0.18" stroke="{g.color}"/>'
            f'<line x1="{sx(med):.1f}" y1="{cy - bh / 2:.1f}" x2="{sx(med):.1f}" '
            f'y2="{cy + bh / 2:.1f}" stroke="{g.color}" stroke-width="3"/>'
        )
        for j, x in enumerate(g.values):
            jitter = ((j * 0.6180339887) % 1.0) * 2 - 1  # golden-ratio: the same every run
            body.append(
                f'<circle cx="{sx(x):.1f}" cy="{cy + jitter * bh * 0.4:.1f}" r="2.6" '
                f'fill="{g.color}" fill-opacity="0.75"><title>{escape(fmt_time(x))}</title>'
                "</circle>"
            )
    return _svg(width, height, title, body)


@dataclass(frozen=True)
class Point:
    value: float
    label: str  # tooltip: when, which run
    color: str = BASELINE
    current: bool = False
    #: when the run was made (ISO ``2025-11-29T19:38:00+00:00``, or a date), for the x axis
    when: str | None = None
    #: the commit it measured (a short sha), for the x axis
    commit: str | None = None


def _axis_labels(n: int, most: int = 4) -> list[int]:
    """Indices of up to ``most`` points to label: the first, the last, evenly between."""
    if n <= most:
        return list(range(n))
    return sorted({round(i * (n - 1) / (most - 1)) for i in range(most)})


def _when(iso: str | None, precision: int) -> str:
    """``2025-11-29`` (0), ``11-29 19:38`` (1) or ``11-29 19:38:05`` (2)."""
    if not iso:
        return ""
    if precision == 0 or len(iso) < 16:
        return iso[:10]
    return f"{iso[5:10]} {iso[11 : 19 if precision > 1 else 16]}"


def _time_axis(points: Sequence[Point], n: int) -> list[tuple[int, list[str]]]:
    """The labelled runs and their lines (when, commit), as precise as tells them apart; a
    run whose label is still another's is left unlabelled: never two equal ticks."""
    shown = _axis_labels(n)
    precision = 0
    for precision in range(3):
        labels = [(_when(points[i].when, precision), points[i].commit or "") for i in shown]
        if len(set(labels)) == len(labels):
            break
        shown = _axis_labels(n, most=3)
    out: list[tuple[int, list[str]]] = []
    seen: set[tuple[str, ...]] = set()
    for i in shown:
        p = points[i]
        lines = [_when(p.when, precision) or ("?" if not p.current else ""), p.commit or ""]
        if tuple(lines) in seen:
            continue
        seen.add(tuple(lines))
        out.append((i, lines))
    return out


def history(points: Sequence[Point], *, title: str, width: int = 360, height: int = 190) -> str:
    """Stored runs in order joined by a line, the current run a larger dot, dated below."""
    left, right, top, bottom = 64, 16, 10, 44
    body: list[str] = []
    if not points:
        return _empty(width, height, title, "no stored runs")
    lo, hi = _domain([p.value for p in points])
    plot_w, plot_h = width - left - right, height - top - bottom
    n = len(points)

    def sx(i: int) -> float:
        return left + (plot_w / 2 if n == 1 else i * plot_w / (n - 1))

    def sy(y: float) -> float:
        return top + plot_h - (y - lo) / (hi - lo) * plot_h

    ticks = nice_ticks(lo, hi, 4)
    body += _y_grid(ticks, time_tick_labels(ticks), sy, left, width - right)
    axis_y = top + plot_h
    body.append(_x_axis(left, width - right, axis_y))
    for i, lines in _time_axis(points, n):
        x = sx(i)
        body.append(f'<line x1="{x:.1f}" y1="{axis_y}" x2="{x:.1f}" y2="{axis_y + 4}" '
                    f'stroke="{INK}"/>')  # fmt: skip
        body += [
            _x_label(x, axis_y + 15 + 11 * k, text, width) for k, text in enumerate(lines) if text
        ]
    line = [(sx(i), sy(p.value)) for i, p in enumerate(points) if p.color == BASELINE]
    if len(line) > 1:
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in line)
        body.append(
            f'<polyline points="{path}" fill="none" stroke="{BASELINE}" stroke-width="1.5"/>'
        )
    for i, p in enumerate(points):
        r = 5 if p.current else 3
        body.append(
            f'<circle cx="{sx(i):.1f}" cy="{sy(p.value):.1f}" r="{r}" fill="{p.color}">'
            f"<title>{escape(p.label)}</title></circle>"
        )
    return _svg(width, height, title, body)


#: Colours of a line chart's series (Tableau 10, colour-blind friendly in order), without the
#: baseline's and the current's: a series never reads as one of those.
SERIES = ("#54a24b", "#e45756", "#72b7b2", "#b279a2", "#eeca3b", "#9d755d")


@dataclass(frozen=True)
class Line:
    label: str
    values: Sequence[float | None]  # one per x label, None for a gap
    color: str
    dashed: bool = False


def line_chart(
    lines: Sequence[Line],
    x_labels: Sequence[str],
    *,
    title: str,
    y_label: str,
    y_format: str = "number",
    width: int = 480,
    height: int = 240,
) -> str:
    """Lines over categories (shapes), y from 0, with a legend; ``y_format``: number or time."""
    left, right, top = 60, 16, 10
    bottom = 40 + 14 * len(lines)  # the legend's rows
    values = [v for ln in lines for v in ln.values if v is not None and math.isfinite(v)]
    body: list[str] = []
    if not values or not x_labels:
        return _empty(width, height, title, "no data")
    height = max(height, top + 120 + bottom)
    plot_w, plot_h = width - left - right, height - top - bottom
    hi = max(values) * 1.08 or 1.0
    n = len(x_labels)

    def sx(i: int) -> float:
        return left + (plot_w / 2 if n == 1 else 12 + i * (plot_w - 24) / (n - 1))

    def sy(y: float) -> float:
        return top + plot_h - y / hi * plot_h

    ticks = nice_ticks(0.0, hi, 5)
    labels = time_tick_labels(ticks) if y_format == "time" else number_tick_labels(ticks)
    body += _y_grid(ticks, labels, sy, left, width - right)
    axis_y = top + plot_h
    body.append(
        _x_axis(left, width - right, axis_y)
        + f'<text x="12" y="{top + plot_h / 2:.1f}" font-size="10" fill="{INK}" '
        f'text-anchor="middle" transform="rotate(-90 12 {top + plot_h / 2:.1f})">'
        f"{escape(y_label)}</text>"
    )
    for i, label in enumerate(x_labels):
        x = sx(i)
        body.append(_x_label(x, axis_y + 15, label, width))
    shown = fmt_time if y_format == "time" else (lambda v: f"{v:.4g} {y_label}")
    for ln in lines:
        body += _polyline(ln, x_labels, sx, sy, shown)
    body += _legend(lines, left, axis_y + 32)
    return _svg(width, height, title, body)


def _polyline(
    ln: Line,
    x_labels: Sequence[str],
    sx: Callable[[int], float],
    sy: Callable[[float], float],
    shown: Callable[[float], str],
) -> list[str]:
    """A line's stretches between missing values, and a dot with a tooltip at each value."""
    out = []
    dash = ' stroke-dasharray="5,3"' if ln.dashed else ""
    points = [
        None if v is None or not math.isfinite(v) else (sx(i), sy(v))
        for i, v in enumerate(ln.values)
    ]
    for drawn, stretch in groupby(points, key=lambda p: p is not None):
        seg = [p for p in stretch if p is not None]
        if drawn and len(seg) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in seg)
            out.append(
                f'<polyline points="{path}" fill="none" stroke="{ln.color}" '
                f'stroke-width="2"{dash}/>'
            )
    for i, v in enumerate(ln.values):
        if v is None or not math.isfinite(v):
            continue
        tip = f"{ln.label} at {x_labels[i]}: {shown(v)}"
        fill = "#fff" if ln.dashed else ln.color
        out.append(
            f'<circle cx="{sx(i):.1f}" cy="{sy(v):.1f}" r="3" fill="{fill}" '
            f'stroke="{ln.color}"><title>{escape(tip)}</title></circle>'
        )
    return out


def _legend(lines: Sequence[Line], left: float, y0: float) -> list[str]:
    """One row per line under the chart, from ``y0`` down: a stroke of its style, its label."""
    out = []
    for k, ln in enumerate(lines):
        y = y0 + 14 * k
        dash = ' stroke-dasharray="5,3"' if ln.dashed else ""
        out.append(
            f'<line x1="{left}" y1="{y - 4}" x2="{left + 22}" y2="{y - 4}" stroke="{ln.color}" '
            f'stroke-width="2"{dash}/>' + _text(f'x="{left + 28}" y="{y}"', ln.label)
        )
    return out
