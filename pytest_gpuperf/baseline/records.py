"""What a baseline holds, and how a current result finds its comparable runs.

:class:`Baseline` is the read-only view of one loaded baseline file;
:class:`RunRecord` one stored run; :func:`record_from_result` turns a
:class:`~pytest_gpuperf.model.Result` into what is stored. Storage itself
(files, locking, versions) is in :mod:`pytest_gpuperf.baseline.store` and
:mod:`pytest_gpuperf.baseline.schema`.

Pure Python: no torch, no pytest.
"""

from __future__ import annotations

import datetime as _dt
import math
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_gpuperf import __version__
from pytest_gpuperf.baseline import schema
from pytest_gpuperf.baseline.fingerprint import differences
from pytest_gpuperf.measure.numerics_format import is_fingerprint
from pytest_gpuperf.model import Result

#: :attr:`Match.status` values.
MATCH = "match"
NO_BENCHMARK = "no-benchmark"
OTHER_ENVIRONMENT = "other-environment"
OTHER_POLICY = "other-policy"


def _plain_number(x: Any, kind: type[int] | type[float]) -> int | float | None:
    """``x`` as a plain finite ``int`` or ``float`` (a result made in this process may hold
    what the user gave, such as a NumPy integer or a ``Decimal``), else None."""
    if x is None or isinstance(x, bool):
        return None
    try:
        value = kind(x)
    except (TypeError, ValueError, OverflowError):
        return None
    return value if math.isfinite(value) else None


def _sig(x: float, digits: int) -> float:
    return float(f"{x:.{digits}g}")


@dataclass(frozen=True)
class RunRecord:
    """One stored run of one benchmark: what the verdict compares a new run with.

    Fields a run did not record (older files, or nothing measured) are ``None``.
    """

    run_id: str
    timestamp: str
    fingerprint_id: str
    median: float
    rounds: tuple[float, ...]
    calls_per_round: int
    stability: str
    policy: Mapping[str, Any]
    policy_id: str
    rel_iqr: float | None = None
    first_call_s: float | None = None
    peak_memory_bytes: int | None = None
    flops: float | None = None
    bytes: float | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    telemetry: Mapping[str, Any] | None = None
    #: opaque per-run data saved beside the timings (the kernel inventory, later)
    extra: Mapping[str, Any] | None = None
    plugin_version: str | None = None
    warmup_rounds: int | None = None
    trimmed: int | None = None
    #: the CUDA events backend's end-to-end figure (``rounds`` are then device time)
    e2e_rounds: tuple[float, ...] = ()
    host_hidden: bool | None = None
    host_s: float | None = None
    #: the numeric fingerprint of the output (pytest_gpuperf.verdict.numerics); None: not recorded
    numerics: tuple[Mapping[str, Any], ...] | None = None
    #: the caching allocator's figures per call (pytest_gpuperf.measure.allocation); None: not
    #: recorded (a CPU run, or a file written before they were)
    memory: Mapping[str, Any] | None = None
    #: whether the run's rounds had the CPUs they needed (``Result.contention``); None: not
    #: recorded
    contention: Mapping[str, Any] | None = None
    #: the tracer or profiler active in the run; None: none (or not recorded, older runs)
    tracer: str | None = None

    @property
    def log_median(self) -> float:
        """The run statistic the verdict compares: the log of the run's median (seconds)."""
        return math.log(self.median)

    @property
    def time(self) -> _dt.datetime:
        return _dt.datetime.fromisoformat(self.timestamp)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], policies: Mapping[str, Any]) -> RunRecord:
        """From a current-version run of a file whose policies table is ``policies``."""
        return cls(
            run_id=d["run_id"],
            timestamp=d["timestamp"],
            fingerprint_id=d["fingerprint"],
            median=float(d["median"]),
            rounds=tuple(map(float, d["rounds"])),
            calls_per_round=int(d["calls_per_round"]),
            stability=d["stability"],
            policy=dict(policies[d["policy"]]),
            policy_id=d["policy"],
            rel_iqr=d.get("rel_iqr"),
            first_call_s=d.get("first_call_s"),
            peak_memory_bytes=d.get("peak_memory_bytes"),
            flops=d.get("flops"),
            bytes=d.get("bytes"),
            meta=dict(d.get("meta") or {}),
            telemetry=d.get("telemetry"),
            extra=d.get("extra"),
            plugin_version=d.get("plugin_version"),
            warmup_rounds=d.get("warmup_rounds"),
            trimmed=d.get("trimmed"),
            e2e_rounds=tuple(map(float, d.get("e2e_rounds") or ())),
            host_hidden=d.get("host_hidden"),
            host_s=d.get("host_s"),
            numerics=tuple(d["numerics"]) if d.get("numerics") else None,
            memory=d.get("memory"),
            contention=d.get("contention"),
            tracer=d.get("tracer"),
        )


