"""Atomic writes of output files: what a killed writer leaves is cleaned up by the next one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

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
