"""Files named by environment variables follow the output rule (the rule of T2)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest


def test_the_lock_log_named_by_the_environment_never_goes_into_a_baseline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GPUPERF_LOCK_LOG naming a baseline got a JSON line appended to it."""
    from pytest_gpuperf.shell import locks

    baseline = tmp_path / "main.json"
    baseline.write_text('{"schema":"pytest-gpuperf/baseline","schema_version":3}')
    before = baseline.read_bytes()
    monkeypatch.setenv("GPUPERF_LOCK_LOG", str(baseline))
    locks.HoldLog().add("cpu", "me", 0.0)
    assert baseline.read_bytes() == before
    log = tmp_path / "holds.jsonl"
    monkeypatch.setenv("GPUPERF_LOCK_LOG", str(log))
    locks.HoldLog().add("cpu", "me", 0.0)
    locks.HoldLog().add("cpu", "me", 1.0)
    assert [json.loads(x)["taken"] for x in log.read_text().splitlines()] == [0.0, 1.0]


@pytest.mark.parametrize("where", ["main.runs/x.json", "new.json", "main.lock"])
def test_a_file_named_by_the_environment_stays_out_of_a_baseline_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """No option names the baseline folder of GPUPERF_LOCK_LOG: the folder is known by the
    NAME.json and NAME.runs/ pair it holds."""
    from pytest_gpuperf.shell import locks

    (tmp_path / "main.runs").mkdir()
    (tmp_path / "main.json").write_text('{"schema":"pytest-gpuperf/baseline"}')
    monkeypatch.setenv("GPUPERF_LOCK_LOG", str(tmp_path / where))
    locks.HoldLog().add("cpu", "me", 0.0)
    assert not (tmp_path / where).exists()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.setenv("GPUPERF_LOCK_LOG", str(tmp_path / "elsewhere" / "new.json"))
    locks.HoldLog().add("cpu", "me", 0.0)
    assert (tmp_path / "elsewhere" / "new.json").exists()


@pytest.mark.parametrize("kind", ["fifo", "folder", "device", "baseline", "under-a-file"])
def test_the_lock_log_is_checked_at_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """R9: a GPUPERF_LOCK_LOG that could not take the lines (a FIFO: 10 s more per
    benchmark, holding the machine's lock; a baseline; /dev/full) failed silently at each
    hold. It is now one problem at the start, as the outputs are, naming it and the fix."""
    from pytest_gpuperf.model import printable
    from pytest_gpuperf.shell.locks import settle_lock_dir

    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("x")
    (tmp_path / "main.json").write_text('{"schema":"pytest-gpuperf/baseline","schema_version":3}')
    path = {
        "fifo": tmp_path / "fifo",
        "folder": tmp_path / "folder",
        "device": Path("/dev/full"),
        "baseline": tmp_path / "main.json",
        "under-a-file": tmp_path / "file" / "holds.jsonl",
    }[kind]
    monkeypatch.setenv("GPUPERF_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("GPUPERF_LOCK_LOG", str(path))
    problem = settle_lock_dir(tmp_path)
    assert problem is not None and problem.startswith("gpuperf: GPUPERF_LOCK_LOG: "), problem
    assert str(path) in problem and printable(problem) == problem
    assert "choose another path" in problem or "give the path of a file" in problem
    monkeypatch.setenv("GPUPERF_LOCK_LOG", str(tmp_path / "new" / "holds.jsonl"))
    assert settle_lock_dir(tmp_path) is None


def test_the_lock_log_is_written_after_the_lock_is_let_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R9: each hold was logged while the lock was still held, so a slow log file (a FIFO
    with no reader: 10 s) kept every other user's benchmarks waiting meanwhile."""
    from pytest_gpuperf.baseline import fileio
    from pytest_gpuperf.errors import DeviceBusy
    from pytest_gpuperf.shell import locks

    monkeypatch.setenv("GPUPERF_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("GPUPERF_LOCK_LOG", str(tmp_path / "holds.jsonl"))
    free_while_logging: list[bool] = []
    real = fileio.write_output

    def write(*args: object, **kw: object) -> Path:
        try:  # another holder (a descriptor of its own, as another process has), unlogged
            with monkeypatch.context() as env:
                env.delenv("GPUPERF_LOCK_LOG")
                with locks.device_lock("cpu", timeout_s=0.2):
                    free_while_logging.append(True)
        except DeviceBusy:
            free_while_logging.append(False)
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(locks, "write_output", write)
    lock = locks.DeviceLock("cpu", timeout_s=1)
    with lock.hold("t.py::test_one"):
        pass
    assert free_while_logging[0] is True, free_while_logging


def test_a_lock_log_that_fails_is_said_once_and_then_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R9: a write that failed (a full disk; /dev/full) was silent at every hold."""
    from pytest_gpuperf.baseline import fileio
    from pytest_gpuperf.shell import locks

    monkeypatch.setenv("GPUPERF_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("GPUPERF_LOCK_LOG", "/dev/full")
    tries: list[object] = []
    real = fileio.write_output
    monkeypatch.setattr(locks, "write_output", lambda *a, **k: tries.append(a) or real(*a, **k))
    lock = locks.DeviceLock("cpu", timeout_s=1)
    for test in ("test_one", "test_two", "test_three"):
        with lock.hold(f"t.py::{test}"):
            pass
    assert len(tries) == 1
    (line,) = lock.summary_lines()
    assert line.startswith("gpuperf: GPUPERF_LOCK_LOG: a hold of cpu could not be appended to")
    assert "/dev/full" in line and "No space left on device" in line
