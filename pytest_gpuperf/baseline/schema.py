"""The baseline file format: its versions, their validation, migrations, stable text, and
a save's runs merged into an index (:func:`add_runs`).

Version history:

1. One JSON file per baseline: ``benchmarks[key].runs[]`` with every field of
   a run, ``fingerprints[id]``.
2. Measurement policies move to a ``policies[id]`` table like fingerprints
   (runs hold the id); fields without a value are left out instead of
   ``null``; new optional run fields ``extra`` (opaque, e.g. the kernel
   inventory), ``plugin_version`` (runs of several releases share a
   window), ``warmup_rounds`` and ``trimmed`` (to audit the steady state).
3. Sharded, so that a save into a large baseline writes only what it adds.
   ``NAME.json`` becomes the *index*: the fingerprints and policies tables,
   each benchmark's identity and its runs as references
   ``[segment, digest, fingerprint, policy]``, and the ``segments`` table.
   The runs themselves live in *segments* ``NAME.runs/<segment>.json``, one
   per save, ``runs[key][digest]`` (a run as in version 2), one line per run.
   The index records each segment's SHA-256: a segment whose bytes match was
   validated when it was written and is not validated again; one that does
   not (edited by hand) is validated in full. A run gains two optional
   fields, the CUDA events backend's second figure: ``e2e_rounds``
   (end-to-end time per call, one value per kept round; ``rounds`` are then
   device time), ``host_hidden`` (whether that device time had the host
   hidden) and ``host_s`` (the host's time to issue one call). Later, without a new
   version (old files stay valid; only a file holding it is refused by an older
   reader): the optional run field ``numerics``, the numeric fingerprint of the
   benchmark's output (:mod:`pytest_gpuperf.verdict.numerics`, which validates it);
   then the optional run fields ``memory``, the caching allocator's figures per call
   (:mod:`pytest_gpuperf.measure.allocation`), ``contention`` (whether the run's rounds had the
   CPUs they needed, :mod:`pytest_gpuperf.measure.contention`) and ``tracer`` (the tracer or
   profiler active while it was measured, :mod:`pytest_gpuperf.measure.tracing`), and, inside
   the opaque ``telemetry``, ``activity``: a summary of the GPU's activity (NVML GPM) over the
   run.

Versions 1 and 2 are validated in their own terms (so an error names fields
as they are in the file), then migrated one step at a time to the
*document* (:data:`DOCUMENT_VERSION`, the one-file form of version 2), which
is what :class:`~pytest_gpuperf.baseline.records.Baseline` is built from; a
version-3 index and its segments are assembled into the same document.
Reading never touches the files; the next save writes version 3.

Pure Python: no torch, no pytest.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_gpuperf import __version__
from pytest_gpuperf.measure.numerics_format import is_fingerprint

SCHEMA = "pytest-gpuperf/baseline"
#: The ``schema`` of a version-3 segment (the runs of one save).
SEGMENT_SCHEMA = "pytest-gpuperf/baseline-runs"
#: The version this pytest-gpuperf writes, and the newest it reads.
SCHEMA_VERSION = 3
#: The in-memory form every version is read into (version 2's one-file document).
DOCUMENT_VERSION = 2
#: A segment id is a file name: letters, digits, '.', '_' and '-', not hidden.
SEGMENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
#: A run's digest in an index (12 hex digits, :func:`digest`).
DIGEST = re.compile(r"[0-9a-f]{12}")
SHA256 = re.compile(r"[0-9a-f]{64}")


class SchemaProblem(ValueError):
    """What is wrong with a document, and where (a JSON path such as ``runs[3].rounds``).

    ``remedy`` is set where the usual one (restore the file, or save again) is wrong.
    """

    def __init__(self, problem: str, remedy: str | None = None):
        super().__init__(problem)
        self.remedy = remedy


class FutureSchema(SchemaProblem):
    """The document is of a schema version newer than this pytest-gpuperf reads."""


# --- validation --------------------------------------------------------------

_TOP_FIELDS_V1 = {
    "schema",
    "schema_version",
    "name",
    "plugin_version",
    "created",
    "updated",
    "fingerprints",
    "benchmarks",
}
_BENCH_FIELDS = {"nodeid", "name", "mode", "params", "runs"}

Check = tuple[Callable[[Any], bool], str]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    """A JSON number that is also a finite float (json reads any integer, even 10**400)."""
    if _is_int(v):
        return bool(abs(v) <= sys.float_info.max)
    return isinstance(v, float) and math.isfinite(v)


def _is_timestamp(v: Any) -> bool:
    """ISO 8601 with a time zone, so that timestamps from any machine compare."""
    if not isinstance(v, str):
        return False
    try:
        return _dt.datetime.fromisoformat(v).tzinfo is not None
    except ValueError:
        return False


def _nullable(check: Check) -> Check:
    pred, desc = check
    return (lambda v: v is None or pred(v)), f"{desc} or null"


STR: Check = (lambda v: isinstance(v, str) and v != "", "a non-empty string")
INT_POS: Check = (lambda v: _is_int(v) and v >= 1, "a whole number >= 1")
INT_NONNEG: Check = (lambda v: _is_int(v) and v >= 0, "a whole number >= 0")
POSITIVE: Check = (lambda v: _is_number(v) and v > 0, "a number > 0")
NONNEG: Check = (lambda v: _is_number(v) and v >= 0, "a number >= 0")
TIMESTAMP: Check = (_is_timestamp, "an ISO 8601 timestamp with a time zone")
OBJECT: Check = (lambda v: isinstance(v, dict), "an object")


def _is_rounds(v: Any) -> bool:
    """A non-empty list of numbers >= 0 (all floats, as a save writes them, checked at C speed)."""
    if not isinstance(v, list) or not v:
        return False
    if set(map(type, v)) == {float}:
        return all(map(math.isfinite, v)) and min(v) >= 0
    return all(_is_number(x) and x >= 0 for x in v)


ROUNDS: Check = (_is_rounds, "a non-empty list of numbers >= 0")

#: Fields of one run in version 1, all required: name -> check.
RUN_FIELDS_V1: dict[str, Check] = {
    "run_id": STR,
    "timestamp": TIMESTAMP,
    "fingerprint": STR,
    "meta": OBJECT,
    "median": POSITIVE,
    "rounds": ROUNDS,
    "calls_per_round": INT_POS,
    "rel_iqr": _nullable(NONNEG),
    "stability": STR,
    "first_call_s": _nullable(NONNEG),
    "peak_memory_bytes": _nullable(INT_NONNEG),
    "flops": _nullable(NONNEG),
    "bytes": _nullable(NONNEG),
    "policy": OBJECT,
    "telemetry": _nullable(OBJECT),
}
#: Version 2: required fields of a run (``policy`` is now an id in ``policies``) ...
RUN_REQUIRED_V2: dict[str, Check] = {
    "run_id": STR,
    "timestamp": TIMESTAMP,
    "fingerprint": STR,
    "policy": STR,
    "median": POSITIVE,
    "rounds": ROUNDS,
    "calls_per_round": INT_POS,
    "stability": STR,
}
#: ... and the optional ones, left out when there is no value.
RUN_OPTIONAL_V2: dict[str, Check] = {
    "meta": OBJECT,
    "rel_iqr": NONNEG,
    "first_call_s": NONNEG,
    "peak_memory_bytes": INT_NONNEG,
    "flops": NONNEG,
    "bytes": NONNEG,
    "telemetry": OBJECT,
    "extra": OBJECT,
    "plugin_version": STR,
    "warmup_rounds": INT_NONNEG,
    "trimmed": INT_NONNEG,
    # from version 3 on: the CUDA events backend's second figure, and whether its device
    # time had the host hidden (version-2 files never hold them)
    "e2e_rounds": ROUNDS,
    "host_hidden": (lambda v: isinstance(v, bool), "true or false"),
    "host_s": NONNEG,
    # the numeric fingerprint of the output (verdict/numerics.py), where it returned tensors
    "numerics": (is_fingerprint, "a numerics fingerprint (a list of tensor entries)"),
    # the caching allocator's figures per call (measure/allocation.py), CUDA runs only
    "memory": OBJECT,
    # whether the rounds had their CPUs (measure/contention.py), the tracer while measuring
    "contention": (
        lambda v: is_contention(v),
        "a contention record (an object with waited >= 0, threads >= 1, clock thread or wall)",
    ),
    "tracer": STR,
}


def is_contention(v: Any) -> bool:
    """Whether ``v`` is a run's contention as :mod:`pytest_gpuperf.measure.contention` records
    it: ``waited`` (if any) a number >= 0, ``threads`` (if any) >= 1, ``clock`` (if any)
    "thread" or "wall"."""
    if not isinstance(v, dict):
        return False
    waited: Any = v.get("waited", 0.0)
    threads: Any = v.get("threads", 1.0)
    return (
        _is_number(waited)
        and waited >= 0
        and _is_number(threads)
        and threads >= 1
        and v.get("clock", "wall") in ("thread", "wall")
    )


#: The optional fields of a run a save has just recorded: its numerics fingerprint was
#: checked when it was recorded (so that a save does not check it twice).
_WRITTEN_OPTIONAL: dict[str, Check] = {
    **RUN_OPTIONAL_V2,
    "numerics": (lambda v: isinstance(v, list), "a list of tensor entries"),
}

#: Run fields whose content is free-form JSON.
_OPAQUE = ("meta", "policy", "telemetry", "extra", "memory")


def _describe(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"the boolean {str(v).lower()}"
    if isinstance(v, dict):
        return "an object"
    if isinstance(v, list):
        return f"a list of {len(v)}" if v else "an empty list"
    r = repr(v)
    r = r if len(r) <= 40 else r[:37] + "..."
    return f"the string {r}" if isinstance(v, str) else f"{type(v).__name__} {r}"


def _check(value: Any, check: Check, where: str) -> None:
    pred, desc = check
    if not pred(value):
        raise SchemaProblem(f"{where}: expected {desc}, got {_describe(value)}")


def _fields(obj: Mapping[str, Any], required: set[str], optional: set[str], where: str) -> None:
    missing = sorted(required - set(obj))
    if missing:
        raise SchemaProblem(f"{where}: missing field {', '.join(repr(m) for m in missing)}")
    unknown = sorted(set(obj) - required - optional)
    if unknown:
        raise SchemaProblem(
            f"{where}: unknown field {', '.join(repr(u) for u in unknown)} "
            "(each field a version allows is fixed; a new field comes with a new schema version)"
        )


#: How deep an opaque value (meta, policy, telemetry, extra) may nest. The deepest the
#: plugin writes is the kernel inventory, 5 levels; deeper is a hand edit or an attack, and
#: recursive code (json, copy) would fail on it with a RecursionError.
MAX_NESTING = 32


def _json_value(v: Any, where: str) -> None:
    """An opaque field must still be plain JSON: finite numbers, at most MAX_NESTING deep.

    Iterative, so a deep value is an error that says where, not a RecursionError.
    """
    stack: list[tuple[Any, str, int]] = [(v, where, 0)]
    while stack:
        x, at, depth = stack.pop()
        if isinstance(x, (dict, list)):
            if depth >= MAX_NESTING:
                raise SchemaProblem(f"{at}: nested more than {MAX_NESTING} levels deep")
            items = x.items() if isinstance(x, dict) else enumerate(x)
            for k, y in items:
                if isinstance(y, (dict, list, float)):
                    stack.append((y, f"{at}[{k!r}]", depth + 1))
        elif isinstance(x, float) and not math.isfinite(x):
            raise SchemaProblem(f"{at}: expected a finite number, got {x!r}")


def check_nesting(value: Any, limit: int = MAX_NESTING + 8) -> None:
    """Raise :class:`SchemaProblem` if any part of ``value`` nests deeper than ``limit``."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        x, depth = stack.pop()
        if isinstance(x, (dict, list)):
            if depth >= limit:
                raise SchemaProblem(f"the JSON is nested more than {MAX_NESTING} levels deep")
            for y in x.values() if isinstance(x, dict) else x:
                if isinstance(y, (dict, list)):
                    stack.append((y, depth + 1))


