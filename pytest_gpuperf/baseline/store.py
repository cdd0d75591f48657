"""The baseline store: storing runs of benchmarks, and finding the comparable ones.

``--gpuperf-save=NAME`` appends one run per benchmark to ``<dir>/NAME.json``;
``--gpuperf-baseline=NAME`` reads it back. A benchmark's runs are kept per
environment fingerprint (:mod:`pytest_gpuperf.fingerprint`), the newest
``keep_runs`` of each, because the run-to-run noise that the verdict needs is
learnt from that history, never from the rounds of one run.

Nothing is lost on bad input: a file that cannot be read is reported (which
file, what is wrong, what to do) and never rewritten; a save holds a
cross-process lock around read-merge-write (:mod:`pytest_gpuperf.filelock`)
and replaces the file atomically, so concurrent saves keep every run and a
save killed half-way leaves the old file whole. The format and its versions
are in :mod:`pytest_gpuperf.baseline.schema`.

Pure Python: no torch, no pytest.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_gpuperf import __version__
from pytest_gpuperf.baseline import DEFAULT_KEEP_RUNS, NAME_PATTERN, check_name, schema
from pytest_gpuperf.baseline.records import (
    Baseline,
    record_from_result,
)
from pytest_gpuperf.errors import (
    BaselineError,
    BaselineLocked,
    CorruptBaseline,
    UnknownBaseline,
)
from pytest_gpuperf.fileio import atomic_write_text
from pytest_gpuperf.filelock import LockTimeout, locked
from pytest_gpuperf.fingerprint import content_id, fingerprint, fingerprint_id
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
class PruneSummary:
    name: str
    path: Path
    removed_runs: int
    removed_benchmarks: int
    removed_fingerprints: int

    def describe(self) -> str:
        """One line for the CLI."""
        if not self.removed_runs:
            return f"baseline {self.name!r}: nothing to remove ({self.path})"
        return (
            f"removed {self.removed_runs} run(s) from baseline {self.name!r} ({self.path}); "
            f"{self.removed_benchmarks} benchmark(s) and {self.removed_fingerprints} "
            "environment(s) left without runs were removed too"
        )


class BaselineStore:
    """The baselines of one directory, one ``<name>.json`` file each."""

    def __init__(self, root: str | Path, *, lock_timeout: float = 60.0):
        self.root = Path(root)
        self.lock_timeout = lock_timeout

    def __repr__(self) -> str:
        return f"BaselineStore({str(self.root)!r})"

    def names(self) -> list[str]:
        """Names of the baselines in the directory, sorted (none if it does not exist)."""
        if not self.root.is_dir():
            return []
        return sorted(
            p.stem
            for p in self.root.glob("*.json")
            if p.is_file() and NAME_PATTERN.fullmatch(p.stem)
        )

    def path(self, name: str) -> Path:
        return self.root / f"{check_name(name)}.json"

    def _lock_path(self, name: str) -> Path:
        return self.root / f".{check_name(name)}.json.lock"

    def exists(self, name: str) -> bool:
        return self.path(name).is_file()

    def _existing(self, name: str) -> Path:
        """The path of ``name``, or :class:`UnknownBaseline` (before any lock file is made)."""
        path = self.path(name)
        if not path.exists():
            raise UnknownBaseline(name, str(self.root), self.names())
        return path

    def load(self, name: str) -> Baseline:
        """Read, validate and migrate baseline ``name``; the file is never changed."""
        path = self.path(name)
        doc, version = self._read(name, path)
        return Baseline(name, path, doc, version)

    def _read(self, name: str, path: Path) -> tuple[dict[str, Any], int]:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise UnknownBaseline(name, str(self.root), self.names()) from None
        except OSError as e:
            raise BaselineError(f"cannot read baseline file {path}: {e.strerror or e}") from None
        try:
            doc, version = schema.parse(data)
        except schema.SchemaProblem as e:
            raise CorruptBaseline(str(path), str(e), e.remedy) from None
        return doc, version

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
        An existing file that cannot be read is left as it is
        (:class:`CorruptBaseline`).
        """
        if keep_runs < 1:
            raise ValueError(f"keep_runs must be >= 1, got {keep_runs}")
        path = self.path(name)
        stamp = _stamp(now or _now())
        new_fps: dict[str, dict[str, Any]] = {}
        new_runs: list[tuple[Mapping[str, Any], dict[str, Any]]] = []
        skipped: list[tuple[str, str]] = []
        for r in results:
            d = r.to_dict() if isinstance(r, Result) else r
            key = d.get("id", {}).get("key", "?")
            env = d.get("environment")
            if not env:
                skipped.append((key, "no environment recorded, so no fingerprint"))
                continue
            fp = fingerprint(env, fingerprint_extra)
            fid = fingerprint_id(fp)
            try:
                rec = record_from_result(
                    d,
                    fingerprint_id=fid,
                    timestamp=stamp,
                    meta=meta,
                    extra=(extras or {}).get(key),
                )
            except ValueError as e:
                skipped.append((key, str(e)))
                continue
            new_fps[fid] = fp
            new_runs.append((d, rec))
        if not new_runs:
            return SaveSummary(name, path, False, 0, 0, 0, (), keep_runs, None, tuple(skipped))

        with self._locked(name, path, "save into"):
            created = not path.exists()
            if created:
                doc = empty_document(name, stamp)
                version = schema.SCHEMA_VERSION
            else:
                doc, version = self._read(name, path)
            added, dropped, n_bench = _merge(doc, new_fps, new_runs, keep_runs, skipped)
            if added:
                doc.update(name=name, updated=stamp, plugin_version=__version__)
                self._write(path, doc)
        return SaveSummary(
            name=name,
            path=path,
            created=created and bool(added),
            added=added,
            dropped=dropped,
            benchmarks=n_bench,
            fingerprints=tuple(sorted(new_fps)),
            keep_runs=keep_runs,
            migrated_from=None if version == schema.SCHEMA_VERSION else version,
            skipped=tuple(skipped),
        )

    @contextlib.contextmanager
    def _locked(self, name: str, path: Path, action: str) -> Iterator[None]:
        """Hold the baseline's lock; turn lock and file-system failures into clear errors."""
        try:
            with locked(self._lock_path(name), timeout=self.lock_timeout):
                yield
        except LockTimeout as e:
            raise BaselineLocked(str(e)) from None
        except OSError as e:  # disk full, read-only, no locks on this file system, ...
            raise BaselineError(
                f"cannot {action} baseline file {path}: {e.strerror or e}. "
                "The file is as it was before."
            ) from e

    def _write(self, path: Path, doc: dict[str, Any]) -> None:
        doc["schema"] = schema.SCHEMA
        doc["schema_version"] = schema.SCHEMA_VERSION
        try:
            schema.validate(doc, schema.SCHEMA_VERSION)
        except schema.SchemaProblem as e:  # a bug: never write what we would refuse to read
            raise BaselineError(f"refusing to write an invalid baseline to {path}: {e}") from None
        atomic_write_text(path, schema.dumps(doc))

    def delete(self, name: str) -> Path:
        """Remove baseline ``name``; :class:`UnknownBaseline` if there is none."""
        path = self._existing(name)
        with self._locked(name, path, "delete"):
            if not path.exists():  # deleted by another process meanwhile
                raise UnknownBaseline(name, str(self.root), self.names())
            path.unlink()
        return path

    def prune(
        self,
        name: str,
        *,
        keep_runs: int | None = None,
        fingerprint_id: str | None = None,
        keys: Iterable[str] | None = None,
        before: _dt.datetime | None = None,
        now: _dt.datetime | None = None,
    ) -> PruneSummary:
        """Remove runs from baseline ``name``.

        A run goes when it matches every selector given among
        ``fingerprint_id``, ``keys`` (benchmark keys) and ``before`` (saved
        earlier than this time); then ``keep_runs`` trims each benchmark to
        its newest runs per fingerprint. Emptied benchmarks and fingerprints
        no run refers to are removed too.
        """
        if keep_runs is None and fingerprint_id is None and keys is None and before is None:
            raise ValueError("prune needs keep_runs, fingerprint_id, keys or before")
        if keep_runs is not None and keep_runs < 1:
            raise ValueError(f"keep_runs must be >= 1, got {keep_runs}")
        if before is not None and before.tzinfo is None:
            raise ValueError("before must be timezone-aware (e.g. datetime(..., tzinfo=utc))")
        path = self._existing(name)
        key_set = set(keys) if keys is not None else None
        with self._locked(name, path, "prune"):
            doc, _ = self._read(name, path)
            if fingerprint_id is not None and fingerprint_id not in doc["fingerprints"]:
                have = ", ".join(sorted(doc["fingerprints"])) or "none"
                raise BaselineError(
                    f"baseline {name!r} has no fingerprint {fingerprint_id!r}; it has: {have}"
                )
            selective = fingerprint_id is not None or key_set is not None or before is not None
            removed = 0
            for key, bench in doc["benchmarks"].items():
                runs = bench["runs"]
                if selective:
                    keep = [
                        r for r in runs if not _selected(r, key, fingerprint_id, key_set, before)
                    ]
                    removed += len(runs) - len(keep)
                    runs[:] = keep
                if keep_runs is not None:
                    for fid in {r["fingerprint"] for r in runs}:
                        removed += _trim(runs, fid, keep_runs)
            n_bench, n_fp = _drop_empty(doc)
            if removed or n_bench or n_fp:
                doc.update(updated=_stamp(now or _now()), plugin_version=__version__)
                self._write(path, doc)
        return PruneSummary(name, path, removed, n_bench, n_fp)


