"""The baseline store: storing runs of benchmarks, and finding the comparable ones.

``--gpuperf-save=NAME`` appends one run per benchmark to baseline NAME
(``<dir>/NAME.json`` and its runs folder, :mod:`.layout`);
``--gpuperf-baseline=NAME`` reads it back. A benchmark's runs are kept per
environment fingerprint (:mod:`pytest_gpuperf.baseline.fingerprint`), the newest
``keep_runs`` of each, because the run-to-run noise that the verdict needs is
learnt from that history, never from the rounds of one run.

Nothing is lost on bad input: a file that cannot be read is reported (which
file, what is wrong, what to do) and never rewritten; a save holds a
cross-process lock around read-merge-write (:mod:`pytest_gpuperf.baseline.filelock`)
and commits by replacing the index atomically, so concurrent saves keep every
run and a save killed half-way leaves the old baseline whole. A save reads
and writes the index and writes its own runs; the runs already stored are
not read, so its cost does not grow with the history. The format and its versions
are in :mod:`pytest_gpuperf.baseline.schema`.

Pure Python: no torch, no pytest.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_gpuperf.baseline import (
    DEFAULT_KEEP_RUNS,
    NAME_RULE,
    check_name,
    is_name,
    layout,
    schema,
)
from pytest_gpuperf.baseline.filelock import DEFAULT_TIMEOUT_S, OnWait
from pytest_gpuperf.baseline.fingerprint import BUILTIN_KEYS, fingerprint
from pytest_gpuperf.baseline.records import Baseline, RunRecord, record_from_result
from pytest_gpuperf.baseline.schema import empty_document
from pytest_gpuperf.errors import BaselineError, CorruptBaseline, UnknownBaseline
from pytest_gpuperf.model import Result


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def _stamp(t: _dt.datetime) -> str:
    if t.tzinfo is None:
        raise ValueError("timestamps must be timezone-aware (e.g. datetime.now(timezone.utc))")
    return t.astimezone(_dt.timezone.utc).isoformat(timespec="seconds")


# --- the store -------------------------------------------------------------------


@dataclass(frozen=True)
class SaveSummary:
    name: str
    path: Path
    created: bool
    added: int
    dropped: int
    benchmarks: int
    fingerprints: tuple[str, ...]
    keep_runs: int
    #: the schema version the file had before this save upgraded it (None: no upgrade)
    migrated_from: int | None = None
    #: results not saved, with why: (benchmark key, reason)
    skipped: tuple[tuple[str, str], ...] = ()

    def describe(self) -> str:
        """One line for the terminal summary."""
        if not self.added:
            return f"baseline {self.name!r}: nothing saved ({self.path})"
        text = (
            f"saved {self.added} run(s) of {self.benchmarks} benchmark(s) into baseline "
            f"{self.name!r} ({self.path})"
        )
        if self.dropped:
            text += f"; dropped {self.dropped} older run(s) (keeping {self.keep_runs} each)"
        if self.migrated_from is not None:
            text += f"; upgraded from schema version {self.migrated_from}"
        if self.skipped:
            text += f"; skipped {len(self.skipped)} result(s) that cannot be a baseline run"
        return text


@dataclass(frozen=True)
class EnvironmentPrune:
    """What a prune removes from one environment (fingerprint) of a baseline."""

    fingerprint_id: str
    label: str
    removed: int
    total: int
    benchmarks: int
    first: str | None = None
    last: str | None = None

    def describe(self, verb: str) -> str:
        head = f"  environment {self.fingerprint_id} ({self.label}): "
        if not self.removed:
            return head + f"nothing ({self.total} run(s) kept)"
        text = (
            f"{verb} {self.removed} of {self.total} run(s) of {self.benchmarks} benchmark(s), "
            f"saved {(self.first or '?')[:10]} to {(self.last or '?')[:10]}"
        )
        if self.removed == self.total:
            text += "; the environment goes with its last run"
        return head + text


@dataclass(frozen=True)
class PruneSummary:
    name: str
    path: Path
    removed_runs: int
    removed_benchmarks: int
    removed_fingerprints: int
    environments: tuple[EnvironmentPrune, ...] = ()
    dry_run: bool = False

    def describe(self) -> str:
        """A line for the baseline, then one per environment."""
        head = f"baseline {self.name!r} ({self.path}): "
        if not self.removed_runs:
            head += "nothing to remove"
        elif self.dry_run:
            head += f"would remove {self.removed_runs} run(s); nothing was changed (--dry-run)"
        else:
            head += f"removed {self.removed_runs} run(s)"
            if self.removed_benchmarks:
                head += f"; {self.removed_benchmarks} benchmark(s) left without runs went too"
        verb = "would remove" if self.dry_run else "removed"
        return "\n".join([head, *(e.describe(verb) for e in self.environments)])


@dataclass(frozen=True)
class Session:
    """The runs one save added, as ``pytest-gpuperf list`` shows them."""

    timestamp: str
    run_ids: tuple[str, ...]
    fingerprint_id: str
    benchmarks: int
    commit: str | None = None


@dataclass(frozen=True)
class Overview:
    """What a baseline holds, read from its index alone (``pytest-gpuperf list``)."""

    name: str
    path: Path
    benchmarks: int
    runs: int
    environments: int
    updated: str
    sessions: tuple[Session, ...]


class BaselineStore:
    """The baselines of one directory: ``NAME.json`` each (see :mod:`.layout`)."""

    def __init__(
        self,
        root: str | Path,
        *,
        lock_timeout: float = DEFAULT_TIMEOUT_S,
        on_wait: OnWait | None = None,
    ):
        """``lock_timeout``: how long a save, prune or delete waits for another one's lock;
        ``on_wait(text)`` is told once when it has to wait, with who holds the lock (what it
        returns, if a context manager, lasts while waiting: a progress line)."""
        self.root = Path(root)
        self.lock_timeout = lock_timeout
        self.on_wait = on_wait

    def __repr__(self) -> str:
        return f"BaselineStore({str(self.root)!r})"

    def names(self) -> list[str]:
        """Names of the baselines in the directory, sorted (none if it does not exist)."""
        if not self.root.is_dir():
            return []
        return sorted(
            p.stem
            for p in self.root.glob("*.json")
            if p.is_file() and is_name(p.stem) and not layout.looks_like_segment(p)
        )

    def strays(self) -> list[tuple[Path, str]]:
        """JSON files in the folder that look like baselines but cannot be one, with why."""
        if not self.root.is_dir():
            return []
        out = []
        for p in sorted(self.root.glob("*.json")):
            if p.name.startswith(".") or not p.is_file() or is_name(p.stem):
                continue
            if p.stem.lower().endswith(".json") and is_name(p.stem[:-5]):
                why = f"a baseline name has no .json: rename {p.name} to {p.stem}"
            else:
                why = f"{p.stem!r} is not a baseline name ({NAME_RULE})"
            out.append((p, why))
        return out

    def files(self, name: str) -> layout.Files:
        return layout.Files(self.root, check_name(name))

    def path(self, name: str) -> Path:
        """The baseline's index file, ``<dir>/NAME.json``."""
        return self.files(name).index

    def exists(self, name: str) -> bool:
        return self.path(name).is_file()

    def _existing(self, name: str) -> layout.Files:
        """The files of ``name``, or :class:`UnknownBaseline` (before any lock file is made)."""
        files = self.files(name)
        if not files.index.exists():
            raise UnknownBaseline(name, str(self.root), self.names())
        return files

    def load(self, name: str, *, nodeids: Collection[str] | None = None) -> Baseline:
        """Read, validate and migrate baseline ``name``; its files are never changed.

        With ``nodeids`` (pytest node ids, as results record them), only the
        benchmarks of those tests, with their runs: the others are left out, and their
        runs are not parsed where their segment is the one the index records
        (:func:`.layout.read_segment`). Every segment is still looked at, at its two
        ends, and every run kept is validated, so the errors are those of a whole load
        (``nodeids=()``: the index and those checks only). A version-1/2 file is read whole.
        """
        files = self.files(name)
        select = None
        if nodeids is not None:
            wanted = set(nodeids)
            select = lambda bench: bench["nodeid"] in wanted  # noqa: E731
        try:
            doc, version = layout.load(files, RunRecord.from_dict, select)
        except FileNotFoundError:
            raise UnknownBaseline(name, str(self.root), self.names()) from None
        return Baseline(name, files.index, doc, version)

    def _read_index(self, name: str, files: layout.Files) -> tuple[dict[str, Any], int]:
        """The index (a version-1/2 file is read whole and returned as a document)."""
        try:
            data = layout.read_bytes(files.index)
        except FileNotFoundError:
            raise UnknownBaseline(name, str(self.root), self.names()) from None
        return layout.parse_index(files, data)

    def check(self, name: str) -> None:
        """That an existing baseline ``name`` can be saved into: its index reads and validates.

        Cheap (the runs are not read; its segments are looked at, at their two ends): the
        check a session makes before measuring.
        """
        files = self.files(name)
        layout.check_writable(files)
        if files.index.exists():
            index, version = self._read_index(name, files)
            if version > schema.DOCUMENT_VERSION:
                layout.check_segments(files, index)

    def overview(self, name: str) -> Overview:
        """What ``name`` holds, from its index alone (a version-1/2 file is read whole)."""
        files = self.files(name)
        index, version = self._read_index(name, files)
        if version <= schema.DOCUMENT_VERSION:
            index = _index_of_document(index)
        counts: dict[tuple[str, str], int] = {}
        n_runs = 0
        for bench in index["benchmarks"].values():
            for sid, _, fid, _ in bench["runs"]:
                counts[sid, fid] = counts.get((sid, fid), 0) + 1
                n_runs += 1
        segs = index["segments"]
        sessions = sorted(
            (
                Session(
                    segs[sid]["timestamp"],
                    tuple(segs[sid]["run_ids"]),
                    fid,
                    n,
                    segs[sid].get("commit"),
                )
                for (sid, fid), n in counts.items()
            ),
            key=lambda s: (s.timestamp, s.run_ids, s.fingerprint_id),
        )
        return Overview(
            name=name,
            path=files.index,
            benchmarks=len(index["benchmarks"]),
            runs=n_runs,
            environments=len(index["fingerprints"]),
            updated=index["updated"],
            sessions=tuple(sessions),
        )

    def save(
        self,
        name: str,
        results: Sequence[Result | Mapping[str, Any]],
        *,
        keep_runs: int = DEFAULT_KEEP_RUNS,
        meta: Mapping[str, Any] | None = None,
        fingerprint_extra: Mapping[str, Any] | None = None,
        extras: Mapping[str, Mapping[str, Any]] | None = None,
        now: _dt.datetime | None = None,
    ) -> SaveSummary:
        """Append one run per result to baseline ``name`` (created if missing).

        Keeps the newest ``keep_runs`` runs of each benchmark per fingerprint;
        other benchmarks and fingerprints are never dropped. ``meta`` (git sha,
        CI job, ...) is stored with every run of this save; ``fingerprint_extra``
        holds the hook-provided fingerprint keys; ``extras[key]`` is opaque
        data stored with the run of benchmark ``key`` (the kernel inventory).
        The runs go into one new segment, and the index is rewritten; the
        runs already stored are not read. An existing file that cannot be read
        is left as it is (:class:`CorruptBaseline`).

        One pass: record the results (:mod:`.fingerprint`, :mod:`.records`), check the
        name and the files, lock, read the index, merge the runs into it
        (:func:`.schema.add_runs`), write the segment, then the index (:func:`.layout.commit`).
        """
        if keep_runs < 1:
            raise ValueError(f"keep_runs must be >= 1, got {keep_runs}")
        stamp = _stamp(now or _now())
        new_fps, new_runs, skipped = _record(results, stamp, meta, fingerprint_extra, extras)
        # check
        files = layout.Files(self.root, check_name(name))
        if not new_runs:
            return SaveSummary(
                name, files.index, False, 0, 0, 0, (), keep_runs, None, tuple(skipped)
            )
        layout.check_writable(files)
        # lock, read, merge, write the segment, write the index
        with layout.locked(files, "save into", self.lock_timeout, self.on_wait):
            layout.check_writable(files)
            created = not files.index.exists()
            if created:
                index, version = schema.empty_index(name, stamp), schema.SCHEMA_VERSION
            else:
                try:
                    data = layout.read_bytes(files.index)
                except FileNotFoundError:
                    raise UnknownBaseline(name, str(self.root), self.names()) from None
                try:
                    index, version = schema.read_index(data)
                except schema.SchemaProblem as e:
                    raise CorruptBaseline(str(files.index), str(e), e.remedy) from None
            migrated = version != schema.SCHEMA_VERSION
            if migrated:  # a version-1/2 file: its runs become segments first
                index = layout.index_from_document(files, index)
            previous = {} if migrated else dict(index["segments"])
            written = list(index["segments"]) if migrated else []
            try:
                add = schema.add_runs(
                    index, new_fps, new_runs, skipped, name=name, stamp=stamp, keep_runs=keep_runs
                )
            except schema.RefusedWrite as e:  # a bug: never write what we would refuse to read
                what = f"segment {e.segment} of" if e.segment else "baseline to"
                raise BaselineError(
                    f"refusing to write an invalid {what} {files.index}: {e}"
                ) from None
            layout.commit(files, add, previous, written, write=bool(add.added) or migrated)
        return SaveSummary(
            name=name,
            path=files.index,
            created=created and bool(add.added),
            added=add.added,
            dropped=add.dropped,
            benchmarks=add.benchmarks,
            fingerprints=tuple(sorted(new_fps)),
            keep_runs=keep_runs,
            migrated_from=version if migrated else None,
            skipped=tuple(skipped),
        )

    def delete(self, name: str) -> Path:
        """Remove baseline ``name`` (its index and its runs); :class:`UnknownBaseline` if none."""
        files = self._existing(name)
        layout.check_writable(files)
        with layout.locked(files, "delete", self.lock_timeout, self.on_wait):
            layout.check_writable(files)
            if not files.index.exists():  # deleted by another process meanwhile
                raise UnknownBaseline(name, str(self.root), self.names())
            files.index.unlink()
            layout.collect_garbage(files, set())
        return files.index

    def prune(
        self,
        name: str,
        *,
        keep_runs: int | None = None,
        fingerprint_id: str | None = None,
        keys: Iterable[str] | None = None,
        before: _dt.datetime | None = None,
        dry_run: bool = False,
        now: _dt.datetime | None = None,
    ) -> PruneSummary:
        """Remove runs from baseline ``name``, or with ``dry_run`` only say which.

        A run is removed when it matches every selector given among
        ``fingerprint_id``, ``keys`` (benchmark keys) and ``before`` (saved
        earlier than this time), and, with ``keep_runs``, is not among the
        newest ``keep_runs`` runs of its benchmark in its environment (alone,
        ``keep_runs`` trims every benchmark of every environment). Benchmarks
        and environments left without runs go too. Nothing else is touched.
        """
        _check_prune(keep_runs, fingerprint_id, keys, before)
        files = self._existing(name)
        key_set = set(keys) if keys is not None else None
        layout.check_writable(files)
        with layout.locked(files, "prune", self.lock_timeout, self.on_wait):
            layout.check_writable(files)
            index, version = self._read_index(name, files)
            if version <= schema.DOCUMENT_VERSION and not dry_run:
                index = layout.index_from_document(files, index)
                previous: set[str] = set()
            elif version <= schema.DOCUMENT_VERSION:
                index = _index_of_document(index)
                previous = set()
            else:
                previous = set(index["segments"])
            if fingerprint_id is not None and fingerprint_id not in index["fingerprints"]:
                have = ", ".join(sorted(index["fingerprints"])) or "none"
                raise BaselineError(
                    f"baseline {name!r} has no fingerprint {fingerprint_id!r}; it has: {have}"
                )
            report = _prune_runs(index, keep_runs, fingerprint_id, key_set, before)
            removed = sum(e.removed for e in report)
            n_bench, n_fp = schema.drop_unused(index)
            if not dry_run and (removed or version != schema.SCHEMA_VERSION):
                index.update(updated=_stamp(now or _now()))
                layout.write_index(files, index)
                layout.collect_garbage(files, previous | set(index["segments"]))
        return PruneSummary(name, files.index, removed, n_bench, n_fp, report, dry_run)


