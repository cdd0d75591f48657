"""The baseline file format (schema version 1): an index, and segments of runs, one a line.

``NAME.json``, the index, holds the fingerprints and policies tables, each benchmark's
identity and its runs as [segment, digest, fingerprint, policy], and the segments table.
``NAME.runs/<segment>.json`` holds the runs of one save, each a line: its
:class:`~pytest_gpuperf.model.Run` less what the index holds. What a line may hold is
derived from ``Run``'s annotations, so a new field needs no entry here. The pre-release
formats (one file, ``schema_version`` 1 without segments; 2; 3) are refused with how to
save again; the next version is 4.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import re
import statistics
import typing
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import MISSING, dataclass, fields
from typing import Any

from pytest_gpuperf import __version__
from pytest_gpuperf.baseline.fileio import dumps
from pytest_gpuperf.measure.numerics_format import is_fingerprint
from pytest_gpuperf.model import RUN_FIELDS, Run, thawed

SCHEMA = "pytest-gpuperf/baseline"
SEGMENT_SCHEMA = "pytest-gpuperf/baseline-runs"
SCHEMA_VERSION = 1
#: The pre-release formats' versions (1 too: told apart by its segments).
PRE_RELEASE = (1, 2, 3)
SEGMENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
DIGEST = re.compile(r"[0-9a-f]{12}")
SHA256 = re.compile(r"[0-9a-f]{64}")
#: How deep an opaque value may nest (the kernel inventory: 5 levels): deeper is a hand
#: edit, on which recursive code would fail.
MAX_NESTING = 32
#: The range a stored time (seconds) may take: no call takes less than a picosecond, and a
#: round of more than a day is no benchmark (a forged 5e-324 made "nanx faster").
TIMES = (1e-12, 86400.0)


class SchemaProblem(ValueError):
    """What is wrong with a file, and where; ``remedy`` where restoring it is no fix."""

    def __init__(self, problem: str, remedy: str | None = None):
        super().__init__(problem)
        self.remedy = remedy


class FutureSchema(SchemaProblem):
    """A file of a schema version newer than this pytest-gpuperf reads."""


# --- values ----------------------------------------------------------------------------------


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    """A JSON number that is also a finite float (json reads any integer, even 10**400)."""
    if _is_int(v):
        return bool(abs(v) <= 1.7e308)
    return isinstance(v, float) and math.isfinite(v)


def _is_time(v: Any) -> bool:
    return _is_number(v) and (v == 0 or TIMES[0] <= v <= TIMES[1])


def is_timestamp(v: Any) -> bool:
    """ISO 8601 with a time zone, so that timestamps from any machine compare."""
    try:
        return isinstance(v, str) and _dt.datetime.fromisoformat(v).tzinfo is not None
    except ValueError:
        return False


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


Check = tuple[Callable[[Any], bool], str]


def _check(value: Any, check: Check, where: str) -> None:
    if not check[0](value):
        raise SchemaProblem(f"{where}: expected {check[1]}, got {_describe(value)}")


def check_nesting(
    value: Any, where: str = "the JSON", limit: int = MAX_NESTING, *, finite: bool = True
) -> None:
    """Raise :class:`SchemaProblem` if ``value`` nests deeper than ``limit`` or (``finite``)
    holds a number that is not finite (iterative: no crash on depth)."""
    stack: list[tuple[Any, str, int]] = [(value, where, 0)]
    while stack:
        x, at, depth = stack.pop()
        if isinstance(x, (dict, list)):
            if depth >= limit:
                raise SchemaProblem(f"{at}: nested more than {limit} levels deep")
            items = x.items() if isinstance(x, dict) else enumerate(x)
            stack.extend((y, f"{at}[{k!r}]", depth + 1) for k, y in items)
        elif finite and isinstance(x, float) and not math.isfinite(x):
            raise SchemaProblem(f"{at}: expected a finite number, got {x!r}")


def is_contention(v: Any) -> bool:
    """Whether ``v`` is a contention record (:mod:`pytest_gpuperf.measure.contention`)."""
    if not isinstance(v, dict):
        return False
    waited: Any = v.get("waited", 0.0)
    threads: Any = v.get("threads", 1.0)
    numbers = _is_number(waited) and _is_number(threads)
    clock = v.get("clock", "wall") in ("thread", "wall")
    return bool(numbers and waited >= 0 and threads >= 1 and clock)


# --- a run's line ------------------------------------------------------------------------------

IN_INDEX = ("id", "policy", "environment", "fingerprint_id")
#: A line's times (seconds): kept to 4 significant figures, checked to be in :data:`TIMES`.
_TIMES = frozenset({"rounds", "warmup", "e2e_rounds"} | {n for n in RUN_FIELDS if n[-2:] == "_s"})
#: What a field's value must be beyond its type, and what is left out of a line when not so.
_KEPT_IF: dict[str, Check] = {
    "numerics": (is_fingerprint, "a numerics fingerprint (a list of tensor entries)"),
    "contention": (is_contention, "a contention record (waited >= 0, threads >= 1, clock)"),
    "memory": (lambda v: bool(v.get("available")), "the allocator's figures"),
}
_MORE: dict[str, Check] = {
    "rounds": (bool, "a non-empty list of times"),
    "calls_per_round": (lambda v: v >= 1, "a whole number >= 1"),
    "timestamp": (is_timestamp, "an ISO 8601 timestamp with a time zone"),
    **_KEPT_IF,
}
_SCALARS: dict[Any, Check] = {
    bool: (lambda v: isinstance(v, bool), "true or false"),
    int: (lambda v: _is_int(v) and v >= 0, "a whole number >= 0"),
    float: (lambda v: _is_number(v) and v >= 0, "a number >= 0"),
    str: (lambda v: isinstance(v, str) and v != "", "a non-empty string"),
}
_STR = _SCALARS[str]
_OBJECT: Check = (lambda v: isinstance(v, dict), "an object")


def _check_of(name: str, hint: Any) -> Check:
    """How a line's ``name`` is checked, from its annotation on :class:`Run`."""
    if typing.get_origin(hint) in (typing.Union, type(int | None)):
        (hint,) = [a for a in typing.get_args(hint) if a is not type(None)]
    one = _SCALARS.get(hint, _OBJECT)
    if name in _TIMES:
        one = (_is_time, f"a time in seconds (0, or {TIMES[0]:g} to {TIMES[1]:g})")
    if typing.get_origin(hint) is not tuple:
        return one
    return (lambda v: isinstance(v, list) and all(map(one[0], v)), f"a list, each {one[1]}")


