"""A/B against a git revision: the order of paired runs, who is on which side, the base's runs.

The judgement is :class:`~pytest_gpuperf.verdict.judge.Judge`'s, unchanged: the base tree's
fresh-process runs become an in-memory baseline (:func:`paired_baseline`). This module holds
what pairing adds: the ABBA order, the benchmarks of each side, the runs as they come in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_gpuperf.baseline.records import Baseline
from pytest_gpuperf.model import Result

BASE, CURRENT = "base", "current"


def pair_order(index: int) -> tuple[str, str]:
    """The sides of pair ``index`` in the order they run: AB, BA, ... (a steady drift of the
    machine adds the same to both)."""
    return (BASE, CURRENT) if index % 2 == 0 else (CURRENT, BASE)


@dataclass(frozen=True)
class Sides:
    """Benchmarks (node ids, in the current session's order) by where they exist."""

    both: tuple[str, ...]
    #: in the current tree only: reported as new, never failed
    new: tuple[str, ...]
    #: in the base tree only: reported as removed
    removed: tuple[str, ...]


def sides(base: Iterable[str], current: Sequence[str]) -> Sides:
    """Which of the current benchmarks the base tree has, and which of its it lost."""
    base_ids = list(dict.fromkeys(base))
    have = set(base_ids)
    cur = set(current)
    return Sides(
        both=tuple(n for n in current if n in have),
        new=tuple(n for n in current if n not in have),
        removed=tuple(n for n in base_ids if n not in cur),
    )


@dataclass
class PairedRuns:
    """The fresh-process runs of each side, by benchmark key, in the order they ran."""

    base: dict[str, list[Result]] = field(default_factory=dict)
    current: dict[str, list[Result]] = field(default_factory=dict)

    def add(self, side: str, results: Iterable[Result]) -> set[str]:
        """Record one process's results; returns the keys it measured."""
        into = self.base if side == BASE else self.current
        keys = set()
        for r in results:
            into.setdefault(r.id.key, []).append(r)
            keys.add(r.id.key)
        return keys

    def runs(self, side: str, key: str) -> list[Result]:
        return list((self.base if side == BASE else self.current).get(key, []))


def paired_baseline(
    name: str,
    runs: Mapping[str, Sequence[Result]],
    *,
    fingerprint_extra: Mapping[str, Any] | None = None,
) -> Baseline:
    """The base tree's runs as a baseline held in memory (never written), named ``name``:
    matched with the current runs as stored runs are (:meth:`Baseline.from_runs`)."""
    every = (r.run for results in runs.values() for r in results)
    return Baseline.from_runs(name, every, fingerprint_extra=fingerprint_extra)
