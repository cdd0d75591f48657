"""The output rule under a seeded, time-bounded fuzz, in one process: the CLI's
``export -o`` and ``compare --markdown/--html/--csv``, the session's report writer with
``$GITHUB_STEP_SUMMARY``, and an A/B base process's check file (``GPUPERF_AB_CHECK``),
pointed at devices, FIFOs, sockets, links, folders, baselines (pretty and minified) and
read-only places, with hostile names in the results.

No call may raise, touch a non-regular file or a link, or change a baseline; the CLI exits
with 0-3, and a refusal says why. ``GPUPERF_FUZZ_SEED`` picks another seed.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import os
import random
import socket
import stat
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf.baseline import fileio
from pytest_gpuperf.baseline.store import BaselineStore
from pytest_gpuperf.cli import main as cli
from pytest_gpuperf.model import BenchId
from pytest_gpuperf.reporting.ci import write_ci_outputs
from pytest_gpuperf.reporting.settings import ReportSettings
from pytest_gpuperf.shell.ab_tree import BaseTreeCheck
from tests.unit.reporting_data import T0, session

SEED = int(os.environ.get("GPUPERF_FUZZ_SEED", "24"))
BUDGET_S = 8.0
PIECES = ["\x1b[31m", "\n::error::n", "::", "/", "..", "=1+1", "+1", "-2+3", "@A1", "\u202e", "w"]


def hostile(rng: random.Random) -> str:
    return "".join(rng.choice(PIECES) for _ in range(3))


def results(rng: random.Random) -> list[Any]:
    out = []
    for r in session():
        bid = BenchId(r.id.nodeid, hostile(rng), r.id.mode, (("p", hostile(rng)),))
        out.append(replace(r, run=replace(r.run, id=bid)))
    return out


def places(root: Path, store: Path) -> dict[str, Path]:
    p = {
        "new": root / "new" / "r.out",
        "regular": root / "regular.txt",
        "folder": root / "dir",
        "fifo": root / "fifo",
        "fifo-link": root / "fifo-link",
        "socket": root / "sock",
        "under-file": root / "regular.txt" / "x",
        "dangling": root / "dangling",
        "copy": root / "copy.json",
        "read-only": root / "ro" / "r.out",
        "index": store / "main.json",
        "segment-place": store / "main.runs" / "x.json",
        "store-new": store / "new.json",
        "stdout": Path("-"),
        "dev-stdout": Path("/dev/stdout"),
    }
    p["regular"].write_text("mine\n")
    p["folder"].mkdir()
    os.mkfifo(p["fifo"])
    p["fifo-link"].symlink_to("fifo")
    p["dangling"].symlink_to(root / "gone" / "x")
    p["copy"].write_text((store / "main.json").read_text().replace("\n", "").replace("  ", ""))
    p["read-only"].parent.mkdir()
    p["read-only"].parent.chmod(0o555)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        p["device"] = root / "null"
        os.mknod(p["device"], 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    return p


def snapshot(*roots: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                out[str(path)] = ("link", os.readlink(path))
            elif not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                out[str(path)] = (stat.S_IFMT(st.st_mode), st.st_rdev)
            elif path.suffix == ".json" and (root.name == "store" or path.name == "copy.json"):
                out[str(path)] = path.read_bytes()
    return out


@contextlib.contextmanager
def fifo_reader(fifo: Path, on: bool) -> Any:
    """A reader of ``fifo`` while the block runs (``on``), else none."""
    stop = threading.Event()

    def read() -> None:
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        try:
            while not stop.is_set():
                try:
                    os.read(fd, 1 << 16)
                except BlockingIOError:
                    time.sleep(0.005)
        finally:
            os.close(fd)

    t = threading.Thread(target=read, daemon=True)
    if on:
        t.start()
    try:
        yield
    finally:
        stop.set()
        if on:
            t.join(5)


def cli_case(rng: random.Random, p: dict[str, Path], store: Path) -> list[str]:
    target = str(rng.choice(list(p.values())))
    if rng.random() < 0.5:
        fmt = rng.choice(["markdown", "html", "csv", "pytest-benchmark"])
        return ["export", "main", "--format", fmt, "-o", target, "--dir", str(store)]
    option = rng.choice(["--markdown", "--html", "--csv"])
    return ["compare", "main", "pr", option, target, "--dir", str(store)]


def test_outputs_at_hostile_places(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(SEED)
    monkeypatch.setattr(fileio, "FIFO_WAIT_S", 0.05, raising=False)
    store = tmp_path / "store"
    BaselineStore(store).save("main", [r.run for r in results(rng)], now=T0)
    BaselineStore(store).save("pr", [r.run for r in results(rng)], now=T0 + dt.timedelta(hours=1))
    root = tmp_path / "places"
    root.mkdir()
    p = places(root, store)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(p["socket"]))
        before = snapshot(root, store)
        start, cases = time.monotonic(), 0
        while cases < 40 or time.monotonic() - start < BUDGET_S:
            argv = cli_case(rng, p, store)
            with fifo_reader(p["fifo"], on=rng.random() < 0.7):
                code = cli.main(argv, out=io.StringIO())
            err = capfd.readouterr().err
            label = f"seed {SEED}: {argv}: {err[-1500:]}"
            assert code in (cli.OK, cli.GATE_FAILED, cli.INPUT_ERROR, cli.NOTHING_COMPARED), label
            assert "Traceback" not in err, label
            assert code != cli.INPUT_ERROR or err.strip(), label  # a refusal says why
            picked = rng.sample(sorted(p), 5)
            values = dict(zip(("json", "markdown", "html", "csv"), picked, strict=False))
            env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(p[picked[4]])}
            settings = ReportSettings(**{k: str(p[v]) for k, v in values.items()})
            with fifo_reader(p["fifo"], on=rng.random() < 0.7):
                written = write_ci_outputs(
                    settings, results(rng), env=env, cwd=tmp_path, baseline_dirs=[store]
                )
            assert len(written.errors) + len(written.messages) >= 4, (values, written)
            # the A/B base process's check file (GPUPERF_AB_CHECK): a regular or new file only
            check_at = p[rng.choice(sorted(p))]
            check = BaseTreeCheck(check_at, tmp_path, tmp_path / "current", lambda item: True)
            check._write()
            err = capfd.readouterr().err
            assert "Traceback" not in err and err.count("\n") <= 1, (check_at, err)
            assert snapshot(root, store) == before, label
            cases += 1
    p["read-only"].parent.chmod(0o755)
