"""One measurement at a time per device, across processes: a file lock per device.

An ``fcntl.flock`` on a file named after the device (its UUID, or ``cpu``), held while a
benchmark is measured. The files go where every process of every user finds them:
``GPUPERF_LOCK_DIR``, else the first of :data:`SHARED_PLACES` that is root's, sticky and
writable by all (never the temp folder, which ``TMPDIR`` moves per user; docs/ci.md).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import stat
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from pytest_gpuperf.baseline import filelock
from pytest_gpuperf.baseline.fileio import output_target, write_output
from pytest_gpuperf.errors import DeviceBusy, OutputError
from pytest_gpuperf.model import printable

LOCK_DIR_ENV = "GPUPERF_LOCK_DIR"
LOG_ENV = "GPUPERF_LOCK_LOG"
#: Where the lock files go without GPUPERF_LOCK_DIR (module docstring).
SHARED_PLACES = ("/dev/shm", "/tmp")
#: What every lock file's name starts with: a shared place holds other files too.
PREFIX = "pytest-gpuperf-"


def lock_dir() -> Path:
    """The folder of the per-device lock files (module docstring)."""
    env = os.environ.get(LOCK_DIR_ENV)
    if env:
        return Path(env).absolute()
    for place in SHARED_PLACES:
        with contextlib.suppress(OSError):
            st = os.stat(place)
            mine = st.st_uid in (0, getattr(os, "geteuid", lambda: 0)())
            if stat.S_ISDIR(st.st_mode) and st.st_mode & 0o1002 == 0o1002 and mine:
                return Path(os.path.realpath(place))
    if os.path.isdir(SHARED_PLACES[-1]):  # none fits: the last, whose check says why
        return Path(SHARED_PLACES[-1])
    return Path(tempfile.gettempdir()) / "pytest-gpuperf-locks"  # Windows


def settle_lock_dir(base: Path, baseline_dirs: Sequence[Path] = ()) -> str | None:
    """At a session's start: a relative ``GPUPERF_LOCK_DIR`` made absolute against ``base``
    for every process of the session; then why no lock can be taken there, or why
    ``GPUPERF_LOCK_LOG`` cannot be written, or None."""
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
    problem = filelock.shared_folder_problem(lock_dir(), PREFIX + "cpu")
    if problem is not None:
        where = f"{LOCK_DIR_ENV}={os.environ[LOCK_DIR_ENV]}" if env else "the default lock folder"
        return _cannot_use(where, problem)
    return HoldLog.problem(baseline_dirs)


def _cannot_use(where: str, problem: str) -> str:
    """The start's error for a lock folder that cannot be used, with the remedy, escaped."""
    return printable(
        f"gpuperf: cannot use {where}: {problem}. Point {LOCK_DIR_ENV} at a folder that root "
        "or you own, e.g. GPUPERF_LOCK_DIR=$HOME/.cache/pytest-gpuperf-locks (every user who "
        "measures on this machine's devices should share one folder, made by root: a folder "
        "of your own does not keep other users off them)"
    )


@contextlib.contextmanager
def device_lock(
    device_key: str,
    *,
    timeout_s: float = filelock.DEFAULT_TIMEOUT_S,
    on_wait: filelock.OnWait | None = None,
    owner: str | None = None,
    log: HoldLog | None = None,
) -> Iterator[None]:
    """Hold the lock of ``device_key`` for the block; ``owner`` (the test id) is written into
    the lock file, ``on_wait`` told once who holds it, :class:`DeviceBusy` after ``timeout_s``."""
    if not filelock.SUPPORTED or os.environ.get("GPUPERF_NO_LOCK") == "1":
        yield
        return

    def told(holder: str) -> Any:
        if on_wait is not None:
            return on_wait(f"waiting for {device_key}: it is being measured by {holder}")
        return None

    name = PREFIX + (re.sub(r"[^A-Za-z0-9._-]+", "_", device_key)[:120] or "device")
    held = filelock.shared_locked(lock_dir(), name, timeout=timeout_s, on_wait=told, owner=owner)
    try:
        held.__enter__()
    except filelock.LockTimeout as e:
        raise DeviceBusy(
            f"{device_key} stayed busy for {timeout_s:g} s: it is being measured by "
            f"{e.holder}. Wait for that run to end, or stop it; --gpuperf-lock-timeout sets "
            "how long to wait."
        ) from None
    taken = time.time()
    try:
        yield
    finally:
        held.__exit__(None, None, None)
        (log or HoldLog()).add(device_key, owner, taken)


