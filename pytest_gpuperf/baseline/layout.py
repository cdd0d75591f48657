"""A baseline's files on disk (schema version 3), read and written so that nothing is torn.

::

    <dir>/NAME.json              the index: tables, benchmarks, references to runs
    <dir>/NAME.runs/<seg>.json   a segment: the runs of one save, one line each
    <dir>/.NAME.json.lock        the lock every writer holds (pytest_gpuperf.baseline.filelock)

A writer (holding the lock) writes its new segment first, then replaces the
index atomically: the index is the commit, so a writer killed at any point
leaves the previous index and every segment it names. A segment file is
deleted only when neither the new index nor the one it replaces names it:
a reader (readers take no lock) that read the previous index still finds
its segments, and one that finds a segment gone (two saves happened while it
read) reads the index again.

Versions 1 and 2 are one file, ``NAME.json``, read whole; the first save
into one rewrites it as an index with one segment per saved session.

Pure Python: no torch, no pytest.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_gpuperf.baseline import schema
from pytest_gpuperf.baseline.fileio import atomic_write_bytes, nearest_existing
from pytest_gpuperf.baseline.fileio import remove_temporaries as remove_temporaries_of
from pytest_gpuperf.baseline.filelock import LockTimeout, OnWait, lock_file_problem, owner_of
from pytest_gpuperf.baseline.filelock import locked as lock
from pytest_gpuperf.errors import BaselineError, BaselineLocked, CorruptBaseline, UnsafePath

#: What :func:`assemble` turns each run into, given the run and the policies table.
Convert = Callable[[dict[str, Any], Mapping[str, Any]], Any]
#: Which benchmarks :func:`assemble` reads, given a benchmark's index entry (None: all).
Select = Callable[[Mapping[str, Any]], bool]
#: How often a reader starts again when a segment vanished under it (a save per attempt).
READ_ATTEMPTS = 5


@dataclass(frozen=True)
class Files:
    """The paths of baseline ``stem`` in ``root`` (made once, with the object)."""

    root: Path
    stem: str
    #: ``NAME.json``
    index: Path = field(init=False, repr=False, compare=False)
    #: ``NAME.runs/``
    runs_dir: Path = field(init=False, repr=False, compare=False)
    #: ``.NAME.json.lock``
    lock: Path = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "index", self.root / f"{self.stem}.json")
        object.__setattr__(self, "runs_dir", self.root / f"{self.stem}.runs")
        object.__setattr__(self, "lock", self.root / f".{self.stem}.json.lock")

    def segment(self, sid: str) -> Path:
        return self.runs_dir / f"{sid}.json"

    def show(self, path: Path) -> str:
        """A segment's path as a user finds it (relative to the baseline folder)."""
        return f"{self.runs_dir.name}/{path.name}" if path.parent == self.runs_dir else str(path)


class _SegmentGone(Exception):
    def __init__(self, path: Path, stamp: str):
        self.path = path
        self.stamp = stamp


# --- reading -------------------------------------------------------------------------