def validate(doc: Any, version: int) -> None:
    """Raise :class:`SchemaProblem` unless ``doc`` is a valid one-file document (version 1, 2)."""
    if not isinstance(doc, dict):
        raise SchemaProblem(f"top level: expected an object, got {_describe(doc)}")
    top = _TOP_FIELDS_V1 | ({"policies"} if version >= 2 else set())
    _fields(doc, top, set(), "top level")
    _check(doc["name"], STR, "name")
    _check(doc["plugin_version"], STR, "plugin_version")
    _check(doc["created"], TIMESTAMP, "created")
    _check(doc["updated"], TIMESTAMP, "updated")
    policies: dict[str, Any] = {}
    if version >= 2:
        _tables(doc)
        policies = doc["policies"]
        required, optional = RUN_REQUIRED_V2, RUN_OPTIONAL_V2
    else:
        _tables({"fingerprints": doc["fingerprints"], "policies": {}})
        required, optional = RUN_FIELDS_V1, {}
    fps = doc["fingerprints"]
    benches = doc["benchmarks"]
    _check(benches, OBJECT, "benchmarks")
    for key, bench in benches.items():
        where = f"benchmarks[{key!r}]"
        _benchmark(bench, where)
        runs = bench["runs"]
        for i, run in enumerate(runs):
            rwhere = f"{where}.runs[{i}]"
            _run(run, required, optional, rwhere)
            if run["fingerprint"] not in fps:
                raise SchemaProblem(
                    f"{rwhere}.fingerprint: {run['fingerprint']!r} is not in the fingerprints table"
                )
            if version >= 2 and run["policy"] not in policies:
                raise SchemaProblem(
                    f"{rwhere}.policy: {run['policy']!r} is not in the policies table"
                )


