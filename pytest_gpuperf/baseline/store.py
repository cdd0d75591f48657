"""The baseline store: saving, pruning and loading named baselines.

A benchmark's runs are kept per environment fingerprint, the newest ``keep_runs`` of each:
the run-to-run noise the verdict needs is learnt from that history. A save holds a
cross-process lock around read-merge-write and never reads the runs already stored, so
its cost does not grow with the history (files: :mod:`.files`; format: :mod:`.codec`).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_gpuperf import __version__
from pytest_gpuperf.baseline import DEFAULT_KEEP_RUNS, NAME_RULE, check_name, codec, is_name
from pytest_gpuperf.baseline import files as disk
from pytest_gpuperf.baseline.filelock import DEFAULT_TIMEOUT_S, OnWait
from pytest_gpuperf.baseline.fingerprint import BUILTIN_KEYS
from pytest_gpuperf.baseline.records import Baseline, storable
from pytest_gpuperf.errors import BaselineError, UnknownBaseline
from pytest_gpuperf.model import EMPTY, Run


def _stamp(t: _dt.datetime | None) -> str:
    t = t or _dt.datetime.now(_dt.timezone.utc)
    if t.tzinfo is None:
        raise ValueError("timestamps must be timezone-aware (e.g. datetime.now(timezone.utc))")
    return t.astimezone(_dt.timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class SaveSummary:
    name: str
    path: Path
    created: bool
    added: int
    dropped: int
    benchmarks: int
    keep_runs: int
    #: runs not saved, with why: (benchmark key, reason)
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
    """The baselines of one directory: ``NAME.json`` each (see :mod:`.files`)."""

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
        """Names of the baselines in the directory (none if it is missing), sorted."""
        return sorted(
            p.stem
            for p in self.root.glob("*.json")
            if p.is_file() and is_name(p.stem) and not disk.looks_like_segment(p)
        )

    def strays(self) -> list[tuple[Path, str]]:
        """JSON files in the folder that look like baselines but cannot be one, with why."""
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

    def files(self, name: str) -> disk.Files:
        return disk.Files(self.root, check_name(name))

    def path(self, name: str) -> Path:
        return self.files(name).index

    def exists(self, name: str) -> bool:
        return self.path(name).is_file()

    def load(self, name: str, *, nodeids: Collection[str] | None = None) -> Baseline:
        """Read baseline ``name``, checked, as it is now: with ``nodeids`` (pytest node ids),
        only the benchmarks of those tests (:func:`.files.read`); a bad run of a test's is
        raised when its runs are asked for."""
        where = self.files(name)
        wanted = None if nodeids is None else set(nodeids)
        try:
            index, lines, problems = disk.read(where, wanted)
        except FileNotFoundError:
            raise UnknownBaseline(name, str(self.root), self.names()) from None
        return Baseline.read(name, where.index, index, lines, problems, wanted)

    def _read_index(self, where: disk.Files) -> dict[str, Any]:
        try:
            data = disk.read_regular(where.index)
        except FileNotFoundError:
            raise UnknownBaseline(where.stem, str(self.root), self.names()) from None
        return disk.parse_index(where, data)

    def check(self, name: str) -> None:
        """That ``name`` can be saved into (index read, segments whole), before measuring."""
        where = self.files(name)
        disk.check_writable(where)
        if where.index.exists() or where.index.is_symlink():
            disk.check_segments(where, self._read_index(where))

    def overview(self, name: str) -> Overview:
        """What ``name`` holds, from its index alone."""
        where = self.files(name)
        index = self._read_index(where)
        runs = [(sid, fid) for b in index["benchmarks"].values() for sid, _, fid, _ in b["runs"]]
        sessions = sorted(
            (
                Session(s["timestamp"], tuple(s["run_ids"]), fid, n, s.get("commit"))
                for (sid, fid), n in Counter(runs).items()
                for s in [index["segments"][sid]]
            ),
            key=lambda s: (s.timestamp, s.run_ids, s.fingerprint_id),
        )
        head = (len(index["benchmarks"]), len(runs), len(index["fingerprints"]), index["updated"])
        return Overview(name, where.index, *head, tuple(sessions))

    def save(
        self,
        name: str,
        runs: Sequence[Run],
        *,
        keep_runs: int = DEFAULT_KEEP_RUNS,
        meta: Mapping[str, Any] | None = None,
        fingerprint_extra: Mapping[str, Any] | None = None,
        now: _dt.datetime | None = None,
    ) -> SaveSummary:
        """Append ``runs`` to baseline ``name`` (created if missing), keeping the newest
        ``keep_runs`` runs of each benchmark per fingerprint. ``meta`` (git sha, CI job, ...)
        goes with every run of this save; ``fingerprint_extra``: the hooks' fingerprint keys.
        A file that cannot be read is left as it is."""
        if keep_runs < 1:
            raise ValueError(f"keep_runs must be >= 1, got {keep_runs}")
        stamp = _stamp(now)
        new: list[tuple[Run, dict[str, Any], dict[str, Any]]] = []
        skipped: list[tuple[str, str]] = []
        changes = {"timestamp": stamp, "meta": meta or EMPTY, "plugin_version": __version__}
        for run in runs:
            got = storable(run, fingerprint_extra, **changes)
            if isinstance(got, str):
                skipped.append((run.id.key, got))
            else:
                new.append(got)
        where = disk.Files(self.root, check_name(name))
        if not new:
            return SaveSummary(name, where.index, False, 0, 0, 0, keep_runs, tuple(skipped))
        with disk.locked(where, "save into", self.lock_timeout, self.on_wait):
            created = not os.path.lexists(where.index)
            if created:
                index = codec.empty_index(stamp)
            else:
                index = disk.parse_index(where, disk.read_regular(where.index))
            previous = dict(index["segments"])  # merged in memory: the files are written after
            add = codec.add_runs(index, new, skipped, name=name, stamp=stamp, keep_runs=keep_runs)
            disk.check_segments(where, {"segments": previous})  # still whole
            if add.segment is not None:
                disk.commit(where, index, previous, add.segment)
        made, counts = created and bool(add.added), (add.added, add.dropped, add.benchmarks)
        return SaveSummary(name, where.index, made, *counts, keep_runs, tuple(skipped))

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
        """Remove from baseline ``name`` (with ``dry_run``: only say) the runs that match
        every selector given (``fingerprint_id``, benchmark ``keys``, saved ``before``) and,
        with ``keep_runs``, are not among the newest ``keep_runs`` of their benchmark in
        their environment. Benchmarks and environments left without runs go too."""
        if keep_runs is None and fingerprint_id is None and keys is None and before is None:
            raise ValueError("prune needs keep_runs, fingerprint_id, keys or before")
        if keep_runs is not None and keep_runs < 1:
            raise ValueError(f"keep_runs must be >= 1, got {keep_runs}")
        if before is not None and before.tzinfo is None:
            raise ValueError("before must be timezone-aware (e.g. datetime(..., tzinfo=utc))")
        where = self.files(name)
        if not os.path.lexists(where.index):  # before any lock file is made
            raise UnknownBaseline(name, str(self.root), self.names())
        key_set = set(keys) if keys is not None else None
        held = disk.locked(where, "prune", self.lock_timeout, self.on_wait)
        with contextlib.nullcontext() if dry_run else held:
            index = self._read_index(where)
            previous = set(index["segments"])
            if fingerprint_id is not None and fingerprint_id not in index["fingerprints"]:
                have = ", ".join(sorted(index["fingerprints"])) or "none"
                raise BaselineError(
                    f"baseline {name!r} has no fingerprint {fingerprint_id!r}; it has: {have}"
                )
            report = _prune_runs(index, keep_runs, fingerprint_id, key_set, before)
            removed = sum(e.removed for e in report)
            n_bench, n_fp = codec.drop_unused(index)
            if not dry_run and removed:
                index.update(updated=_stamp(now))
                disk.commit(where, index, previous)
        return PruneSummary(name, where.index, removed, n_bench, n_fp, report, dry_run)


def _prune_runs(
    index: dict[str, Any],
    keep_runs: int | None,
    fingerprint_id: str | None,
    key_set: set[str] | None,
    before: _dt.datetime | None,
) -> tuple[EnvironmentPrune, ...]:
    """Remove the runs :meth:`BaselineStore.prune` selects; what went, per environment."""
    segs = index["segments"]
    stamps = {s: _dt.datetime.fromisoformat(e["timestamp"]) for s, e in segs.items()}

    def selected(key: str, ref: list[str]) -> bool:
        return (
            (fingerprint_id is None or ref[2] == fingerprint_id)
            and (key_set is None or key in key_set)
            and (before is None or stamps[ref[0]] < before)
        )

    total = Counter(r[2] for b in index["benchmarks"].values() for r in b["runs"])
    gone: dict[str, list[tuple[str, str]]] = {fid: [] for fid in index["fingerprints"]}
    for key, bench in index["benchmarks"].items():
        runs = bench["runs"]
        newest = _newest(runs, keep_runs)
        drop = {i for i, r in enumerate(runs) if i not in newest and selected(key, r)}
        for i in sorted(drop):
            gone[runs[i][2]].append((key, segs[runs[i][0]]["timestamp"]))
        runs[:] = [r for i, r in enumerate(runs) if i not in drop]
    return tuple(
        EnvironmentPrune(
            fid,
            _environment_label(index["fingerprints"][fid]),
            len(g),
            total[fid],
            len({k for k, _ in g}),
            min((t for _, t in g), default=None),
            max((t for _, t in g), default=None),
        )
        for fid, g in gone.items()
    )


def _newest(runs: list[list[str]], keep: int | None) -> set[int]:
    """Where the newest ``keep`` runs of each fingerprint are in ``runs`` (None: none)."""
    by_fp: dict[str, list[int]] = {}
    for i, ref in enumerate(runs):
        by_fp.setdefault(ref[2], []).append(i)
    return {i for mine in by_fp.values() for i in mine[-keep:]} if keep is not None else set()


def _environment_label(fp: Mapping[str, Any]) -> str:
    """A fingerprint as a user tells environments apart: the device, driver, torch."""
    if fp.get("device") == "cuda":
        parts = [fp.get("gpu_name"), f"driver {fp.get('driver')}", f"torch {fp.get('torch')}"]
    else:
        parts = [fp.get("cpu_model") or "cpu", f"torch {fp.get('torch')}"]
    extra = [f"{k}={v}" for k, v in sorted(fp.items()) if k not in BUILTIN_KEYS]
    return ", ".join(str(p) for p in [*parts, *extra] if p)


def load_file(path: Path) -> Baseline:
    """The baseline whose file is ``path``, named by its stem (the CLI's ``show PATH``)."""
    where = disk.Files(path.parent, path.stem)
    try:
        index, lines, _ = disk.read(where, None)
    except FileNotFoundError:
        raise BaselineError(f"no such baseline file: {path}") from None
    return Baseline.read(path.stem, path, index, lines, {})
