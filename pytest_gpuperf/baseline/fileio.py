"""Writing files so that a reader never sees half of one, and output files where they belong.

Output files (``--gpuperf-json``, ``--gpuperf-markdown``/``--gpuperf-html``,
``export -o``, ``compare --markdown/--html``) go through :func:`write_output`:
never over a baseline (only ``--gpuperf-save`` and ``prune`` write those),
written through a symbolic link the user made (the link stays), never through
one another user planted, and checked before any work with
:func:`output_target`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import socket
import tempfile
from collections.abc import Sequence
from pathlib import Path

from pytest_gpuperf.errors import OutputError


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8, ``\\n`` line ends) as :func:`atomic_write_bytes` does."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, flush it to disk, then rename.

    A process killed at any point leaves either the old file or the new one,
    never a mix, and perhaps its temporary file, which the next write of
    ``path`` removes (:func:`remove_temporaries`). The file keeps the
    permissions of the one it replaces.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_temporaries(target)
    fd, tmp = tempfile.mkstemp(prefix=temporary_prefix(target), suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(OSError):
            os.chmod(tmp, target.stat().st_mode & 0o777 if target.exists() else 0o644)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


#: This host, as temporary file names carry it (a PID means nothing on another host).
_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


def temporary_prefix(target: Path, pid: int | None = None) -> str:
    """``.NAME.<pid>-<host>.``: whose temporary file of ``target`` it is."""
    return f".{target.name}.{os.getpid() if pid is None else pid}-{_HOST}."


def remove_temporaries(target: Path, *, all_of_them: bool = False) -> int:
    """Remove the temporary files of ``target`` that writers killed mid-write left.

    Only those of processes of this host that are gone, unless ``all_of_them``
    (the caller holds a lock that keeps every other writer out). Returns how
    many were removed.
    """
    pattern = re.compile(rf"\.{re.escape(target.name)}\.(?:(\d+)-([0-9a-f]{{8}})\.)?[^/]*\.tmp")
    removed = 0
    try:
        names = os.listdir(target.parent)
    except OSError:
        return 0
    for name in names:
        m = pattern.fullmatch(name)
        if m is None:
            continue
        if not all_of_them and (
            m.group(2) != _HOST or m.group(1) is None or _alive(int(m.group(1)))
        ):
            continue
        try:
            os.unlink(target.parent / name)
            removed += 1
        except OSError:
            pass
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


# --- output files ----------------------------------------------------------------------

#: What marks a file as a pytest-gpuperf baseline (index, one-file, segment), in its text.
_BASELINE_MARK = b'"schema": "pytest-gpuperf/baseline'
#: Files up to this size are searched whole for the mark; larger ones at both ends.
_SNIFF_WHOLE = 16 << 20
_SNIFF_ENDS = 1 << 20


def nearest_existing(path: Path) -> Path:
    """``path``, or its nearest ancestor that exists (what a new file there would go into)."""
    existing = path
    while not os.path.lexists(existing) and existing.parent != existing:
        existing = existing.parent
    return existing


def output_target(
    path: str | os.PathLike[str], *, what: str, baseline_dirs: Sequence[Path] = ()
) -> Path:
    """The regular file that writing output ``path`` (option ``what``) will replace.

    Raises :class:`OutputError` when it must not or cannot be written: it is a
    pytest-gpuperf baseline, or in one of ``baseline_dirs`` (a baseline's
    place); a folder; under a file or an unwritable folder; a symbolic link of
    another user (one of your own is followed: the link stays, its target is
    written). Nothing is written; call it before the work whose output it is.
    """
    target = _follow_links(Path(path), what)
    if target.is_dir():
        raise OutputError(f"{what}: cannot write {path}: it is a folder; give a file name")
    folder = target.parent
    existing = nearest_existing(folder)
    if not existing.is_dir():
        raise OutputError(
            f"{what}: cannot write {path}: {existing} is a file, not a folder; choose another path"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OutputError(
            f"{what}: cannot write {path}: {existing} is not writable (permissions or a "
            "read-only file system); choose another path"
        )
    refusal = _baseline_reason(target, baseline_dirs)
    if refusal:
        raise OutputError(
            f"{what}: refusing to write {path}: it is a pytest-gpuperf baseline{refusal}; only "
            "--gpuperf-save and pytest-gpuperf prune write baselines; choose another path, "
            "e.g. gpuperf-results.json"
        )
    return target


def write_output(
    path: str | os.PathLike[str],
    text: str,
    *,
    what: str,
    baseline_dirs: Sequence[Path] = (),
) -> Path:
    """Write output ``path`` atomically after :func:`output_target`'s checks; returns the file
    written (a link's target). ``OutputError`` or ``OSError`` when it cannot be."""
    target = output_target(path, what=what, baseline_dirs=baseline_dirs)
    atomic_write_text(target, text)
    return target


def _follow_links(path: Path, what: str) -> Path:
    """``path`` with links of its last part resolved, each owned by this user (or refused)."""
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
        path = path.parent / os.readlink(path)
    raise OutputError(f"{what}: cannot write {path}: too many levels of symbolic links")


def _baseline_reason(target: Path, baseline_dirs: Sequence[Path]) -> str:
    """Why ``target`` is (the place of) a baseline: '' if it is not."""
    real = Path(os.path.realpath(target))
    for folder in baseline_dirs:
        base = Path(os.path.realpath(folder))
        if real.parent == base and (real.suffix == ".json" or real.suffix == ".lock"):
            return f" or a baseline's place (the baseline folder {folder})"
        if base in real.parents and any(p.suffix == ".runs" for p in real.parents if p != base):
            return f" (a segment's place in the baseline folder {folder})"
    try:
        size = target.stat().st_size
        with open(target, "rb") as f:
            if size <= _SNIFF_WHOLE:
                data = f.read()
            else:
                data = f.read(_SNIFF_ENDS)
                f.seek(-_SNIFF_ENDS, os.SEEK_END)
                data += f.read()
    except OSError:
        return ""
    return " (its content says so)" if _BASELINE_MARK in data else ""
