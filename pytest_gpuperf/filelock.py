"""A cross-process lock on a sidecar file, for read-modify-write of shared files.

Two pytest processes that save into the same baseline at once (two CI jobs on
one runner, or a re-run next to a session) must not both read the old file
and each write their version: the second rename would drop the first one's
runs. Holding this lock around "read, merge, write" serialises them.

POSIX: ``fcntl.flock`` on ``<file>.lock``. The kernel releases the lock when
the process dies, even by SIGKILL, so a lock is never stale. The lock file is
left in place (deleting it would race with a process that has just opened it).

Windows: ``msvcrt.locking`` on the first byte of the same file, which the
system also releases when the process ends.

Elsewhere (no ``fcntl``, no ``msvcrt``): no lock is taken. Each write is
still atomic, so a file is never torn, but two concurrent saves may lose the
runs of one of them; run saves one at a time there.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

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


#: True where :func:`locked` really excludes other processes.
SUPPORTED = fcntl is not None or msvcrt is not None


@contextlib.contextmanager
def locked(
    path: Path,
    *,
    timeout: float = 60.0,
    poll: float = 0.05,
    on_wait: Callable[[str], None] | None = None,
) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if needed) for the ``with`` block.

    Waits up to ``timeout`` seconds, then raises :class:`LockTimeout`, so a
    hung writer cannot hang every later session forever. While it holds the
    lock, the file names the holder (``pid N on HOST``); ``on_wait`` is
    called once with that text when the lock is busy.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        _acquire(fd, path, timeout, poll, on_wait)
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            _release(fd)
    finally:
        os.close(fd)


def holder(fd: int) -> str:
    """Who holds the lock, as its holder wrote it."""
    try:
        text = os.pread(fd, 200, 0).decode(errors="replace").strip()
    except OSError:
        text = ""
    return text or "another process"


#: errno values that mean "another process holds it".
_HELD = frozenset(
    {errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES, getattr(errno, "EDEADLOCK", errno.EDEADLK)}
)


def _acquire(
    fd: int, path: Path, timeout: float, poll: float, on_wait: Callable[[str], None] | None
) -> None:
    deadline = time.monotonic() + timeout
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
                on_wait(holder(fd))
                told = True
            if time.monotonic() >= deadline:
                raise LockTimeout(path, timeout, holder(fd)) from None
            time.sleep(poll)


def _release(fd: int) -> None:
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
    elif msvcrt is not None:  # pragma: no cover - Windows
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
