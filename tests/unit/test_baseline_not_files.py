"""R2: what is not a regular file where the store reads one (a FIFO, a link to a device, a
link loop, a dangling link, a folder) is an error that names it and the fix, at once: never
a hang, never a read until memory runs out. Git stores links, and baselines are committed.

Each operation runs in a thread given 10 s; the FIFO has no writer, so a read of it would
block for ever (and /dev/zero never ends)."""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf.baseline.store import BaselineStore
from pytest_gpuperf.cli import main as cli
from pytest_gpuperf.errors import GpuPerfError
from tests.unit.test_baseline import T0, make_run

MM = "tests/test_ops.py::test_mm[4096-bf16]"
ADD = "tests/test_ops.py::test_add"


def _make(kind: str, path: Path) -> None:
    """Put ``kind`` at ``path`` (which is gone)."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path.symlink_to("/dev/zero")
    elif kind == "loop":
        path.symlink_to(path.name)
    elif kind == "dangling":
        path.symlink_to(path.parent / "nowhere.json")
    else:
        path.mkdir()


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        for p in path.iterdir():
            p.unlink()
        path.rmdir()
    else:
        path.unlink()


def _cli(*args: str) -> int:
    """The command line, as a user runs it: an error is exit code 2 and one line."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli.main(list(args), out=io.StringIO())
    if code != 0:
        raise GpuPerfError(err.getvalue())
    return code


def _within(seconds: float, act: Callable[[], Any]) -> BaseException | None:
    """What ``act`` raised (None: nothing), or a failure if it did not end in ``seconds``."""
    box: list[BaseException | None] = []

    def run() -> None:
        try:
            act()
            box.append(None)
        except BaseException as e:
            box.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        pytest.fail(f"still running after {seconds:g} s (a read that blocks, or never ends)")
    return box[0]


#: (where, what is there): every path the store reads, and every kind of thing that is not
#: what belongs there
CASES = [
    (where, kind)
    for where in ("index", "segment", "runs folder", "baseline folder")
    for kind in ("fifo", "device", "loop", "dangling", "folder")
    if not (kind == "folder" and where.endswith("folder"))
]


@pytest.mark.parametrize(("where", "kind"), CASES)
def test_a_file_that_is_not_one_is_an_error_naming_it_never_a_hang(
    tmp_path: Path, where: str, kind: str
) -> None:
    root = tmp_path / "baselines"
    store = BaselineStore(root)
    for day in range(2):
        runs = [make_run(MM, run_id=f"r{day}"), make_run(ADD, run_id=f"r{day}")]
        store.save("main", runs, now=T0 + dt.timedelta(days=day))
    files = store.files("main")
    target = {
        "index": files.index,
        "segment": sorted(files.runs_dir.glob("*.json"))[0],
        "runs folder": files.runs_dir,
        "baseline folder": root,
    }[where]
    if where == "baseline folder":
        target = tmp_path / "other"  # a --gpuperf-baseline-dir that is not a folder
        store = BaselineStore(target)
    else:
        _remove(target)
    _make(kind, target)
    acts: dict[str, Callable[[], Any]] = {
        "load": lambda: store.load("main"),
        "session load": lambda: store.load("main", nodeids=[MM]),
        "load before collection": lambda: store.load("main", nodeids=()),
        "check before a save": lambda: store.check("main"),
        "save": lambda: store.save("main", [make_run(MM, run_id="new")], now=T0),
        "prune --dry-run": lambda: store.prune("main", keep_runs=1, dry_run=True),
        "show": lambda: _cli("show", "main", "--dir", str(store.root)),
        "compare": lambda: _cli("compare", "main", "main", "--dir", str(store.root)),
        "export": lambda: _cli("export", "main", "--dir", str(store.root)),
    }
    if where == "index":
        acts["show PATH"] = lambda: _cli("show", str(files.index))
        acts["export PATH"] = lambda: _cli("export", str(files.index))
    for name, act in acts.items():
        raised = _within(10, act)
        if raised is None and where in ("segment", "runs folder") and name == "prune --dry-run":
            continue  # a prune reads the index alone
        assert isinstance(raised, GpuPerfError), f"{name}: {raised!r}"
        said = str(raised)
        assert str(target) in said or target.name in said, f"{name}: {said}"
        assert any(
            fix in said.lower() for fix in ("move it away", "point --", "repair the link")
        ), f"{name}: {said}"
    assert os.path.lexists(target)  # left as it was


def test_a_run_file_given_by_path_that_is_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "results.json"
    os.mkfifo(fifo)
    for args in (["show", str(fifo)], ["export", str(fifo)], ["compare", str(fifo), str(fifo)]):
        raised = _within(10, lambda args=args: _cli(*args, "--dir", str(tmp_path)))
        assert isinstance(raised, GpuPerfError) and "is a FIFO, not a file" in str(raised)
