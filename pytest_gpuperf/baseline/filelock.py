"""A cross-process lock on a lock file, safe in a folder that other users can write to.

Two pytest processes that save into the same baseline at once must not both
read the old index and each write their version; two sessions must not
measure on one GPU at a time. Holding this lock serialises them.

POSIX: ``fcntl.flock`` on the lock file. The kernel releases the lock when
the process dies, even by SIGKILL, so a lock is never stale. The lock file is
left in place (deleting it would race with a process that has just opened
it). While a process holds the lock, the file names it (pid, host, user and
what it is doing), so that a waiting process can say who it waits for.

Safety in a shared folder (the per-GPU lock folder is shared by every user of
the machine, so another user may have planted anything in it):

- the lock file is opened relative to its folder's descriptor with
  ``O_NOFOLLOW``, never created through a symbolic link, and must be a
  regular file with no other name (a hard link to someone's file) before a
  byte is written to it; ``O_NONBLOCK`` keeps a FIFO planted there from
  hanging the run; a shared folder must not be a symbolic link either;
- a lock file is created readable and writable by everyone (``fchmod``, past
  the umask) where the folder is shared, so a second user can write its name
  into it; where a file made by an older version is read-only to this user,
  the lock is taken on a read-only descriptor (``flock`` needs no write
  access) and simply not named.

Windows: ``msvcrt.locking`` on the first byte of the same file, which the
system also releases when the process ends (no descriptor-relative opening
there: the path is checked with ``lstat`` first). Elsewhere (no ``fcntl``, no
``msvcrt``): no lock is taken. Each write is still atomic, so a file is never
torn, but two concurrent saves may lose the runs of one of them.

Why not the ``filelock`` package (installed with torch): its releases before
3.20.1 open the lock file with ``O_TRUNC``, following a symbolic link
(CVE-2025-68146: a link planted in a shared lock folder truncates its target),
and this project cannot pin the version a user's torch environment brings; no
release checks for hard links or opens relative to a checked folder; and it
records no holder a waiting process could name (a run that waits would wait
without saying for whom). The part of it
this needs is the ~100 lines below.
"""

from __future__ import annotations

import contextlib
import errno
import getpass
import os
import socket
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from pytest_gpuperf.errors import UnsafePath

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]
try:
    import msvcrt
except ImportError:
    msvcrt = None  # type: ignore[assignment]


class LockTimeout(TimeoutError):
    """The lock stayed held by another process for longer than the timeout."""

    def __init__(self, path: Path, timeout: float, holder: str = "another process"):
        self.path = path
        self.timeout = timeout
        self.holder = holder
        super().__init__(
            f"{path} stayed locked by {holder} for {timeout:g} s; another "
            "pytest-gpuperf process is writing beside it. Wait for it to finish and retry."
        )


#: How long to wait for a lock unless told otherwise (``--gpuperf-lock-timeout``): a long
#: benchmark session on a shared GPU may hold it for minutes, and the wait says who holds it.
DEFAULT_TIMEOUT_S = 1800.0
#: True where :func:`locked` really excludes other processes.
SUPPORTED = fcntl is not None or msvcrt is not None
#: A lock file is never longer than this; a longer file is not one, and is never written.
MAX_LOCK_FILE = 4096
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FD = os.open in os.supports_dir_fd and _NOFOLLOW != 0

#: ``on_wait(holder)``: called once when the lock is busy, with who holds it; what it
#: returns, if a context manager, is entered then and left when the wait ends.
OnWait = Callable[[str], "AbstractContextManager[Any] | None"]


def holder_text(owner: str | None = None) -> str:
    """``pid 123 on host (user alice): tests/test_x.py::test_mm``: who holds a lock."""
    try:
        user = getpass.getuser()
    except Exception:  # no passwd entry for this uid
        user = f"uid {os.getuid()}" if hasattr(os, "getuid") else "unknown"
    text = f"pid {os.getpid()} on {socket.gethostname()} (user {user})"
    return f"{text}: {owner}" if owner else text


