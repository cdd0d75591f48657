"""What a baseline holds, and how a current run finds its comparable runs.

:class:`Baseline` is the read-only view of one baseline: read from its files, or made of
runs held in memory (an A/B session's base runs, a results file given to ``compare``).
Stored runs are kept as the text of their checked lines, made runs when asked for: a
session of thousands of benchmarks holds text, not objects.
"""

from __future__ import annotations

import datetime as _dt
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_gpuperf import __version__
from pytest_gpuperf.baseline import codec
from pytest_gpuperf.baseline.fingerprint import differences, fingerprint
from pytest_gpuperf.errors import BaselineError
from pytest_gpuperf.model import BenchId, Run, frozen

#: :attr:`Match.status` values.
MATCH = "match"
NO_BENCHMARK = "no-benchmark"
OTHER_ENVIRONMENT = "other-environment"
OTHER_POLICY = "other-policy"


def storable(
    run: Run, extra: Mapping[str, Any] | None, **changes: Any
) -> tuple[Run, dict[str, Any], dict[str, Any]] | str:
    """``run`` with ``changes`` (and a run id) as a store keeps it: (the run, its fingerprint
    with the hooks' ``extra`` keys, its line), or why it cannot be kept."""
    if not run.environment:
        return "no environment recorded, so no fingerprint"
    fp = fingerprint(run.environment, extra)
    run = replace(run, run_id=run.run_id or uuid.uuid4().hex[:12], **changes)
    line = codec.run_line(run)
    try:
        codec.check_line(line, run.id.key)
    except codec.SchemaProblem as e:
        return str(e)
    return run, fp, line


@dataclass(frozen=True)
class BenchmarkEntry:
    """A benchmark's identity (as last saved) and its runs, oldest first: each a run, or the
    text of its stored line with its fingerprint and policy ids (made a run when asked for)."""

    ident: BenchId
    source: tuple[tuple[Run | bytes, str, str], ...]
    fingerprints: Mapping[str, Mapping[str, Any]] = field(repr=False)
    policies: Mapping[str, Mapping[str, Any]] = field(repr=False)
    #: what is wrong with its stored runs (a session's read leaves it to the test's verdict)
    problem: BaselineError | None = field(default=None, repr=False)

    @property
    def runs(self) -> list[Run]:
        return self.runs_of()

    def runs_of(self, fingerprint_id: str | None = None) -> list[Run]:
        """The runs (of one fingerprint; None: all), decoded: a stored one with its identity,
        policy and fingerprint from the index (its environment, as far as the file knows it).
        A problem with them is raised."""
        if self.problem is not None:
            raise self.problem
        out = []
        for x, f, p in self.source:
            if fingerprint_id is not None and f != fingerprint_id:
                continue
            if not isinstance(x, Run):  # a checked line (files.read)
                fp, policy = self.fingerprints[f], self.policies[p]
                x = Run(
                    id=self.ident, policy=policy, environment=fp, fingerprint_id=f, **json.loads(x)
                )
            out.append(x)
        return out

    def fingerprint_ids(self) -> list[str]:
        """The fingerprints this benchmark has runs under, most recently saved first."""
        return list(dict.fromkeys(f for _, f, _ in reversed(self.source)))


@dataclass(frozen=True)
class Match:
    """What a baseline holds for one current run (:meth:`Baseline.match`): ``runs`` where
    ``status`` is :data:`MATCH`; else ``differences`` from the closest environment
    (:data:`OTHER_ENVIRONMENT`) or settings (:data:`OTHER_POLICY`)."""

    status: str
    runs: Sequence[Run]
    fingerprint_id: str | None = None
    differences: list[str] = field(default_factory=list)

    @property
    def reason(self) -> str:
        """One sentence for a report, e.g. ``"different environment: driver 580 -> 575"``."""
        if self.status == MATCH:
            return f"{len(self.runs)} comparable baseline run(s)"
        if self.status == NO_BENCHMARK:
            return "not in the baseline"
        what = "environment" if self.status == OTHER_ENVIRONMENT else "measurement settings"
        return f"different {what}: {'; '.join(self.differences)}"


