"""Waiting for a lock another process holds: a visible line naming the holder, and the
timeout of --gpuperf-lock-timeout (issues 12 and 13)."""

from __future__ import annotations

import fnmatch
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import FAST

#: The benchmark touches $GO just before it measures: the holder then knows it is waiting.
BENCH = """
import os, pathlib

def test_add(gpu_bench):
    pathlib.Path(os.environ["GO"]).touch()
    gpu_bench(lambda: sum(range(100)))
"""


@contextmanager
def holder(code: str, *args: str) -> Iterator[subprocess.Popen[str]]:
    """Another process holding a lock (``code``), until it ends or this block is left."""
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "holding\n"
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=30)
        if proc.stdout:
            proc.stdout.close()


#: Holds the lock until $GO appears, then for argv[2] more seconds (or until this process
#: is killed). Generous: under load the waiting session may take seconds to reach the lock.
HOLD = """
import os, sys, time
from pathlib import Path
{take}
    print("holding", flush=True)
    go, deadline = Path(sys.argv[1]), time.monotonic() + 120
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(float(sys.argv[2]))
"""
#: Never let go while the test runs (the holder is killed when its block ends).
FOREVER = "600"


@pytest.fixture
def go(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUPERF_LOCK_DIR", str(pytester.path / "locks"))
    monkeypatch.setenv("GO", str(pytester.path / "go"))
    pytester.makepyfile(test_lock=BENCH)
    return pytester.path / "go"


def test_waiting_for_the_device_says_who_holds_it(pytester: pytest.Pytester, go: Path) -> None:
    """A run stalled with no message while another process measured."""
    take = (
        "from pytest_gpuperf.shell.locks import device_lock\n"
        "with device_lock('cpu', owner='tests/test_other.py::test_mm'):"
    )
    with holder(HOLD.format(take=take), str(go), "6"):
        result = pytester.runpytest("-p", "no:cacheprovider", *FAST, "--gpuperf-progress=on")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*gpuperf: waiting for cpu: it is being measured by pid * (user *): "
            "tests/test_other.py::test_mm ... * s",
            "gpuperf: waiting for cpu: *: done in * s",
        ]
    )


def test_a_device_lock_timeout_fails_the_test_with_a_plain_text(
    pytester: pytest.Pytester, go: Path
) -> None:
    """R7: a device-lock timeout failed each benchmark with a 60-line traceback through the
    plugin's insides (contextlib, shell/locks.py, filelock.py, the fixture's locals), then
    with the test's source and its fixture's repr: now the text alone, as for "no verdict"."""
    take = (
        "from pytest_gpuperf.shell.locks import device_lock\n"
        "with device_lock('cpu', owner='tests/test_other.py::test_mm'):"
    )
    with holder(HOLD.format(take=take), str(go), FOREVER):
        result = pytester.runpytest(
            "-p", "no:cacheprovider", *FAST, "--gpuperf-lock-timeout=0.5", "--showlocals"
        )
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    # the section ends at the summary, or at the warnings where pytest has any (in CI, a
    # PytestAssertRewriteWarning of the installed package)
    failure = out.split(" FAILURES ")[1].split(" short test summary info ")[0]
    failure = failure.split(" warnings summary ")[0]
    body = " ".join(line for line in failure.splitlines()[2:] if line.strip(" ="))
    assert fnmatch.fnmatch(
        body,
        "gpuperf: cpu stayed busy for 0.5 s: it is being measured by pid * (user *): "
        "tests/test_other.py::test_mm. Wait for that run to end, or stop it; "
        "--gpuperf-lock-timeout sets how long to wait.",
    ), failure
    result.stdout.fnmatch_lines(
        ["FAILED *::test_add - Failed: gpuperf: cpu stayed busy for 0.5 s*"]
    )


def test_a_lock_log_that_is_no_file_stops_the_session_at_its_start(
    pytester: pytest.Pytester, go: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R9: GPUPERF_LOCK_LOG naming a FIFO no process read cost 10 s per benchmark, with the
    machine's lock held, and said nothing (26.0 s instead of 6.9 s for two benchmarks)."""
    import os

    os.mkfifo(pytester.path / "holds.fifo")
    monkeypatch.setenv("GPUPERF_LOCK_LOG", str(pytester.path / "holds.fifo"))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *FAST, timeout=60)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert err.count("GPUPERF_LOCK_LOG: cannot append to") == 1, err
    assert "give the path of a file" in err and not go.exists()  # no test ran


def test_the_baseline_lock_waits_as_long_as_lock_timeout_says(
    pytester: pytest.Pytester, go: Path
) -> None:
    """The baseline's lock gave up after a fixed 60 s, whatever --gpuperf-lock-timeout said."""
    take = (
        "from pytest_gpuperf.baseline.filelock import locked\n"
        "with locked(Path('.gpuperf/baselines/.main.json.lock'), owner='saving into main'):"
    )
    no_inventory = "--gpuperf-inventory=never"
    with holder(HOLD.format(take=take), str(go), FOREVER):
        result = pytester.runpytest(
            "-p",
            "no:cacheprovider",
            *FAST,
            no_inventory,
            "--gpuperf-save=main",
            "--gpuperf-lock-timeout=0.5",
        )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "gpuperf: the baseline was NOT saved: *.main.json.lock stayed locked by pid * "
            "(user *): saving into main for 0.5 s*--gpuperf-lock-timeout*"
        ]
    )

    go.unlink()
    with holder(HOLD.format(take=take), str(go), "8"):
        result = pytester.runpytest(
            "-p",
            "no:cacheprovider",
            *FAST,
            no_inventory,
            "--gpuperf-save=main",
            "--gpuperf-progress=on",
        )
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "*gpuperf: waiting for baseline 'main': it is locked by pid * (user *): saving into "
            "main ... * s",
            "*saved 1 run(s) of 1 benchmark(s) into baseline 'main'*",
        ]
    )


def test_an_unusable_lock_folder_stops_the_session_once_at_its_start(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """T13: GPUPERF_LOCK_DIR=/proc gave a FileNotFoundError traceback in every test."""
    monkeypatch.setenv("GPUPERF_LOCK_DIR", "/proc")
    monkeypatch.setenv("GO", str(pytester.path / "go"))
    pytester.makepyfile(test_lock=BENCH, test_more=BENCH.replace("test_add", "test_more"))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *FAST)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert err.count("cannot use GPUPERF_LOCK_DIR=/proc") == 1, err
    assert "Traceback" not in err + result.stdout.str()
    assert not (pytester.path / "go").exists()  # no test ran