def _record(
    results: Sequence[Result | Mapping[str, Any]],
    stamp: str,
    meta: Mapping[str, Any] | None,
    fingerprint_extra: Mapping[str, Any] | None,
    extras: Mapping[str, Mapping[str, Any]] | None,
) -> tuple[
    dict[str, dict[str, Any]],
    list[tuple[Mapping[str, Any], dict[str, Any]]],
    list[tuple[str, str]],
]:
    """The runs a save stores: their fingerprints by id, (benchmark identity, record) pairs,
    and the (key, why) of each result that cannot be stored (no environment, a bad field).

    Each result's environment first, then its run; loops, not comprehensions, so that
    the save does not step back into this module between them.
    """
    fps: list[dict[str, Any] | None] = []
    for r in results:
        env = r.environment if isinstance(r, Result) else r.get("environment")
        fps.append(fingerprint(env, fingerprint_extra) if env else None)
    new_fps: dict[str, dict[str, Any]] = {}
    new_runs: list[tuple[Mapping[str, Any], dict[str, Any]]] = []
    skipped: list[tuple[str, str]] = []
    for r, fp in zip(results, fps, strict=True):
        ident = r.id.to_dict() if isinstance(r, Result) else r.get("id", {})
        key = ident.get("key", "?")
        if fp is None:
            skipped.append((key, "no environment recorded, so no fingerprint"))
            continue
        try:
            rec = record_from_result(
                r, timestamp=stamp, meta=meta, extra=(extras or {}).get(key), fingerprint=fp
            )
        except ValueError as e:
            skipped.append((key, str(e)))
            continue
        new_fps[rec["fingerprint"]] = fp
        new_runs.append((ident, rec))
    return new_fps, new_runs, skipped


