"""Run an external program with a time budget, and kill all of it when the budget runs out.

A profiler's own child (``nsys profile python -m pytest ...``) would outlive the profiler,
holding the GPU and its lock: every program runs in its own session, its whole process group
killed at the budget and on Ctrl-C; a child also watches its caller (:func:`watch_parent`),
which a SIGKILL ends without that.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
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
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.kill()


def _stat(pid: int) -> list[str] | None:
    """``/proc/PID/stat``'s fields from the 3rd (the state) on; None where unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rfind(b")") + 2 :].decode("ascii", "replace").split()


def parent_env() -> dict[str, str]:
    """A child's environment to watch this process: ``PID:START`` (START, field 22 of
    ``/proc/PID/stat``: a reused pid is not taken for it)."""
    fields = _stat(os.getpid())
    start = fields[19] if fields and len(fields) > 19 else ""
    return {PARENT_ENV: f"{os.getpid()}:{start}"}


def _parent_alive(pid: int, start: str) -> bool:
    """Whether the process ``pid`` started at ``start`` still runs (a zombie does not)."""
    if not start:
        return pid_alive(pid)
    fields = _stat(pid)
    return fields is not None and len(fields) > 19 and fields[0] not in "ZX" and fields[19] == start


def watch_parent(poll_s: float = 0.5) -> bool:
    """In a child: a daemon thread that, once the process named by :data:`PARENT_ENV` is gone,
    kills this process's group (or, where the group is the parent's own, this process);
    whether one runs."""
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
        args = (pid, start, own_group, poll_s)
        threading.Thread(target=_watch, args=args, name=_WATCH_THREAD, daemon=True).start()
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
    ``timeout_s`` seconds; a missing executable, a failure and a timeout are not raised."""
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
    )


def _finish(
    proc: subprocess.Popen[str],
    cmd: list[str],
    start: float,
    timeout_s: float,
    log_path: Path | None,
    stdin_text: str | None = None,
    *,
    head: str = "",
    drop: str = "",
) -> ProcessRun:
    """Wait for ``proc`` (its whole group killed at the timeout or on an interrupt); its
    output after ``head`` (what the parent read of it already), ``drop`` taken out once."""
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
    finally:  # whatever the group left behind (a profiler's helper daemons) goes too
        if proc.poll() is not None:
            _kill_group(proc)
    wall = time.perf_counter() - start
    text = (head + (out or "")).replace(drop, "", 1)  # drop "": nothing taken out
    if timed_out:
        text += f"\n[killed after {wall:.0f} s: time budget {timeout_s:.0f} s]\n"
    if log_path is not None:
        with contextlib.suppress(OSError):
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log_path.write_text(" ".join(cmd) + "\n\n" + text)
    code = proc.returncode if proc.returncode is not None else -9
    return ProcessRun(cmd, code, wall, timed_out, text)


#: A spare Python: the imports a child would pay for, then the one ``-m module args`` asked.
_SPARE = """
import json, os, runpy, sys
from contextlib import suppress
with suppress(Exception):
    from pytest_gpuperf.artifacts.collectors.process import watch_parent
    watch_parent()
for name in {modules!r}:
    with suppress(Exception):
        __import__(name)
with suppress(BaseException):
    exec({prelude!r})
print({ready!r}, flush=True)  # the parent waits for it before it measures again
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
    # handler is made once, so it goes first)
    with suppress(Exception):
        logs.LOG_TRACE_HANDLER = None
        logs._init_logs()
# The plugin's modules go: pytest warns when an installed plugin it rewrites is imported
# already, an error under `filterwarnings = error`
for _name in [m for m in sys.modules if m == "pytest_gpuperf" or m.startswith("pytest_gpuperf.")]:
    del sys.modules[_name]
sys.argv = [ask["module"], *ask["args"]]
sys.path[0] = os.getcwd()
code = 0
try:
    runpy.run_module(ask["module"], run_name="__main__", alter_sys=True)
except SystemExit as e:
    code = e.code if isinstance(e.code, int) else int(e.code is not None)
# The run over, its output flushed, it ends without the interpreter's finalization: seconds
# with torch's modules loaded, which the parent would wait for
import logging
logging.shutdown()
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
"""


#: torch.compile's imports, which a spare makes where this process made them: a compiled
#: test's child spent 6 of its 13 s importing them (CPU; its compile hit the Inductor cache)
COMPILER = ("torch._dynamo", "torch._inductor.compile_fx", "triton")


class SparePython:
    """A Python started ahead, its imports (torch, pytest, the compiler where this process
    compiled) and ``prelude`` done, waiting to run one ``python -m MODULE ARGS``: a child
    that starts warm. Its start runs while nothing is measured (the session waits for
    :meth:`wait_ready`); used once, :meth:`close` ends one not used."""

    _READY = b"gpuperf: spare ready"

    def __init__(
        self, env: Mapping[str, str], modules: Sequence[str] | None = None, prelude: str = ""
    ) -> None:
        if modules is None:
            modules = ("torch", "pytest", *[m for m in COMPILER if m in sys.modules])
        code = _SPARE.format(modules=tuple(modules), prelude=prelude, ready=self._READY.decode())
        self.proc: subprocess.Popen[str] | None = None
        self.ready = False
        self._seen = b""  # its output until it is ready
        with contextlib.suppress(OSError):
            self.proc = _popen(
                [sys.executable, "-c", code], env={**env, **parent_env()}, cwd=None,
                stdin=subprocess.PIPE,
            )  # fmt: skip

    def wait_ready(self, timeout_s: float) -> bool:
        """Whether the spare is ready, waiting at most ``timeout_s``."""
        end = time.monotonic() + timeout_s
        with contextlib.suppress(OSError, ValueError):
            while not self.ready and self.proc is not None and self.proc.stdout is not None:
                fd = self.proc.stdout.fileno()
                if not select.select([fd], [], [], max(end - time.monotonic(), 0.0))[0]:
                    break
                chunk = os.read(fd, 4096)
                self._seen += chunk
                self.ready = self._READY in self._seen
                if not chunk:  # it ended
                    break
        return self.ready

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
        # what it printed before its run (its imports' warnings, read while waiting for it to
        # be ready) goes first in the output and the log, without the ready line
        ready = self._READY.decode() + "\n"
        start, stdin = time.perf_counter(), json.dumps(ask) + "\n"
        seen = self._seen.decode(errors="replace")
        return _finish(proc, cmd, start, timeout_s, log_path, stdin, drop=ready, head=seen)

    def close(self) -> None:
        if self.proc is not None:
            _kill_group(self.proc)
            with contextlib.suppress(Exception):
                self.proc.communicate(timeout=5)
            self.proc = None
