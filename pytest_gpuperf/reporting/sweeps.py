"""Shape sweeps: a marker's ``shapes=`` as one series per other parameter, for a plot.

A sweep: the results of one test function, name and mode over two or more shapes; a series
holds what every result has (TFLOP/s, else GB/s, else the time per call), and the baseline's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_gpuperf.model import Result

#: The parameter that ``@pytest.mark.gpuperf(shapes=...)`` fills.
SHAPE = "shape"


@dataclass(frozen=True)
class Series:
    label: str
    #: one value per x label; None where this series has no result at that shape
    values: tuple[float | None, ...]
    #: the baseline's value at each shape (None where there is none)
    baseline: tuple[float | None, ...]


@dataclass(frozen=True)
class Sweep:
    title: str
    #: the shapes, as the test ids show them (``4096x4096x4096``), in the marker's order
    shapes: tuple[str, ...]
    series: tuple[Series, ...]
    #: ``TFLOP/s``, ``GB/s`` or ``s`` (time per call)
    unit: str


#: The throughputs a sweep shows when every result has the work they need: (field, scale).
_RATES = {"TFLOP/s": ("flops", 1e12), "GB/s": ("bytes", 1e9)}


def _metric(r: Result, unit: str, seconds: float | None) -> float | None:
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
        series = []
        for label, at in by_series.items():
            values = tuple(
                _metric(at[s], unit, at[s].run.median) if s in at else None for s in shapes
            )
            base_values = tuple(
                _metric(at[s], unit, c.baseline_s if (c := at[s].comparison) else None)
                if s in at
                else None
                for s in shapes
            )
            series.append(Series(label or "all", values, base_values))
        func = base.rsplit("::", 1)[-1]
        title = func + (f"::{name}" if name else "") + f" [{mode}]"
        out.append(Sweep(title, shapes, tuple(series), unit))
    return out
