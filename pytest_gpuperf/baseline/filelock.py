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


def owner_of(path: Path) -> str | None:
    """Who owns ``path``: ``user NAME`` (``uid N`` where the name is unknown), or None where
    it cannot be read."""
    try:
        uid = os.lstat(path).st_uid
    except OSError:
        return None
    try:
        import pwd

        return f"user {pwd.getpwuid(uid).pw_name}"
    except (ImportError, KeyError):
        return f"uid {uid}"


def _write_holder(fd: int, owner: str | None) -> None:
    """Who holds the lock, into its file (best effort: a reader only shows it)."""
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, (holder_text(owner)[:200] + "\n").encode(), 0)


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
            _write_holder(fd, owner)
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


# --- a lock in a folder every user shares: one lock file per user -------------------------
#
# A single lock file in a sticky, world-writable folder can be denied to everyone by one
# user: a symbolic link, a FIFO or a 0600 file planted under its name cannot be removed by
# the others. So each user locks a file of its own, ``NAME.u<uid>.lock`` (readable by
# everyone), and, holding it, checks that no other ``NAME.lock`` or ``NAME.u*.lock`` file
# is locked. Of two processes that lock their own files, at least one sees the other's in
# its check (each locks before it checks), and gives way. A file planted under another
# user's name is not theirs: it is left alone, and that user locks a file of a random name
# instead; one that cannot be opened, or is not a regular file, is nobody's lock.


def _uid() -> int:
    return getattr(os, "geteuid", lambda: -1)()


def _own_lock_file(dir_fd: int, folder: Path, name: str) -> tuple[int, str, bool]:
    """This user's lock file of ``name`` in the folder: (descriptor, file name, whether
    it is a one-off file, removed after use: the usual name was taken by a planted file)."""
    flags = os.O_RDWR | _NOFOLLOW | _NONBLOCK | _CLOEXEC
    usual = f"{name}.u{_uid()}.lock"
    try:
        fd = os.open(usual, flags | os.O_CREAT, 0o644, dir_fd=dir_fd)
    except OSError:
        fd = -1
    if fd >= 0:
        st = os.fstat(fd)
        if _problem(st) is None and st.st_uid == _uid():
            with contextlib.suppress(OSError):
                os.fchmod(fd, 0o644)  # readable by everyone: others check it
            return fd, usual, False
        os.close(fd)
    for _ in range(8):
        one_off = f"{name}.u{_uid()}.{os.urandom(6).hex()}.lock"
        try:
            fd = os.open(one_off, flags | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=dir_fd)
        except FileExistsError:
            continue
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o644)
        return fd, one_off, True
    raise _unsafe(folder / usual, "is taken, as are random names beside it")  # pragma: no cover


def _is_lock_of(entry: str, name: str) -> bool:
    return entry == f"{name}.lock" or (entry.startswith(f"{name}.u") and entry.endswith(".lock"))


def _other_holder(dir_fd: int, folder: Path, name: str, own: str) -> str | None:
    """Who holds another lock file of ``name`` in the folder, or None when nobody does."""
    flags = os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC
    for entry in sorted(os.listdir(dir_fd)):
        if entry == own or not _is_lock_of(entry, name):
            continue
        try:
            fd = os.open(entry, flags, dir_fd=dir_fd)
        except OSError:  # a link, or unreadable: nobody can lock through it
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno not in _HELD:
                    continue
                return f"{holder(fd)} (lock file {folder / entry}, of {_owner(fd)})"
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
    return None


def _owner(fd: int) -> str:
    uid = os.fstat(fd).st_uid
    try:
        import pwd

        return f"user {pwd.getpwuid(uid).pw_name}"
    except (ImportError, KeyError):
        return f"uid {uid}"


def _try_take(dir_fd: int, fd: int, folder: Path, name: str, own: str) -> str | None:
    """Take this user's lock and check the others': None when taken, else who holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno not in _HELD:
            raise
        return holder(fd)
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
    poll: float = 0.05,
    on_wait: OnWait | None = None,
    owner: str | None = None,
) -> Iterator[None]:
    """Hold lock ``name`` in ``folder``, a folder every user of the machine shares, for
    the ``with`` block: no other process of any user holds it meanwhile, and no file
    another user plants there can keep this one from taking it (see above). Waits up
    to ``timeout`` seconds (:class:`LockTimeout`); ``on_wait`` as for :func:`locked`.
    Raises :class:`~pytest_gpuperf.errors.UnsafePath` for a folder that is a symbolic
    link or not a folder, and ``OSError`` where no file can be made in it."""
    if fcntl is None:  # pragma: no cover - Windows: the one shared file
        with locked(folder / f"{name}.lock", timeout=timeout, poll=poll, on_wait=on_wait,
                    owner=owner, shared=True):  # fmt: skip
            yield
        return
    dir_fd = open_folder(folder, shared=True)
    try:
        fd, own, one_off = _own_lock_file(dir_fd, folder, name)
    except BaseException:
        os.close(dir_fd)
        raise
    try:
        _wait_for(lambda: _try_take(dir_fd, fd, folder, name, own), folder / own, timeout,
                  poll, on_wait)  # fmt: skip
        _write_holder(fd, owner)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        if one_off:
            with contextlib.suppress(OSError):
                os.unlink(own, dir_fd=dir_fd)
        os.close(fd)
        os.close(dir_fd)


def _wait_for(
    attempt: Callable[[], str | None],
    path: Path,
    timeout: float,
    poll: float,
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
            time.sleep(poll * (0.5 + int.from_bytes(os.urandom(1), "little") / 255))


def shared_folder_problem(folder: Path, name: str) -> str | None:
    """Why :func:`shared_locked` could not lock ``name`` in ``folder`` (None when it can):
    a check made once, before a run measures anything."""
    try:
        dir_fd = open_folder(folder, shared=True)
    except UnsafePath as e:
        return str(e)
    except OSError as e:
        return f"lock folder {folder} cannot be made or opened: {e.strerror or e}"
    try:
        fd, own, one_off = _own_lock_file(dir_fd, folder, name)
    except OSError as e:
        return f"no lock file can be made in lock folder {folder}: {e.strerror or e}"
    finally:
        os.close(dir_fd)
    os.close(fd)
    if one_off:
        with contextlib.suppress(OSError):
            os.unlink(folder / own)
    return None
