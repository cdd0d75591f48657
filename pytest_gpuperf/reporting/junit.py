"""JUnit XML properties (``user_properties``): each benchmark's numbers on its test case.

A test with one result gets plain names (``gpuperf.median``), one with several a group per
result (``gpuperf[matmul@cuda-graph].median``).
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_gpuperf.model import Result
from pytest_gpuperf.reporting import verdicts as v
from pytest_gpuperf.units import fmt_pct, fmt_time

PREFIX = "gpuperf"


def _g(x: float | None) -> str:
    """A number as dashboards parse it: 6 significant figures, no unit."""
    return "" if x is None else f"{x:.6g}"


def result_properties(result: Result, prefix: str = PREFIX) -> list[tuple[str, str]]:
    """The properties of one result; names start with ``prefix``."""
    r = v.row(result)
    c = result.comparison
    s = result.run.summary
    props = [
        (f"{prefix}.median", fmt_time(s.median if result.run.rounds else None)),
        (f"{prefix}.median_s", _g(s.median if result.run.rounds else None)),
        (f"{prefix}.spread", fmt_pct(s.rel_iqr)),
        (f"{prefix}.rounds", f"{s.n}x{result.run.calls_per_round}"),
        (f"{prefix}.verdict", r.label),
    ]
    if c is not None:
        props += [
            (f"{prefix}.baseline_s", _g(v._num(c.baseline_s))),
            (f"{prefix}.ratio", _g(r.ratio)),
            (f"{prefix}.change", r.change),
            (f"{prefix}.interval", r.interval),
            (f"{prefix}.runs", r.runs),
        ]
    return props


def junit_properties(results: Sequence[Result]) -> list[tuple[str, str]]:
    """``(name, value)`` pairs for a test report's ``user_properties`` (all of one test)."""
    if len(results) == 1:
        return result_properties(results[0])
    out: list[tuple[str, str]] = []
    for res in results:
        label = f"{res.id.name}@{res.id.mode}" if res.id.name else res.id.mode
        out += result_properties(res, f"{PREFIX}[{label}]")
    return out