_HINTS = typing.get_type_hints(Run)
#: Every field a line may hold, and its check.
LINE: dict[str, Check] = {n: _check_of(n, _HINTS[n]) for n in RUN_FIELDS if n not in IN_INDEX}
#: A line's required fields: those a run must be made with, and what a save sets.
_REQUIRED = {f.name for f in fields(Run) if f.default is f.default_factory is MISSING} & set(LINE)
_REQUIRED |= {"run_id", "timestamp"}


def _sig4(v: Any) -> Any:
    if isinstance(v, float):
        return float(f"{v:.4g}")
    return [float(f"{x:.4g}") for x in v] if isinstance(v, (list, tuple)) else v


def run_line(run: Run) -> dict[str, Any]:
    """``run`` as a segment's line: times to 4 significant figures (more is timer noise),
    nothing empty, and no numerics, contention or memory value that is not one."""
    line: dict[str, Any] = {}
    for name, value in thawed({n: getattr(run, n) for n in LINE}).items():
        if (value is None or value == [] or value == {}) and name not in _REQUIRED:
            continue
        kept = _KEPT_IF.get(name)
        if kept is None or kept[0](value):
            line[name] = _sig4(value) if name in _TIMES else value
    return line


def check_line(line: Any, where: str) -> None:
    """Raise :class:`SchemaProblem` unless ``line`` is a stored run (:data:`LINE`)."""
    _record(line, LINE, where, set(LINE) - _REQUIRED)
    for name, value in line.items():
        if name in _MORE:
            _check(value, _MORE[name], f"{where}.{name}")
        elif isinstance(value, (dict, list)):
            check_nesting(value, f"{where}.{name}")
    if not _is_time(median := statistics.median_high(line["rounds"])) or median <= 0:
        raise SchemaProblem(f"{where}.rounds: their median is not a time > 0")


# --- reading ---------------------------------------------------------------------------------


def load_json(data: bytes) -> Any:
    """Bytes of a file of the store -> the value, or a :class:`SchemaProblem` saying why not."""
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
    if len(out) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise SchemaProblem(f"the key {k!r} appears twice in one object")
            seen.add(k)
    return out


def _ends_early(text: str) -> bool:
    """True if ``text`` stops inside a string or with brackets left open: a file cut off in a
    word or a number, or its tail filled with NUL bytes (as a crash leaves it)."""
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