def _benchmark(bench: Any, where: str) -> None:
    """A benchmark's identity and its ``runs`` list (whatever a run is in this version)."""
    _check(bench, OBJECT, where)
    _fields(bench, _BENCH_FIELDS, set(), where)
    _check(bench["nodeid"], STR, f"{where}.nodeid")
    _check(bench["name"], _nullable(STR), f"{where}.name")
    _check(bench["mode"], STR, f"{where}.mode")
    params = bench["params"]
    _check(params, OBJECT, f"{where}.params")
    for pk, pv in params.items():
        _check(pv, (lambda v: isinstance(v, str), "a string"), f"{where}.params[{pk!r}]")
    _check(bench["runs"], (lambda v: isinstance(v, list), "a list"), f"{where}.runs")


def _run(
    run: Any, required: Mapping[str, Check], optional: Mapping[str, Check], where: str
) -> None:
    if _run_ok(run, required, optional):
        return  # the usual case, checked without naming every place; else said where below
    _check(run, OBJECT, where)
    _fields(run, set(required), set(optional), where)
    for name, check in (*required.items(), *optional.items()):
        if name in run:
            _check(run[name], check, f"{where}.{name}")
    for opaque in _OPAQUE:
        _json_value(run.get(opaque), f"{where}.{opaque}")