def read_bytes(path: Path) -> bytes:
    """The bytes of ``path``; ``FileNotFoundError`` as it is, other errors as BaselineError."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise
    except IsADirectoryError:
        raise BaselineError(
            f"{path} is a folder, not a baseline file; move it away (the baseline of that "
            "name is written there)"
        ) from None
    except OSError as e:
        raise BaselineError(f"cannot read baseline file {path}: {e.strerror or e}") from None


def parse_index(files: Files, data: bytes) -> tuple[dict[str, Any], int]:
    """Bytes of ``NAME.json`` -> (a document for versions 1-2, or a version-3 index; version)."""
    try:
        return schema.read_index(data)
    except schema.SchemaProblem as e:
        raise CorruptBaseline(str(files.index), str(e), e.remedy) from None


def segment_remedy(files: Files, stamp: str) -> str:
    """How to repair a baseline one of whose segments (saved at ``stamp``) is broken,
    keeping the runs saved after it."""
    try:
        after = (_dt.datetime.fromisoformat(stamp) + _dt.timedelta(seconds=1)).isoformat()
    except ValueError:
        after = "<the time just after that save>"
    return (
        f"Restore {files.runs_dir.name}/ together with {files.index.name} from where you keep "
        "them (they belong together), or remove the runs of that save and keep those saved "
        f"after it: pytest-gpuperf prune {files.stem} --dir {files.root} --before {after} "
        "(it also removes any runs saved earlier; see which with --dry-run first)."
    )


def _broken_segment(files: Files, sid: str, stamp: str, problem: str) -> CorruptBaseline:
    return CorruptBaseline(
        str(files.segment(sid)),
        problem,
        segment_remedy(files, stamp),
        where=f" (a segment of {files.index.name})",
    )


def read_segment(
    files: Files, sid: str, entry: Mapping[str, Any], keys: set[str] | None = None
) -> dict[str, Any]:
    """Segment ``sid``, validated (also when its bytes are those the index recorded: an
    index can be forged, or edited together with the segment).

    With ``keys``, the runs of other benchmarks may be left out, unparsed (their
    benchmarks then have no runs): only where the bytes are those the index records
    (SHA-256) and laid out as :func:`write_segment` writes them. What is kept is validated
    as the whole would be; a problem is reported as the whole segment's (:func:`_runs_of`).
    """
    path = files.segment(sid)
    try:
        data = read_bytes(path)
    except FileNotFoundError:
        raise _SegmentGone(path, entry["timestamp"]) from None
    try:
        try:
            doc: dict[str, Any] = schema.load_json(_runs_of(data, sid, entry, keys))
            schema.validate_segment(doc, sid)
        except (RecursionError, schema.SchemaProblem):
            if keys is None:
                raise
            doc = schema.load_json(data)  # the problem as the whole segment has it
            schema.validate_segment(doc, sid)
    except RecursionError:
        problem = f"the JSON is nested more than {schema.MAX_NESTING} levels deep"
        raise _broken_segment(files, sid, entry["timestamp"], problem) from None
    except schema.SchemaProblem as e:
        raise _broken_segment(files, sid, entry["timestamp"], str(e)) from None
    return doc


#: How a segment's lines begin (:func:`write_segment`, ``compact_depth=3``): a benchmark's
#: key at depth 2, each of its runs on one line at depth 3.
_BENCH_LINE = b'    "'
_RUN_LINE = b'      "'


def _runs_of(data: bytes, sid: str, entry: Mapping[str, Any], keys: set[str] | None) -> bytes:
    """``data`` without the run lines of benchmarks not in ``keys``, where the segment is
    the one the index records and laid out as a save writes it; else ``data`` as it is.

    A benchmark left out keeps its key with no runs (``"key": {\n    }``), so the rest
    is the same JSON, validated the same way."""
    if keys is None or entry.get("sha256") != hashlib.sha256(data).hexdigest():
        return data
    if not _segment_ends(Path(sid), sid, (b"", data[-_SNIFF:])):
        return data
    wanted = {json.dumps(k, ensure_ascii=False).encode("utf-8") for k in keys}
    out: list[bytes] = []
    keep = False
    for line in data.split(b"\n"):
        if line.startswith(_RUN_LINE):
            if keep:
                out.append(line)
            continue
        if line.startswith(_BENCH_LINE) and line.endswith(b": {"):
            keep = line[4:-3] in wanted
        out.append(line)
    return b"\n".join(out)


def assemble(
    files: Files,
    index: Mapping[str, Any],
    convert: Convert | None = None,
    select: Select | None = None,
) -> dict[str, Any]:
    """The document (version-2 form) of a version-3 index: every run it names, in order.

    Segments are read one at a time, in the order their first run is named, and each
    run is handed to ``convert(run, policies)`` as its segment is read (the document
    then holds what it returns), so that no more than one segment is held as JSON.

    With ``select``, only the benchmarks whose index entry it accepts: the segments
    that hold none of their runs are not read, only checked at their two ends (as
    :func:`check_segments` does). In the others, a segment whose bytes are the ones
    the index records and laid out as a save writes it is checked without its runs
    (:func:`_scan`), and a benchmark's ``runs`` are then a :class:`LazyRuns`: read,
    validated and converted when first asked for, not before; the runs of other
    segments are read and validated now (:func:`read_segment`).
    """
    refs: dict[str, list[tuple[list[Any], int, str, str, str, str]]] = {}
    benchmarks: dict[str, Any] = {}
    others: set[str] = set()  # the segments of the benchmarks not selected
    for key, bench in index["benchmarks"].items():
        if select is not None and not select(bench):
            others.update(ref[0] for ref in bench["runs"])
            continue
        runs: list[Any] = [None] * len(bench["runs"])
        for i, (sid, dig, fid, pid) in enumerate(bench["runs"]):
            refs.setdefault(sid, []).append((runs, i, key, dig, fid, pid))
        benchmarks[key] = {**{k: bench[k] for k in ("nodeid", "name", "mode", "params")}}
        benchmarks[key]["runs"] = runs
    policies = index["policies"]
    keys = None if select is None else set(benchmarks)
    for sid in sorted(others - set(refs)):
        _check_segment(files, sid, index["segments"][sid])
    lazy: dict[str, LazyRuns] = {}
    for sid, named in refs.items():
        entry = index["segments"][sid]
        scanned = None if keys is None else _scan(files, sid, entry, {n[2] for n in named})
        if scanned is not None:
            for runs, i, key, dig, fid, pid in named:
                later = lazy.get(key)
                if later is None:
                    later = lazy[key] = LazyRuns(files, key, len(runs), convert, policies)
                later.add(i, scanned, dig, fid, pid)
            continue
        seg = read_segment(files, sid, entry, keys)["runs"]
        for runs, i, key, dig, fid, pid in named:
            runs[i] = _run_of(files, sid, entry, seg, key, dig, fid, pid, convert, policies)
        del seg
    for key, later in lazy.items():
        later.ready = benchmarks[key]["runs"]
        benchmarks[key]["runs"] = later
    return {
        "schema": schema.SCHEMA,
        "schema_version": schema.DOCUMENT_VERSION,
        **{k: index[k] for k in ("name", "plugin_version", "created", "updated")},
        "fingerprints": index["fingerprints"],
        "policies": index["policies"],
        "benchmarks": benchmarks,
    }


def _run_of(
    files: Files,
    sid: str,
    entry: Mapping[str, Any],
    seg: Mapping[str, Any],
    key: str,
    dig: str,
    fid: str,
    pid: str,
    convert: Convert | None,
    policies: Mapping[str, Any],
) -> Any:
    """Run ``dig`` of benchmark ``key`` in the (validated) runs ``seg`` of segment ``sid``,
    with the index's ids, converted; a segment without it is broken."""
    run = (seg.get(key) or {}).get(dig)
    if run is None:
        raise _broken_segment(
            files,
            sid,
            entry["timestamp"],
            f"it has no run {dig} of benchmark {key!r}, which {files.index.name} lists",
        )
    run["fingerprint"], run["policy"] = fid, pid  # the index's ids are canonical
    return run if convert is None else convert(run, policies)