class HoldLog:
    """``GPUPERF_LOCK_LOG``: one JSON line per hold, appended after the lock is let go; the
    first write that fails ends the log (:attr:`error`)."""

    def __init__(self) -> None:
        self.path = os.environ.get(LOG_ENV) or None
        self.error = ""

    @staticmethod
    def problem(baseline_dirs: Sequence[Path] = ()) -> str | None:
        """Why ``GPUPERF_LOCK_LOG`` cannot take the lines, or None."""
        path = os.environ.get(LOG_ENV)
        if not path:
            return None
        try:
            kind = output_target(path, what=LOG_ENV, baseline_dirs=baseline_dirs).kind
        except OutputError as e:
            return printable(f"gpuperf: {e}")
        if kind == "file":
            return None
        return printable(
            f"gpuperf: {LOG_ENV}: cannot append to {path}: it is not a file (a FIFO, a device "
            "or a standard stream), and every process of the session appends its holds to "
            "it; give the path of a file, e.g. GPUPERF_LOCK_LOG=holds.jsonl"
        )

    def add(self, device_key: str, owner: str | None, taken: float) -> None:
        if self.path is None:
            return
        line = {"device": device_key, "owner": owner, "pid": os.getpid(), "taken": taken,
                "released": time.time()}  # fmt: skip
        try:
            write_output(self.path, json.dumps(line) + "\n", what=LOG_ENV, append=True)
        except (OSError, OutputError) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            self.error = printable(
                f"gpuperf: {LOG_ENV}: a hold of {device_key} could not be appended to "
                f"{self.path} ({why}); later holds of this process were not logged"
            )
            self.path = None


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


@functools.cache  # the capture's lock and the session's: one look-up
def device_key(device: str, index: int | None = None) -> str:
    """The lock name of a device (GPU UUID where known; ``index`` None: the current one)."""
    if device != "cuda":
        return "cpu"
    import torch

    idx = torch.cuda.current_device() if index is None else index
    props = torch.cuda.get_device_properties(idx)
    uuid = str(getattr(props, "uuid", "") or "")
    if uuid:
        return f"gpu-{uuid if uuid.startswith('GPU-') else 'GPU-' + uuid}"
    return f"gpu-index-{idx}"


class DeviceLock:
    """The lock of the device a session measures on; its name is found on first use."""

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
        #: this session's waits for other processes' measurements (:meth:`summary_lines`)
        self.waited_s = 0.0
        self.waits = 0
        self.last_holder = ""
        self.log = HoldLog()

    @contextlib.contextmanager
    def hold(self, owner: str) -> Iterator[None]:
        if self._key is None:
            self._key = device_key(self.device)
        told: list[str] = []

        def on_wait(message: str) -> Any:
            told.append(message)
            return self.on_wait(message) if self.on_wait is not None else None

        t0 = time.monotonic()
        with device_lock(
            self._key, timeout_s=self.timeout_s, on_wait=on_wait, owner=owner, log=self.log
        ):
            if told:
                self.waited_s += time.monotonic() - t0
                self.waits += 1
                self.last_holder = told[-1].split(": it is being measured by ", 1)[-1]
            yield

    def summary_lines(self) -> list[str]:
        """For the summary, even under ``-q``: this session's waits, a lock log that failed."""
        which = "the machine's CPU" if self._key == "cpu" else f"{self._key}"
        waited = (
            f"gpuperf: waited {self.waited_s:.1f} s ({self.waits} wait(s)) for {which}: another "
            f"process was measuring on it (last: {self.last_holder}); one measurement at a time "
            "per device, across processes (--gpuperf-lock-timeout)"
        )
        return [line for line in (waited if self.waits else "", self.log.error) if line]