@contextlib.contextmanager
def locked(
    path: Path,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    poll: float = 0.05,
    on_wait: OnWait | None = None,
    owner: str | None = None,
    shared: bool = False,
) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if needed) for the ``with`` block.

    Waits up to ``timeout`` seconds, then raises :class:`LockTimeout`, so a
    hung writer cannot hang every later session forever. While it holds the
    lock, the file names the holder (:func:`holder_text` with ``owner``, what
    it is doing). ``shared``: the folder is shared by every user of the
    machine (made sticky and world-writable when this creates it, never
    followed through a symbolic link; lock files writable by everyone).
    Raises :class:`~pytest_gpuperf.errors.UnsafePath` for a lock file or a
    shared folder that is a symbolic link, a hard link or not a regular file.
    """
    fd, writable = _open(path, shared)
    try:
        _acquire(fd, path, timeout, poll, on_wait)
        if writable:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
                os.pwrite(fd, (holder_text(owner)[:200] + "\n").encode(), 0)
        try:
            yield
        finally:
            if writable:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)
            _release(fd)
    finally:
        os.close(fd)


def _open(path: Path, shared: bool) -> tuple[int, bool]:
    """A descriptor of lock file ``path`` that is safe to write to, and whether it may be."""
    if not _DIR_FD:  # pragma: no cover - Windows: check, then open (best effort)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink():
            raise _unsafe(path, "is a symbolic link")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        return _checked(fd, path, writable=True, shared=shared)
    dir_fd = open_folder(path.parent, shared=shared)
    try:
        flags = _NOFOLLOW | _NONBLOCK | _CLOEXEC
        writable = True
        try:
            fd = os.open(path.name, os.O_RDWR | os.O_CREAT | flags, 0o666, dir_fd=dir_fd)
        except PermissionError:  # made by another user, writable only to them: lock read-only
            writable = False
            fd = os.open(path.name, os.O_RDONLY | flags, dir_fd=dir_fd)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise _unsafe(path, "is a symbolic link") from None
            if e.errno == errno.ENXIO:  # a FIFO with no reader
                raise _unsafe(path, "is not a regular file") from None
            raise
    finally:
        os.close(dir_fd)
    return _checked(fd, path, writable=writable, shared=shared)


def _problem(st: os.stat_result) -> str | None:
    """Why a lock file with this status is refused, or None."""
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_nlink != 1:
        return "has other names (hard links)"
    return None


def lock_file_problem(path: Path) -> str | None:
    """Why the lock file at ``path`` would be refused by :func:`locked`, without opening
    it (a check before a long step): None when it is absent or fine."""
    try:
        return _problem(os.lstat(path))
    except FileNotFoundError:
        return None


def _checked(fd: int, path: Path, *, writable: bool, shared: bool) -> tuple[int, bool]:
    try:
        st = os.fstat(fd)
        problem = _problem(st)
        if problem:
            raise _unsafe(path, problem)
        if st.st_size > MAX_LOCK_FILE:
            writable = False  # not a lock file we made: lock on it, never write it
        if shared and writable and st.st_uid == getattr(os, "geteuid", lambda: -1)():
            with contextlib.suppress(OSError):
                os.fchmod(fd, 0o666)  # so that another user can name itself in it
    except BaseException:
        os.close(fd)
        raise
    return fd, writable


def open_folder(folder: Path, *, shared: bool) -> int:
    """A descriptor of ``folder`` (created if missing) to open lock files relative to.

    A shared folder is created sticky and writable by everyone (like /tmp), and
    must not be a symbolic link (one planted there would send lock files into
    someone's folder); a private one is opened as the path says.
    """
    if shared:
        folder.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(folder, 0o700)
            created = True
        except FileExistsError:
            created = False
    else:
        folder.mkdir(parents=True, exist_ok=True)
        created = False
    flags = os.O_RDONLY | _DIRECTORY | _CLOEXEC | (_NOFOLLOW if shared else 0)
    try:
        fd = os.open(folder, flags)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):  # O_NOFOLLOW|O_DIRECTORY: ENOTDIR on Linux
            what = "is a symbolic link" if folder.is_symlink() else "is not a folder"
            raise _unsafe(folder, what, folder=True) from None
        raise
    if created:
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o1777)
    return fd


def _unsafe(path: Path, what: str, *, folder: bool = False) -> UnsafePath:
    kind = "lock folder" if folder else "lock file"
    fix = (
        "remove it (it is not one pytest-gpuperf made), or point GPUPERF_LOCK_DIR at a folder "
        "of your own"
        if folder
        else "remove it (pytest-gpuperf makes a new one)"
    )
    return UnsafePath(
        f"{kind} {path} {what}; refusing to use it, since that could write into a file "
        f"that is not a lock: {fix}"
    )


def holder(fd: int) -> str:
    """Who holds the lock, as its holder wrote it (printable characters only)."""
    try:
        raw = os.pread(fd, 240, 0).decode(errors="replace")
    except OSError:
        raw = ""
    text = "".join(c for c in raw.split("\n", 1)[0] if c.isprintable()).strip()
    return text or "another process"


#: errno values that mean "another process holds it".
_HELD = frozenset(
    {errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES, getattr(errno, "EDEADLOCK", errno.EDEADLK)}
)


def _acquire(fd: int, path: Path, timeout: float, poll: float, on_wait: OnWait | None) -> None:
    deadline = time.monotonic() + timeout
    with contextlib.ExitStack() as waiting:
        told = False
        while True:
            try:
                if fcntl is not None:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                elif msvcrt is not None:  # pragma: no cover - Windows
                    os.lseek(fd, 0, os.SEEK_SET)
                    msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
                return
            except OSError as e:
                if e.errno not in _HELD:  # e.g. ENOLCK: locks unsupported on this file system
                    raise
                if on_wait is not None and not told:
                    told = True
                    cm = on_wait(holder(fd))
                    if cm is not None:
                        waiting.enter_context(cm)
                if time.monotonic() >= deadline:
                    raise LockTimeout(path, timeout, holder(fd)) from None
                time.sleep(poll)


def _release(fd: int) -> None:
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
    elif msvcrt is not None:  # pragma: no cover - Windows
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
