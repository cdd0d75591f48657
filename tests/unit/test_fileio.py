"""Atomic writes of output files: what a killed writer leaves is cleaned up by the next one."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf.baseline import fileio
from pytest_gpuperf.baseline.fileio import (
    atomic_write_text,
    output_target,
    temporary_prefix,
    write_output,
)
from pytest_gpuperf.errors import OutputError


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_temporary_file_of_a_dead_writer_is_removed_by_the_next_write(tmp_path: Path) -> None:
    target = tmp_path / "report.md"
    stale = tmp_path / f"{temporary_prefix(target, _dead_pid())}abc123.tmp"
    stale.write_text("half a report")
    live = tmp_path / f"{temporary_prefix(target, os.getpid())}def456.tmp"
    live.write_text("another writer of this process, still writing")
    other = tmp_path / ".other.md.1.tmp"
    other.write_text("not ours")
    atomic_write_text(target, "# report\n")
    assert target.read_text() == "# report\n"
    assert not stale.exists()
    assert live.exists() and other.exists()


# --- output files -------------------------------------------------------------------------


def test_an_output_is_written_through_its_owners_link(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    link = tmp_path / "out.json"
    link.symlink_to("real.json")  # relative, as ln -s makes it
    assert write_output(link, "{}\n", what="--gpuperf-json") == real
    assert link.is_symlink() and real.read_text() == "{}\n"


@pytest.mark.parametrize(
    "make, problem",
    [
        (lambda d: (d / "out.json").mkdir(), "it is a folder"),
        (lambda d: (d / "f").write_text(""), r"f is a file, not a folder"),
        (
            lambda d: (d / "out.json").write_text('{\n  "schema": "pytest-gpuperf/baseline",\n}'),
            r"it is a pytest-gpuperf baseline \(its content says so\)",
        ),
    ],
)
def test_an_output_that_must_not_be_written_is_refused_before_any_work(
    tmp_path: Path, make: Any, problem: str
) -> None:
    make(tmp_path)
    path = tmp_path / ("f/out.json" if "file, not" in problem else "out.json")
    before = sorted((str(p), p.is_dir()) for p in tmp_path.rglob("*"))
    with pytest.raises(OutputError, match=problem):
        output_target(path, what="--gpuperf-json")
    with pytest.raises(OutputError, match=problem):
        write_output(path, "{}", what="--gpuperf-json")
    assert sorted((str(p), p.is_dir()) for p in tmp_path.rglob("*")) == before


def test_a_baseline_folder_is_no_place_for_outputs(tmp_path: Path) -> None:
    folder = tmp_path / "baselines"
    for name in ("new.json", "main.runs/x.json"):
        with pytest.raises(OutputError, match="baseline"):
            output_target(folder / name, what="-o", baseline_dirs=[folder])
    assert output_target(tmp_path / "new.json", what="-o", baseline_dirs=[folder])


# --- the one rule for every output path (T1, T7, T21, T22) -----------------------

needs_root = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="mknod of a device node needs root"
)


def _null_copy(folder: Path) -> Path:
    """A copy of /dev/null's node in a scratch folder (never the real one)."""
    node = folder / "null2"
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    return node