def _check_prune(
    keep_runs: int | None,
    fingerprint_id: str | None,
    keys: Iterable[str] | None,
    before: _dt.datetime | None,
) -> None:
    """Refuse a prune that selects nothing, keeps no run, or has a naive ``before``."""
    if keep_runs is None and fingerprint_id is None and keys is None and before is None:
        raise ValueError("prune needs keep_runs, fingerprint_id, keys or before")
    if keep_runs is not None and keep_runs < 1:
        raise ValueError(f"keep_runs must be >= 1, got {keep_runs}")
    if before is not None and before.tzinfo is None:
        raise ValueError("before must be timezone-aware (e.g. datetime(..., tzinfo=utc))")


def _prune_runs(
    index: dict[str, Any],
    keep_runs: int | None,
    fingerprint_id: str | None,
    key_set: set[str] | None,
    before: _dt.datetime | None,
) -> tuple[EnvironmentPrune, ...]:
    """Remove from ``index`` the runs :meth:`BaselineStore.prune` selects; returns what it
    removed in each environment."""
    segs = index["segments"]
    stamps = {sid: _dt.datetime.fromisoformat(e["timestamp"]) for sid, e in segs.items()}
    envs = {fid: _Tally() for fid in index["fingerprints"]}
    for key, bench in index["benchmarks"].items():
        runs = bench["runs"]
        newest: set[int] = set()
        if keep_runs is not None:
            for fid in {r[2] for r in runs}:
                mine = [i for i, r in enumerate(runs) if r[2] == fid]
                newest.update(mine[-keep_runs:])
        keep = []
        for i, ref in enumerate(runs):
            tally = envs[ref[2]]
            tally.total += 1
            if i in newest or not _selected(ref, key, stamps, fingerprint_id, key_set, before):
                keep.append(ref)
                continue
            tally.removed += 1
            tally.benchmarks.add(key)
            tally.times.append(segs[ref[0]]["timestamp"])
        runs[:] = keep
    return tuple(
        EnvironmentPrune(
            fid,
            _environment_label(index["fingerprints"][fid]),
            t.removed,
            t.total,
            len(t.benchmarks),
            min(t.times, default=None),
            max(t.times, default=None),
        )
        for fid, t in envs.items()
    )


