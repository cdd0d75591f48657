"""Writing files so that a reader never sees half of one."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import socket
import tempfile
from pathlib import Path


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