def record_from_result(
    result: Result | Mapping[str, Any],
    *,
    fingerprint_id: str | None = None,
    timestamp: str,
    meta: Mapping[str, Any] | None = None,
    run_id: str | None = None,
    extra: Mapping[str, Any] | None = None,
    fingerprint: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The stored form of one result (a :class:`Result` or its ``to_dict()``).

    Rounds, rel IQR and first-call time keep 4 significant figures (more is
    timer noise and bloats the file); the median keeps 6 so that rounding
    adds nothing to the between-run spread. Fields without a value are left
    out. ``policy`` is the policy record itself here; the store replaces it
    by its id in the file's policies table. ``extra`` (or the result's own
    ``extra``, if it has one) is stored as it is. The run's environment is
    ``fingerprint_id``, or the id of ``fingerprint``. Raises ``ValueError`` for a
    result that cannot be a baseline run (no rounds, non-finite or zero times).

    In three steps, each in one module: the figures, then the opaque values made
    plain (:mod:`.schema`), then the numerics fingerprint checked (:mod:`.numerics
    <pytest_gpuperf.verdict.numerics>`).
    """
    d = result_fields(result) if isinstance(result, Result) else dict(result)
    key = d.get("id", {}).get("key", "?")
    rounds = d.get("rounds") or []
    if not rounds:
        raise ValueError(f"{key}: no measured rounds")
    if not all(isinstance(x, (int, float)) and math.isfinite(x) and x >= 0 for x in rounds):
        raise ValueError(f"{key}: rounds contain a missing, negative or non-finite time")
    summary = d.get("summary") or {}
    median = summary.get("median")
    if not (isinstance(median, (int, float)) and math.isfinite(median) and median > 0):
        raise ValueError(f"{key}: median time {median!r} is not a positive number")
    rec: dict[str, Any] = {
        "run_id": str(run_id or d.get("run_id") or uuid.uuid4().hex[:12]),
        "timestamp": timestamp,
        "fingerprint": fingerprint_id,
        "policy": None,
        "median": _sig(median, 6),
        "rounds": [_sig(x, 4) for x in rounds],
        "calls_per_round": int(d["calls_per_round"]),
        "stability": str(d.get("stability") or "steady"),
        "plugin_version": __version__,
        "warmup_rounds": len(d.get("warmup") or []),
        "trimmed": d.get("trimmed"),
        "peak_memory_bytes": _plain_number(d.get("peak_memory_bytes"), int),
        "flops": _plain_number(d.get("flops"), float),
        "bytes": _plain_number(d.get("bytes"), float),
    }
    e2e = d.get("e2e_rounds") or []
    if e2e and all(isinstance(x, (int, float)) and math.isfinite(x) and x >= 0 for x in e2e):
        rec["e2e_rounds"] = [_sig(x, 4) for x in e2e]
    if isinstance(d.get("host_hidden"), bool):
        rec["host_hidden"] = d["host_hidden"]
    host = d.get("host_s")
    if isinstance(host, (int, float)) and math.isfinite(host) and host >= 0:
        rec["host_s"] = _sig(host, 4)
    for name in ("rel_iqr", "first_call_s"):
        value = summary.get(name) if name == "rel_iqr" else d.get(name)
        if isinstance(value, (int, float)) and math.isfinite(value):
            rec[name] = _sig(value, 4)
    return _with_opaque(rec, d, meta, extra, fingerprint)


def _with_opaque(
    rec: dict[str, Any],
    d: Mapping[str, Any],
    meta: Mapping[str, Any] | None,
    extra: Mapping[str, Any] | None,
    fingerprint: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """``rec`` completed with the fingerprint's id and the opaque values as plain JSON
    (:mod:`.schema`), the numerics fingerprint checked last, and fields without a value
    left out."""
    memory = d.get("memory")
    opaque = {  # in the order a run has always listed them
        "meta": meta,
        "telemetry": d.get("telemetry"),
        "numerics": d.get("numerics"),
        "memory": memory if isinstance(memory, Mapping) and memory.get("available") else None,
        "contention": d.get("contention"),
        "tracer": d["tracer"] if isinstance(d.get("tracer"), str) else None,
        "extra": {**(d.get("extra") or {}), **(extra or {})},
    }
    if fingerprint is not None:
        rec["fingerprint"] = schema.fingerprint_id(fingerprint)
    rec["policy"] = schema.plain(d.get("policy") or {})
    for name, value in opaque.items():
        if not value:
            rec[name] = None
        elif name == "tracer":
            rec[name] = value
        elif name != "contention" or schema.is_contention(value):
            rec[name] = schema.plain(value)
    if rec["numerics"] is not None and not is_fingerprint(d["numerics"]):
        rec["numerics"] = None
    out: dict[str, Any] = {}
    for k, v in rec.items():  # a loop, not a comprehension: no step back into this module
        if v is not None:
            out[k] = v
    return out


def result_fields(r: Result) -> dict[str, Any]:
    """What :func:`record_from_result` and the store read of a result, as ``to_dict()`` has it.

    Without ``to_dict()``'s deep copy of every field: a save of thousands of
    results spent most of its time there.
    """
    s = r.summary

    def finite(x: Any) -> Any:
        return None if isinstance(x, float) and not math.isfinite(x) else x

    return {
        "id": r.id.to_dict(),
        "environment": r.environment,
        "run_id": r.run_id,
        "rounds": r.rounds,
        "summary": {"median": finite(s.median), "rel_iqr": finite(s.rel_iqr)},
        "calls_per_round": r.calls_per_round,
        "stability": r.stability,
        "warmup": r.warmup,
        "trimmed": r.trimmed,
        "first_call_s": finite(r.first_call_s),
        "peak_memory_bytes": r.peak_memory_bytes,
        "flops": finite(r.flops),
        "bytes": finite(r.bytes),
        "policy": r.policy,
        "telemetry": r.telemetry,
        "extra": r.extra,
        "e2e_rounds": r.e2e_rounds,
        "host_hidden": r.host_hidden,
        "host_s": r.host_s,
        "numerics": r.numerics,
        "memory": r.memory,
        "contention": r.contention,
        "tracer": r.tracer,
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


def _entry(key: str, b: Mapping[str, Any], policies: Mapping[str, Any]) -> BenchmarkEntry:
    """A benchmark of a document (its runs as dicts or records, or a callable returning
    them) as an entry of records."""
    runs = b["runs"]() if callable(b["runs"]) else b["runs"]
    return BenchmarkEntry(
        key=key,
        nodeid=b["nodeid"],
        name=b["name"],
        mode=b["mode"],
        params=dict(b["params"]),
        runs=[r if isinstance(r, RunRecord) else RunRecord.from_dict(r, policies) for r in runs],
    )


class _Entries(Mapping[str, BenchmarkEntry]):
    """The benchmarks of a baseline whose runs are read when first asked for (a load
    with ``nodeids``: :class:`pytest_gpuperf.baseline.layout.LazyRuns`): an entry is
    made on each access, and only the last :data:`KEEP` are kept, so that a session that
    judges its benchmarks one by one never holds every run. A problem with a run is
    raised (a ``CorruptBaseline``) by the access that reads it."""

    #: how many entries are kept (a test's benchmarks are judged, then reported)
    KEEP = 16

    def __init__(self, benches: Mapping[str, Mapping[str, Any]], policies: Mapping[str, Any]):
        self._benches = benches
        self._policies = policies
        self._kept: dict[str, BenchmarkEntry] = {}

    def __getitem__(self, key: str) -> BenchmarkEntry:
        entry = self._kept.pop(key, None)
        if entry is None:
            entry = _entry(key, self._benches[key], self._policies)
            while len(self._kept) >= self.KEEP:
                del self._kept[next(iter(self._kept))]
        self._kept[key] = entry  # the most recently used last
        return entry

    def __contains__(self, key: object) -> bool:
        return key in self._benches

    def __iter__(self) -> Iterator[str]:
        return iter(self._benches)

    def __len__(self) -> int:
        return len(self._benches)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self.items()) == dict(other.items())

    __hash__ = None  # type: ignore[assignment]

    def stored_runs(self) -> int:
        return sum(len(b["runs"]) for b in self._benches.values())


class Baseline:
    """A loaded baseline: fingerprints and policies by id, benchmarks by key (read-only view).

    Whatever schema version the file has, this is the current version's
    content (migrated in memory); ``read_version`` says what the file holds.
    """

    def __init__(self, name: str, path: Path, doc: Mapping[str, Any], read_version: int):
        """``doc``: a document of any version, migrated; its runs may already be records."""
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
        #: measurement policy records by id (runs carry theirs resolved, as ``RunRecord.policy``)
        self.policies: dict[str, dict[str, Any]] = {k: dict(v) for k, v in doc["policies"].items()}
        benches = doc["benchmarks"]
        self.benchmarks: Mapping[str, BenchmarkEntry]
        if any(callable(b["runs"]) for b in benches.values()):
            self.benchmarks = _Entries(benches, doc["policies"])
        else:
            self.benchmarks = {key: _entry(key, b, doc["policies"]) for key, b in benches.items()}

    def stored_runs(self) -> int:
        """How many runs the benchmarks loaded have, counted without reading them."""
        if isinstance(self.benchmarks, _Entries):
            return self.benchmarks.stored_runs()
        return sum(len(e.runs) for e in self.benchmarks.values())

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
        want = None if policy is None else schema.plain(policy)  # as stored: tuples are lists
        return [
            r
            for r in entry.runs
            if r.fingerprint_id == fingerprint_id and (want is None or r.policy == want)
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
        fid = schema.fingerprint_id(fp)
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
        same = self.runs(key, fid, policy)
        if same:
            return Match(MATCH, same, fid)
        want = schema.plain(policy)
        return Match(OTHER_POLICY, [], fid, differences(same_env[-1].policy, want))