@needs_root
@pytest.mark.parametrize("append", [False, True])
def test_a_device_node_is_written_to_never_replaced(tmp_path: Path, append: bool) -> None:
    """T1: --gpuperf-json=<a copy of /dev/null> replaced the node by a regular file."""
    node = _null_copy(tmp_path)
    assert output_target(node, what="--gpuperf-json").kind == "stream"
    assert write_output(node, "{}\n" * 1000, what="--gpuperf-json", append=append) == node
    assert stat.S_ISCHR(os.lstat(node).st_mode) and os.lstat(node).st_rdev == os.makedev(1, 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null2"]  # no temporary left


@needs_root
def test_an_atomic_write_never_renames_over_a_device(tmp_path: Path) -> None:
    """T1, the last guard: even a caller that skipped the checks cannot replace a node."""
    node = _null_copy(tmp_path)
    with pytest.raises(OSError, match="it is a character device, not a file: never replaced"):
        atomic_write_text(node, "x")
    assert stat.S_ISCHR(os.lstat(node).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null2"]


def _in_thread(fn: Any, timeout: float = 10.0) -> Any:
    """``fn()`` in a thread; fails (instead of hanging the suite) if it blocks."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # handed back to the test
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"{fn} blocked for {timeout} s"
    if "error" in box:
        raise box["error"]
    return box["value"]


def test_a_fifo_is_checked_without_opening_it_and_written_as_a_stream(tmp_path: Path) -> None:
    """T7: the baseline-content sniff opened an output FIFO for reading and hung."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    target = _in_thread(lambda: output_target(fifo, what="-o"))
    assert target.kind == "stream"
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    text = "a,b\n" * 50_000  # more than a pipe holds: the writer blocks until it is read
    _in_thread(lambda: write_output(fifo, text, what="-o"))
    reader.join(10)
    assert got == [text.encode()]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_fifo_that_nobody_reads_is_given_up_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    monkeypatch.setattr(fileio, "FIFO_WAIT_S", 0.2)
    with pytest.raises(OutputError, match=r"no process read it within 0\.2 s; start its reader"):
        _in_thread(lambda: write_output(fifo, "x", what="-o"))
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize(
    "dump",
    [
        lambda d: json.dumps(d, separators=(",", ":")),  # jq -c
        lambda d: json.dumps(d, indent=4),
        lambda d: json.dumps(d).replace("/", "\\/"),  # a JSON writer that escapes slashes
    ],
)
def test_a_baseline_is_recognised_by_its_parsed_content_whatever_the_spacing(
    tmp_path: Path, dump: Any
) -> None:
    """T21: a minified copy of a baseline outside the store was overwritten by -o."""
    copy = tmp_path / "copy.json"
    copy.write_text(dump({"schema": "pytest-gpuperf/baseline", "schema_version": 3, "runs": []}))
    before = copy.read_bytes()
    with pytest.raises(OutputError, match=r"baseline \(its content says so\)"):
        write_output(copy, "a,b\n", what="-o")
    assert copy.read_bytes() == before


def test_a_file_that_only_mentions_the_baseline_schema_is_not_one(tmp_path: Path) -> None:
    results = tmp_path / "results.json"
    doc = {"schema": "pytest-gpuperf/results", "args": ['"schema": "pytest-gpuperf/baseline"']}
    results.write_text(json.dumps(doc))
    write_output(results, "{}\n", what="--gpuperf-json")
    assert results.read_text() == "{}\n"


def test_a_socket_or_a_folder_is_refused_with_its_reason(tmp_path: Path) -> None:
    sock_path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        with pytest.raises(OutputError, match="it is a socket, not a file"):
            write_output(sock_path, "x", what="-o")
    assert stat.S_ISSOCK(os.lstat(sock_path).st_mode)
    with pytest.raises(OutputError, match="it is a folder, not a file"):
        write_output(tmp_path, "x", what="-o")


@pytest.mark.parametrize("name", ["-", "/dev/stdout"])
def test_standard_output_works_in_a_pipe(name: str) -> None:
    """T22: -o /dev/stdout in a pipe failed ("No such file or directory")."""
    code = (
        "from pytest_gpuperf.baseline.fileio import write_output; "
        f"write_output({name!r}, 'through the pipe\\n', what='-o')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=False)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout == b"through the pipe\n"


def test_a_process_substitution_is_written_as_a_stream(tmp_path: Path) -> None:
    """/dev/fd/N of a pipe (bash's >(...)) is a link to no path: written through, as a stream."""
    r, w = os.pipe()
    try:
        path = f"/dev/fd/{w}"
        if not os.path.exists(path):
            pytest.skip("no /dev/fd here")
        assert output_target(path, what="-o").kind == "stream"
        write_output(path, "piped\n", what="-o")
        assert os.read(r, 100) == b"piped\n"
    finally:
        os.close(r)
        os.close(w)


def test_a_new_file_follows_the_umask_and_a_replaced_one_keeps_its_mode(tmp_path: Path) -> None:
    """R13: new files were 0644 whatever the umask (``umask 077`` gave 0644 baselines and
    reports); a file replaced keeps the permissions it had."""
    from pytest_gpuperf.baseline.store import BaselineStore
    from tests.unit.test_baseline import T0, make_run

    old = os.umask(0o077)
    try:
        atomic_write_text(tmp_path / "new.json", "{}")
        write_output(tmp_path / "report.md", "x", what="--gpuperf-markdown")
        BaselineStore(tmp_path / "b").save("main", [make_run()], now=T0)
    finally:
        os.umask(old)
    made = [tmp_path / "new.json", tmp_path / "report.md", *(tmp_path / "b").rglob("*.json")]
    assert len(made) == 4
    assert {stat.S_IMODE(p.stat().st_mode) for p in made} == {0o600}
    kept = tmp_path / "kept.json"
    kept.write_text("{}")
    kept.chmod(0o640)
    atomic_write_text(kept, "[]")
    assert stat.S_IMODE(kept.stat().st_mode) == 0o640 and kept.read_text() == "[]"