def _merge(
    doc: dict[str, Any],
    fps: Mapping[str, dict[str, Any]],
    runs: Sequence[tuple[Mapping[str, Any], dict[str, Any]]],
    keep_runs: int,
    skipped: list[tuple[str, str]],
) -> tuple[int, int, int]:
    """Add ``runs`` (result dict, record) to ``doc``; returns (added, dropped, benchmarks)."""
    doc["fingerprints"].update(fps)
    policies, benches = doc["policies"], doc["benchmarks"]
    touched: set[tuple[str, str]] = set()
    added = 0
    for result, rec in runs:
        bid = result["id"]
        entry = benches.setdefault(bid["key"], {"runs": []})
        if any(_same_run(rec, old) for old in entry["runs"]):
            # The same run saved again (a retried job): once is enough. Distinct runs
            # that share a run id (subprocesses of one session) are kept.
            skipped.append((bid["key"], f"run {rec['run_id']} is already saved"))
            continue
        entry.update(
            nodeid=bid["nodeid"],
            name=bid.get("name"),
            mode=bid["mode"],
            params={str(k): str(v) for k, v in (bid.get("params") or {}).items()},
        )
        pid = content_id(rec["policy"])
        policies[pid] = rec["policy"]
        entry["runs"].append({**rec, "policy": pid})
        touched.add((bid["key"], rec["fingerprint"]))
        added += 1
    dropped = sum(_trim(benches[key]["runs"], fid, keep_runs) for key, fid in touched)
    _drop_empty(doc)  # fingerprints and policies whose last run was trimmed
    return added, dropped, len({key for key, _ in touched})


