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

    @property
    def higher_is_better(self) -> bool:
        return self.unit != "s"


def _metric(r: Result, unit: str, seconds: float | None) -> float | None:
    if seconds is None or not math.isfinite(seconds) or seconds <= 0:
        return None
    if unit == "TFLOP/s":
        return (r.run.flops or 0.0) / seconds / 1e12
    if unit == "GB/s":
        return (r.run.bytes or 0.0) / seconds / 1e9
    return seconds


def _baseline_s(r: Result) -> float | None:
    b = r.comparison.baseline_s if r.comparison is not None else None
    return float(b) if b is not None else None


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
        if all(r.run.flops for r in members):
            unit = "TFLOP/s"
        elif all(r.run.bytes for r in members):
            unit = "GB/s"
        else:
            unit = "s"
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
                _metric(at[s], unit, _baseline_s(at[s])) if s in at else None for s in shapes
            )
            series.append(Series(label or "all", values, base_values))
        func = base.rsplit("::", 1)[-1]
        title = func + (f"::{name}" if name else "") + f" [{mode}]"
        out.append(Sweep(title, shapes, tuple(series), unit))
    return out
