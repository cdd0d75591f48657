"""Run an external program with a time budget, and kill all of it when the budget runs out.

A profiler starts the program it profiles as its own child (``nsys profile python -m pytest
...``): killing the profiler alone would leave that grandchild holding the GPU and its lock,
so every program runs in its own session and its whole process group is killed, at the
budget and on Ctrl-C. A caller killed outright (SIGKILL) cannot do that, so each child also
watches its caller (:func:`parent_env`, :func:`watch_parent`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_gpuperf.baseline.fileio import pid_alive

TAIL_LINES = 15

#: ``PID:START`` of the process that started a child (:func:`parent_env`)
PARENT_ENV = "GPUPERF_PARENT"
_WATCH_THREAD = "gpuperf-parent-watch"


@dataclass
class ProcessRun:
    command: list[str]
    returncode: int
    wall_s: float
    timed_out: bool = False
    output: str = ""
    error: str | None = None  # the program could not be started

    @property
    def tail(self) -> str:
        return "\n".join(self.output.strip().splitlines()[-TAIL_LINES:])

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and self.error is None

    def describe_failure(self, what: str) -> str:
        """Why ``what`` did not succeed, in one line plus the output's last lines."""
        if self.error:
            return f"{what} could not start: {self.error}"
        if self.timed_out:
            head = f"{what} was killed after {self.wall_s:.0f} s (its time budget)"
        else:
            head = f"{what} exited with status {self.returncode}"
        last = [ln for ln in self.output.strip().splitlines() if ln.strip()][-3:]
        return head + (": " + " | ".join(s.strip()[:200] for s in last) if last else "")


