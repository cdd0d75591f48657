"""What a baseline holds, and how a current result finds its comparable runs.

:class:`Baseline` is the read-only view of one loaded baseline file;
:class:`RunRecord` one stored run; :func:`record_from_result` turns a
:class:`~pytest_gpuperf.model.Result` into what is stored. Storage itself
(files, locking, versions) is in :mod:`pytest_gpuperf.baseline` and
:mod:`pytest_gpuperf.baseline_schema`.

Pure Python: no torch, no pytest.
"""

from __future__ import annotations

import datetime as _dt
import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_gpuperf import baseline_schema as schema
from pytest_gpuperf.fingerprint import differences, fingerprint_id
from pytest_gpuperf.model import Result

#: :attr:`Match.status` values.
MATCH = "match"
NO_BENCHMARK = "no-benchmark"
OTHER_ENVIRONMENT = "other-environment"
OTHER_POLICY = "other-policy"


def _sig(x: float, digits: int) -> float:
    return float(f"{x:.{digits}g}")


@dataclass(frozen=True)
class RunRecord:
    """One stored run of one benchmark: what the verdict compares a new run with."""

    run_id: str
    timestamp: str
    fingerprint_id: str
    median: float
    rounds: tuple[float, ...]
    calls_per_round: int
    rel_iqr: float | None
    stability: str
    first_call_s: float | None
    peak_memory_bytes: int | None
    flops: float | None
    bytes: float | None
    policy: Mapping[str, Any]
    meta: Mapping[str, Any] = field(default_factory=dict)
    telemetry: Mapping[str, Any] | None = None

    @property
    def log_median(self) -> float:
        """The run statistic of statistics.md §4.1: the log of the run's median (seconds)."""
        return math.log(self.median)

    @property
    def time(self) -> _dt.datetime:
        return _dt.datetime.fromisoformat(self.timestamp)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunRecord:
        return cls(
            run_id=d["run_id"],
            timestamp=d["timestamp"],
            fingerprint_id=d["fingerprint"],
            median=float(d["median"]),
            rounds=tuple(float(x) for x in d["rounds"]),
            calls_per_round=int(d["calls_per_round"]),
            rel_iqr=d["rel_iqr"],
            stability=d["stability"],
            first_call_s=d["first_call_s"],
            peak_memory_bytes=d["peak_memory_bytes"],
            flops=d["flops"],
            bytes=d["bytes"],
            policy=dict(d["policy"]),
            meta=dict(d["meta"]),
            telemetry=d["telemetry"],
        )


def record_from_result(
    result: Result | Mapping[str, Any],
    *,
    fingerprint_id: str,
    timestamp: str,
    meta: Mapping[str, Any] | None = None,
    run_id: str | None = None,
) -> dict[str, Any]:
    """The stored form of one result (a :class:`Result` or its ``to_dict()``).

    Rounds, rel IQR and first-call time keep 4 significant figures (more is
    timer noise and bloats the file); the median keeps 6 so that rounding
    adds nothing to the between-run spread. Raises ``ValueError`` for a
    result that cannot be a baseline run (no rounds, non-finite or zero times).
    """
    d = result.to_dict() if isinstance(result, Result) else dict(result)
    key = d.get("id", {}).get("key", "?")
    rounds = d.get("rounds") or []
    if not rounds:
        raise ValueError(f"{key}: no measured rounds")
    if not all(isinstance(x, (int, float)) and math.isfinite(x) and x >= 0 for x in rounds):
        raise ValueError(f"{key}: rounds contain a missing, negative or non-finite time")
    median = (d.get("summary") or {}).get("median")
    if not (isinstance(median, (int, float)) and math.isfinite(median) and median > 0):
        raise ValueError(f"{key}: median time {median!r} is not a positive number")
    rel_iqr = (d.get("summary") or {}).get("rel_iqr")
    first = d.get("first_call_s")
    rid = run_id or d.get("run_id") or uuid.uuid4().hex[:12]
    return {
        "run_id": str(rid),
        "timestamp": timestamp,
        "fingerprint": fingerprint_id,
        "meta": schema.plain(meta or {}),
        "median": _sig(median, 6),
        "rounds": [_sig(x, 4) for x in rounds],
        "calls_per_round": int(d["calls_per_round"]),
        "rel_iqr": _sig(rel_iqr, 4) if isinstance(rel_iqr, (int, float)) else None,
        "stability": str(d.get("stability") or "steady"),
        "first_call_s": _sig(first, 4) if isinstance(first, (int, float)) else None,
        "peak_memory_bytes": d.get("peak_memory_bytes"),
        "flops": d.get("flops"),
        "bytes": d.get("bytes"),
        "policy": schema.plain(d.get("policy") or {}),
        "telemetry": schema.plain(d["telemetry"]) if d.get("telemetry") else None,
    }


