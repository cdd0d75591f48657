"""A/B against a git revision: the order of paired runs, who is on which side, the base's runs.

The judgement is :class:`~pytest_gpuperf.verdict.judge.Judge`'s, unchanged: the base tree's
fresh-process runs become an in-memory baseline (:meth:`Baseline.from_runs`, never written).
This module holds what pairing adds: the ABBA order, the benchmarks of each side, the runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

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

    def add(self, side: str, results: Iterable[Result]) -> None:
        """Record one process's results."""
        into = self.base if side == BASE else self.current
        for r in results:
            into.setdefault(r.id.key, []).append(r)