def _run_ok(run: Any, required: Mapping[str, Check], optional: Mapping[str, Check]) -> bool:
    """Whether :func:`_run` accepts ``run`` (True only when it does; False when it may not,
    and then :func:`_run` says what is wrong, where)."""
    if type(run) is not dict:
        return False
    keys = run.keys()
    if not keys >= required.keys() or not keys <= required.keys() | optional.keys():
        return False
    for name, value in run.items():
        pred = (required.get(name) or optional[name])[0]
        if not pred(value):
            return False
    return all(_plain_ok(run.get(opaque), 0) for opaque in _OPAQUE)


_SCALAR_TYPES = (str, int, bool, type(None))


def _plain_ok(x: Any, depth: int) -> bool:
    """Whether :func:`_json_value` accepts ``x`` at ``depth`` (False also for what it might
    not: a type json does not make). Recursion is bounded by :data:`MAX_NESTING`."""
    t = type(x)
    if t is float:
        return math.isfinite(x)
    if t is dict:
        items: Any = x.values()
    elif t is list:
        items = x
    else:
        return t in _SCALAR_TYPES
    if depth >= MAX_NESTING:
        return False
    for y in items:
        ty = type(y)
        if ty is float:
            if not math.isfinite(y):
                return False
        elif ty is dict or ty is list:
            if not _plain_ok(y, depth + 1):
                return False
        elif ty not in _SCALAR_TYPES:
            return False
    return True


def _tables(doc: Mapping[str, Any]) -> None:
    """The fingerprints and policies tables (versions 2 and 3)."""
    fps = doc["fingerprints"]
    _check(fps, OBJECT, "fingerprints")
    for fid, fp in fps.items():
        where = f"fingerprints[{fid!r}]"
        _check(fp, OBJECT, where)
        for k, v in fp.items():
            if not (v is None or isinstance(v, (str, bool)) or _is_number(v)):
                raise SchemaProblem(
                    f"{where}[{k!r}]: expected a string, number, boolean or null, "
                    f"got {_describe(v)}"
                )
    policies = doc["policies"]
    _check(policies, OBJECT, "policies")
    for pid, pol in policies.items():
        _check(pol, OBJECT, f"policies[{pid!r}]")
        _json_value(pol, f"policies[{pid!r}]")


_INDEX_FIELDS = _TOP_FIELDS_V1 | {"policies", "segments"}
_SEGMENT_FIELDS = {"schema", "schema_version", "baseline", "segment", "timestamp", "runs"}
SEGMENT_ENTRY: dict[str, Check] = {
    "sha256": (lambda v: isinstance(v, str) and bool(SHA256.fullmatch(v)), "64 hex digits"),
    "timestamp": TIMESTAMP,
    "runs": INT_NONNEG,
    "run_ids": (lambda v: isinstance(v, list) and all(STR[0](x) for x in v), "a list of strings"),
}
SEGMENT_ENTRY_OPTIONAL: dict[str, Check] = {"commit": STR}
_SEG_ID: Check = (
    lambda v: isinstance(v, str) and bool(SEGMENT_ID.fullmatch(v)),
    "a segment id (a file name of letters, digits, '.', '_' and '-')",
)
_DIGEST: Check = (lambda v: isinstance(v, str) and bool(DIGEST.fullmatch(v)), "12 hex digits")


