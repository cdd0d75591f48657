"""Which commit made a benchmark slower: the search over a first-parent history, and its record.

Commits are numbered 0 (GOOD) to n (BAD). Each benchmark's :class:`Range` keeps the last
commit known not slower than GOOD, the first known slower, and the commits between that could
not tell (:data:`UNDECIDED`, or :data:`SKIPPED` as ``git bisect skip``). Each probe measures,
at the untried commit nearest the middle of the widest open range, every benchmark whose range
holds it. Each benchmark ends with its first slower commit or the range it could not narrow,
never a guess. Pure Python: the shell measures (``shell/bisect.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_gpuperf.jsonsafe import json_safe
from pytest_gpuperf.outcome import IMPROVEMENT, NO_CHANGE, REGRESSION, Comparison, Diagnosis, Words

SLOWER, NOT_SLOWER, UNDECIDED, SKIPPED = "slower", "not-slower", "undecided", "skipped"
#: what became of a benchmark: its first slower commit; a range it could not narrow; or what
#: BAD told, when it was not slower there (then it is left out of the search)
FOUND, NOT_NARROWED = "found", "not-narrowed"
NOT_SLOWER_AT_BAD, UNDECIDED_AT_BAD, NOT_MEASURED = NOT_SLOWER, UNDECIDED, SKIPPED


def outcome(kind: str | None) -> str:
    """What a verdict's kind tells the search (None: the benchmark was not measured)."""
    if kind is None:
        return SKIPPED
    return {REGRESSION: SLOWER, NO_CHANGE: NOT_SLOWER, IMPROVEMENT: NOT_SLOWER}.get(kind, UNDECIDED)


@dataclass
class Range:
    """One benchmark's search: ``good`` < first slower commit <= ``bad``."""

    good: int
    bad: int
    #: commits that could not tell, by index: UNDECIDED or SKIPPED
    tried: dict[int, str] = field(default_factory=dict)

    def candidates(self) -> list[int]:
        return [i for i in range(self.good + 1, self.bad) if i not in self.tried]

    @property
    def found(self) -> int | None:
        return self.bad if self.bad == self.good + 1 else None

    def untold(self) -> dict[int, str]:
        """The commits inside the range that could not tell."""
        return {i: o for i, o in sorted(self.tried.items()) if self.good < i < self.bad}


class Search:
    """The ranges of the benchmarks slower at commit ``bad`` than at 0."""

    def __init__(self, bad: int, keys: Iterable[str]):
        self.ranges = {k: Range(0, bad) for k in keys}

    def next_probe(self) -> tuple[int, list[str]] | None:
        """The next commit to measure and the benchmarks to measure there; None: done."""
        open_ranges = [r for r in self.ranges.values() if r.candidates()]
        if not open_ranges:
            return None
        widest = max(open_ranges, key=lambda r: len(r.candidates()))
        middle = (widest.good + widest.bad) / 2
        index = min(widest.candidates(), key=lambda i: (abs(i - middle), i))
        return index, [
            k for k, r in self.ranges.items() if r.good < index < r.bad and index not in r.tried
        ]

    def record(self, index: int, outcomes: Mapping[str, str]) -> None:
        """What commit ``index`` told each benchmark (an :func:`outcome`)."""
        for key, told in outcomes.items():
            r = self.ranges[key]
            if not r.good < index < r.bad:
                continue
            if told == SLOWER:
                r.bad = index
            elif told == NOT_SLOWER:
                r.good = index
            else:
                r.tried[index] = told


# --- the record -------------------------------------------------------------------------


@dataclass(frozen=True)
class Commit:
    """Commit ``index`` of the history (0: GOOD)."""

    index: int
    sha: str
    subject: str
    #: what the user called it (GOOD's and BAD's refs), else ""
    ref: str = ""
    #: measured as the working tree is (BAD by default: HEAD with its uncommitted changes)
    here: bool = False

    @property
    def short(self) -> str:
        return self.sha[:10]


@dataclass
class Step:
    """One A/B of ``commit`` against ``against`` (GOOD, or the commit's parent)."""

    number: int
    commit: Commit
    against: Commit
    #: "probe" (against GOOD), "again" (an undecided probe measured again), "confirm"
    purpose: str
    outcomes: dict[str, str] = field(default_factory=dict)
    verdicts: dict[str, Comparison] = field(default_factory=dict)
    #: why a benchmark was not measured (the error of the fresh process that failed)
    errors: dict[str, str] = field(default_factory=dict)
    processes: int = 0
    wall_s: float = 0.0


@dataclass
class Answer:
    """What the search found for one benchmark (``key``: ``nodeid[::name]@mode``)."""

    key: str
    status: str
    #: FOUND: the first slower commit and its parent
    commit: Commit | None = None
    parent: Commit | None = None
    against_parent: Comparison | None = None
    against_good: Comparison | None = None
    #: NOT_NARROWED: the commits that may be the first slower one, and those of them that
    #: could not tell, by index (UNDECIDED, SKIPPED)
    candidates: tuple[Commit, ...] = ()
    untold: dict[int, str] = field(default_factory=dict)
    #: why the search stopped short, or why the benchmark was left out
    why: str = ""
    diagnosis: Diagnosis | None = None
    #: the folder of the diagnosis's evidence
    evidence: str | None = None


@dataclass
class Report:
    """A whole search: its ends, its steps, each benchmark's answer."""

    good: Commit
    bad: Commit
    budget_s: float
    steps: list[Step] = field(default_factory=list)
    answers: list[Answer] = field(default_factory=list)
    wall_s: float = 0.0
    #: why the search stopped before every range was narrowed ("" when it did not)
    stopped: str = ""

    def failing(self, fail_on: str) -> list[Answer]:
        """The benchmarks slower at BAD, and with ``--gpuperf-fail-on=inconclusive`` those
        undecided there too."""
        fail = (FOUND, NOT_NARROWED, UNDECIDED_AT_BAD)[: 3 if fail_on == "inconclusive" else 2]
        return [a for a in self.answers if a.status in fail]

    @property
    def processes(self) -> int:
        return sum(s.processes for s in self.steps)

    def to_dict(self, words: Words | None = None) -> dict[str, Any]:
        """The JSON's ``session.bisect``: every field, the verdicts written with ``words``."""
        doc = asdict(self)
        for step, d in zip(self.steps, doc["steps"], strict=True):
            d["verdicts"] = {k: c.to_dict(words) for k, c in step.verdicts.items()}
        for a, d in zip(self.answers, doc["answers"], strict=True):
            for side in ("against_parent", "against_good"):
                c = getattr(a, side)
                d[side] = None if c is None else c.to_dict(words)
        out: dict[str, Any] = json_safe(doc)
        return {**out, "processes": self.processes}