def check_version(doc: Any, schema: str, what: str) -> None:
    """That ``doc`` is of ``schema``, in this version; a pre-release or a newer one said so."""
    if not isinstance(doc, dict):
        raise SchemaProblem(f"top level: expected an object, got {_describe(doc)}")
    if doc.get("schema") != schema:
        raise SchemaProblem(
            f"schema: expected {schema!r}, got {_describe(doc.get('schema'))} (not a "
            f"pytest-gpuperf {what})"
        )
    version = doc.get("schema_version")
    _check(version, (lambda v: _is_int(v) and v >= 1, "a whole number >= 1"), "schema_version")
    one_file = what == "baseline file" and "segments" not in doc
    if version == SCHEMA_VERSION and not one_file:
        return
    if version in PRE_RELEASE:
        raise SchemaProblem(
            f"it is in a pre-release format (schema_version {version}"
            f"{', one file' if one_file else ''}), which this pytest-gpuperf does not read",
            "Save the baseline again: move this file (and its NAME.runs folder) away, then "
            "run the benchmarks with --gpuperf-save=NAME as many times as you want runs.",
        )
    raise FutureSchema(
        f"schema_version {version} was written by a newer pytest-gpuperf; this one reads "
        f"version {SCHEMA_VERSION}",
        "Upgrade pytest-gpuperf (pip install -U pytest-gpuperf) to read it.",
    )


def read_index(data: bytes) -> dict[str, Any]:
    """Bytes of ``NAME.json`` -> the index, checked, with canonical ids."""
    index = load_json(data)
    check_version(index, SCHEMA, "baseline file")
    validate_index(index)
    return canonical_ids(index)


_TIMESTAMP = _MORE["timestamp"]
_ANY: Check = (lambda v: True, "anything")  # checked elsewhere
_INDEX = {"schema": _ANY, "schema_version": _ANY, "name": _STR, "plugin_version": _STR}
_INDEX |= {"created": _TIMESTAMP, "updated": _TIMESTAMP}
TABLES = ("fingerprints", "policies", "segments", "benchmarks")
_INDEX |= {k: _OBJECT for k in TABLES}
_SEGMENT_ENTRY: dict[str, Check] = {
    "sha256": (lambda v: isinstance(v, str) and bool(SHA256.fullmatch(v)), "64 hex digits"),
    "timestamp": _TIMESTAMP,
    "runs": _SCALARS[int],
    "run_ids": (lambda v: isinstance(v, list) and all(map(_STR[0], v)), "a list of strings"),
    "commit": _STR,
}
_DIGEST: Check = (lambda v: isinstance(v, str) and bool(DIGEST.fullmatch(v)), "12 hex digits")
_NAME: Check = (lambda v: v is None or _STR[0](v), "a non-empty string or null")
_SEG_ID: Check = (
    lambda v: isinstance(v, str) and bool(SEGMENT_ID.fullmatch(v)),
    "a segment id (a file name of letters, digits, '.', '_' and '-')",
)
_BENCHMARK = {"nodeid": _STR, "name": _NAME, "mode": _STR, "params": _OBJECT}
_BENCHMARK["runs"] = (lambda v: isinstance(v, list), "a list")
_SEGMENT = {"schema": _ANY, "schema_version": _ANY, "baseline": _STR, "segment": _ANY}
_SEGMENT |= {"timestamp": _TIMESTAMP, "runs": _OBJECT}


def _record(
    obj: Any, spec: Mapping[str, Check], where: str, optional: Set[str] = frozenset()
) -> None:
    """That ``obj`` is an object of the fields of ``spec``, each passing its check."""
    at = where or "top level"
    _check(obj, _OBJECT, at)
    if missing := sorted(set(spec) - set(optional) - set(obj)):
        raise SchemaProblem(f"{at}: missing field {', '.join(map(repr, missing))}")
    if unknown := sorted(set(obj) - set(spec)):
        raise SchemaProblem(
            f"{at}: unknown field {', '.join(map(repr, unknown))} (each field a version "
            "allows is fixed; a new field comes with a new schema version)"
        )
    for name, check in spec.items():
        if name in obj:
            _check(obj[name], check, f"{where}.{name}" if where else name)


