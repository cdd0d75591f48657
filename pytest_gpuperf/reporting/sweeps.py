"""Shape sweeps: the results of one test function, name and mode over a marker's ``shapes=``
(two or more), as a plot's lines, one per other parameter, of what every result has (TFLOP/s,
else GB/s, else the time per call); a dashed one of the same colour, the baseline's."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_gpuperf.model import Result
from pytest_gpuperf.reporting.svg import SERIES, Line

#: The parameter that ``@pytest.mark.gpuperf(shapes=...)`` fills.
SHAPE = "shape"


@dataclass(frozen=True)
class Sweep:
    title: str
    #: the shapes, as the test ids show them (``4096x4096x4096``), in the marker's order
    shapes: tuple[str, ...]
    lines: tuple[Line, ...]
    #: ``TFLOP/s``, ``GB/s`` or ``s`` (time per call)
    unit: str


#: The throughputs a sweep shows when every result has the work they need: (field, scale).
_RATES = {"TFLOP/s": ("flops", 1e12), "GB/s": ("bytes", 1e9)}


def _metric(r: Result | None, unit: str, baseline: bool = False) -> float | None:
    """What a line shows at a shape (``r``'s, or its baseline's): a rate, else the time."""
    if r is None:
        return None
    c = r.comparison
    seconds = (c.baseline_s if c is not None else None) if baseline else r.run.median
    if seconds is None or not math.isfinite(seconds) or seconds <= 0:
        return None
    if unit in _RATES:
        work, scale = _RATES[unit]
        return (getattr(r.run, work) or 0.0) / seconds / scale
    return seconds


def sweeps(results: Sequence[Result]) -> list[Sweep]:
    """Every sweep among ``results``, in the order their first result appears."""
    groups: dict[tuple[str, str | None, str], list[Result]] = {}
    for r in results:
        params = dict(r.id.params)
        if SHAPE not in params or not r.run.rounds:
            continue
        base = r.id.nodeid.split("[", 1)[0]
        groups.setdefault((base, r.id.name, r.id.mode), []).append(r)
    out = []
    for (base, name, mode), members in groups.items():
        shapes = tuple(dict.fromkeys(dict(r.id.params)[SHAPE] for r in members))
        if len(shapes) < 2:
            continue
        rates = (u for u, (work, _) in _RATES.items() if all(getattr(r.run, work) for r in members))
        unit = next(rates, "s")
        by_series: dict[str, dict[str, Result]] = {}
        for r in members:
            rest = ", ".join(f"{k}={v}" for k, v in r.id.params if k != SHAPE)
            by_series.setdefault(rest, {})[dict(r.id.params)[SHAPE]] = r
        lines = []
        for i, (label, at) in enumerate(by_series.items()):
            values = tuple(_metric(at.get(s), unit) for s in shapes)
            base_values = tuple(_metric(at.get(s), unit, baseline=True) for s in shapes)
            color = SERIES[i % len(SERIES)]
            lines.append(Line(label or "all", values, color))
            if any(b is not None for b in base_values):
                lines.append(Line(f"{label or 'all'} (baseline)", base_values, color, True))
        func = base.rsplit("::", 1)[-1]
        title = func + (f"::{name}" if name else "") + f" [{mode}]"
        out.append(Sweep(title, shapes, tuple(lines), unit))
    return out
