"""Cross-process locks on lock files (``fcntl.flock``; ``msvcrt`` on Windows), safe in a
folder that other users can write to; a held lock file names its holder.

Not the ``filelock`` package: the user's torch environment picks its version (before
3.20.1 it follows a planted symbolic link, CVE-2025-68146), and none names the holder to
a waiter, refuses hard links or foreign folder owners, or shares a folder per user.
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
        self.holder = holder
        super().__init__(
            f"{path} stayed locked by {holder} for {timeout:g} s; another "
            "pytest-gpuperf process is writing beside it. Wait for it to finish and retry."
        )


#: ``--gpuperf-lock-timeout``'s default: a session on a shared GPU may hold it for minutes.
DEFAULT_TIMEOUT_S = 1800.0
SUPPORTED = fcntl is not None or msvcrt is not None
#: A longer file is not a lock file: locked on, never written.
MAX_LOCK_FILE = 4096
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FD = os.open in os.supports_dir_fd and _NOFOLLOW != 0

#: ``on_wait(holder)``: called once when the lock is busy; a context manager it returns
#: lasts while waiting.
OnWait = Callable[[str], "AbstractContextManager[Any] | None"]


def _uid() -> int:
    return getattr(os, "geteuid", lambda: -1)()


def user_name(uid: int) -> str:
    try:
        import pwd

        return f"user {pwd.getpwuid(uid).pw_name}"
    except (ImportError, KeyError):
        return f"uid {uid}"


def owner_of(path: Path) -> str | None:
    try:
        return user_name(os.lstat(path).st_uid)
    except OSError:
        return None


def holder_text(owner: str | None = None) -> str:
    """``pid 123 on host (user alice): tests/test_x.py::test_mm``: who holds a lock."""
    try:
        user = getpass.getuser()
    except Exception:  # no passwd entry for this uid
        user = f"uid {os.getuid()}" if hasattr(os, "getuid") else "unknown"
    text = f"pid {os.getpid()} on {socket.gethostname()} (user {user})"
    return f"{text}: {owner}" if owner else text


def holder(fd: int) -> str:
    """Who holds the lock, as its holder wrote it (printable characters only)."""
    try:
        raw = os.pread(fd, 240, 0).decode(errors="replace")
    except OSError:
        raw = ""
    text = "".join(c for c in raw.split("\n", 1)[0] if c.isprintable()).strip()
    return text or "another process"


@contextlib.contextmanager
def _holding(fd: int, writable: bool, owner: str | None) -> Iterator[None]:
    """Run the block holding the lock on ``fd``: the holder named (best effort), then let go."""
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
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
        elif msvcrt is not None:  # pragma: no cover - Windows
            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)


@contextlib.contextmanager
def locked(
    path: Path,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    on_wait: OnWait | None = None,
    owner: str | None = None,
) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (made if needed) for the block: :class:`LockTimeout`
    after ``timeout`` s; UnsafePath for a lock file that is a link or not a regular file."""
    fd, writable = _open(path)
    try:
        _wait_for(lambda: _try_flock(fd), path, timeout, on_wait)
        with _holding(fd, writable, owner):
            yield
    finally:
        os.close(fd)


def _open(path: Path) -> tuple[int, bool]:
    """A descriptor of lock file ``path`` that is safe to lock, and whether it may be written
    (a file another user made, writable only to them, is locked read-only and not named)."""
    if not _DIR_FD:  # pragma: no cover - Windows: check, then open (best effort)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink():
            raise _unsafe(path, "is a symbolic link")
        return _checked(os.open(path, os.O_RDWR | os.O_CREAT, 0o666), path, True)
    dir_fd = open_folder(path.parent, shared=False)
    flags = _NOFOLLOW | _NONBLOCK | _CLOEXEC
    writable = True
    try:
        fd = os.open(path.name, os.O_RDWR | os.O_CREAT | flags, 0o666, dir_fd=dir_fd)
    except PermissionError:
        writable = False
        fd = os.open(path.name, os.O_RDONLY | flags, dir_fd=dir_fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENXIO):  # a link; a FIFO with no reader
            link = e.errno == errno.ELOOP
            raise _unsafe(path, "is a symbolic link" if link else "is not a regular file") from None
        raise
    finally:
        os.close(dir_fd)
    return _checked(fd, path, writable)


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
    """Why :func:`locked` would refuse ``path`` (None: absent or fine), without opening it."""
    try:
        return _problem(os.lstat(path))
    except FileNotFoundError:
        return None