@dataclass
class _Tally:
    total: int = 0
    removed: int = 0
    benchmarks: set[str] = field(default_factory=set)
    times: list[str] = field(default_factory=list)


def _environment_label(fp: Mapping[str, Any]) -> str:
    """A fingerprint as a user tells environments apart: the device, driver, torch."""
    if fp.get("device") == "cuda":
        parts = [fp.get("gpu_name"), f"driver {fp.get('driver')}", f"torch {fp.get('torch')}"]
    else:
        parts = [fp.get("cpu_model") or "cpu", f"torch {fp.get('torch')}"]
    extra = [f"{k}={v}" for k, v in sorted(fp.items()) if k not in BUILTIN_KEYS]
    return ", ".join(str(p) for p in [*parts, *extra] if p)


def load_file(path: Path) -> Baseline:
    """The baseline whose file is ``path`` (``NAME.json``, its runs beside it), named by its stem.

    For files given by path (the CLI's ``show PATH``), whatever their name.
    """
    files = layout.Files(path.parent, path.stem)
    try:
        doc, version = layout.load(files, RunRecord.from_dict)
    except FileNotFoundError:
        raise BaselineError(f"no such baseline file: {path}") from None
    return Baseline(path.stem, path, doc, version)


def _selected(
    ref: Sequence[str],
    key: str,
    stamps: Mapping[str, _dt.datetime],
    fid: str | None,
    keys: set[str] | None,
    before: _dt.datetime | None,
) -> bool:
    if fid is not None and ref[2] != fid:
        return False
    if keys is not None and key not in keys:
        return False
    return before is None or stamps[ref[0]] < before


