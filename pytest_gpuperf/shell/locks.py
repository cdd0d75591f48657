"""One measurement at a time per device, across processes: a file lock per GPU.

Two xdist workers, or two pytest sessions on one machine, must never measure
on the same GPU at the same time. The lock is an ``fcntl.flock`` on a file
named after the device (the GPU's UUID, or ``cpu``) in a directory shared by
every process of the machine (every user's: see :mod:`pytest_gpuperf.baseline.filelock`
for why that is safe), and it is held only while a benchmark is being
measured, so the rest of a test (set-up, correctness checks) runs in
parallel. The kernel releases a lock when its process dies, so a crash never
leaves a device locked.

A test marked ``world_size=`` measures on several devices at once: it holds the lock
of each (:func:`devices_locked`), taken in one fixed order (sorted by name) by every
process, so two groups, or a group and xdist workers, never wait for each other in a
cycle. On the CPU a group takes the machine's one ``cpu`` lock once, for all its ranks.

With ``GPUPERF_LOCK_LOG`` set to a file, each hold appends a line there when it ends
(JSON: the device, the holder, when it was taken and released), so a run can show
afterwards that no two holders of one device overlapped.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pytest_gpuperf.baseline import filelock
from pytest_gpuperf.errors import DeviceBusy
from pytest_gpuperf.model import printable

LOCK_DIR_ENV = "GPUPERF_LOCK_DIR"


def lock_dir() -> Path:
    """The folder of the per-device lock files: ``GPUPERF_LOCK_DIR``, else
    ``<tmp>/pytest-gpuperf-locks``.

    Shared by all users of the machine (two users on one GPU is the case to
    prevent): :func:`pytest_gpuperf.baseline.filelock.shared_locked` creates it sticky
    and writable by everyone, refuses it if it is a symbolic link, and gives each user
    a lock file of its own there. A relative ``GPUPERF_LOCK_DIR`` is made absolute once,
    at the session's start (:func:`settle_lock_dir`), for this process and its children.
    """
    env = os.environ.get(LOCK_DIR_ENV)
    return Path(env).absolute() if env else Path(tempfile.gettempdir()) / "pytest-gpuperf-locks"


def settle_lock_dir(base: Path) -> str | None:
    """At a session's start: a relative ``GPUPERF_LOCK_DIR`` resolved against ``base``
    (the folder pytest was started in) and put back into the environment, so that
    every process of the session (xdist workers, re-runs, A/B base processes, which run
    in other folders) uses one folder; then why no lock can be taken there, or None.
    A value with control characters (a line break, an escape) is refused as it is: no
    folder of locks is named so, and the name would reach the terminal.
    """
    env = os.environ.get(LOCK_DIR_ENV)
    if env and printable(env) != env:
        return _cannot_use(
            f"{LOCK_DIR_ENV}={printable(env)}",
            "the value holds control characters (a line break, an escape), which a folder "
            "of locks is never named with",
        )
    if env and not os.path.isabs(env):
        os.environ[LOCK_DIR_ENV] = str(base / env)
    if not filelock.SUPPORTED or os.environ.get("GPUPERF_NO_LOCK") == "1":
        return None
    folder = lock_dir()
    problem = filelock.shared_folder_problem(folder, "cpu")
    if problem is None:
        return None
    where = f"{LOCK_DIR_ENV}={os.environ[LOCK_DIR_ENV]}" if env else "the default lock folder"
    return _cannot_use(where, problem + _folder_owner(folder))


def _cannot_use(where: str, problem: str) -> str:
    """The start's error for a lock folder that cannot be used, with the remedy (escaped:
    a path may hold any character)."""
    return printable(
        f"gpuperf: cannot use {where}: {problem}. Point {LOCK_DIR_ENV} at a folder of your "
        "own, e.g. GPUPERF_LOCK_DIR=$HOME/.cache/pytest-gpuperf-locks (every user who "
        "measures on this machine's devices should share one folder: a folder of your own "
        "does not keep other users off them)"
    )


def _folder_owner(folder: Path) -> str:
    """`` (the folder belongs to user NAME)`` where it belongs to another user."""
    try:
        uid = os.lstat(folder).st_uid
    except OSError:
        return ""
    if uid == getattr(os, "geteuid", lambda: uid)():
        return ""
    return f" (the folder belongs to {filelock.owner_of(folder) or f'uid {uid}'})"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)[:120] or "device"


@contextlib.contextmanager
def device_lock(
    device_key: str,
    *,
    timeout_s: float = filelock.DEFAULT_TIMEOUT_S,
    on_wait: filelock.OnWait | None = None,
    owner: str | None = None,
) -> Iterator[None]:
    """Hold the lock of ``device_key`` for the duration of the block.

    ``owner`` (the test id) is written into the lock file for others to read.
    ``on_wait`` is called once, with a message naming the holder, when the
    lock is busy (what it returns, if a context manager, lasts while waiting);
    the wait ends with :class:`~pytest_gpuperf.errors.DeviceBusy` after ``timeout_s``.
    """
    if not filelock.SUPPORTED or os.environ.get("GPUPERF_NO_LOCK") == "1":
        yield
        return
    folder, name = lock_dir(), _safe(device_key)

    def told(holder: str) -> Any:
        if on_wait is not None:
            return on_wait(f"waiting for {device_key}: it is being measured by {holder}")
        return None

    try:
        ctx = filelock.shared_locked(folder, name, timeout=timeout_s, on_wait=told, owner=owner)
        ctx.__enter__()
    except filelock.LockTimeout as e:
        raise DeviceBusy(
            f"{device_key} stayed busy for {timeout_s:.0f} s: it is being measured by "
            f"{e.holder}. Wait for that run to end, or stop it; --gpuperf-lock-timeout sets "
            "how long to wait."
        ) from None
    taken = time.time()
    try:
        yield
    finally:
        _log_hold(device_key, owner, taken)
        ctx.__exit__(None, None, None)


def _log_hold(device_key: str, owner: str | None, taken: float) -> None:
    """One line in ``GPUPERF_LOCK_LOG`` for a hold that ends now (nothing when unset)."""
    path = os.environ.get("GPUPERF_LOCK_LOG")
    if not path:
        return
    line = {"device": device_key, "owner": owner, "pid": os.getpid(), "taken": taken,
            "released": time.time()}  # fmt: skip
    from pytest_gpuperf.baseline.fileio import write_output  # never over a baseline or a device
    from pytest_gpuperf.errors import OutputError

    with contextlib.suppress(OSError, OutputError):
        write_output(path, json.dumps(line) + "\n", what="GPUPERF_LOCK_LOG", append=True)


@contextlib.contextmanager
def devices_locked(
    keys: Iterable[str],
    *,
    timeout_s: float = filelock.DEFAULT_TIMEOUT_S,
    on_wait: filelock.OnWait | None = None,
    owner: str | None = None,
) -> Iterator[None]:
    """Hold the lock of every device in ``keys``, taken in sorted order (never a cycle)."""
    with contextlib.ExitStack() as stack:
        for key in sorted(set(keys)):
            stack.enter_context(device_lock(key, timeout_s=timeout_s, on_wait=on_wait, owner=owner))
        yield


def device_key(device: str) -> str:
    """The lock name of the device this process measures on (GPU UUID where known)."""
    if device != "cuda":
        return "cpu"
    import torch

    idx = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(idx)
    uuid = str(getattr(props, "uuid", "") or "")
    if uuid:
        return f"gpu-{uuid if uuid.startswith('GPU-') else 'GPU-' + uuid}"
    return f"gpu-index-{idx}"


class DeviceLock:
    """The lock of the device a session measures on; its name is found on first use.

    ``hold(owner)`` is what the fixture enters around each benchmark's measurement.
    """

    def __init__(
        self,
        device: str,
        *,
        timeout_s: float = filelock.DEFAULT_TIMEOUT_S,
        on_wait: filelock.OnWait | None = None,
    ):
        self.device = device
        self.timeout_s = timeout_s
        self.on_wait = on_wait
        self._key: str | None = None
        #: seconds this session waited for another process's measurements, in how many waits,
        #: and who held the lock the last time (for the terminal summary: :meth:`waited`)
        self.waited_s = 0.0
        self.waits = 0
        self.last_holder = ""

    @contextlib.contextmanager
    def hold(self, owner: str) -> Iterator[None]:
        if self._key is None:
            self._key = device_key(self.device)
        told: list[str] = []

        def on_wait(message: str) -> Any:
            told.append(message)
            return self.on_wait(message) if self.on_wait is not None else None

        t0 = time.monotonic()
        with device_lock(self._key, timeout_s=self.timeout_s, on_wait=on_wait, owner=owner):
            if told:
                self.waited_s += time.monotonic() - t0
                self.waits += 1
                self.last_holder = told[-1].split(": it is being measured by ", 1)[-1]
            yield

    def waited(self) -> str:
        """One line for the summary when this session waited for the lock ("" when not): even
        under ``-q``, a session that took longer because another one was measuring says so."""
        if not self.waits:
            return ""
        which = "the machine's CPU" if self._key == "cpu" else f"{self._key}"
        return (
            f"gpuperf: waited {self.waited_s:.1f} s ({self.waits} wait(s)) for {which}: another "
            f"process was measuring on it (last: {self.last_holder}); one measurement at a time "
            "per device, across processes (--gpuperf-lock-timeout)"
        )