def validate_index(doc: Any) -> None:
    """Raise :class:`SchemaProblem` unless ``doc`` is a valid version-3 index."""
    if not isinstance(doc, dict):
        raise SchemaProblem(f"top level: expected an object, got {_describe(doc)}")
    _fields(doc, _INDEX_FIELDS, set(), "top level")
    _check(doc["name"], STR, "name")
    _check(doc["plugin_version"], STR, "plugin_version")
    _check(doc["created"], TIMESTAMP, "created")
    _check(doc["updated"], TIMESTAMP, "updated")
    _tables(doc)
    fps, policies, segments = doc["fingerprints"], doc["policies"], doc["segments"]
    _check(segments, OBJECT, "segments")
    for sid, entry in segments.items():
        where = f"segments[{sid!r}]"
        _check(sid, _SEG_ID, where)
        _check(entry, OBJECT, where)
        _fields(entry, set(SEGMENT_ENTRY), set(SEGMENT_ENTRY_OPTIONAL), where)
        for name, check in (*SEGMENT_ENTRY.items(), *SEGMENT_ENTRY_OPTIONAL.items()):
            if name in entry:
                _check(entry[name], check, f"{where}.{name}")
    benches = doc["benchmarks"]
    _check(benches, OBJECT, "benchmarks")
    for key, bench in benches.items():
        where = f"benchmarks[{key!r}]"
        _benchmark(bench, where)
        for i, ref in enumerate(bench["runs"]):
            rwhere = f"{where}.runs[{i}]"
            if not (isinstance(ref, list) and len(ref) == 4):
                raise SchemaProblem(
                    f"{rwhere}: expected [segment, digest, fingerprint, policy], "
                    f"got {_describe(ref)}"
                )
            sid, digest, fid, pid = ref
            _check(digest, _DIGEST, f"{rwhere}[1]")
            for value, table, what in (
                (sid, segments, "segments"),
                (fid, fps, "fingerprints"),
                (pid, policies, "policies"),
            ):
                if not isinstance(value, str) or value not in table:
                    raise SchemaProblem(f"{rwhere}: {_describe(value)} is not in the {what} table")


def validate_segment(
    doc: Any, segment: str | None = None, *, numerics_checked: bool = False
) -> None:
    """Raise :class:`SchemaProblem` unless ``doc`` is a valid version-3 segment (``segment``).

    ``numerics_checked``: the runs' ``numerics`` were checked already, as a save checks
    them when it records a result (:func:`~pytest_gpuperf.baseline.records.record_from_result`).
    """
    optional = _WRITTEN_OPTIONAL if numerics_checked else RUN_OPTIONAL_V2
    if not isinstance(doc, dict):
        raise SchemaProblem(f"top level: expected an object, got {_describe(doc)}")
    _fields(doc, _SEGMENT_FIELDS, set(), "top level")
    if doc["schema"] != SEGMENT_SCHEMA:
        raise SchemaProblem(f"schema: expected {SEGMENT_SCHEMA!r}, got {_describe(doc['schema'])}")
    if doc["schema_version"] != SCHEMA_VERSION:
        raise SchemaProblem(
            f"schema_version: expected {SCHEMA_VERSION}, got {_describe(doc['schema_version'])}"
        )
    _check(doc["baseline"], STR, "baseline")
    _check(doc["segment"], _SEG_ID, "segment")
    if segment is not None and doc["segment"] != segment:
        raise SchemaProblem(f"segment: expected {segment!r}, got {_describe(doc['segment'])}")
    _check(doc["timestamp"], TIMESTAMP, "timestamp")
    runs = doc["runs"]
    _check(runs, OBJECT, "runs")
    for key, by_digest in runs.items():
        _check(by_digest, OBJECT, f"runs[{key!r}]")
        for digest, run in by_digest.items():
            where = f"runs[{key!r}][{digest!r}]"
            _check(digest, _DIGEST, where)
            _run(run, RUN_REQUIRED_V2, optional, where)


# --- versions and migration --------------------------------------------------


def read_version(doc: Any) -> int:
    """The document's schema version, checked to be one this code can read."""
    if not isinstance(doc, dict):
        raise SchemaProblem(f"top level: expected an object, got {_describe(doc)}")
    if "schema" not in doc:
        raise SchemaProblem("top level: missing field 'schema' (not a pytest-gpuperf baseline?)")
    if doc["schema"] != SCHEMA:
        raise SchemaProblem(
            f"schema: expected {SCHEMA!r}, got {_describe(doc['schema'])} "
            "(not a pytest-gpuperf baseline file)"
        )
    if "schema_version" not in doc:
        raise SchemaProblem("top level: missing field 'schema_version'")
    version = doc["schema_version"]
    _check(version, INT_POS, "schema_version")
    if version > SCHEMA_VERSION:
        raise FutureSchema(
            f"schema_version {version} was written by a newer pytest-gpuperf; this one reads "
            f"versions up to {SCHEMA_VERSION}",
            "Upgrade pytest-gpuperf (pip install -U pytest-gpuperf) to read it.",
        )
    return int(version)


def _v1_to_v2(doc: dict[str, Any]) -> dict[str, Any]:
    """Policies into a table; null and empty optional fields left out.

    What version 1 did not record (``plugin_version``, ``warmup_rounds``,
    ``trimmed``, ``extra`` of each run) stays absent, i.e. unknown.
    """
    policies: dict[str, Any] = {}
    for bench in doc["benchmarks"].values():
        for run in bench["runs"]:
            pid = content_id(run["policy"])
            policies[pid] = run["policy"]
            run["policy"] = pid
            for name in RUN_OPTIONAL_V2:
                if name in run and run[name] in (None, {}):
                    del run[name]
    doc["policies"] = policies
    return doc


#: ``MIGRATIONS[n]`` turns a valid version-``n`` document into a version ``n + 1`` one.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _v1_to_v2}


