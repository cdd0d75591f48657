"""Writing files so that a reader never sees half of one, stable text that diffs well in
git, and output files where they belong.

Every output file (reports, ``export -o``, ``$GITHUB_STEP_SUMMARY``) goes through
:func:`write_output` under one rule, checked before any work by :func:`output_target`.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import secrets
import socket
import stat
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_gpuperf.errors import OutputError


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, flush it to disk, then rename:
    a process killed at any point leaves the old file or the new one, and perhaps its
    temporary file, which the next write removes. The permissions of the file replaced
    are kept; a new one follows the umask."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_temporaries(target.parent, re.escape(target.name))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    while True:  # made as open() makes a file: 0666 less the umask (mkstemp's 0600 is not)
        tmp = str(target.parent / f"{temporary_prefix(target)}{secrets.token_hex(4)}.tmp")
        with contextlib.suppress(FileExistsError):
            fd = os.open(tmp, flags, 0o666)
            break
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if target.exists():
            with contextlib.suppress(OSError):
                os.chmod(tmp, target.stat().st_mode & 0o777)
        _refuse_to_replace(target)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _refuse_to_replace(target: Path) -> None:
    """A FIFO, a device, a socket or a folder is never replaced (think ``/dev/null``)."""
    try:
        mode = os.lstat(target).st_mode
    except OSError:
        return
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        # an OSError: every writer (the store's too) reports those with the file's name
        raise OSError(
            errno.EEXIST, f"it is {kind_of(mode)}, not a file: never replaced", str(target)
        )


#: This host, as temporary file names carry it (a PID means nothing on another host).
_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


def temporary_prefix(target: Path, pid: int | None = None) -> str:
    """``.NAME.<pid>-<host>.``: whose temporary file of ``target`` it is."""
    return f".{target.name}.{os.getpid() if pid is None else pid}-{_HOST}."


def remove_temporaries(folder: Path, name: str, *, all_of_them: bool = False) -> None:
    """Remove the temporary files in ``folder`` of the files named ``name`` (a pattern) that
    writers killed mid-write left: those of gone processes of this host, or ``all_of_them``
    (the caller holds a lock)."""
    pattern = re.compile(rf"\.{name}\.(?:(\d+)-([0-9a-f]{{8}})\.)?[^/]*\.tmp")
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for found in names:
        m = pattern.fullmatch(found)
        if m is None or (
            not all_of_them
            and (m.group(2) != _HOST or m.group(1) is None or pid_alive(int(m.group(1))))
        ):
            continue
        with contextlib.suppress(OSError):
            os.unlink(folder / found)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs; one that cannot be asked about counts (what cannot be
    judged is never taken over or removed)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):  # another user's process, or a pid not to be asked about
        return True
    return True


# --- stable text ------------------------------------------------------------------------


def dumps(doc: Mapping[str, Any], *, compact_depth: int | None = None) -> str:
    """Stable text that diffs well in git: sorted keys, one per line; lists of plain values,
    and values ``compact_depth`` levels deep (a segment's runs), on one line. No NaN."""
    out: list[str] = []
    _emit(doc, 0, out, compact_depth)
    out.append("\n")
    return "".join(out)


def _emit(v: Any, level: int, out: list[str], compact: int | None) -> None:
    pad = "  " * (level + 1)
    flat = isinstance(v, (list, tuple)) and not any(isinstance(x, (Mapping, list)) for x in v)
    if level == compact or not isinstance(v, (Mapping, list, tuple)) or flat:
        out.append(_LINE(v))
    elif not v:
        out.append("{}" if isinstance(v, Mapping) else "[]")
    else:
        items = sorted(v.items()) if isinstance(v, Mapping) else [(None, x) for x in v]
        out.append("{\n" if isinstance(v, Mapping) else "[\n")
        for i, (k, x) in enumerate(items):
            out.append(pad + ("" if k is None else json.dumps(str(k), ensure_ascii=False) + ": "))
            _emit(x, level + 1, out, compact)
            out.append(",\n" if i < len(items) - 1 else "\n")
        out.append("  " * level + ("}" if isinstance(v, Mapping) else "]"))


#: One value on one line: sorted keys, ", " and ": " separators, no NaN (C-accelerated).
_LINE = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(", ", ": ")
).encode


# --- output files ----------------------------------------------------------------------