def _kill_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.kill()


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` from the 3rd (the state) on, None where unreadable
    (they start after the last ``)``: the 2nd, the command's name, may hold one)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rfind(b")") + 2 :].decode("ascii", "replace").split()


def parent_env() -> dict[str, str]:
    """A child's environment to watch this process: ``PID:START`` (START, field 22 of
    ``/proc/PID/stat``, so that a reused pid is not taken for it; empty without /proc)."""
    fields = _stat(os.getpid())
    start = fields[19] if fields and len(fields) > 19 else ""
    return {PARENT_ENV: f"{os.getpid()}:{start}"}


def _parent_alive(pid: int, start: str) -> bool:
    """Whether the process ``pid`` started at ``start`` still runs (a zombie does not; an
    answer of another user's process is the pid reused, unless /proc says otherwise)."""
    if not pid_alive(pid):
        return False
    if not start:
        return True
    fields = _stat(pid)
    if fields is None or len(fields) < 20:
        return False
    return fields[0] not in ("Z", "X") and fields[19] == start


def watch_parent(poll_s: float = 0.5) -> bool:
    """In a child: a daemon thread that, once the process named by :data:`PARENT_ENV` is gone,
    kills this process's group (or, where the group is the parent's own, this process).
    Started once per process; never raises. Returns whether one runs."""
    try:
        pid_text, _, start = os.environ.get(PARENT_ENV, "").partition(":")
        pid = int(pid_text) if pid_text.isdigit() else 0
        if pid <= 1 or pid == os.getpid() or not _parent_alive(pid, start):
            return False
        if any(t.name == _WATCH_THREAD for t in threading.enumerate()):
            return True
        fields = _stat(pid)
        group = os.getpgrp()
        own_group = group > 1 and (fields is None or fields[2] != str(group))
        thread = threading.Thread(
            target=_watch, args=(pid, start, own_group, poll_s), name=_WATCH_THREAD, daemon=True
        )
        thread.start()
        return True
    except Exception:
        return False


def _watch(pid: int, start: str, own_group: bool, poll_s: float) -> None:
    try:
        while _parent_alive(pid, start):
            time.sleep(poll_s)
        if own_group:
            with contextlib.suppress(OSError):
                os.killpg(os.getpgrp(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
    except Exception:
        return


def run_process(
    command: Sequence[str],
    *,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    log_path: Path | None = None,
) -> ProcessRun:
    """Run ``command`` (stdout and stderr together, also to ``log_path``) for at most
    ``timeout_s`` seconds. A missing executable, a non-zero exit and a timeout are reported
    in the :class:`ProcessRun`, never raised."""
    cmd = [str(c) for c in command]
    start = time.perf_counter()
    try:
        proc = _popen(cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL)
    except OSError as e:
        return ProcessRun(cmd, -1, time.perf_counter() - start, error=str(e))
    return _finish(proc, cmd, start, timeout_s, log_path)


def _popen(
    cmd: Sequence[str],
    *,
    env: Mapping[str, str] | None,
    cwd: Path | str | None,
    stdin: Any,
    pass_fds: Sequence[int] = (),
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        list(cmd),
        cwd=cwd,
        env=dict(env) if env is not None else None,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=stdin,
        text=True,
        errors="replace",
        start_new_session=True,
        pass_fds=tuple(pass_fds),
    )


def _finish(
    proc: subprocess.Popen[str],
    cmd: list[str],
    start: float,
    timeout_s: float,
    log_path: Path | None,
    stdin_text: str | None = None,
) -> ProcessRun:
    """Wait for ``proc`` (its whole group killed at the timeout or on an interrupt)."""
    timed_out = False
    try:
        out, _ = proc.communicate(input=stdin_text, timeout=max(timeout_s, 0.001))
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        try:
            out, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # a descendant escaped the group and holds the pipe
            out = ""
    except BaseException:
        _kill_group(proc)
        raise
    finally:
        # Whatever the group left behind (a profiler's helper daemons) goes too.
        if proc.poll() is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
                os.killpg(proc.pid, signal.SIGKILL)
    wall = time.perf_counter() - start
    text = out or ""
    if timed_out:
        text += f"\n[killed after {wall:.0f} s: time budget {timeout_s:.0f} s]\n"
    if log_path is not None:
        with contextlib.suppress(OSError):
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log_path.write_text(" ".join(cmd) + "\n\n" + text)
    code = proc.returncode if proc.returncode is not None else -9
    return ProcessRun(cmd, code, wall, timed_out, text)


#: What a spare Python runs: the imports a child would pay for, then, once asked, the one
#: Python command it is given (``-m module args`` only), in the environment and folder given.
_SPARE = """
import json, os, runpy, sys
try:
    from pytest_gpuperf.artifacts.collectors.process import watch_parent
    watch_parent()
except Exception:
    pass
for name in {modules!r}:
    try:
        __import__(name)
    except Exception:
        pass
try:
    exec({prelude!r})
except BaseException:
    pass
try:  # ready: tell the parent, which waits for it before it measures again
    _fd = int(os.environ.pop("GPUPERF_SPARE_READY_FD"))
    os.write(_fd, b"1")
    os.close(_fd)
except Exception:
    pass
line = sys.stdin.readline()
if not line:
    sys.exit(0)
ask = json.loads(line)
os.environ.clear()
os.environ.update(ask["env"])
os.chdir(ask["cwd"])
logs = sys.modules.get("torch._logging._internal")
if logs is not None:
    # TORCH_TRACE and TORCH_LOGS are read when torch is imported: read them again (the trace
    # handler is made once, so it goes first; where that fails, the trace collector sees no
    # log and runs a child of its own)
    try:
        logs.LOG_TRACE_HANDLER = None
        logs._init_logs()
    except Exception:
        pass
# The plugin's own modules, imported above for the parent watch and the prelude, go: pytest
# marks an installed plugin for assertion rewriting and warns when it finds it imported, an
# error under `filterwarnings = error`; imported again by pytest, it is as in a fresh process
for _name in [m for m in sys.modules if m == "pytest_gpuperf" or m.startswith("pytest_gpuperf.")]:
    del sys.modules[_name]
sys.argv = [ask["module"], *ask["args"]]
sys.path[0] = os.getcwd()
runpy.run_module(ask["module"], run_name="__main__", alter_sys=True)
"""


class SparePython:
    """A Python process started ahead, its imports done (torch, pytest), waiting to run one
    ``python -m MODULE ARGS`` command: a child that starts warm.

    It imports and runs ``prelude`` (the caller's warm-up; errors ignored) while nothing is
    measured (``shell/capture_budget.py`` waits for :meth:`wait_ready` before measuring
    again), then waits, idle. Used once; :meth:`close` ends one not used.
    """

    def __init__(
        self,
        env: Mapping[str, str],
        modules: Sequence[str] = ("torch", "pytest"),
        prelude: str = "",
    ) -> None:
        env = {**env, **parent_env()}
        self.proc: subprocess.Popen[str] | None = None
        code = _SPARE.format(modules=tuple(modules), prelude=prelude)
        self._ready_fd: int | None = None
        self.ready = False
        try:
            r, w = os.pipe()
        except OSError:
            r = w = -1
        if w >= 0:
            env["GPUPERF_SPARE_READY_FD"] = str(w)
        try:
            self.proc = _popen(
                [sys.executable, "-c", code], env=env, cwd=None, stdin=subprocess.PIPE,
                pass_fds=(w,) if w >= 0 else (),
            )  # fmt: skip
        except OSError:
            self.proc = None
        if w >= 0:
            os.close(w)
            if self.proc is not None:
                self._ready_fd = r
            else:
                os.close(r)

    def wait_ready(self, timeout_s: float) -> bool:
        """Whether the spare is ready, waiting at most ``timeout_s``."""
        if self.ready or self._ready_fd is None:
            return self.ready
        import select

        try:
            got, _, _ = select.select([self._ready_fd], [], [], max(timeout_s, 0.0))
            if got and os.read(self._ready_fd, 1):
                self.ready = True
        except (OSError, ValueError):
            pass
        if self.ready or not self.usable:
            self._close_ready()
        return self.ready

    def _close_ready(self) -> None:
        if self._ready_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._ready_fd)
            self._ready_fd = None

    @property
    def usable(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def run(
        self,
        module: str,
        args: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path | str | None,
        timeout_s: float,
        log_path: Path | None = None,
    ) -> ProcessRun:
        """Run ``python -m module args`` here, as :func:`run_process` would in a new process."""
        if self.proc is None or not self.usable:
            raise RuntimeError("the spare Python is not running")
        cmd = [sys.executable, "-m", module, *[str(a) for a in args]]
        ask = {"module": module, "args": cmd[3:], "env": dict(env), "cwd": str(cwd or os.getcwd())}
        proc, self.proc = self.proc, None
        self._close_ready()
        return _finish(proc, cmd, time.perf_counter(), timeout_s, log_path, json.dumps(ask) + "\n")

    def close(self) -> None:
        self._close_ready()
        if self.proc is not None:
            _kill_group(self.proc)
            with contextlib.suppress(Exception):
                self.proc.communicate(timeout=5)
            self.proc = None