@dataclass(frozen=True)
class _Scanned:
    """A segment checked without its runs (:func:`_scan`): where each selected
    benchmark's run lines are, and what identifies the file that was read."""

    sid: str
    entry: Mapping[str, Any]
    #: the segment's fields other than its runs, as validated
    head: Mapping[str, Any]
    #: benchmark key -> (start, end) of its run lines in the file
    blocks: Mapping[str, tuple[int, int]]
    #: (device, inode, size, modification time in ns) of the file read
    stat: tuple[int, int, int, int]
    #: the runs of the file that replaced it since, read once for all its benchmarks
    reread: _Reread = field(default_factory=lambda: _Reread(), compare=False, repr=False)


class _Reread:
    """A scanned segment replaced since its scan is read whole, and validated, once: the
    runs of the scanned benchmarks that still want theirs are kept here, each handed out
    once (then let go), while the file is the one that was read (:attr:`stat`); a file
    replaced again is read again."""

    def __init__(self) -> None:
        self.stat: tuple[int, int, int, int] | None = None
        self.runs: dict[str, Any] = {}

    def take(self, key: str, stat: tuple[int, int, int, int] | None) -> dict[str, Any] | None:
        """``{key: runs}`` as read from the file of ``stat``, handed out once; None where
        that file was not read whole (or ``key``'s runs were handed out already)."""
        if stat is None or stat != self.stat or key not in self.runs:
            return None
        runs = self.runs.pop(key)
        if not self.runs:
            self.stat = None
        return {} if runs is None else {key: json.loads(runs)}

    def keep(
        self, stat: tuple[int, int, int, int] | None, runs: Mapping[str, Any], keys: Iterable[str]
    ) -> None:
        """The runs of the benchmarks ``keys`` (None where the segment has none of theirs)
        of the file of ``stat``, read whole; nothing is kept without its ``stat``."""
        self.stat, self.runs = stat, {}
        if stat is not None:
            self.runs = {k: _compact(runs.get(k)) for k in keys}
            if not self.runs:
                self.stat = None