#: What marks a file as a pytest-gpuperf baseline (index, one-file, segment): its ``schema``.
_BASELINE_SCHEMA = "pytest-gpuperf/baseline"
#: The same in a file that does not parse (damaged, or too large to read whole).
_BASELINE_MARK = re.compile(rb'"schema"\s*:\s*"pytest-gpuperf(?:\\?/)baseline')
#: Files up to this size are parsed whole; larger ones searched for the mark at both ends.
_SNIFF_WHOLE = 16 << 20
_SNIFF_ENDS = 1 << 20
#: The names of the standard streams (``-``: standard output).
STANDARD_STREAMS: dict[str, int] = {
    "-": 1, "/dev/stdout": 1, "/dev/fd/1": 1, "/proc/self/fd/1": 1,
    "/dev/stderr": 2, "/dev/fd/2": 2, "/proc/self/fd/2": 2,
}  # fmt: skip
#: How long a FIFO output waits for a process that reads it.
FIFO_WAIT_S = 10.0


@dataclass(frozen=True)
class OutputTarget:
    """Where an output goes, and how: ``file`` (replaced atomically), ``stream`` (a FIFO or
    a character device: written to, never replaced), or ``fd`` (a standard stream)."""

    path: Path
    kind: str
    fd: int = -1


def nearest_existing(path: Path) -> Path:
    """``path``, or its nearest ancestor that exists."""
    existing = path
    while not os.path.lexists(existing) and existing.parent != existing:
        existing = existing.parent
    return existing


def output_target(
    path: str | os.PathLike[str], *, what: str, baseline_dirs: Sequence[Path] = ()
) -> OutputTarget:
    """Where writing output ``path`` (option ``what``) goes, or :class:`OutputError` saying
    why it must not or cannot be written; nothing is written or opened. Call it before the
    work whose output it is."""
    fd = STANDARD_STREAMS.get(os.fspath(path))
    if fd is not None:
        return OutputTarget(Path(os.fspath(path)), "fd", fd)
    target = _follow_links(Path(path), what)
    try:
        mode = os.stat(target).st_mode
    except (FileNotFoundError, NotADirectoryError):
        mode = None
    except OSError as e:
        raise OutputError(
            f"{what}: cannot write {path}: {e.strerror or e}; choose another path"
        ) from None
    refusal = _place_reason(target, baseline_dirs)
    if mode is not None and not stat.S_ISREG(mode):
        if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode):
            if refusal:
                _refuse_baseline(path, what, refusal)
            return OutputTarget(target, "stream")
        raise OutputError(
            f"{what}: cannot write {path}: it is {kind_of(mode)}, not a file; give the path of "
            "a file (or of a FIFO, or - for standard output)"
        )
    existing = nearest_existing(target.parent)
    if not existing.is_dir():
        raise OutputError(
            f"{what}: cannot write {path}: {existing} is a file, not a folder; choose another path"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OutputError(
            f"{what}: cannot write {path}: {existing} is not writable (permissions or a "
            "read-only file system); choose another path"
        )
    if not refusal and mode is not None:
        refusal = _content_reason(target)
    if refusal:
        _refuse_baseline(path, what, refusal)
    return OutputTarget(target, "file")


_KINDS: tuple[tuple[Callable[[int], bool], str], ...] = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISFIFO, "a FIFO"),
)


def kind_of(mode: int) -> str:
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def _refuse_baseline(path: str | os.PathLike[str], what: str, refusal: str) -> None:
    raise OutputError(
        f"{what}: refusing to write {path}: it is a pytest-gpuperf baseline{refusal}; only "
        "--gpuperf-save and pytest-gpuperf prune write baselines; choose another path, "
        "e.g. gpuperf-results.json"
    )


