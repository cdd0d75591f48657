"""Small inline SVG plots for the HTML report, drawn by hand (no JS, no libraries, no network).

:func:`strip_box` draws groups of values (baseline vs current run medians,
or rounds) as a box plot with every point over it; :func:`history` draws a
benchmark's stored runs in order, with the current run at the end. Values
are seconds; axes are labelled with :func:`~pytest_gpuperf.reporting.units.fmt_time`.
Every text is escaped.

Pure Python: no torch, no pytest.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from pytest_gpuperf.reporting.units import fmt_time
from pytest_gpuperf.summary import quantile

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
    if hi <= lo:
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


def _domain(values: Sequence[float], pad: float = 0.08) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    if hi <= lo:
        span = abs(lo) * 0.05 or 1e-9
        return lo - span, hi + span
    span = hi - lo
    return lo - pad * span, hi + pad * span


def _jitter(i: int) -> float:
    """Deterministic jitter in [-1, 1] (golden-ratio sequence): plots do not change run to run."""
    return ((i * 0.6180339887) % 1.0) * 2 - 1


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
    row_height: int = 46,
    reference: float | None = None,
    reference_label: str = "baseline",
) -> str:
    """One row per group: whiskers (within 1.5 IQR), box (quartiles), median line, and points.

    ``reference`` draws a dashed vertical line (the baseline's level when its
    runs themselves are not at hand).
    """
    shown = [g for g in groups if g.values]
    left, right, top, bottom = 92, 16, 8, 30
    height = top + bottom + row_height * max(len(shown), 1)
    body: list[str] = []
    if not shown:
        body.append(
            f'<text x="{width / 2:.1f}" y="{height / 2:.1f}" text-anchor="middle" '
            f'font-size="12" fill="{INK}">no data</text>'
        )
        return _svg(width, height, title, body)
    ref = reference if reference is not None and math.isfinite(reference) else None
    lo, hi = _domain([x for g in shown for x in g.values] + ([ref] if ref is not None else []))
    plot_w = width - left - right

    def sx(x: float) -> float:
        return left + (x - lo) / (hi - lo) * plot_w

    axis_y = top + row_height * len(shown)
    for t in nice_ticks(lo, hi):
        x = sx(t)
        body.append(
            f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{axis_y}" stroke="{GRID}"/>'
            f'<text x="{x:.1f}" y="{axis_y + 16}" text-anchor="middle" font-size="10" '
            f'fill="{INK}">{escape(fmt_time(t))}</text>'
        )
    body.append(
        f'<line x1="{left}" y1="{axis_y}" x2="{width - right}" y2="{axis_y}" stroke="{INK}"/>'
    )
    if ref is not None:
        body.append(
            f'<line x1="{sx(ref):.1f}" y1="{top}" x2="{sx(ref):.1f}" y2="{axis_y}" '
            f'stroke="{BASELINE}" stroke-width="2" stroke-dasharray="5,3">'
            f"<title>{escape(reference_label)}: {escape(fmt_time(ref))}</title></line>"
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
            f'<text x="{left - 8}" y="{cy + 4:.1f}" text-anchor="end" font-size="11" '
            f'fill="{INK}">{escape(g.label)}</text>'
            f'<line x1="{sx(w_lo):.1f}" y1="{cy:.1f}" x2="{sx(w_hi):.1f}" y2="{cy:.1f}" '
            f'stroke="{g.color}" stroke-width="1.5"/>'
            f'<rect x="{sx(q1):.1f}" y="{cy - bh / 2:.1f}" width="{max(sx(q3) - sx(q1), 1):.1f}" '
            f'height="{bh:.1f}" fill="{g.color}" fill-opacity="0.18" stroke="{g.color}"/>'
            f'<line x1="{sx(med):.1f}" y1="{cy - bh / 2:.1f}" x2="{sx(med):.1f}" '
            f'y2="{cy + bh / 2:.1f}" stroke="{g.color}" stroke-width="3"/>'
        )
        for j, x in enumerate(g.values):
            body.append(
                f'<circle cx="{sx(x):.1f}" cy="{cy + _jitter(j) * bh * 0.4:.1f}" r="2.6" '
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


def history(points: Sequence[Point], *, title: str, width: int = 360, height: int = 170) -> str:
    """Stored runs in order (oldest left) joined by a line; the current run as a larger dot."""
    left, right, top, bottom = 64, 16, 10, 28
    body: list[str] = []
    if not points:
        body.append(
            f'<text x="{width / 2:.1f}" y="{height / 2:.1f}" text-anchor="middle" '
            f'font-size="12" fill="{INK}">no stored runs</text>'
        )
        return _svg(width, height, title, body)
    lo, hi = _domain([p.value for p in points])
    plot_w, plot_h = width - left - right, height - top - bottom
    n = len(points)

    def sx(i: int) -> float:
        return left + (plot_w / 2 if n == 1 else i * plot_w / (n - 1))

    def sy(y: float) -> float:
        return top + plot_h - (y - lo) / (hi - lo) * plot_h

    for t in nice_ticks(lo, hi, 4):
        y = sy(t)
        body.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" stroke="{GRID}"/>'
            f'<text x="{left - 6}" y="{y + 3:.1f}" text-anchor="end" font-size="10" '
            f'fill="{INK}">{escape(fmt_time(t))}</text>'
        )
    body.append(
        f'<line x1="{left}" y1="{top + plot_h}" x2="{width - right}" y2="{top + plot_h}" '
        f'stroke="{INK}"/>'
        f'<text x="{left}" y="{height - 8}" font-size="10" fill="{INK}">oldest</text>'
        f'<text x="{width - right}" y="{height - 8}" text-anchor="end" font-size="10" '
        f'fill="{INK}">newest</text>'
    )
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
