"""What a baseline holds about each benchmark of a report: the runs the plots draw."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_gpuperf.baseline.codec import fingerprint_id
from pytest_gpuperf.baseline.fingerprint import fingerprint
from pytest_gpuperf.baseline.records import MATCH, Baseline
from pytest_gpuperf.errors import BaselineError
from pytest_gpuperf.model import Result, Run


@dataclass(frozen=True)
class BenchHistory:
    """One benchmark in a baseline: comparable runs, every stored run (oldest first)."""

    baseline: str
    comparable: Sequence[Run] = ()
    runs: Sequence[Run] = ()
    fingerprint_id: str | None = None
    reason: str = ""


def histories(
    results: Sequence[Result],
    baseline: Baseline | None,
    fingerprint_extra: Mapping[str, Any] | None = None,
) -> dict[str, BenchHistory]:
    """The history of each result's benchmark in ``baseline``, by key."""
    if baseline is None:
        return {}
    out: dict[str, BenchHistory] = {}
    for r in results:
        key = r.id.key
        entry = baseline.benchmarks.get(key)
        try:  # a session's baseline holds a run of this test that cannot be used
            runs = list(entry.runs) if entry else []
        except BaselineError as e:  # the test's failure said it (shell/session.py)
            out[key] = BenchHistory(baseline.name, (), (), None, str(e))
            continue
        if not r.run.environment:
            out[key] = BenchHistory(baseline.name, (), runs, None, "no environment recorded")
            continue
        fp = fingerprint(r.run.environment, fingerprint_extra)
        match = baseline.match(key, fp, r.run.policy or None)
        comparable = match.runs if match.status == MATCH else ()
        out[key] = BenchHistory(baseline.name, comparable, runs, fingerprint_id(fp), match.reason)
    return out
