"""Run an external program with a time budget, and kill all of it when the budget runs out.

Profilers start the program they profile as their own child (``nsys profile
python -m pytest ...``). Killing only the profiler would leave that
grandchild running, holding the GPU and its lock, so every program runs in
its own session and the whole process group is killed: at the budget, and
when the caller is interrupted (Ctrl-C).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

TAIL_LINES = 15


@dataclass
class ProcessRun:
    command: list[str]
    returncode: int
    wall_s: float
    timed_out: bool = False
    output: str = ""
    log_path: Path | None = None
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


def run_process(
    command: Sequence[str],
    *,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    log_path: Path | None = None,
) -> ProcessRun:
    """Run ``command`` (stdout and stderr together) for at most ``timeout_s`` seconds.

    Never raises for the program's own failure: a missing executable, a
    non-zero exit and a timeout are all reported in the :class:`ProcessRun`.
    The full output goes to ``log_path`` when given.
    """
    cmd = [str(c) for c in command]
    start = time.perf_counter()
    try:
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            start_new_session=True,
        )
    except OSError as e:
        return ProcessRun(cmd, -1, time.perf_counter() - start, error=str(e))
    timed_out = False
    try:
        out, _ = proc.communicate(timeout=max(timeout_s, 0.001))
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
    return ProcessRun(cmd, code, wall, timed_out, text, log_path)
