"""Runs made for the rule's tests: a run of ``t`` seconds per call, as the fixture makes one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pytest_gpuperf.measure.names import MODE_CPU, STEADY
from pytest_gpuperf.model import BenchId, Run
from pytest_gpuperf.verdict import RunStat


def make_run(
    t: float,
    rounds: Sequence[float] | None = None,
    stability: str = STEADY,
    *,
    mode: str = MODE_CPU,
    contention: dict[str, Any] | None = None,
    **fields: Any,
) -> Run:
    """A run of 30 rounds at ``t`` s per call (or ``rounds``); ``contention`` whether its rounds had their CPUs,
    ``fields`` the run's other fields."""
    return Run(
        id=BenchId("tests/t.py::t", mode=mode),
        device="cpu" if mode == MODE_CPU else "cuda",
        rounds=tuple(rounds if rounds is not None else [t] * 30),
        calls_per_round=1,
        stability=stability,
        contention=contention,
        **fields,
    )


def stats(runs: Sequence[Run]) -> list[RunStat]:
    """``runs`` as the rule sees them."""
    return [RunStat.from_run(r) for r in runs]
