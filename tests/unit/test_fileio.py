"""Atomic writes of output files: what a killed writer leaves is cleaned up by the next one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pytest_gpuperf.fileio import atomic_write_text, temporary_prefix


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