def upgrade(doc: Any) -> tuple[dict[str, Any], int]:
    """Validate a one-file ``doc`` (version 1 or 2) in its own version, migrate it to the
    document (:data:`DOCUMENT_VERSION`).

    Returns the document and the version it was read as. A migrated document
    is a new object (``doc`` is not changed); a version-2 one is ``doc`` itself.
    """
    version = read_version(doc)
    if version > DOCUMENT_VERSION:
        raise SchemaProblem(
            f"schema_version {version} is the index of a sharded baseline; read it with its "
            "runs folder (BaselineStore.load, or pytest-gpuperf show PATH)"
        )
    validate(doc, version)
    if version == DOCUMENT_VERSION:
        return doc, version
    out: dict[str, Any] = json.loads(json.dumps(doc))  # a private deep copy
    try:
        for v in range(version, DOCUMENT_VERSION):
            out = MIGRATIONS[v](out)
            out["schema_version"] = v + 1
        validate(out, DOCUMENT_VERSION)
    except Exception as e:  # a valid old file must migrate: anything else is our bug
        raise SchemaProblem(
            f"cannot migrate it from schema version {version} to {SCHEMA_VERSION} ({e})",
            "This is a bug in pytest-gpuperf; please report it with the file attached.",
        ) from e
    return out, version


# --- reading --------------------------------------------------------------------


def read_index(data: bytes) -> tuple[dict[str, Any], int]:
    """Bytes of ``NAME.json`` -> (a document for versions 1-2, or a version-3 index; the
    version it was written in), with canonical ids; a :class:`SchemaProblem` says why not."""
    raw = load_json(data)
    version = read_version(raw)
    if version <= DOCUMENT_VERSION:
        doc, version = upgrade(raw)
        return canonical_ids(doc), version
    validate_index(raw)
    return canonical_ids(raw, index=True), version


def load_json(data: bytes) -> Any:
    """Bytes of a JSON file of the store -> the value, or a :class:`SchemaProblem` saying why not.

    Empty, not UTF-8, merge-conflict markers, truncated or invalid JSON (with
    line and column), a key given twice.
    """
    if not data or data.isspace():
        raise SchemaProblem("the file is empty (truncated, or an interrupted copy)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SchemaProblem(f"not UTF-8 text (invalid byte at offset {e.start})") from None
    if (b"<<<<<<< " in data or b">>>>>>> " in data) and re.search(
        r"^(<<<<<<<|>>>>>>>) ", text, re.MULTILINE
    ):
        raise SchemaProblem(
            "it contains git merge-conflict markers (<<<<<<< / >>>>>>>)",
            "Resolve the conflict by keeping one side (git checkout --ours or --theirs on "
            "this file; runs from both sides cannot be merged by hand), or restore it.",
        )
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates)
    except RecursionError:
        raise SchemaProblem(
            f"the JSON is nested more than {MAX_NESTING} levels deep (so deep that the parser "
            "gave up); pytest-gpuperf never writes that"
        ) from None
    except json.JSONDecodeError as e:
        where = f"line {e.lineno}, column {e.colno}"
        if e.pos >= len(text.rstrip()) or _ends_early(text):
            raise SchemaProblem(
                f"truncated: the JSON ends before it is complete (the parser stopped at "
                f"{where}: {e.msg})"
            ) from None
        raise SchemaProblem(f"invalid JSON at {where}: {e.msg}") from None


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json's hook: a key given twice (a block pasted twice) would silently lose one."""
    out = dict(pairs)
    if len(out) == len(pairs):
        return out
    out = {}
    for k, v in pairs:
        if k in out:
            raise SchemaProblem(f"the key {k!r} appears twice in one object")
        out[k] = v
    return out


def _ends_early(text: str) -> bool:
    """True if ``text`` stops inside a string or with brackets left open (a cut-off file)."""
    depth, in_string, escaped = 0, False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
    return in_string or depth > 0


# --- ids of content ------------------------------------------------------------


def content_id(obj: Any) -> str:
    """A short stable id of JSON content: 12 hex digits of the SHA-256 of its canonical JSON.

    Independent of key order, process and Python version, so that ids written
    by one machine are found by another. Baseline files key fingerprints and
    measurement policies by it, and name segments with it.
    """
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(blob.encode("ascii")).hexdigest()[:12]


def fingerprint_id(fp: Mapping[str, Any]) -> str:
    """The id of fingerprint ``fp`` (:func:`content_id`)."""
    return content_id(dict(fp))


def digest(run: Mapping[str, Any]) -> str:
    """What tells two runs of one benchmark apart in an index: run id, rounds and median."""
    return content_id([run["run_id"], run["rounds"], run["median"]])


def segment_id(stamp: str, runs: Mapping[str, Any]) -> str:
    """``20251129T193800Z-1a2b3c4d``: the save's time (so names sort by it) and content."""
    when = _dt.datetime.fromisoformat(stamp).astimezone(_dt.timezone.utc)
    return f"{when:%Y%m%dT%H%M%SZ}-{content_id(runs)[:8]}"