def _index_of_document(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A version-1/2 document seen as an index (one pseudo-segment per save), for overviews."""
    segments: dict[str, Any] = {}
    benchmarks: dict[str, Any] = {}
    for key, bench in doc["benchmarks"].items():
        refs = []
        for run in bench["runs"]:
            sid = f"{run['timestamp']}|{run['run_id']}"
            seg = segments.setdefault(
                sid, {"timestamp": run["timestamp"], "run_ids": [run["run_id"]]}
            )
            meta = run.get("meta") or {}
            sha = meta.get("git_sha") or meta.get("ci_sha")
            if sha and "commit" not in seg:
                seg["commit"] = str(sha)
            refs.append([sid, "", run["fingerprint"], run["policy"]])
        benchmarks[key] = {"runs": refs}
    return {**doc, "segments": segments, "benchmarks": benchmarks}


def document_of(
    name: str,
    results: Iterable[Result],
    *,
    stamp: str,
    fingerprint_extra: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], dict[str, Result]]:
    """``results`` as an in-memory document (never written) of one run each, recorded as a
    save records them, and the results kept, by key. A result that cannot be a baseline run
    (no environment, no rounds, a zero time) is left out, as a save leaves it out."""
    doc = empty_document(name, stamp)
    kept: dict[str, Result] = {}
    for r in results:
        if not r.environment or not r.rounds:
            continue
        fp = fingerprint(r.environment, fingerprint_extra)
        fid = schema.fingerprint_id(fp)
        try:
            rec = record_from_result(r, fingerprint_id=fid, timestamp=stamp)
        except ValueError:
            continue
        pid = schema.content_id(rec["policy"])
        doc["fingerprints"][fid] = fp
        doc["policies"][pid] = rec["policy"]
        entry = doc["benchmarks"].setdefault(
            r.id.key,
            {"nodeid": r.id.nodeid, "name": r.id.name, "mode": r.id.mode, "runs": []},
        )
        entry["params"] = dict(r.id.params)
        entry["runs"].append({**rec, "policy": pid})
        kept[r.id.key] = r
    return doc, kept