def _selected(
    run: Mapping[str, Any],
    key: str,
    fid: str | None,
    keys: set[str] | None,
    before: _dt.datetime | None,
) -> bool:
    if fid is not None and run["fingerprint"] != fid:
        return False
    if keys is not None and key not in keys:
        return False
    return before is None or _dt.datetime.fromisoformat(run["timestamp"]) < before


def _same_run(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    return all(new[k] == old[k] for k in ("run_id", "fingerprint", "rounds", "median"))


def _trim(runs: list[dict[str, Any]], fid: str, keep: int) -> int:
    """Drop the oldest runs of fingerprint ``fid`` beyond ``keep``; returns how many."""
    idx = [i for i, r in enumerate(runs) if r["fingerprint"] == fid]
    drop = set(idx[: max(0, len(idx) - keep)])
    if drop:
        runs[:] = [r for i, r in enumerate(runs) if i not in drop]
    return len(drop)


def _drop_empty(doc: dict[str, Any]) -> tuple[int, int]:
    benches = doc["benchmarks"]
    empty = [k for k, b in benches.items() if not b["runs"]]
    for k in empty:
        del benches[k]
    used = {r["fingerprint"] for b in benches.values() for r in b["runs"]}
    unused = [f for f in doc["fingerprints"] if f not in used]
    for f in unused:
        del doc["fingerprints"][f]
    used = {r["policy"] for b in benches.values() for r in b["runs"]}
    doc["policies"] = {p: v for p, v in doc["policies"].items() if p in used}
    return len(empty), len(unused)


def empty_document(name: str, stamp: str) -> dict[str, Any]:
    """A baseline document with no benchmarks (the current schema)."""
    return {
        "schema": schema.SCHEMA,
        "schema_version": schema.SCHEMA_VERSION,
        "name": name,
        "plugin_version": __version__,
        "created": stamp,
        "updated": stamp,
        "fingerprints": {},
        "policies": {},
        "benchmarks": {},
    }