def canonical_ids(doc: dict[str, Any], *, index: bool = False) -> dict[str, Any]:
    """Re-derive fingerprint and policy ids from their contents (in place; returns ``doc``).

    An id is only a hash of its content; recomputing it on load means a
    hand-edited fingerprint (say, declaring a new driver equivalent) is found
    under its new content, and two entries that became equal merge. ``doc`` is
    a document, or a version-3 index (``index=True``: runs are references).
    """
    for table, field, slot, ident in (
        ("fingerprints", "fingerprint", 2, fingerprint_id),
        ("policies", "policy", 3, content_id),
    ):
        rename = {old: ident(content) for old, content in doc[table].items()}
        if all(old == new for old, new in rename.items()):
            continue
        doc[table] = {rename[old]: content for old, content in doc[table].items()}
        for bench in doc["benchmarks"].values():
            for run in bench["runs"]:
                if index:
                    run[slot] = rename[run[slot]]
                else:
                    run[field] = rename[run[field]]
    return doc


# --- stable text ---------------------------------------------------------------

_INDENT = "  "


def dumps(doc: Mapping[str, Any], *, compact_depth: int | None = None) -> str:
    """Stable text that diffs well in git.

    Objects have sorted keys, one per line, two-space indent; lists of plain
    values (the rounds of a run, a run's reference in an index) stay on one
    line, so a new run adds one block and changes no other line. Values
    nested ``compact_depth`` levels deep are written on one line each (the
    runs of a segment). Ends with a newline. NaN is refused.
    """
    out: list[str] = []
    _emit(doc, 0, out, compact_depth)
    out.append("\n")
    return "".join(out)


def _emit(v: Any, level: int, out: list[str], compact: int | None) -> None:
    pad = _INDENT * (level + 1)
    if level == compact:
        out.append(_LINE(v))
    elif isinstance(v, Mapping):
        if not v:
            out.append("{}")
            return
        out.append("{\n")
        items = sorted(v.items())
        for i, (k, x) in enumerate(items):
            out.append(pad + json.dumps(str(k), ensure_ascii=False) + ": ")
            _emit(x, level + 1, out, compact)
            out.append(",\n" if i < len(items) - 1 else "\n")
        out.append(_INDENT * level + "}")
    elif isinstance(v, (list, tuple)):
        if all(not isinstance(x, (Mapping, list, tuple)) for x in v):
            out.append(_LINE(v))
            return
        out.append("[\n")
        for i, x in enumerate(v):
            out.append(pad)
            _emit(x, level + 1, out, compact)
            out.append(",\n" if i < len(v) - 1 else "\n")
        out.append(_INDENT * level + "]")
    else:
        out.append(_LINE(v))


#: One value on one line: sorted keys, ", " and ": " separators, no NaN (C-accelerated).
_LINE = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(", ", ": ")
).encode


def plain(obj: Any) -> Any:
    """A JSON-safe copy of an opaque value: string keys, lists, finite floats, else str()."""
    if isinstance(obj, Mapping):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if obj is None or isinstance(obj, (str, int, bool)):
        return obj
    return str(obj)


# --- a save's runs, added to an index --------------------------------------------


class RefusedWrite(SchemaProblem):
    """What a save made is not valid (a bug): it is not written. ``segment``: in which."""

    def __init__(self, problem: str, segment: str | None = None):
        super().__init__(problem)
        self.segment = segment


@dataclass
class Addition:
    """What :func:`add_runs` made of a save: the new segment (none if every run was there
    already), the new index as text, and the counts the save reports."""

    segment_id: str | None
    segment: bytes
    index: bytes
    added: int
    dropped: int
    benchmarks: int
    #: the segments the new index names
    segments: frozenset[str]


def empty_document(name: str, stamp: str) -> dict[str, Any]:
    """A document (the in-memory form of any version) with no benchmarks."""
    return {
        "schema": SCHEMA,
        "schema_version": DOCUMENT_VERSION,
        "name": name,
        "plugin_version": __version__,
        "created": stamp,
        "updated": stamp,
        "fingerprints": {},
        "policies": {},
        "benchmarks": {},
    }


def empty_index(name: str, stamp: str) -> dict[str, Any]:
    """A version-3 index with no benchmarks."""
    return {**empty_document(name, stamp), "schema_version": SCHEMA_VERSION, "segments": {}}