def _compact(runs: Any) -> str | None:
    """Validated runs kept for later as JSON text: a few times smaller than the objects."""
    return None if runs is None else json.dumps(runs, ensure_ascii=False, separators=(",", ":"))


def _file_id(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _scan(files: Files, sid: str, entry: Mapping[str, Any], keys: set[str]) -> _Scanned | None:
    """Segment ``sid`` checked without parsing its runs: where its bytes are those the
    index records (SHA-256) and laid out as :func:`write_segment` writes them, the rest of
    it (every benchmark's key, the segment's own fields) is parsed and validated as the
    whole would be, and the run lines of the benchmarks in ``keys`` (those the index names
    runs of in it) are located for :class:`LazyRuns`. None where the segment is not such a
    one, or a benchmark's lines are not found (it is then read whole)."""
    path = files.segment(sid)
    try:
        with open(path, "rb") as f:
            stat = _file_id(os.fstat(f.fileno()))
            data = f.read()
    except OSError:
        return None  # read_segment says what is wrong
    if entry.get("sha256") != hashlib.sha256(data).hexdigest():
        return None
    if not _segment_ends(path, sid, (b"", data[-_SNIFF:])):
        return None
    wanted = {json.dumps(k, ensure_ascii=False).encode("utf-8"): k for k in keys}
    rest: list[bytes] = []
    blocks: dict[str, tuple[int, int]] = {}
    pos = at = 0  # the rest is kept from pos on; benchmark lines are looked for from at on
    while True:
        start = data.find(b"\n" + _BENCH_LINE, at)
        eol = data.find(b"\n", start + 1) if start >= 0 else -1
        close = data.find(b"\n    }", eol) if eol >= 0 else -1
        if close < 0:
            break
        line, at = data[start + 1 : eol], eol
        if not line.endswith(b": {"):
            continue
        rest.append(data[pos:eol])
        key = wanted.get(line[4:-3])
        if key is not None:
            blocks[key] = (eol + 1, close)
        pos = at = close
    rest.append(data[pos:])
    del data
    try:
        doc = schema.load_json(b"".join(rest))
        schema.validate_segment(doc, sid)
    except (RecursionError, schema.SchemaProblem):
        return None  # read_segment reports the problem as the whole segment has it
    runs = doc.pop("runs")
    if len(blocks) < len(keys) or any(runs.get(k) for k in keys):
        return None  # runs of a selected benchmark not where a save writes them
    return _Scanned(sid, entry, doc, blocks, stat)


class LazyRuns:
    """The runs of one benchmark, read from the segments that hold them when first asked
    for (:meth:`load`), each validated as :func:`read_segment` validates a segment; a
    problem is reported as the whole segment's. Not kept: each call reads them again (a
    segment replaced since the load is read whole once for the benchmarks scanned in it:
    :class:`_Reread`)."""

    def __init__(
        self,
        files: Files,
        key: str,
        n: int,
        convert: Convert | None,
        policies: Mapping[str, Any],
    ):
        self.files = files
        self.key = key
        self.convert = convert
        self.policies = policies
        #: the runs read already (from segments read whole), None where still to read
        self.ready: list[Any] = [None] * n
        self._later: list[tuple[int, _Scanned, str, str, str]] = []

    def __len__(self) -> int:
        return len(self.ready)

    def add(self, i: int, scanned: _Scanned, dig: str, fid: str, pid: str) -> None:
        self._later.append((i, scanned, dig, fid, pid))

    def __call__(self) -> list[Any]:
        return self.load()

    def load(self) -> list[Any]:
        """The runs, in order, read, validated and converted now."""
        out = list(self.ready)
        by_segment: dict[str, list[tuple[int, _Scanned, str, str, str]]] = {}
        for later in self._later:
            by_segment.setdefault(later[1].sid, []).append(later)
        for sid, named in by_segment.items():
            scanned = named[0][1]
            seg = self._runs_in(scanned)
            for i, _, dig, fid, pid in named:
                out[i] = _run_of(
                    self.files, sid, scanned.entry, seg, self.key, dig, fid, pid,
                    self.convert, self.policies,
                )  # fmt: skip
        return out

    def _runs_in(self, scanned: _Scanned) -> dict[str, Any]:
        """The validated runs of this benchmark in ``scanned``'s segment (``{key: runs}``):
        its run lines where the file is the one scanned, else the file that replaced it, read
        whole once for all the benchmarks scanned in it (:class:`_Reread`)."""
        path = self.files.segment(scanned.sid)
        start, end = scanned.blocks.get(self.key, (0, 0))
        now: tuple[int, int, int, int] | None = None
        try:
            with open(path, "rb") as f:
                now = _file_id(os.fstat(f.fileno()))
                same = now == scanned.stat
                f.seek(start)
                lines = f.read(end - start) if same else b""
        except FileNotFoundError:
            raise _missing_segment(self.files, path, scanned.entry["timestamp"]) from None
        except OSError:
            same = False
        if same:
            try:
                runs = schema.load_json(b"{" + lines + b"}") if lines else {}
                schema.validate_segment({**scanned.head, "runs": {self.key: runs}}, scanned.sid)
                return {self.key: runs}
            except (RecursionError, schema.SchemaProblem):
                pass  # the problem as the whole segment has it, below
            now = None  # the file is the one scanned: nothing to keep for the others
        taken = scanned.reread.take(self.key, now)
        if taken is not None:
            return taken
        try:
            seg = read_segment(self.files, scanned.sid, scanned.entry)
        except _SegmentGone as gone:
            raise _missing_segment(self.files, gone.path, gone.stamp) from None
        # ``now`` was taken before the read: a file replaced in between is read again
        runs = seg["runs"]
        scanned.reread.keep(now, runs, (k for k in scanned.blocks if k != self.key))
        return {self.key: runs[self.key]} if self.key in runs else {}


def load(
    files: Files, convert: Convert | None = None, select: Select | None = None
) -> tuple[dict[str, Any], int]:
    """The document of baseline ``files`` and the schema version it was read from
    (with ``convert``, each run of a version-3 baseline as it returns it; with ``select``,
    only the benchmarks it accepts: :func:`assemble`).

    ``FileNotFoundError`` when there is no ``NAME.json``; ``CorruptBaseline``
    naming the file (index or segment) that cannot be used.
    """
    previous: bytes | None = None
    for _ in range(READ_ATTEMPTS):
        data = read_bytes(files.index)
        doc, version = parse_index(files, data)
        if version <= schema.DOCUMENT_VERSION:
            return doc, version
        try:
            return assemble(files, doc, convert, select), version
        except _SegmentGone as gone:
            if data == previous:  # the same index twice: the segment is really missing
                break
            previous, missing = data, gone
    else:  # pragma: no cover - five saves while one baseline was read
        raise BaselineError(
            f"baseline {files.index} changed {READ_ATTEMPTS} times while it was read; "
            "try again when the saves into it are done"
        )
    raise _missing_segment(files, missing.path, missing.stamp)


def _missing_segment(files: Files, path: Path, stamp: str) -> CorruptBaseline:
    return CorruptBaseline(
        str(path),
        f"the file is missing, and {files.index.name} lists runs in it",
        segment_remedy(files, stamp),
        where=f" (a segment of {files.index.name})",
        note="Nothing was changed.",
    )


def check_segments(files: Files, index: Mapping[str, Any]) -> None:
    """That every segment ``index`` lists is there and whole (read at its two ends, or
    validated when it is not laid out as a save writes it): a save into a baseline
    with a broken segment would succeed and leave it unreadable."""
    for sid, entry in index["segments"].items():
        try:
            _check_segment(files, sid, entry)
        except _SegmentGone as gone:
            raise _missing_segment(files, gone.path, gone.stamp) from None


def _check_segment(files: Files, sid: str, entry: Mapping[str, Any]) -> None:
    """That segment ``sid`` is there (else :class:`_SegmentGone`) and whole at its two
    ends, or valid when it is not laid out as a save writes it."""
    path = files.segment(sid)
    if not path.is_file():
        raise _SegmentGone(path, entry["timestamp"])
    if not _segment_ends(path, sid):
        read_segment(files, sid, entry)


# --- writing (under the baseline's lock) ---------------------------------------------


def check_writable(files: Files) -> None:
    """Raise :class:`BaselineError` if a save into ``files`` cannot, or must not, happen.

    The folder (or the nearest of its parents that exists) must be a writable
    folder; ``NAME.json`` and ``NAME.runs`` must not be symbolic links (a save
    replaces the index, so a link would be replaced instead of its target
    updated, and segments would be written wherever a link points), nor of the
    wrong kind; nor may its lock file be a link or other than a plain file (the
    lock would refuse it only after the measurement). Nothing is created.
    """
    folder = files.root
    existing = nearest_existing(folder)
    if not existing.is_dir():
        raise BaselineError(
            f"cannot save into baseline folder {folder}: {existing} is a file, not a folder; "
            "point --gpuperf-baseline-dir (the CLI's --dir) at a folder"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise BaselineError(
            f"cannot save into baseline folder {folder}: {existing} is not writable (permissions "
            "or a read-only file system); point --gpuperf-baseline-dir (the CLI's --dir) at a "
            "folder you can write"
        )
    _check_owned(files, existing)
    for path, kind in ((files.index, "file"), (files.runs_dir, "folder")):
        if path.is_symlink():
            target = os.readlink(path)
            raise BaselineError(
                f"cannot save into baseline {files.stem!r}: {path} is a symbolic link (to "
                f"{target}); a save would replace the link, not update what it points to. Point "
                "--gpuperf-baseline-dir (the CLI's --dir) at the folder that holds the real "
                "files, or replace the "
                f"link by its {kind}."
            )
    problem = lock_file_problem(files.lock)
    if problem:
        target = f" (to {os.readlink(files.lock)})" if files.lock.is_symlink() else ""
        raise BaselineError(
            f"cannot save into baseline {files.stem!r}: its lock file {files.lock} {problem}"
            f"{target}, which pytest-gpuperf never makes and will not open; remove it (a save "
            "makes a new one)"
        )
    if files.index.exists() and not files.index.is_file():
        raise BaselineError(
            f"{files.index} is a folder, not a baseline file; move it away (the baseline of that "
            "name is written there)"
        )
    if files.runs_dir.exists() and not files.runs_dir.is_dir():
        raise BaselineError(
            f"cannot save into baseline {files.stem!r}: {files.runs_dir} is not a folder (a "
            "baseline's runs are kept there); move it away"
        )


def _user_of(path: Path) -> str:
    return owner_of(path) or "another user"


def _check_owned(files: Files, folder: Path) -> None:
    """Files of the baseline that another user owns and a save could not write: the runs
    folder (a save writes a segment into it), the index in a sticky folder (only its
    owner may replace it), the lock file (it must at least be readable)."""
    if not files.root.is_dir():
        return
    problem = None
    me = getattr(os, "geteuid", lambda: 0)()
    if files.runs_dir.is_dir() and not os.access(files.runs_dir, os.W_OK | os.X_OK):
        problem = (files.runs_dir, "is not writable by you")
    elif (
        files.index.is_file()
        and os.stat(folder).st_mode & stat.S_ISVTX
        and me != 0
        and os.lstat(files.index).st_uid != me
    ):
        problem = (files.index, "is in a sticky folder, where only its owner may replace it")
    elif files.lock.is_file() and not os.access(files.lock, os.R_OK):
        problem = (files.lock, "is not readable by you")
    if problem is not None:
        path, why = problem
        raise BaselineError(
            f"cannot save into baseline {files.stem!r}: {path} belongs to {_user_of(path)} and "
            f"{why}. Save under a name of your own, ask {_user_of(path)} to save, or point "
            "--gpuperf-baseline-dir (the CLI's --dir) at a folder of your own"
        )


def write_segment(
    files: Files, stamp: str, runs: dict[str, dict[str, dict[str, Any]]]
) -> tuple[str, dict[str, Any]]:
    """Write the runs of one save as a new segment; returns its id and its index entry."""
    sid = schema.segment_id(stamp, runs)
    doc = {
        "schema": schema.SEGMENT_SCHEMA,
        "schema_version": schema.SCHEMA_VERSION,
        "baseline": files.stem,
        "segment": sid,
        "timestamp": stamp,
        "runs": runs,
    }
    try:
        schema.validate_segment(doc, sid)
    except schema.SchemaProblem as e:  # a bug: never write what we would refuse to read
        raise BaselineError(
            f"refusing to write an invalid segment {sid} of {files.index}: {e}"
        ) from None
    data = schema.dumps(doc, compact_depth=3).encode("utf-8")
    atomic_write_bytes(files.segment(sid), data)
    return sid, schema.segment_entry(data, stamp, runs)


def write_index(files: Files, index: dict[str, Any]) -> None:
    """Replace ``NAME.json`` by ``index`` (the commit of a save or a prune)."""
    try:
        data = schema.index_bytes(index)
    except schema.RefusedWrite as e:  # a bug: never write what we would refuse to read
        raise BaselineError(
            f"refusing to write an invalid baseline to {files.index}: {e}"
        ) from None
    atomic_write_bytes(files.index, data)


def commit(
    files: Files,
    add: schema.Addition,
    previous: Mapping[str, Any],
    written: list[str],
    *,
    write: bool,
) -> None:
    """The end of a save, under the lock: check that the segments the index had
    (``previous``, their entries) are still whole; then, with ``write``, write the new
    segment, replace the index (the commit), and delete the segments no index names any
    more. If the index cannot be written, the segments this save wrote (``written``, a
    migration's, and the new one) go again and the baseline is as it was."""
    check_segments(files, {"segments": previous})
    if not write:
        return
    if add.segment_id is not None:
        atomic_write_bytes(files.segment(add.segment_id), add.segment)
        written = [*written, add.segment_id]
    try:
        atomic_write_bytes(files.index, add.index)
    except BaseException:
        discard(files, [s for s in written if s not in previous])
        raise
    collect_garbage(files, set(previous) | add.segments)


@contextlib.contextmanager
def locked(files: Files, action: str, timeout: float, on_wait: OnWait | None) -> Iterator[None]:
    """Hold the baseline's lock (removing what a writer killed mid-write left); lock and
    file-system failures become errors that say what to do."""
    name = files.stem

    def told(holder: str) -> Any:
        if on_wait is not None:
            return on_wait(f"waiting for baseline {name!r}: it is locked by {holder}")
        return None

    try:
        with lock(files.lock, timeout=timeout, on_wait=told, owner=f"{action} baseline {name}"):
            remove_temporaries(files)
            yield
    except LockTimeout as e:
        raise BaselineLocked(
            f"{e} (--gpuperf-lock-timeout, or the command's --lock-timeout, sets how long to wait)"
        ) from None
    except UnsafePath as e:
        raise BaselineError(f"cannot {action} baseline file {files.index}: {e}") from None
    except OSError as e:  # disk full, read-only, no locks on this file system, ...
        raise BaselineError(
            f"cannot {action} baseline file {files.index}: {e.strerror or e}. "
            "The file is as it was before."
        ) from e


def index_from_document(files: Files, doc: Mapping[str, Any]) -> dict[str, Any]:
    """A version-3 index of a version-1/2 document, writing one segment per saved session.

    Runs of one benchmark that are the same run twice (same id, rounds and
    median, saved at the same time) are kept once.
    """
    by_stamp: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    refs: dict[str, list[tuple[str, str, str, str]]] = {}
    for key, bench in doc["benchmarks"].items():
        for run in bench["runs"]:
            dig = schema.digest(run)
            seg = by_stamp.setdefault(run["timestamp"], {}).setdefault(key, {})
            if dig in seg:
                continue
            seg[dig] = dict(run)
            refs.setdefault(key, []).append(
                (run["timestamp"], dig, run["fingerprint"], run["policy"])
            )
    sids = {stamp: write_segment(files, stamp, runs) for stamp, runs in sorted(by_stamp.items())}
    benchmarks = {}
    for key, bench in doc["benchmarks"].items():
        benchmarks[key] = {k: bench[k] for k in ("nodeid", "name", "mode", "params")}
        benchmarks[key]["runs"] = [
            [sids[stamp][0], dig, fid, pid] for stamp, dig, fid, pid in refs.get(key, [])
        ]
    return {
        "schema": schema.SCHEMA,
        "schema_version": schema.SCHEMA_VERSION,
        **{k: doc[k] for k in ("name", "plugin_version", "created", "updated")},
        "fingerprints": dict(doc["fingerprints"]),
        "policies": dict(doc["policies"]),
        "segments": {sid: entry for sid, entry in sids.values()},
        "benchmarks": benchmarks,
    }


def segment_files(files: Files) -> Iterator[Path]:
    """The segment files in ``NAME.runs/`` (other files there are not ours: left alone)."""
    try:
        entries = list(os.scandir(files.runs_dir))
    except (FileNotFoundError, NotADirectoryError):
        return
    for e in entries:
        stem, ext = os.path.splitext(e.name)
        if (
            ext == ".json"
            and schema.SEGMENT_ID.fullmatch(stem)
            and e.is_file(follow_symlinks=False)
        ):
            yield Path(e.path)


def remove_temporaries(files: Files) -> int:
    """Remove what writers killed mid-write left: temporary copies of the index and segments.

    Only under the baseline's lock, which keeps every other writer out.
    """
    removed = remove_temporaries_of(files.index, all_of_them=True)
    try:
        names = os.listdir(files.runs_dir)
    except OSError:
        return removed
    for name in names:
        if name.startswith(".") and name.endswith(".tmp") and ".json." in name:
            with contextlib.suppress(OSError):
                os.unlink(files.runs_dir / name)
                removed += 1
    return removed


def discard(files: Files, sids: list[str]) -> None:
    """Remove segments written for a commit that failed (best effort)."""
    for sid in sids:
        with contextlib.suppress(OSError):
            files.segment(sid).unlink()
    if sids:
        with contextlib.suppress(OSError):
            files.runs_dir.rmdir()  # only when empty


#: How much of a file's start and end :func:`is_own_segment` reads.
_SNIFF = 4096


def _ends(path: Path) -> tuple[bytes, bytes]:
    """The first and the last :data:`_SNIFF` bytes of ``path`` (empty when unreadable)."""
    try:
        with open(path, "rb") as f:
            start = f.read(_SNIFF)
            f.seek(max(0, os.fstat(f.fileno()).st_size - _SNIFF))
            return start, f.read(_SNIFF)
    except OSError:
        return b"", b""


def _segment_ends(path: Path, sid: str, ends: tuple[bytes, bytes] | None = None) -> bool:
    """Whether ``path`` ends as :func:`write_segment` ends segment ``sid``."""
    tail = (
        f'  "schema": {json.dumps(schema.SEGMENT_SCHEMA)},\n'
        f'  "schema_version": {schema.SCHEMA_VERSION},\n'
        f'  "segment": {json.dumps(sid)},\n'
    ).encode()
    end = (ends or _ends(path))[1]
    return tail in end and end.endswith(b"}\n")


def looks_like_segment(path: Path) -> bool:
    """Whether ``path`` begins as a segment does (a baseline folder pointed at a ``NAME.runs``
    folder: its segments are not baselines)."""
    return path.parent.name.endswith(".runs") and _ends(path)[0].startswith(b'{\n  "baseline": ')


def is_own_segment(files: Files, path: Path) -> bool:
    """Whether ``path`` is a segment this store wrote for baseline ``files``: it begins
    with the baseline's name and ends with the segment schema and its own id, as
    :func:`write_segment` lays them out. A user's file, or another baseline's index,
    that happens to have a segment-like name in ``NAME.runs/`` is not."""
    ends = _ends(path)
    head = ('{\n  "baseline": ' + json.dumps(files.stem) + ",\n").encode()
    return ends[0].startswith(head) and _segment_ends(path, path.stem, ends)


def collect_garbage(files: Files, keep: set[str]) -> int:
    """Delete the segments named by neither ``keep`` (the new and the previous index),
    and only those this store wrote for this baseline (:func:`is_own_segment`)."""
    removed = 0
    for path in segment_files(files):
        if path.stem not in keep and is_own_segment(files, path):
            try:
                path.unlink()
                removed += 1
            except FileNotFoundError:
                pass
    if not keep:
        with contextlib.suppress(OSError):
            files.runs_dir.rmdir()  # only when empty: files that are not ours stay
    return removed