@dataclass
class BenchmarkEntry:
    """A benchmark's identity (as last saved) and its runs, oldest first."""

    key: str
    nodeid: str
    name: str | None
    mode: str
    params: dict[str, str]
    runs: list[RunRecord]

    def fingerprint_ids(self) -> list[str]:
        """The fingerprints this benchmark has runs under, most recently saved first."""
        return list(dict.fromkeys(r.fingerprint_id for r in reversed(self.runs)))


@dataclass(frozen=True)
class Match:
    """What a baseline holds for one current result; see :meth:`Baseline.match`.

    ``status`` is :data:`MATCH` (``runs`` are comparable), :data:`NO_BENCHMARK`,
    :data:`OTHER_ENVIRONMENT` (the benchmark exists, under ``fingerprint_id``;
    ``differences`` say what changed) or :data:`OTHER_POLICY` (same environment,
    other measurement settings; ``differences`` say which).
    """

    status: str
    runs: list[RunRecord]
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


class Baseline:
    """A loaded baseline: fingerprints by id and benchmarks by key (read-only view)."""

    def __init__(self, name: str, path: Path, doc: Mapping[str, Any], read_version: int):
        self.name = name
        self.path = path
        #: the schema version the file was written in (migrated to the current one in memory)
        self.read_version = read_version
        self.plugin_version: str = doc["plugin_version"]
        self.created: str = doc["created"]
        self.updated: str = doc["updated"]
        self.fingerprints: dict[str, dict[str, Any]] = {
            k: dict(v) for k, v in doc["fingerprints"].items()
        }
        self.benchmarks: dict[str, BenchmarkEntry] = {
            key: BenchmarkEntry(
                key=key,
                nodeid=b["nodeid"],
                name=b["name"],
                mode=b["mode"],
                params=dict(b["params"]),
                runs=[RunRecord.from_dict(r) for r in b["runs"]],
            )
            for key, b in doc["benchmarks"].items()
        }

    def __repr__(self) -> str:
        return (
            f"<Baseline {self.name!r}: {len(self.benchmarks)} benchmarks, "
            f"{len(self.fingerprints)} fingerprints>"
        )

    def runs(
        self, key: str, fingerprint_id: str, policy: Mapping[str, Any] | None = None
    ) -> list[RunRecord]:
        """Runs comparable to a current result: same benchmark, fingerprint and policy.

        ``policy`` is the result's policy record (``Result.policy``); ``None``
        skips that filter. Oldest first.
        """
        entry = self.benchmarks.get(key)
        if entry is None:
            return []
        return [
            r
            for r in entry.runs
            if r.fingerprint_id == fingerprint_id and (policy is None or r.policy == policy)
        ]

    def fingerprints_of(self, key: str) -> dict[str, dict[str, Any]]:
        """Fingerprints the benchmark has runs under, most recently saved first."""
        entry = self.benchmarks.get(key)
        ids = entry.fingerprint_ids() if entry else []
        return {i: self.fingerprints[i] for i in ids}

    def match(
        self, key: str, fp: Mapping[str, Any], policy: Mapping[str, Any] | None = None
    ) -> Match:
        """Everything the verdict needs about one current result, in one call.

        ``fp`` is the current fingerprint (:func:`fingerprint`). When the
        benchmark exists only under other fingerprints, the differences are
        taken against the closest of them (fewest differing keys; the most
        recently saved on a tie).
        """
        entry = self.benchmarks.get(key)
        if entry is None or not entry.runs:
            return Match(NO_BENCHMARK, [])
        fid = fingerprint_id(fp)
        same_env = [r for r in entry.runs if r.fingerprint_id == fid]
        if not same_env:
            # The closest environment explains best what changed; ties go to the newest.
            diffs = {
                i: differences(self.fingerprints[i], dict(fp)) for i in entry.fingerprint_ids()
            }
            other = min(diffs, key=lambda i: len(diffs[i]))
            return Match(OTHER_ENVIRONMENT, [], other, diffs[other])
        if policy is None:
            return Match(MATCH, same_env, fid)
        same = [r for r in same_env if r.policy == policy]
        if same:
            return Match(MATCH, same, fid)
        return Match(OTHER_POLICY, [], fid, differences(same_env[-1].policy, dict(policy)))