def add_runs(
    index: dict[str, Any],
    fps: Mapping[str, dict[str, Any]],
    runs: Sequence[tuple[Mapping[str, Any], dict[str, Any]]],
    skipped: list[tuple[str, str]],
    *,
    name: str,
    stamp: str,
    keep_runs: int,
) -> Addition:
    """Add ``runs`` (benchmark identity, record) to ``index``, in place: their fingerprints
    ``fps``, one new segment, each benchmark trimmed to its newest ``keep_runs`` runs per
    fingerprint, then entries no run uses any more dropped. Returns the segment and the
    index as the files' bytes, both validated (:class:`RefusedWrite` if not). A run
    already saved (a retried job) is added to ``skipped`` instead.
    """
    index["fingerprints"].update(fps)
    policies, benches = index["policies"], index["benchmarks"]
    segment: dict[str, dict[str, dict[str, Any]]] = {}
    touched: list[tuple[str, str, str, str]] = []
    for bid, rec in runs:
        key, fid = bid["key"], rec["fingerprint"]
        dig, pid = digest(rec), content_id(rec["policy"])
        entry = benches.get(key)
        if (entry and any(r[1] == dig and r[2] == fid for r in entry["runs"])) or dig in (
            segment.get(key) or {}
        ):
            # The same run saved again (a retried job): once is enough. Distinct runs
            # that share a run id (subprocesses of one session) are kept.
            skipped.append((key, f"run {rec['run_id']} is already saved"))
            continue
        entry = benches.setdefault(key, {"runs": []})
        entry.update(
            nodeid=bid["nodeid"],
            name=bid.get("name"),
            mode=bid["mode"],
            params={str(k): str(v) for k, v in (bid.get("params") or {}).items()},
        )
        policies[pid] = rec["policy"]
        segment.setdefault(key, {})[dig] = {**rec, "policy": pid}
        touched.append((key, dig, fid, pid))
    sid, data = None, b""
    if touched:
        sid = segment_id(stamp, segment)
        doc = {
            "schema": SEGMENT_SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "baseline": name,
            "segment": sid,
            "timestamp": stamp,
            "runs": segment,
        }
        try:
            validate_segment(doc, sid, numerics_checked=True)
        except SchemaProblem as e:
            raise RefusedWrite(str(e), sid) from None
        data = dumps(doc, compact_depth=3).encode("utf-8")
        index["segments"][sid] = segment_entry(data, stamp, segment)
        for key, dig, fid, pid in touched:
            benches[key]["runs"].append([sid, dig, fid, pid])
    dropped = 0
    for key, fid in {(key, fid) for key, _, fid, _ in touched}:
        dropped += trim(benches[key]["runs"], fid, keep_runs)
    drop_unused(index)
    index.update(name=name, updated=stamp)
    return Addition(
        sid,
        data,
        index_bytes(index),
        len(touched),
        dropped,
        len({key for key, _, _, _ in touched}),
        frozenset(index["segments"]),
    )


def segment_entry(
    data: bytes, stamp: str, runs: Mapping[str, Mapping[str, Mapping[str, Any]]]
) -> dict[str, Any]:
    """The index's entry of a segment whose bytes are ``data``, saved at ``stamp``."""
    all_runs = [r for by_digest in runs.values() for r in by_digest.values()]
    entry: dict[str, Any] = {
        "sha256": hashlib.sha256(data).hexdigest(),
        "timestamp": stamp,
        "runs": len(all_runs),
        "run_ids": sorted({r["run_id"] for r in all_runs}),
    }
    for r in all_runs:  # the first run's commit that says one
        meta = r.get("meta") or {}
        for k in ("git_sha", "ci_sha"):
            if isinstance(meta.get(k), str) and meta[k]:
                entry["commit"] = meta[k]
                return entry
    return entry


def index_bytes(index: dict[str, Any]) -> bytes:
    """``index`` as the bytes of ``NAME.json`` (stamped with this version), validated."""
    index["schema"] = SCHEMA
    index["schema_version"] = SCHEMA_VERSION
    index["plugin_version"] = __version__
    try:
        validate_index(index)
    except SchemaProblem as e:  # a bug: never write what we would refuse to read
        raise RefusedWrite(str(e)) from None
    return dumps(index).encode("utf-8")


def trim(runs: list[list[str]], fid: str, keep: int) -> int:
    """Drop the oldest runs of fingerprint ``fid`` beyond ``keep``; returns how many."""
    idx = [i for i, r in enumerate(runs) if r[2] == fid]
    drop = set(idx[: max(0, len(idx) - keep)])
    if drop:
        runs[:] = [r for i, r in enumerate(runs) if i not in drop]
    return len(drop)


def drop_unused(index: dict[str, Any]) -> tuple[int, int]:
    """Remove benchmarks without runs, and table entries and segments no run refers to;
    returns how many benchmarks and fingerprints went."""
    benches = index["benchmarks"]
    empty = [k for k, b in benches.items() if not b["runs"]]
    for k in empty:
        del benches[k]
    refs = [r for b in benches.values() for r in b["runs"]]
    used_fps = {r[2] for r in refs}
    unused = [f for f in index["fingerprints"] if f not in used_fps]
    for f in unused:
        del index["fingerprints"][f]
    used = {r[3] for r in refs}
    index["policies"] = {p: v for p, v in index["policies"].items() if p in used}
    used = {r[0] for r in refs}
    index["segments"] = {s: v for s, v in index["segments"].items() if s in used}
    return len(empty), len(unused)