def write_output(
    path: str | os.PathLike[str],
    text: str,
    *,
    what: str,
    baseline_dirs: Sequence[Path] = (),
    append: bool = False,
) -> Path:
    """Write output ``path`` after :func:`output_target`'s checks (a file atomically, or at
    its end with ``append``); returns where it went (a link's target)."""
    target = output_target(path, what=what, baseline_dirs=baseline_dirs)
    data = text.encode("utf-8")
    if target.kind == "fd":
        stream = sys.stdout if target.fd == 1 else sys.stderr
        with contextlib.suppress(ValueError, OSError):
            stream.flush()
        _write_all(target.fd, data)
    elif target.kind == "stream":
        _write_stream(target.path, data, what)
    elif append:
        _append_file(target.path, data, what)
    else:
        atomic_write_bytes(target.path, data)
    return target.path


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _write_stream(path: Path, data: bytes, what: str) -> None:
    """Write to a FIFO or a character device, never created, truncated or replaced; a FIFO
    that nobody reads is given up after :data:`FIFO_WAIT_S`."""
    flags = os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    deadline = time.monotonic() + FIFO_WAIT_S
    while True:
        try:
            fd = os.open(path, flags)
            break
        except OSError as e:
            if e.errno != errno.ENXIO:
                raise
            if time.monotonic() > deadline:
                raise OutputError(
                    f"{what}: cannot write {path}: it is a FIFO and no process read it "
                    f"within {FIFO_WAIT_S:g} s; start its reader first"
                ) from None
            time.sleep(0.05)
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)):
            raise OutputError(f"{what}: cannot write {path}: it changed while being written")
        os.set_blocking(fd, True)
        _write_all(fd, data)
    finally:
        os.close(fd)


def _append_file(path: Path, data: bytes, what: str) -> None:
    """Add ``data`` at the end of regular file ``path`` (made if missing), in one write."""
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags | getattr(os, "O_NONBLOCK", 0), 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OutputError(f"{what}: cannot write {path}: it changed while being written")
        _write_all(fd, data)
    finally:
        os.close(fd)


def _follow_links(path: Path, what: str) -> Path:
    """``path`` with links of its last part resolved, each owned by this user (or refused);
    a link to no path (``/dev/fd/N`` of a pipe) is returned as it is."""
    uid = os.geteuid() if hasattr(os, "geteuid") else None
    for _ in range(40):
        if not path.is_symlink():
            return path
        owner = os.lstat(path).st_uid
        if uid is not None and owner != uid:
            raise OutputError(
                f"{what}: refusing to write {path}: it is a symbolic link of another user "
                f"(uid {owner}), which could send the output into someone's file; remove it or "
                "choose another path"
            )
        following = path.parent / os.readlink(path)
        if not os.path.lexists(following) and os.path.exists(path):
            return path  # a link of /proc (a pipe, a socket): what the kernel opens
        path = following
    raise OutputError(f"{what}: cannot write {path}: too many levels of symbolic links")


def _place_reason(target: Path, baseline_dirs: Sequence[Path]) -> str:
    """Why ``target`` is a baseline's place: '' if it is not."""
    real = Path(os.path.realpath(target))
    for folder in baseline_dirs:
        base = Path(os.path.realpath(folder))
        if real.parent == base and (real.suffix == ".json" or real.suffix == ".lock"):
            return f" or a baseline's place (the baseline folder {folder})"
        if base in real.parents and any(p.suffix == ".runs" for p in real.parents if p != base):
            return f" (a segment's place in the baseline folder {folder})"
    return _store_place(real)


def _store_place(real: Path) -> str:
    """Why ``real`` is a baseline's place in a folder no option named: in ``NAME.runs/``
    beside ``NAME.json``, or a ``.json``/``.lock`` beside such a pair. '' if it is not."""
    parent = real.parent
    if parent.suffix == ".runs" and parent.with_suffix(".json").is_file():
        return f" (a segment's place of the baseline {parent.with_suffix('.json')})"
    if real.suffix not in (".json", ".lock"):
        return ""
    for runs in parent.glob("*.runs"):  # nothing where the folder cannot be read
        if runs.is_dir() and not runs.is_symlink() and runs.with_suffix(".json").is_file():
            return f" or a baseline's place (the baseline folder {parent})"
    return ""


def _content_reason(target: Path) -> str:
    """Why regular file ``target`` is a baseline by its content: '' if it is not."""
    try:
        fd = os.open(target, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as f:
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return ""
            if st.st_size <= _SNIFF_WHOLE:
                data = f.read()
            else:
                data = f.read(_SNIFF_ENDS)
                f.seek(-_SNIFF_ENDS, os.SEEK_END)
                data += f.read()
        except OSError:
            return ""
    doc = None
    if len(data) == st.st_size:  # read whole: its parsed schema says (else the mark)
        with contextlib.suppress(ValueError, RecursionError):
            doc = json.loads(data)
    if isinstance(doc, dict):
        schema = doc.get("schema")
        found = isinstance(schema, str) and schema.startswith(_BASELINE_SCHEMA)
    else:
        found = _BASELINE_MARK.search(data) is not None
    return " (its content says so)" if found else ""