def _checked(fd: int, path: Path, writable: bool) -> tuple[int, bool]:
    try:
        st = os.fstat(fd)
        problem = _problem(st)
        if problem:
            raise _unsafe(path, problem)
        if st.st_size > MAX_LOCK_FILE:
            writable = False  # not a lock file we made: lock on it, never write it
    except BaseException:
        os.close(fd)
        raise
    return fd, writable


def open_folder(folder: Path, *, shared: bool) -> int:
    """A descriptor of ``folder`` (created if missing) to open lock files relative to. A
    ``shared`` one is made sticky and open to all (like /tmp), and must be no symbolic link
    and belong to root or to this user (its owner can delete held locks)."""
    created = False
    if shared:
        folder.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, 0o700)
            created = True
    else:
        folder.mkdir(parents=True, exist_ok=True)
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
    owner = os.fstat(fd).st_uid
    if shared and owner not in (0, _uid()) and hasattr(os, "geteuid"):
        os.close(fd)
        raise _unsafe(
            folder,
            f"belongs to {user_name(owner)}, who can delete the lock files of others in it, "
            "held ones too (a second session then measures beside the first)",
            folder=True,
        )
    return fd


def _unsafe(path: Path, what: str, *, folder: bool = False) -> UnsafePath:
    if folder:  # a place the user chose or was given: never told to remove it
        return UnsafePath(f"lock folder {path} {what}; refusing to lock in it")
    return UnsafePath(
        f"lock file {path} {what}; refusing to use it, since that could write into a file "
        "that is not a lock: remove it (pytest-gpuperf makes a new one)"
    )


#: errno values that mean "another process holds it".
_HELD = frozenset(
    {errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES, getattr(errno, "EDEADLOCK", errno.EDEADLK)}
)


def _try_flock(fd: int, how: int = 0) -> str | None:
    """Take the lock on ``fd`` (``how``: 0, exclusive, or LOCK_SH) if free (None), else say
    who holds it. Other errors (ENOLCK: no locks on this file system) are raised."""
    try:
        if fcntl is not None:
            fcntl.flock(fd, (how or fcntl.LOCK_EX) | fcntl.LOCK_NB)
        elif msvcrt is not None:  # pragma: no cover - Windows
            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        return None
    except OSError as e:
        if e.errno not in _HELD:
            raise
        return holder(fd)


def _wait_for(
    attempt: Callable[[], str | None],
    path: Path,
    timeout: float,
    on_wait: OnWait | None,
) -> None:
    """Call ``attempt`` (None: taken; else who holds it) until it takes, or the timeout."""
    deadline = time.monotonic() + timeout
    with contextlib.ExitStack() as waiting:
        told = False
        while True:
            who = attempt()
            if who is None:
                return
            if on_wait is not None and not told:
                told = True
                cm = on_wait(who)
                if cm is not None:
                    waiting.enter_context(cm)
            if time.monotonic() >= deadline:
                raise LockTimeout(path, timeout, who)
            # a little random: two processes that each saw the other's lock try apart
            time.sleep(0.05 * (0.5 + int.from_bytes(os.urandom(1), "little") / 255))


# --- a folder every user shares: one lock file per user --------------------------------
#
# One user could deny a single lock file in a sticky folder to all (a link, a FIFO or a 0600
# file planted under its name). So each user locks ``NAME.u<uid>.lock`` and, holding it,
# checks that no other ``NAME.lock`` or ``NAME.u*.lock`` is locked: of two processes, at
# least one sees the other's and gives way. Under a name planted over, a user locks a
# random name instead; a file that cannot be opened is nobody's lock.