def validate_index(doc: dict[str, Any]) -> None:
    """Raise :class:`SchemaProblem` unless ``doc`` (of this version) is a valid index."""
    _record(doc, _INDEX, "")
    _tables(doc)
    segments = doc["segments"]
    for sid, entry in segments.items():
        _check(sid, _SEG_ID, f"segments[{sid!r}]")
        _record(entry, _SEGMENT_ENTRY, f"segments[{sid!r}]", {"commit"})
    tables = [(doc[t], t) for t in ("segments", "fingerprints", "policies")]
    for key, bench in doc["benchmarks"].items():
        where = f"benchmarks[{key!r}]"
        _record(bench, _BENCHMARK, where)
        for pk, pv in bench["params"].items():
            _check(pv, (lambda v: isinstance(v, str), "a string"), f"{where}.params[{pk!r}]")
        for i, ref in enumerate(bench["runs"]):
            if not (isinstance(ref, list) and len(ref) == 4):
                raise SchemaProblem(
                    f"{where}.runs[{i}]: expected [segment, digest, fingerprint, policy], "
                    f"got {_describe(ref)}"
                )
            _check(ref[1], _DIGEST, f"{where}.runs[{i}][1]")
            for value, (table, what) in zip((ref[0], ref[2], ref[3]), tables, strict=True):
                if not isinstance(value, str) or value not in table:
                    raise SchemaProblem(
                        f"{where}.runs[{i}]: {_describe(value)} is not in the {what} table"
                    )


def _tables(doc: Mapping[str, Any]) -> None:
    """The fingerprints (scalars) and policies (plain JSON) tables."""
    for fid, fp in doc["fingerprints"].items():
        _check(fp, _OBJECT, f"fingerprints[{fid!r}]")
        for k, v in fp.items():
            if not (v is None or isinstance(v, (str, bool)) or _is_number(v)):
                raise SchemaProblem(
                    f"fingerprints[{fid!r}][{k!r}]: expected a string, number, boolean or "
                    f"null, got {_describe(v)}"
                )
    for pid, pol in doc["policies"].items():
        _check(pol, _OBJECT, f"policies[{pid!r}]")
        check_nesting(pol, f"policies[{pid!r}]")


def validate_segment(doc: Any, segment: str, *, lines: bool = True) -> None:
    """Raise :class:`SchemaProblem` unless ``doc`` is a valid segment ``segment`` (with
    ``lines=False``, its runs' lines are not checked: they are checked when read)."""
    check_version(doc, SEGMENT_SCHEMA, "baseline segment")
    _record(doc, _SEGMENT, "")
    if doc["segment"] != segment:
        raise SchemaProblem(f"segment: expected {segment!r}, got {_describe(doc['segment'])}")
    for key, by_digest in doc["runs"].items():
        _check(by_digest, _OBJECT, f"runs[{key!r}]")
        for dig, line in by_digest.items():
            where = f"runs[{key!r}][{dig!r}]"
            _check(dig, _DIGEST, where)
            if lines:
                check_line(line, where)


#: A run's line in a segment as a save writes it (``compact_depth=3``): 6 spaces, its
#: digest, its run; a benchmark's line: 4 spaces, its key, the brace of its runs.
_RUN_LINE = b'      "'
_RUN_AT = len(_RUN_LINE) + 12 + len(b'": ')
_BENCH_LINE = b'    "'


#: How far from its end a segment's tail is looked for (:func:`ends_as_written`).
TAIL = 4096


def ends_as_written(end: bytes, sid: str) -> bool:
    """Whether a segment's bytes (or their last :data:`TAIL`) end as a save ends ``sid``."""
    tail = (
        f'  "schema": {json.dumps(SEGMENT_SCHEMA)},\n'
        f'  "schema_version": {SCHEMA_VERSION},\n'
        f'  "segment": {json.dumps(sid)},\n'
    ).encode()
    return tail in end[-TAIL:] and end.endswith(b"}\n")


def segment_lines(
    data: bytes, sid: str, sha256: str | None, keys: set[str]
) -> tuple[dict[tuple[str, str], bytes], dict[str, SchemaProblem]]:
    """The checked runs of benchmarks ``keys`` in segment ``sid`` as JSON text by (key,
    digest), and what is wrong with a benchmark's runs, by key. Where ``data`` are the
    bytes the index records (``sha256``), laid out as a save writes them, the other
    benchmarks' runs are not parsed; else the segment is read and checked whole."""
    found = None
    if ends_as_written(data, sid) and sha256 == hashlib.sha256(data).hexdigest():
        found = _scan(data, keys)
    if found is None:  # edited by hand, or not laid out as a save writes it
        doc = load_json(data)
        validate_segment(doc, sid)
        runs = doc["runs"]
        lines = {
            (key, dig): json.dumps(line, ensure_ascii=False).encode("utf-8")
            for key in keys & set(runs)
            for dig, line in runs[key].items()
        }
        return lines, {}
    head, lines = found
    validate_segment(load_json(head), sid, lines=False)
    problems: dict[str, SchemaProblem] = {}
    for (key, dig), text in lines.items():
        try:
            check_line(load_json(text), f"runs[{key!r}][{dig!r}]")
        except SchemaProblem as e:
            problems.setdefault(key, e)
    return lines, problems


