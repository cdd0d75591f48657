"""A baseline's files on disk, read and written so that nothing is torn and nothing hangs.

``<dir>/NAME.json`` is the index, ``<dir>/NAME.runs/<seg>.json`` one segment per save,
``<dir>/.NAME.json.lock`` the writers' lock. A writer writes its segment, then replaces
the index atomically: the index is the commit, so a writer killed at any point leaves the
previous index and every segment it names. Readers take no lock, and start again when a
segment vanished under them. Only regular files are read, without blocking.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import json
import os
import re
import stat
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_gpuperf.baseline import codec, fileio
from pytest_gpuperf.baseline.fileio import atomic_write_bytes, kind_of, nearest_existing
from pytest_gpuperf.baseline.filelock import LockTimeout, OnWait, lock_file_problem, owner_of
from pytest_gpuperf.baseline.filelock import locked as lock
from pytest_gpuperf.errors import BaselineError, BaselineLocked, CorruptBaseline, UnsafePath

#: How often a reader starts again when a segment vanished under it (a save per attempt).
READ_ATTEMPTS = 5
DIR_OPTION = "--gpuperf-baseline-dir (the CLI's --dir)"


@dataclass(frozen=True)
class Files:
    """The paths of baseline ``stem`` in ``root``."""

    root: Path
    stem: str
    index: Path = field(init=False, repr=False, compare=False)
    runs_dir: Path = field(init=False, repr=False, compare=False)
    lock: Path = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "index", self.root / f"{self.stem}.json")
        object.__setattr__(self, "runs_dir", self.root / f"{self.stem}.runs")
        object.__setattr__(self, "lock", self.root / f".{self.stem}.json.lock")

    def segment(self, sid: str) -> Path:
        return self.runs_dir / f"{sid}.json"


class SegmentGone(CorruptBaseline):
    """A segment the index lists is missing: a reader reads again (a save replaced it)."""


# --- reading ---------------------------------------------------------------------------------


def _open(path: Path) -> int:
    """A descriptor of regular file ``path``, opened without blocking (a FIFO would);
    ``FileNotFoundError``, or :class:`BaselineError` naming it."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        dangling = next(
            (p for p in (path, *path.parents) if p.is_symlink() and not p.exists()), None
        )
        if dangling is None:
            raise
        problem = f"a symbolic link to {os.readlink(dangling)}, which does not exist"
        raise _not_a_file(dangling, problem) from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise _not_a_file(path, "a symbolic link that leads back to itself (a loop)") from None
        blocker = next((p for p in path.parents if os.path.lexists(p) and not p.is_dir()), None)
        if e.errno == errno.ENOTDIR and blocker is not None:
            what = kind_of(os.lstat(blocker).st_mode)
            raise BaselineError(
                f"cannot read baseline file {path}: {blocker} is {what}, not a folder; move it "
                f"away, or point {DIR_OPTION} at the baselines' folder"
            ) from None
        raise BaselineError(f"cannot read baseline file {path}: {e.strerror or e}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise _not_a_file(path, kind_of(mode))
    return fd


def _not_a_file(path: Path, what: str) -> BaselineError:
    return BaselineError(
        f"baseline file {path} is {what}, not a file; pytest-gpuperf reads only regular files "
        "and folders there. Move it away, then restore the baseline's files from version "
        "control or save the baseline again"
    )


def read_regular(path: Path) -> bytes:
    with os.fdopen(_open(path), "rb") as f:
        return f.read()


def parse_index(files: Files, data: bytes) -> dict[str, Any]:
    try:
        return codec.read_index(data)
    except codec.SchemaProblem as e:
        remedy = e.remedy.replace("NAME", files.stem) if e.remedy else None
        raise CorruptBaseline(str(files.index), str(e), remedy) from None


def _broken(
    files: Files,
    sid: str,
    stamp: str,
    e: codec.SchemaProblem | str,
    kind: type[CorruptBaseline] = CorruptBaseline,
    **note: str,
) -> CorruptBaseline:
    """Segment ``sid``, saved at ``stamp``, cannot be used: how to repair the baseline."""
    remedy = e.remedy if isinstance(e, codec.FutureSchema) else None
    if remedy is None:
        after = (_dt.datetime.fromisoformat(stamp) + _dt.timedelta(seconds=1)).isoformat()
        remedy = (
            f"Restore {files.runs_dir.name}/ together with {files.index.name} from where you "
            "keep them (they belong together), or remove the runs of that save and keep those "
            f"saved after it: pytest-gpuperf prune {files.stem} --dir {files.root} --before "
            f"{after} (it also removes any runs saved earlier; see which with --dry-run first)."
        )
    where = f" (a segment of {files.index.name})"
    return kind(str(files.segment(sid)), str(e), remedy, where=where, **note)


def _missing(files: Files, sid: str, entry: Mapping[str, Any]) -> CorruptBaseline:
    problem = f"the file is missing, and {files.index.name} lists runs in it"
    return _broken(
        files, sid, entry["timestamp"], problem, SegmentGone, note="Nothing was changed."
    )


#: The index, each run's line by (key, digest), and what is wrong with a benchmark's runs.
Read = tuple[dict[str, Any], dict[tuple[str, str], bytes], dict[str, CorruptBaseline]]


def read(files: Files, nodeids: set[str] | None) -> Read:
    """The index of baseline ``files`` and the checked lines of the runs of ``nodeids``
    (None: all), in one pass: the baseline as it was, whatever a save changes after. A
    segment holding none of them is looked at, at its two ends; a bad run is its
    benchmark's problem (a whole read raises it). ``FileNotFoundError`` without an index."""
    previous: bytes | None = None
    for _ in range(READ_ATTEMPTS):
        data = read_regular(files.index)
        index = parse_index(files, data)
        try:
            lines, problems = _lines(files, index, nodeids)
            if problems and nodeids is None:
                raise next(iter(problems.values()))
            return index, lines, problems
        except SegmentGone:
            if data == previous:  # the same index twice: the segment is really missing
                raise
            previous = data
    raise BaselineError(
        f"baseline {files.index} changed {READ_ATTEMPTS} times while it was read; try again "
        "when the saves into it are done"
    )


def _lines(
    files: Files, index: Mapping[str, Any], nodeids: set[str] | None
) -> tuple[dict[tuple[str, str], bytes], dict[str, CorruptBaseline]]:
    benches = {
        key: bench
        for key, bench in index["benchmarks"].items()
        if nodeids is None or bench["nodeid"] in nodeids
    }
    wanted: dict[str, set[str]] = {}
    for key, bench in benches.items():
        for ref in bench["runs"]:
            wanted.setdefault(ref[0], set()).add(key)
    read: dict[str, bytes] = {}
    for sid, entry in index["segments"].items():
        if sid in wanted:
            read[sid] = _segment_bytes(files, sid, entry)
        else:
            _check_segment(files, sid, entry)
    out: dict[tuple[str, str], bytes] = {}
    problems: dict[str, CorruptBaseline] = {}
    for sid, data in read.items():
        entry = index["segments"][sid]
        try:
            lines, bad = codec.segment_lines(data, sid, entry["sha256"], wanted[sid])
        except codec.SchemaProblem as e:
            raise _broken(files, sid, entry["timestamp"], e) from None
        out.update(lines)
        for key, wrong in bad.items():
            problems.setdefault(key, _broken(files, sid, entry["timestamp"], wrong))
    for key, bench in benches.items():
        for sid, dig, _, _ in bench["runs"]:
            if (key, dig) not in out:
                problem = (
                    f"it has no run {dig} of benchmark {key!r}, which {files.index.name} lists"
                )
                raise _broken(files, sid, index["segments"][sid]["timestamp"], problem)
    return out, problems


def _segment_bytes(files: Files, sid: str, entry: Mapping[str, Any]) -> bytes:
    try:
        return read_regular(files.segment(sid))
    except FileNotFoundError:
        raise _missing(files, sid, entry) from None


def check_segments(files: Files, index: Mapping[str, Any]) -> None:
    """That every segment ``index`` lists is there and whole at its two ends: a save into a
    baseline with a broken segment would succeed and leave it unreadable."""
    for sid, entry in index["segments"].items():
        _check_segment(files, sid, entry)


def _check_segment(files: Files, sid: str, entry: Mapping[str, Any]) -> None:
    """That segment ``sid`` is there (else :class:`SegmentGone`) and whole at its two ends,
    or valid where it is not laid out as a save writes it."""
    try:
        ends = _ends(files.segment(sid))
    except FileNotFoundError:
        raise _missing(files, sid, entry) from None
    if not codec.ends_as_written(ends[1], sid):
        try:
            codec.segment_lines(_segment_bytes(files, sid, entry), sid, None, set())
        except codec.SchemaProblem as e:
            raise _broken(files, sid, entry["timestamp"], e) from None


def _ends(path: Path) -> tuple[bytes, bytes]:
    """The first and the last :data:`.codec.TAIL` bytes of regular file ``path``."""
    with os.fdopen(_open(path), "rb") as f:
        start = f.read(codec.TAIL)
        f.seek(max(0, os.fstat(f.fileno()).st_size - codec.TAIL))
        return start, f.read(codec.TAIL)


def looks_like_segment(path: Path) -> bool:
    """Whether ``path`` begins as a segment (a baseline folder pointed at ``NAME.runs``)."""
    with contextlib.suppress(OSError, BaselineError):
        return path.parent.name.endswith(".runs") and _ends(path)[0].startswith(
            b'{\n  "baseline": '
        )
    return False


def is_own_segment(files: Files, path: Path) -> bool:
    """Whether ``path`` is a segment this store wrote for baseline ``files`` (not a user's
    file of a segment-like name in ``NAME.runs/``)."""
    head = ('{\n  "baseline": ' + json.dumps(files.stem) + ",\n").encode()
    with contextlib.suppress(OSError, BaselineError):
        start, end = _ends(path)
        return start.startswith(head) and codec.ends_as_written(end, path.stem)
    return False


# --- writing (under the baseline's lock) ---------------------------------------------------


def check_writable(files: Files) -> None:
    """Raise :class:`BaselineError` if a save into ``files`` cannot, or must not, happen (a
    save would replace a symbolic link, not what it points to). Nothing is created."""
    folder = files.root
    existing = nearest_existing(folder)
    if existing.is_symlink() and not existing.exists():
        raise BaselineError(
            f"cannot save into baseline folder {folder}: {existing} is a symbolic link to "
            f"{os.readlink(existing)}, which leads nowhere (it does not exist, or it is a "
            f"loop); point {DIR_OPTION} at a folder, or repair the link"
        )
    if not existing.is_dir():
        raise BaselineError(
            f"cannot save into baseline folder {folder}: {existing} is a file, not a folder; "
            f"point {DIR_OPTION} at a folder"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise BaselineError(
            f"cannot save into baseline folder {folder}: {existing} is not writable (permissions "
            f"or a read-only file system); point {DIR_OPTION} at a folder you can write"
        )
    _check_owned(files, existing)
    problem = lock_file_problem(files.lock)
    if problem:
        target = f" (to {os.readlink(files.lock)})" if files.lock.is_symlink() else ""
        raise BaselineError(
            f"cannot save into baseline {files.stem!r}: its lock file {files.lock} {problem}"
            f"{target}, which pytest-gpuperf never makes and will not open; remove it (a save "
            "makes a new one)"
        )
    for path, kind, check in (
        (files.index, "file", Path.is_file),
        (files.runs_dir, "folder", Path.is_dir),
    ):
        if path.is_symlink():
            raise BaselineError(
                f"cannot save into baseline {files.stem!r}: {path} is a symbolic link (to "
                f"{os.readlink(path)}); a save would replace the link, not update what it "
                f"points to. Point {DIR_OPTION} at the folder that holds the real files, or "
                f"replace the link by its {kind}."
            )
        if os.path.lexists(path) and not check(path):
            mode = os.lstat(path).st_mode
            what = "a file" if stat.S_ISREG(mode) else kind_of(mode)
            raise BaselineError(
                f"cannot save into baseline {files.stem!r}: {path} is {what}, not a {kind} "
                "(the baseline is kept there); move it away"
            )


def _check_owned(files: Files, folder: Path) -> None:
    """Files of the baseline that another user owns and a save could not write."""
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
        user = owner_of(path) or "another user"
        raise BaselineError(
            f"cannot save into baseline {files.stem!r}: {path} belongs to {user} and {why}. "
            f"Save under a name of your own, ask {user} to save, or point {DIR_OPTION} at a "
            "folder of your own"
        )


def commit(
    files: Files,
    index: dict[str, Any],
    previous: Collection[str],
    segment: tuple[str, bytes] | None = None,
) -> None:
    """The end of a save (``segment``: its id and bytes, written first) or a prune, under
    the lock: the index replaced (the commit), then the segments no index names (of
    ``previous`` and now) deleted. If the index cannot be written, the baseline is left as
    it was."""
    data = codec.index_bytes(index)
    if segment is not None:
        atomic_write_bytes(files.segment(segment[0]), segment[1])
    try:
        atomic_write_bytes(files.index, data)
    except BaseException:  # the segment goes again: the baseline is as it was
        if segment is not None:
            with contextlib.suppress(OSError):
                files.segment(segment[0]).unlink()
                files.runs_dir.rmdir()  # only when empty
        raise
    collect_garbage(files, set(previous) | set(index["segments"]))


@contextlib.contextmanager
def locked(files: Files, action: str, timeout: float, on_wait: OnWait | None) -> Iterator[None]:
    """Hold the baseline's lock, once :func:`check_writable` (before and under it),
    removing what a killed writer left; errors say what to do."""
    name = files.stem
    check_writable(files)

    def told(holder: str) -> Any:
        return on_wait and on_wait(f"waiting for baseline {name!r}: it is locked by {holder}")

    try:
        with lock(files.lock, timeout=timeout, on_wait=told, owner=f"{action} baseline {name}"):
            check_writable(files)
            fileio.remove_temporaries(files.root, re.escape(files.index.name), all_of_them=True)
            fileio.remove_temporaries(files.runs_dir, r"[^/]+\.json", all_of_them=True)
            yield
    except LockTimeout as e:
        raise BaselineLocked(
            f"{e} (--gpuperf-lock-timeout, or the command's --lock-timeout, sets how long to wait)"
        ) from None
    except codec.RefusedWrite as e:  # a bug: what a save or prune made is never written
        what = f"segment {e.segment} of" if e.segment else "baseline to"
        raise BaselineError(f"refusing to write an invalid {what} {files.index}: {e}") from None
    except UnsafePath as e:
        raise BaselineError(f"cannot {action} baseline file {files.index}: {e}") from None
    except OSError as e:  # disk full, read-only, no locks on this file system, ...
        raise BaselineError(
            f"cannot {action} baseline file {files.index}: {e.strerror or e}. "
            "The file is as it was before."
        ) from e


def collect_garbage(files: Files, keep: set[str]) -> None:
    """Delete the segments this store wrote (:func:`is_own_segment`) not in ``keep``; the
    other files in ``NAME.runs/`` are not ours: left alone."""
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for e in list(os.scandir(files.runs_dir)):
            sid, ext = os.path.splitext(e.name)
            if ext != ".json" or sid in keep or not codec.SEGMENT_ID.fullmatch(sid):
                continue
            if e.is_file(follow_symlinks=False) and is_own_segment(files, Path(e.path)):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(e.path)
    if not keep:
        with contextlib.suppress(OSError):
            files.runs_dir.rmdir()  # only when empty: files that are not ours stay