def _own_lock_file(dir_fd: int, folder: Path, name: str) -> tuple[int, str, bool]:
    """This user's lock file of ``name``: (descriptor, file name, whether it is a one-off,
    removed after use, since the usual name was planted over)."""
    flags = os.O_RDWR | os.O_CREAT | _NOFOLLOW | _NONBLOCK | _CLOEXEC
    usual = f"{name}.u{_uid()}.lock"
    candidates = [usual] + [f"{name}.u{_uid()}.{os.urandom(6).hex()}.lock" for _ in range(8)]
    for file in candidates:
        try:
            fd = os.open(file, flags | (os.O_EXCL if file != usual else 0), 0o644, dir_fd=dir_fd)
        except OSError as e:  # the usual name planted over; a one-off name taken
            if file != usual and not isinstance(e, FileExistsError):
                raise
            continue
        st = os.fstat(fd)
        if _problem(st) is None and st.st_uid == _uid():
            with contextlib.suppress(OSError):
                os.fchmod(fd, 0o644)  # readable by everyone: others check it
            return fd, file, file != usual
        os.close(fd)
    raise _unsafe(folder / usual, "is taken, as are random names beside it")  # pragma: no cover


def _other_holder(dir_fd: int, folder: Path, name: str, own: str) -> str | None:
    """Who holds another lock file of ``name`` in the folder, or None."""
    flags = os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC
    for entry in sorted(os.listdir(dir_fd)):
        ours = entry.startswith(f"{name}.u") and entry.endswith(".lock")
        if entry == own or not (ours or entry == f"{name}.lock"):
            continue
        try:
            fd = os.open(entry, flags, dir_fd=dir_fd)
        except OSError:  # a link, or unreadable: nobody can lock through it
            continue
        try:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode) and (who := _try_flock(fd, fcntl.LOCK_SH)) is not None:
                return f"{who} (lock file {folder / entry}, of {user_name(st.st_uid)})"
        finally:
            os.close(fd)  # a shared lock taken in the check goes with it
    return None


def _try_take(dir_fd: int, fd: int, folder: Path, name: str, own: str) -> str | None:
    """Take this user's lock and check the others': None when taken, else who holds it."""
    who = _try_flock(fd)
    if who is not None:
        return who
    try:  # still the file of that name (not removed and made again under us)?
        same = os.stat(own, dir_fd=dir_fd, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
    except OSError:
        same = False
    other = None if same else "a process that replaced this user's lock file"
    other = other or _other_holder(dir_fd, folder, name, own)
    if other is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
    return other


@contextlib.contextmanager
def shared_locked(
    folder: Path,
    name: str,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    on_wait: OnWait | None = None,
    owner: str | None = None,
) -> Iterator[None]:
    """Hold lock ``name`` in ``folder``, shared by every user, for the ``with`` block (see
    above); otherwise as :func:`locked`. ``OSError`` where no file can be made there."""
    if fcntl is None:  # pragma: no cover - Windows: the one shared file
        with locked(folder / f"{name}.lock", timeout=timeout, on_wait=on_wait, owner=owner):
            yield
        return
    dir_fd = open_folder(folder, shared=True)
    fd, own, one_off = -1, "", False
    try:
        fd, own, one_off = _own_lock_file(dir_fd, folder, name)
        _wait_for(lambda: _try_take(dir_fd, fd, folder, name, own), folder / own, timeout, on_wait)
        with _holding(fd, True, owner):
            yield
    finally:
        if one_off:
            with contextlib.suppress(OSError):
                os.unlink(own, dir_fd=dir_fd)
        if fd >= 0:
            os.close(fd)
        os.close(dir_fd)


def shared_folder_problem(folder: Path, name: str) -> str | None:
    """Why :func:`shared_locked` could not lock ``name`` in ``folder`` (None: it can)."""
    try:
        with shared_locked(folder, name, timeout=0):
            return None
    except UnsafePath as e:
        return str(e)
    except LockTimeout:
        return None  # held by another process: usable, and in use
    except OSError as e:
        whose = owner_of(folder) if os.path.isdir(folder) else None
        mine = whose is None or whose == user_name(_uid())
        return f"no lock file can be made in lock folder {folder}: {e.strerror or e}" + (
            "" if mine else f" (the folder belongs to {whose})"
        )