@dataclass(eq=False)
class Baseline:
    """A baseline: fingerprints and policies by id, benchmarks by key (read-only)."""

    name: str
    path: Path
    plugin_version: str
    created: str
    updated: str
    fingerprints: dict[str, Any] = field(repr=False)
    policies: dict[str, Any] = field(repr=False)
    benchmarks: Mapping[str, BenchmarkEntry] = field(repr=False)

    @classmethod
    def read(
        cls,
        name: str,
        path: Path,
        index: Mapping[str, Any],
        lines: Mapping[tuple[str, str], bytes],
        problems: Mapping[str, BaselineError],
        nodeids: set[str] | None = None,
    ) -> Baseline:
        """The baseline of ``index``, its runs' ``lines`` and their ``problems`` by benchmark
        (:func:`.files.read`), with the benchmarks of the tests ``nodeids`` only (None: all)."""
        fps = {k: frozen(v) for k, v in index["fingerprints"].items()}
        policies = {k: frozen(v) for k, v in index["policies"].items()}
        benchmarks = {
            key: BenchmarkEntry(
                BenchId.from_dict(bench),
                tuple((lines[key, dig], fid, pid) for _, dig, fid, pid in bench["runs"]),
                fps,
                policies,
                problems.get(key),
            )
            for key, bench in index["benchmarks"].items()
            if nodeids is None or bench["nodeid"] in nodeids
        }
        head = (index["plugin_version"], index["created"], index["updated"])
        return cls(name, path, *head, fps, policies, benchmarks)

    @classmethod
    def from_runs(
        cls,
        name: str,
        runs: Iterable[Run],
        *,
        fingerprint_extra: Mapping[str, Any] | None = None,
        stamp: str | None = None,
    ) -> Baseline:
        """``runs`` as a baseline held in memory, matched as stored runs are; a run a save
        would leave out is left out. ``stamp``: when they were made (default: now)."""
        if stamp is None or not codec.is_timestamp(stamp):
            stamp = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        fps: dict[str, Mapping[str, Any]] = {}
        policies: dict[str, Mapping[str, Any]] = {}
        by_key: dict[str, list[tuple[Run | bytes, str, str]]] = {}
        idents: dict[str, BenchId] = {}
        for given in runs:
            got = storable(given, fingerprint_extra, timestamp=stamp)
            if isinstance(got, str):
                continue
            run, fp, _ = got
            fid, pid = codec.fingerprint_id(fp), codec.content_id(run.policy)
            fps[fid], policies[pid] = frozen(fp), run.policy
            by_key.setdefault(run.id.key, []).append((replace(run, fingerprint_id=fid), fid, pid))
            idents[run.id.key] = run.id
        benchmarks = {
            k: BenchmarkEntry(idents[k], tuple(v), fps, policies) for k, v in by_key.items()
        }
        return cls(name, Path(name), __version__, stamp, stamp, fps, policies, benchmarks)

    def stored_runs(self) -> int:
        """How many runs the benchmarks have, counted without making them runs."""
        return sum(len(e.source) for e in self.benchmarks.values())

    def runs(
        self, key: str, fingerprint_id: str, policy: Mapping[str, Any] | None = None
    ) -> list[Run]:
        """The runs of ``key``, of one fingerprint and ``policy`` (None: any), oldest first."""
        entry = self.benchmarks.get(key)
        if entry is None:
            return []
        want = None if policy is None else frozen(policy)
        return [r for r in entry.runs_of(fingerprint_id) if want is None or r.policy == want]

    def match(
        self, key: str, fp: Mapping[str, Any], policy: Mapping[str, Any] | None = None
    ) -> Match:
        """Everything the verdict needs about one current run of fingerprint ``fp``; the
        closest other environment has the fewest differing keys (the newest on a tie)."""
        entry = self.benchmarks.get(key)
        if entry is None or not entry.source:
            return Match(NO_BENCHMARK, [])
        fid, fids = codec.fingerprint_id(fp), entry.fingerprint_ids()
        if fid not in fids:
            diffs = {i: differences(self.fingerprints[i], dict(fp)) for i in fids}
            other = min(diffs, key=lambda i: len(diffs[i]))
            return Match(OTHER_ENVIRONMENT, [], other, diffs[other])
        same_env, want = self.runs(key, fid), frozen(policy or {})
        same = [r for r in same_env if policy is None or r.policy == want]
        if same:
            return Match(MATCH, same, fid)
        return Match(OTHER_POLICY, [], fid, differences(same_env[-1].policy, want))
