"""A child pytest (and a spare Python) ends itself, its process group too, once the session
that started it is gone: a SIGKILLed session leaves no hanging child behind (T18)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="needs /proc (Linux) to find the processes"
)

#: A test that never ends by itself: it starts a grandchild (as nsys or ncu would be) and
#: writes both pids for the test below, then sleeps.
HANGING = """
import os, subprocess, sys, time
from pathlib import Path

def test_hangs():
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    Path(os.environ["PIDS"]).write_text(f"{os.getpid()} {grandchild.pid}")
    time.sleep(300)
"""

#: The session that starts the child through the one place children are started.
PARENT = """
import sys
from pytest_gpuperf.shell.rerun import run_pytest_child

folder = sys.argv[1]
run_pytest_child(
    [folder + "/test_hang.py"], device="cpu", timeout_s=300, cwd=folder,
    args=["-p", "no:cacheprovider", "--rootdir", folder, "-c", folder + "/pytest.ini"],
)
"""


def _gone(pid: int) -> bool:
    """Whether ``pid`` has ended (a zombie not yet reaped counts as ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True
    return stat[stat.rfind(b")") + 2 :].split()[0] in (b"Z", b"X")


def _wait_for(check: Callable[[], object], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False


def test_a_child_of_a_sigkilled_session_ends_with_its_grandchildren(tmp_path: Path) -> None:
    (tmp_path / "test_hang.py").write_text(HANGING)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "parent.py").write_text(PARENT)
    pids_file = tmp_path / "pids"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUPERF_", "PYTEST_"))}
    parent = subprocess.Popen(
        [sys.executable, str(tmp_path / "parent.py"), str(tmp_path)],
        env={**env, "PIDS": str(pids_file)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    pids: list[int] = []
    try:
        assert _wait_for(lambda: pids_file.exists() and pids_file.read_text(), 120), (
            "the child pytest never started its test"
        )
        pids = [int(p) for p in pids_file.read_text().split()]
        assert not any(_gone(p) for p in pids)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        assert _wait_for(lambda: all(_gone(p) for p in pids), 8), (
            "the child (or its grandchild) of a SIGKILLed session is still running: "
            + ", ".join(str(p) for p in pids if not _gone(p))
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            parent.kill()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


WATCHER = """
import sys, time
from pytest_gpuperf.artifacts.collectors.process import watch_parent

print(watch_parent(0.1), flush=True)
time.sleep(float(sys.argv[1]))
"""


def _watcher(parent_value: str, sleep_s: float = 300) -> subprocess.Popen[str]:
    from pytest_gpuperf.artifacts.collectors.process import PARENT_ENV

    return subprocess.Popen(
        [sys.executable, "-c", WATCHER, str(sleep_s)],
        env={**os.environ, PARENT_ENV: parent_value},
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def test_the_watchdog_ends_its_process_when_the_watched_one_ends() -> None:
    from pytest_gpuperf.artifacts.collectors.process import parent_env

    watched = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        fields = Path(f"/proc/{watched.pid}/stat").read_text().rsplit(")", 1)[1].split()
        child = _watcher(f"{watched.pid}:{fields[19]}")
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "True"
        watched.kill()
        watched.wait()
        child.communicate(timeout=8)
        assert child.returncode == -signal.SIGKILL
    finally:
        watched.kill()
    # our own value names this process, as a child started by us would be given it
    assert parent_env()["GPUPERF_PARENT"].startswith(f"{os.getpid()}:")


@pytest.mark.parametrize(
    "value", ["", "junk", "1:", "0:0", "-5:1", "{me}:1", "99999999:1", "{me}:\n\x1b"]
)
def test_no_watchdog_for_a_value_naming_no_live_process(value: str) -> None:
    """A reused pid (the start time differs), a dead one, init, or a value that does not
    parse: no watchdog, and the process runs on."""
    child = _watcher(value.format(me=os.getpid()), sleep_s=0)
    out, _ = child.communicate(timeout=60)
    assert out.strip() == "False"
    assert child.returncode == 0