def _scan(data: bytes, keys: set[str]) -> tuple[bytes, dict[tuple[str, str], bytes]] | None:
    """``data`` without its run lines, and the run lines of ``keys`` by (key, digest); None
    where a line is not as a save writes it."""
    wanted = {json.dumps(k, ensure_ascii=False).encode("utf-8"): k for k in keys}
    head: list[bytes] = []
    lines: dict[tuple[str, str], bytes] = {}
    key: str | None = None
    for line in data.split(b"\n"):
        if line.startswith(_RUN_LINE):
            dig = line[len(_RUN_LINE) : _RUN_AT - 3].decode("ascii", "replace")
            if line[_RUN_AT - 3 : _RUN_AT] != b'": ' or not DIGEST.fullmatch(dig):
                return None
            if key is not None:
                lines[key, dig] = line[_RUN_AT:].rstrip(b",")
            continue
        if line.startswith(_BENCH_LINE) and line.endswith(b": {"):
            key = wanted.get(line[4:-3])
        head.append(line)
    return b"\n".join(head), lines


# --- ids of content ------------------------------------------------------------------------


def content_id(obj: Any) -> str:
    """12 hex digits of the SHA-256 of canonical JSON: the same on every machine."""
    blob = json.dumps(thawed(obj), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(blob.encode("ascii")).hexdigest()[:12]


#: The id of a fingerprint.
fingerprint_id = content_id


def digest(line: Mapping[str, Any]) -> str:
    """What tells two runs of one benchmark apart in an index: run id and rounds."""
    return content_id([line["run_id"], line["rounds"]])


def segment_id(stamp: str, runs: Mapping[str, Any]) -> str:
    """``20251129T193800Z-1a2b3c4d``: the save's time (so names sort by it) and content."""
    when = _dt.datetime.fromisoformat(stamp).astimezone(_dt.timezone.utc)
    return f"{when:%Y%m%dT%H%M%SZ}-{content_id(runs)[:8]}"


def canonical_ids(index: dict[str, Any]) -> dict[str, Any]:
    """Re-derive fingerprint and policy ids from their contents, in place: a hand-edited
    fingerprint (a new driver declared equivalent) is found under its new content."""
    for table, slot, ident in (("fingerprints", 2, fingerprint_id), ("policies", 3, content_id)):
        rename = {old: ident(content) for old, content in index[table].items()}
        if any(old != new for old, new in rename.items()):
            index[table] = {rename[old]: content for old, content in index[table].items()}
            for bench in index["benchmarks"].values():
                for ref in bench["runs"]:
                    ref[slot] = rename[ref[slot]]
    return index


# --- a save's runs, added to an index ------------------------------------------------------


class RefusedWrite(SchemaProblem):
    """What a save made is not valid (a bug): it is not written. ``segment``: in which."""

    def __init__(self, problem: str, segment: str | None = None):
        super().__init__(problem)
        self.segment = segment


@dataclass
class Addition:
    """What :func:`add_runs` made of a save: its segment's id and bytes (None: every run
    was there), how many runs it added and dropped, of how many benchmarks."""

    segment: tuple[str, bytes] | None
    added: int
    dropped: int
    benchmarks: int


def empty_index(stamp: str) -> dict[str, Any]:
    """An index with no benchmarks (:func:`add_runs` names it, :func:`index_bytes` stamps it)."""
    return {"created": stamp, **{k: {} for k in TABLES}}


def add_runs(
    index: dict[str, Any],
    runs: Sequence[tuple[Run, Mapping[str, Any], dict[str, Any]]],
    skipped: list[tuple[str, str]],
    *,
    name: str,
    stamp: str,
    keep_runs: int,
) -> Addition:
    """Add ``runs`` (the run, its fingerprint, its line) to ``index`` in place, as one new
    segment; trim each benchmark to ``keep_runs`` per fingerprint and drop what no run
    uses. The segment is validated (:class:`RefusedWrite`). A run saved already (a retried
    job) goes to ``skipped``."""
    benches = index["benchmarks"]
    segment: dict[str, dict[str, dict[str, Any]]] = {}
    touched: list[tuple[str, str, str, str]] = []
    for run, fp, line in runs:
        key, fid, dig = run.id.key, fingerprint_id(fp), digest(line)
        entry = benches.get(key)
        if (entry and any(r[1] == dig and r[2] == fid for r in entry["runs"])) or dig in (
            segment.get(key) or {}
        ):
            # The same run saved again: once is enough. Distinct runs that share a run id
            # (subprocesses of one session) are kept.
            skipped.append((key, f"run {line['run_id']} is already saved"))
            continue
        entry = benches.setdefault(key, {"runs": []})
        ident = run.id.to_dict()
        entry.update({k: ident[k] for k in ("nodeid", "name", "mode", "params")})
        pid = content_id(run.policy)
        index["fingerprints"][fid] = dict(fp)
        index["policies"][pid] = thawed(run.policy)
        segment.setdefault(key, {})[dig] = line
        touched.append((key, dig, fid, pid))
    if not touched:
        return Addition(None, 0, 0, 0)
    sid = segment_id(stamp, segment)
    doc = {"schema": SEGMENT_SCHEMA, "schema_version": SCHEMA_VERSION, "baseline": name}
    doc.update(segment=sid, timestamp=stamp, runs=segment)
    try:
        validate_segment(doc, sid)
    except SchemaProblem as e:
        raise RefusedWrite(str(e), sid) from None
    data = dumps(doc, compact_depth=3).encode("utf-8")
    index["segments"][sid] = segment_entry(data, stamp, segment)
    for key, dig, fid, pid in touched:
        benches[key]["runs"].append([sid, dig, fid, pid])
    dropped = sum(trim(benches[k]["runs"], f, keep_runs) for k, f in {t[::2] for t in touched})
    drop_unused(index)
    index.update(name=name, updated=stamp)
    return Addition((sid, data), len(touched), dropped, len({t[0] for t in touched}))


def segment_entry(
    data: bytes, stamp: str, runs: Mapping[str, Mapping[str, Mapping[str, Any]]]
) -> dict[str, Any]:
    lines = [line for by_digest in runs.values() for line in by_digest.values()]
    entry: dict[str, Any] = {
        "sha256": hashlib.sha256(data).hexdigest(),
        "timestamp": stamp,
        "runs": len(lines),
        "run_ids": sorted({line["run_id"] for line in lines}),
    }
    metas = [line.get("meta") or {} for line in lines]  # the first run's commit that says one
    commit = next((m[k] for m in metas for k in ("git_sha", "ci_sha") if _STR[0](m.get(k))), None)
    return entry if commit is None else {**entry, "commit": commit}


def index_bytes(index: dict[str, Any]) -> bytes:
    """``index`` as the bytes of ``NAME.json``, stamped and validated."""
    index.update(schema=SCHEMA, schema_version=SCHEMA_VERSION, plugin_version=__version__)
    try:
        validate_index(index)
    except SchemaProblem as e:  # a bug: never write what we would refuse to read
        raise RefusedWrite(str(e)) from None
    return dumps(index).encode("utf-8")


def trim(runs: list[list[str]], fid: str, keep: int) -> int:
    """Drop the oldest runs of fingerprint ``fid`` beyond ``keep``; returns how many."""
    idx = [i for i, r in enumerate(runs) if r[2] == fid]
    drop = set(idx[: max(0, len(idx) - keep)])
    runs[:] = [r for i, r in enumerate(runs) if i not in drop]
    return len(drop)


def drop_unused(index: dict[str, Any]) -> tuple[int, int]:
    """Drop benchmarks without runs and what no run refers to; (benchmarks, fingerprints) gone."""
    benches = index["benchmarks"]
    empty = [k for k, b in benches.items() if not b["runs"]]
    for k in empty:
        del benches[k]
    refs = [r for b in benches.values() for r in b["runs"]]
    n_fps = len(index["fingerprints"])
    for slot, table in ((0, "segments"), (2, "fingerprints"), (3, "policies")):
        used = {r[slot] for r in refs}
        index[table] = {k: v for k, v in index[table].items() if k in used}
    return len(empty), n_fps - len(index["fingerprints"])
