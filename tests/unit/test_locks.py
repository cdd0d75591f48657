"""The per-device lock, across real processes."""

from __future__ import annotations

import itertools
import json
import multiprocessing as mp
import os
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf.errors import DeviceBusy, GpuPerfError
from pytest_gpuperf.shell.locks import device_lock


def _hold(lock_dir: str, key: str, log: str, hold_s: float) -> None:
    os.environ["GPUPERF_LOCK_DIR"] = lock_dir
    with device_lock(key):
        start = time.monotonic()
        time.sleep(hold_s)
        end = time.monotonic()
    with open(log, "a") as f:
        f.write(json.dumps([start, end]) + "\n")


def test_processes_never_hold_one_device_at_once(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    ctx = mp.get_context("spawn")
    procs = [
        ctx.Process(target=_hold, args=(str(tmp_path), "gpu-GPU-test", str(log), 0.15))
        for _ in range(4)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    spans = sorted(json.loads(line) for line in log.read_text().splitlines())
    assert len(spans) == 4
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end


def test_different_devices_do_not_wait(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPERF_LOCK_DIR", str(tmp_path))
    with device_lock("gpu-a"):
        t = time.monotonic()
        with device_lock("gpu-b", timeout_s=1):
            pass
        assert time.monotonic() - t < 0.5


def test_a_busy_device_times_out_naming_the_holder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUPERF_LOCK_DIR", str(tmp_path))
    ctx = mp.get_context("spawn")
    holder = ctx.Process(target=_hold, args=(str(tmp_path), "gpu-x", str(tmp_path / "l"), 2.0))
    holder.start()
    try:
        deadline = time.monotonic() + 10
        own = tmp_path / f"pytest-gpuperf-gpu-x.u{os.geteuid()}.lock"
        while not own.exists() or not own.read_text():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        waits: list[str] = []
        with (
            pytest.raises(DeviceBusy, match=rf"gpu-x stayed busy.*pid {holder.pid}"),
            device_lock("gpu-x", timeout_s=0.3, on_wait=waits.append),
        ):
            pass
        assert waits and f"pid {holder.pid}" in waits[0]
    finally:
        holder.join(10)


def test_a_sessions_waits_for_the_cpu_lock_are_counted_for_its_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The machine-wide CPU lock: a session that waited for another one's measurements says
    how long and for whom, in one line (shown under -q too)."""
    from pytest_gpuperf.shell.locks import DeviceLock

    monkeypatch.setenv("GPUPERF_LOCK_DIR", str(tmp_path))
    lock = DeviceLock("cpu", timeout_s=10)
    with lock.hold("t.py::test_alone"):
        pass
    assert lock.summary_lines() == []
    ctx = mp.get_context("spawn")
    holder = ctx.Process(target=_hold, args=(str(tmp_path), "cpu", str(tmp_path / "l"), 0.8))
    holder.start()
    try:
        deadline = time.monotonic() + 10
        # the holder's own lock file (one per user: ...cpu.u<uid>.lock) says who holds it
        while not any(f.read_text() for f in tmp_path.glob("pytest-gpuperf-cpu*.lock")):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        with lock.hold("t.py::test_after"):
            pass
    finally:
        holder.join(10)
    (line,) = lock.summary_lines()
    assert lock.waits == 1 and 0.1 < lock.waited_s < 5
    assert line.startswith("gpuperf: waited ") and "for the machine's CPU" in line
    assert f"pid {holder.pid}" in line and "--gpuperf-lock-timeout" in line


# --- hostile lock folders: planted links, FIFOs, hard links, read-only files ------------

needs_root = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0,
    reason="needs root, to act as a second user (setuid)",
)


def _open_to_all(folder: Path) -> None:
    """Let every user reach ``folder``: pytest's own folders above it are private."""
    import tempfile

    folder.chmod(0o755)
    for parent in folder.parents:
        if parent == Path(tempfile.gettempdir()):
            break
        parent.chmod(parent.stat().st_mode | 0o755)


@pytest.fixture
def shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The machine's shared place for lock files (a stand-in for /dev/shm): a folder every
    user can enter and write to, sticky, of root's (or of this user's, where not root)."""
    from pytest_gpuperf.shell import locks

    _open_to_all(tmp_path)
    place = tmp_path / "shm"
    place.mkdir()
    place.chmod(0o1777)
    monkeypatch.delenv("GPUPERF_LOCK_DIR", raising=False)
    monkeypatch.setattr(locks, "SHARED_PLACES", (str(tmp_path / "missing"), str(place)))
    return place


def test_the_default_lock_place_does_not_follow_tmpdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R5: the default lock folder was <TMPDIR>/pytest-gpuperf-locks, so two sessions with
    two TMPDIRs (pam_tmpdir, a service's own) measured at once (7.0 s overlap)."""
    import tempfile

    from pytest_gpuperf.shell.locks import lock_dir

    monkeypatch.delenv("GPUPERF_LOCK_DIR", raising=False)
    seen = set()
    for tmp in ("a", "b"):
        (tmp_path / tmp).mkdir()
        monkeypatch.setenv("TMPDIR", str(tmp_path / tmp))
        monkeypatch.setattr(tempfile, "tempdir", None)
        seen.add(lock_dir())
    assert len(seen) == 1, seen
    (place,) = seen
    assert tmp_path not in place.parents and place in {Path("/dev/shm"), Path("/tmp")}


def test_the_default_lock_place_is_shared_and_sticky(shared: Path) -> None:
    with device_lock("cpu"):
        pass
    own = shared / f"pytest-gpuperf-cpu.u{os.geteuid()}.lock"  # this user's own, readable by all
    assert own.stat().st_mode & 0o777 == 0o644 and own.stat().st_uid == os.geteuid()
    assert sorted(p.name for p in shared.iterdir()) == [own.name]


def test_files_planted_as_lock_files_neither_stop_the_lock_nor_are_written(
    shared: Path,
) -> None:
    """ln -s victim.txt <lockdir>/cpu.lock made a run truncate victim.txt (defect 1); then
    refusing it stopped every run (T5). Links, hard links and FIFOs planted under the
    shared name or this user's own are now nobody's lock: left as they are, unwritten."""
    victim = shared.parent / "victim.txt"
    victim.write_text("precious")
    name = "pytest-gpuperf-cpu"
    (shared / f"{name}.lock").symlink_to(victim)
    (shared / f"{name}.u{os.geteuid()}.lock").symlink_to(victim)
    os.link(victim, shared / f"{name}.u1.lock")
    os.mkfifo(shared / f"{name}.u2.lock")  # opening a FIFO would block for ever
    planted = sorted(p.name for p in shared.iterdir())
    for _ in range(2):
        with device_lock("cpu", timeout_s=1, owner="tests/t.py::test_x"):
            one_off = [p for p in shared.iterdir() if p.name not in planted]
            assert len(one_off) == 1 and "test_x" in one_off[0].read_text()
    assert victim.read_text() == "precious"
    assert sorted(p.name for p in shared.iterdir()) == planted  # the one-off file is gone


def test_a_symlink_planted_as_the_lock_folder_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "victims-folder"
    elsewhere.mkdir()
    (tmp_path / "locks").symlink_to(elsewhere)
    monkeypatch.setenv("GPUPERF_LOCK_DIR", str(tmp_path / "locks"))
    with (
        pytest.raises(GpuPerfError, match=r"locks is a symbolic link; refusing to lock in it$"),
        device_lock("cpu"),
    ):
        pass
    assert list(elsewhere.iterdir()) == []


def _as_nobody(fn: Any, *args: Any) -> str:
    """What ``fn(*args)`` returns, run in a forked child as user nobody (65534).

    Forked, not started afresh: nobody may not read this interpreter's files.
    """
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            out = str(fn(*args))
        except BaseException as e:
            out = f"{type(e).__name__}: {e}"
        os.write(write, out.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        out = f.read()
    os.waitpid(pid, 0)
    return out


def _try_lock(timeout_s: float) -> str:
    try:
        with device_lock("cpu", timeout_s=timeout_s, owner="tests/test_nobody.py::test_x"):
            return "took it"
    except GpuPerfError as e:
        return f"{type(e).__name__}: {e}"


@needs_root
@pytest.mark.parametrize("old_style", [False, True])
def test_a_second_user_can_take_the_lock(shared: Path, old_style: bool) -> None:
    """A lock file made by one user (0644 by older versions) stopped every other user with a
    raw PermissionError (defect 6). Now the second user waits for it, then takes it."""
    if old_style:
        os.close(os.open(shared / "pytest-gpuperf-cpu.lock", os.O_CREAT | os.O_RDWR, 0o644))
        (shared / "pytest-gpuperf-cpu.lock").chmod(0o644)
    with device_lock("cpu", owner="tests/test_root.py::test_mm"):
        busy = _as_nobody(_try_lock, 0.3)
    assert busy.startswith("DeviceBusy: cpu stayed busy"), busy
    assert "(user root): tests/test_root.py::test_mm" in busy
    assert _as_nobody(_try_lock, 5.0) == "took it"


def _plant_and_try(folder: str) -> str:
    """As the second user: take the lock in ``folder`` where root planted files."""
    os.environ["GPUPERF_LOCK_DIR"] = folder
    return _try_lock(2.0)


@needs_root
def test_files_another_user_plants_do_not_deny_the_lock(shared: Path) -> None:
    """T5: any user could stop every other user's benchmarks with a link, a FIFO or a 0600
    file as cpu.lock in the shared sticky folder, which the victim cannot remove."""
    with device_lock("cpu"):
        pass
    victim = shared.parent / "victim.txt"
    victim.write_text("precious")
    (shared / "pytest-gpuperf-cpu.lock").symlink_to(victim)
    nobody_own = shared / "pytest-gpuperf-cpu.u65534.lock"  # the second user's own name
    os.close(os.open(nobody_own, os.O_CREAT | os.O_WRONLY, 0o600))
    os.mkfifo(shared / "pytest-gpuperf-cpu.u65534.x.lock")
    assert _as_nobody(_plant_and_try, str(shared)) == "took it"
    assert victim.read_text() == "precious" and nobody_own.stat().st_size == 0


@needs_root
def test_a_lock_folder_another_user_keeps_closed_fails_once_naming_them(shared: Path) -> None:
    """T5: a lock folder of another user without write access gave a raw PermissionError
    in every test; now one problem at the start names its owner and a fix that works."""
    from pytest_gpuperf.shell.locks import settle_lock_dir

    shared.chmod(0o755)
    problem = _as_nobody(settle_lock_dir, shared.parent)
    assert "cannot use the default lock folder" in problem, problem
    assert "Permission denied" in problem and "belongs to user root" in problem
    assert "GPUPERF_LOCK_DIR=$HOME/.cache/pytest-gpuperf-locks" in problem


def _take_and_report(folder: str, started: str, log: str) -> None:
    """A session's measurement in ``folder``: the lock held for 1.5 s, its span logged."""
    os.environ["GPUPERF_LOCK_DIR"] = folder
    try:
        with device_lock("cpu", timeout_s=10):
            Path(started).touch()
            begin = time.time()
            time.sleep(1.5)
        end = time.time()
        with open(log, "a") as f:
            f.write(json.dumps([begin, end]) + "\n")
    except GpuPerfError as e:
        with open(log, "a") as f:
            f.write(json.dumps(str(e)) + "\n")


@needs_root
def test_the_owner_of_a_lock_folder_cannot_let_two_sessions_measure_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R4: a 1777 lock folder of another user was accepted; its owner deleted a held
    cpu.u0.lock, and a second session took a fresh one: the two holds overlapped 3.86 s.
    Such a folder is now refused, at the start and at each lock, naming its owner."""
    from pytest_gpuperf.shell.locks import settle_lock_dir

    _open_to_all(tmp_path)
    folder = tmp_path / "theirs"
    folder.mkdir()
    folder.chmod(0o1777)
    os.chown(folder, 65534, 65534)  # nobody's, open to all
    monkeypatch.setenv("GPUPERF_LOCK_DIR", str(folder))  # the suite's own, back at the end
    log, started = tmp_path / "spans.jsonl", tmp_path / "started"
    ctx = mp.get_context("spawn")
    first = ctx.Process(target=_take_and_report, args=(str(folder), str(started), str(log)))
    first.start()
    deadline = time.monotonic() + 20
    while not started.exists() and first.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    deleted = _as_nobody(lambda: [p.unlink() for p in folder.iterdir()])  # by their owner
    assert not deleted.startswith("PermissionError"), deleted
    _take_and_report(str(folder), str(tmp_path / "started2"), str(log))
    first.join(30)
    spans = [json.loads(line) for line in log.read_text().splitlines()]
    held = sorted(s for s in spans if isinstance(s, list))
    assert all(b >= a_end for (_, a_end), (b, _) in itertools.pairwise(held)), held
    problem = settle_lock_dir(tmp_path)
    assert problem is not None and "belongs to user nobody" in problem, problem
    assert "delete the lock files of others" in problem and "remove it" not in problem


def test_a_relative_lock_dir_is_resolved_once_against_the_sessions_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """T13: a relative GPUPERF_LOCK_DIR was used relative to each process's own folder (A/B
    base processes run elsewhere, so they used another lock folder)."""
    from pytest_gpuperf.shell.locks import settle_lock_dir

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("GPUPERF_LOCK_DIR", "rel_locks")
    assert settle_lock_dir(tmp_path) is None
    assert os.environ["GPUPERF_LOCK_DIR"] == str(tmp_path / "rel_locks")  # children inherit it
    with device_lock("cpu"):
        pass
    assert (tmp_path / "rel_locks").is_dir() and not (elsewhere / "rel_locks").exists()


KINDS = [
    "proc", "too-long", "a-file", "a-fifo", "a-link-to-a-folder", "under-a-file",
    "control-characters", "control-characters-under-a-file", "read-only", "a-device",
]  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
def test_an_unusable_lock_dir_is_one_clear_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """T13: /proc, a 300-character name or a file gave a traceback in every test; a FIFO, a
    link to a folder elsewhere, a path under a file, control characters (which reached the
    terminal raw) and a folder one cannot write are each one problem, escaped, naming the
    fix, and nothing is made or changed there."""
    from pytest_gpuperf.model import printable
    from pytest_gpuperf.shell.locks import settle_lock_dir

    if kind == "read-only" and os.geteuid() == 0:
        pytest.skip("root writes into a read-only folder: needs a user other than root")
    (tmp_path / "a-file").write_text("x")
    os.mkfifo(tmp_path / "a-fifo")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "a-link").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "ro").mkdir(mode=0o555)
    value = {
        "proc": "/proc",
        "too-long": str(tmp_path / ("x" * 300)),
        "a-file": "a-file",
        "a-fifo": str(tmp_path / "a-fifo"),
        "a-link-to-a-folder": str(tmp_path / "a-link"),
        "under-a-file": str(tmp_path / "a-file" / "deep" / "locks"),
        "control-characters": "locks\n::error::x\x1b[31m",
        "control-characters-under-a-file": str(tmp_path / "a-file") + "/\n::error::y\x1b[0m",
        "read-only": str(tmp_path / "ro" / "locks"),
        "a-device": "/dev/null",
    }[kind]
    before = sorted(p.name for p in tmp_path.iterdir())
    monkeypatch.setenv("GPUPERF_LOCK_DIR", value)
    problem = settle_lock_dir(tmp_path)
    assert problem is not None and problem.startswith("gpuperf: cannot use GPUPERF_LOCK_DIR=")
    assert "Point GPUPERF_LOCK_DIR at a folder that root or you own" in problem
    assert "remove it" not in problem  # R8: /dev/null is not the plugin's to remove
    assert printable(problem) == problem  # no raw line break or escape reaches the terminal
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert (tmp_path / "a-file").read_text() == "x" and not any((tmp_path / "elsewhere").iterdir())
