"""What every CI renderer says about a result's verdict (:func:`rows`): its kind, its rank,
its numbers as text, so every output orders benchmarks alike and writes the same numbers."""

from __future__ import annotations

import math
import posixpath
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from pytest_gpuperf.model import Result
from pytest_gpuperf.outcome import (
    BELOW_RESOLUTION,
    DIFFERENT_ENVIRONMENT,
    IMPROVEMENT,
    INCONCLUSIVE,
    NO_BASELINE,
    NO_CHANGE,
    REGRESSION,
    Comparison,
)
from pytest_gpuperf.reporting import explain
from pytest_gpuperf.reporting.columns import params_text
from pytest_gpuperf.units import fmt_change, fmt_time

#: A result that was not compared with any baseline (no ``--gpuperf-baseline``).
NOT_COMPARED = "not-compared"


class Kind(NamedTuple):
    """How the reports show a verdict's kind."""

    plural: str  # in headlines: "2 regressions, 1 no change"
    color: str  # the HTML badge's
    icon: str  # the Markdown table's first column


#: Every kind, in report order: what needs a person's attention first.
KINDS: dict[str, Kind] = {
    REGRESSION: Kind("regressions", "#c62828", "🔴"),
    INCONCLUSIVE: Kind("inconclusive", "#b7791f", "🟡"),
    IMPROVEMENT: Kind("improvements", "#2e7d32", "🟢"),
    DIFFERENT_ENVIRONMENT: Kind("in a different environment", "#6b6b6b", "⚪"),
    NO_CHANGE: Kind("no change", "#2e7d32", "✅"),
    NO_BASELINE: Kind("without baseline", "#6b6b6b", "⚪"),
    NOT_COMPARED: Kind("not compared", "#6b6b6b", "⚪"),
}


def look(kind: str) -> Kind:
    """How the reports show ``kind``; one this version does not know is grey, with no icon."""
    return KINDS.get(kind) or Kind(kind, "#6b6b6b", "")


@dataclass(frozen=True)
class Row:
    """One result as the reports show it; strings are ready to print (``-`` when unknown)."""

    result: Result
    kind: str
    #: the kind as the reports name it: ``regression``, ``inconclusive / below resolution``,
    #: ``regression (suspect)`` (waiting for a confirmation run)
    label: str
    ratio: float | None
    change: str
    interval: str
    baseline: str
    current: str
    #: baseline runs / current runs that the verdict used ("20 / 3"), "-" without a verdict
    runs: str
    #: the benchmark as a user reads it: the test id's last part plus measurement name
    name: str
    params: str


def kind_of(result: Result) -> str:
    c = result.comparison
    return NOT_COMPARED if c is None else c.kind


def _num(v: float | None) -> float | None:
    """A finite number, else None (unknown)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


def row(result: Result) -> Row:
    c = result.comparison
    f = None if c is None else c.shown
    ratio = None if c is None else _num(c.ratio)
    interval = "-"
    if c and f and _num(f.ratio_low) is not None and _num(f.ratio_high) is not None:
        interval = (
            f"{fmt_change(f.ratio_low)} to {fmt_change(f.ratio_high)} "
            f"({100 * c.terms.ci_level:.0f} % CI)"
        )
    current = None if c is None else _num(c.current_s)
    if current is None and result.run.rounds:
        current = result.run.median
    kind = kind_of(result)
    label = kind.replace("-", " ")
    if c is not None and kind == INCONCLUSIVE and c.why == BELOW_RESOLUTION:
        label += " / below resolution"
    return Row(
        result=result,
        kind=kind,
        label=label if c is None or c.final else f"{label} (suspect)",
        ratio=ratio,
        change="-" if c is None or ratio is None else explain.change_text(c, result.id.mode),
        interval=interval,
        baseline=fmt_time(None if c is None else _num(c.baseline_s)),
        current=fmt_time(current),
        runs="-" if c is None else f"{0 if c.lead is None else c.lead.k} / {c.r}",
        name=result.id.display,
        params=params_text(result.id),
    )


def order_of(kind: str) -> int:
    """The kind's place in :data:`KINDS`; a kind this version does not know comes last."""
    return list(KINDS).index(kind) if kind in KINDS else len(KINDS)


def _rank(r: Row) -> tuple[int, float]:
    return (order_of(r.kind), -(r.ratio or 0.0) if r.kind in (REGRESSION, INCONCLUSIVE) else 0.0)


def rows(results: Iterable[Result]) -> list[Row]:
    """Every result as a :class:`Row`, in :data:`KINDS`'s order (largest slowdown first)."""
    return sorted((row(r) for r in results), key=_rank)


def headline(rs: Sequence[Row]) -> str:
    """``"2 regressions, 1 inconclusive, 9 no change"`` (or ``"no benchmarks"``)."""
    if not rs:
        return "no benchmarks"
    n = Counter(r.kind for r in rs)
    return ", ".join(
        f"{n[k]} {k.replace('-', ' ') if n[k] == 1 else look(k).plural}"
        for k in sorted(n, key=order_of)
    )


def summary_line(result: Result) -> str:
    """One line on the verdict (``verdict`` module's wording), or the median without one."""
    c = result.comparison
    if c is None:
        return f"{result.id.display}: {fmt_time(result.run.median if result.run.rounds else None)}"
    return explain.summary_line(_with_name(c, result), result.id.mode)


def explanation(result: Result) -> str:
    """The verdict's multi-line explanation (the failure text of a regression), or ``""``."""
    c = result.comparison
    return "" if c is None else explain.explain(_with_name(c, result), result.id.mode)


def _with_name(c: Comparison, result: Result) -> Comparison:
    return c if c.name else replace(c, name=result.id.display)


def diagnosis(result: Result) -> list[str]:
    """Where the time went, as lines: the capture's diagnosis, then each artifact's."""
    d = result.diagnosis
    lines = [] if d is None else _lines(d.paragraph) + _lines(d.details)
    return lines + [ln for source in result.artifacts for ln in _lines(source)]


def _lines(x: Any) -> list[str]:
    if isinstance(x, str):
        return [ln.strip() for ln in x.splitlines() if ln.strip()]
    if isinstance(x, (list, tuple)):
        return [str(ln).strip() for ln in x if isinstance(ln, str) and ln.strip()]
    if isinstance(x, Mapping):  # a diagnosis, or an artifact's summary and diagnosis
        told = "paragraph" in x or "details" in x
        keys = ("paragraph", "details") if told else ("summary", "diagnosis")
        return [ln for k in keys for ln in _lines(x.get(k))]
    return []


@dataclass(frozen=True)
class Artifact:
    """One file (or folder) a report links to, or a capture that produced none (``note``)."""

    name: str
    kind: str | None
    path: str | None
    note: str | None = None


def artifacts(result: Result) -> list[Artifact]:
    """The result's artifacts, one per file (``{"path", "name"?, "kind"?}`` or a capture's
    ``{"collector", "status", "reason", "files"}``; a failed capture once, with its note)."""
    out: list[Artifact] = []
    for a in result.artifacts:
        if not isinstance(a, Mapping):
            continue
        kind = a.get("kind") or a.get("collector")
        kind = str(kind) if kind else None
        files = a.get("files")
        paths = [str(f) for f in files if f] if isinstance(files, list) else []
        if a.get("path"):
            paths.insert(0, str(a["path"]))
        status = a.get("status")
        note = None
        if status and status != "ok":
            note = f"{status}: {a.get('reason')}" if a.get("reason") else str(status)
        if not paths:
            if note:
                out.append(Artifact(kind or "capture", kind, None, note))
            continue
        name = a.get("name") if len(paths) == 1 and isinstance(a.get("name"), str) else None
        for p in paths:
            base = posixpath.basename(p.replace("\\", "/").rstrip("/")) or p
            out.append(Artifact(name or base, kind, p, note))
    return out
