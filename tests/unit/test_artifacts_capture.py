"""The capture runner: layout, manifest, budgets, missing and hung tools, failing collectors."""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf.artifacts import (
    FAILED,
    OK,
    SKIPPED,
    TIMEOUT,
    CaptureContext,
    CollectorResult,
    safe_name,
)
from pytest_gpuperf.artifacts.analysis.layout import MAX_NAME, Layout, read_manifest
from pytest_gpuperf.artifacts.collectors.ncu import NcuCollector
from pytest_gpuperf.artifacts.collectors.nsys import NsysCollector
from pytest_gpuperf.artifacts.collectors.process import run_process
from pytest_gpuperf.artifacts.collectors.torch_trace import TorchTraceCollector
from pytest_gpuperf.model import BenchId, Result, Run
from pytest_gpuperf.shell.capture import baseline_inventory, capture, should_capture
from pytest_gpuperf.verdict import REGRESSION
from tests.unit.reporting_data import comparison

NODEIDS = [
    "tests/test_mm.py::test_mm[4096x4096x4096-bfloat16]",
    "tests/test_mm.py::test_mm[4096x4096x4096-float32]",
    "tests/test mm.py::test_mm[a/b]",
    "tests/test mm.py::test_mm[a-b]",
    "tests/test_mm.py::test_mm[a_b]",
    "t.py::test[" + "x" * 300 + "]",
    "t.py::test[" + "x" * 300 + "y]",
    "con",
    "../../etc/passwd",
    "t.py::test[\u00e9\u00e8]",
]


def test_safe_names_are_portable_short_and_distinct() -> None:
    names = [safe_name(n) for n in NODEIDS]
    assert len(set(names)) == len(names)
    for n in names:
        assert len(n) <= MAX_NAME
        assert all(c.isalnum() or c in "._=+-" for c in n), n
        assert not n.startswith(".") and n.lower() != "con"
    readable, digest = safe_name(NODEIDS[0]).rsplit("-", 1)
    assert readable == "tests-test_mm.py--test_mm_4096x4096x4096-bfloat16" and len(digest) == 8
    assert safe_name("abc-1.0") == "abc-1.0"  # nothing lost: no hash
    assert safe_name(NODEIDS[0]) == safe_name(NODEIDS[0])


def test_layout_and_gitignore(tmp_path: Path) -> None:
    lay = Layout(tmp_path / "art", "20261129T200000Z-abc123")
    d = lay.prepare(NODEIDS[0])
    assert d.is_dir() and d.parent == tmp_path / "art" / "20261129T200000Z-abc123"
    assert (tmp_path / "art" / ".gitignore").read_text().strip().endswith("*")


def _result(key_name: str = "t.py::test_a", median: float = 1e-3) -> Result:
    return Result(Run(BenchId(key_name, None, "cpu"), "cpu", (median,) * 5, 1, median))


class Fake:
    def __init__(self, name: str, outcome: Any = None, why: str | None = None) -> None:
        self.name = name
        self.outcome = outcome
        self.why = why
        self.seen: CaptureContext | None = None

    def available(self) -> str | None:
        return self.why

    def collect(self, ctx: CaptureContext) -> CollectorResult:
        self.seen = ctx
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        if self.outcome == "slow":
            time.sleep(1.2)
        f = ctx.folder(self.name) / "out.txt"
        f.write_text("x")
        ctx.state.setdefault("order", []).append(self.name)
        return CollectorResult(self.name, files=[f], summary={"n": 1})


def test_capture_runs_collectors_in_order_and_writes_a_manifest(tmp_path: Path) -> None:
    r = _result()
    cols = [
        Fake("first"),
        Fake("missing", why="tool-x not found on PATH"),
        Fake("broken", ValueError("bad")),
        Fake("last"),
    ]
    rep = capture(
        None, "t.py::test_a", [r],
        {r.id.key: comparison(REGRESSION, 1.25, baseline_s=0.8e-3)},
        device="cpu", run_id="run1", collectors=cols, artifacts_dir=tmp_path,
    )  # fmt: skip
    assert rep is not None
    st = {c.name: c for c in rep.collectors}
    assert st["first"].status == OK and st["last"].status == OK
    assert st["missing"].status == SKIPPED and st["missing"].reason == "tool-x not found on PATH"
    assert st["broken"].status == FAILED and st["broken"].reason == "ValueError: bad"
    assert cols[0].seen is not None and cols[0].seen.state["order"] == ["first", "last"]
    doc = read_manifest(rep.directory)
    assert doc["schema_version"] == 1 and doc["nodeid"] == "t.py::test_a"
    assert doc["benchmarks"] == [r.id.key]
    assert {c["name"]: c["status"] for c in doc["collectors"]} == {
        "first": "ok", "missing": "skipped", "broken": "failed", "last": "ok"
    }  # fmt: skip
    assert doc["collectors"][0]["files"] == ["first/out.txt"]
    assert doc["diagnosis"][r.id.key]["paragraph"].startswith(
        "test_a is slower than its baseline: +25.0 % time"
    )
    msg = rep.message()
    assert msg.startswith("test_a is slower than its baseline: +25.0 % time")
    assert "missing: skipped: tool-x not found on PATH" in msg and "first/out.txt" in msg
    arts = rep.artifacts()
    assert arts[-1]["collector"] == "manifest" and json.dumps(arts)
    rep.apply([r])
    assert r.artifacts == arts
    assert r.diagnosis is not None and r.diagnosis.paragraph.startswith("test_a")
    assert r.comparison is None  # the capture adds no verdict
    from pytest_gpuperf.reporting.verdicts import artifacts, diagnosis

    assert diagnosis(r)[0].startswith(
        "test_a is slower than its baseline: +25.0 % time"
    )  # what the CI reports show
    assert any(a.note == "skipped: tool-x not found on PATH" for a in artifacts(r))


def test_the_budget_skips_collectors_not_reached(tmp_path: Path) -> None:
    from pytest_gpuperf.artifacts.collectors.base import CaptureSettings

    settings = CaptureSettings(budget_s=1.5, skip=("off",))
    cols = [Fake("slow", "slow"), Fake("late"), Fake("off")]
    rep = capture(
        None, "t.py::test_a", [_result()], device="cpu", run_id="r",
        collectors=cols, artifacts_dir=tmp_path, settings=settings,
    )  # fmt: skip
    assert rep is not None
    st = {c.name: c for c in rep.collectors}
    assert st["slow"].status == OK
    assert st["late"].status == SKIPPED and "no time left in the capture budget" in str(
        st["late"].reason
    )
    assert st["off"].status == SKIPPED and "--gpuperf-capture-skip" in str(st["off"].reason)


def test_policy() -> None:
    assert should_capture("on-failure", True) and not should_capture("on-failure", False)
    assert should_capture("always", False) and not should_capture("never", True)


def test_missing_tools_are_skipped_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert NsysCollector().available() == "nsys not found on PATH"
    assert NcuCollector().available() == "ncu not found on PATH"
    ctx = CaptureContext("t.py::t", tmp_path, "cuda", ["k"], state={"compiled": False})
    assert "not compiled code" in str(TorchTraceCollector().collect(ctx).reason)
    assert "no hotspot kernels" in str(NcuCollector().collect(ctx).reason)
    cpu = CaptureContext("t.py::t", tmp_path, "cpu", ["k"])
    assert NsysCollector().collect(cpu).status == SKIPPED


def test_cuda_tools_share_the_path_and_device_checks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """nsys and ncu: available once on PATH, skipped off CUDA with the same reason."""
    monkeypatch.setenv("PATH", str(tmp_path))
    cpu = CaptureContext("t.py::t", tmp_path, "cpu", ["k"])
    for collector in (NsysCollector(), NcuCollector()):
        _fake_tool(tmp_path, collector.name, "exit 0")
        assert collector.available() is None
        res = collector.collect(cpu)
        assert res.status == SKIPPED and res.name == collector.name
        assert res.reason == "the benchmark does not run on a CUDA GPU"


def _fake_tool(folder: Path, name: str, body: str) -> None:
    p = folder / name
    p.write_text("#!/bin/sh\n" + body + "\n")
    p.chmod(p.stat().st_mode | stat.S_IEXEC)


def test_a_hung_tool_is_killed_at_its_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # a fake nsys that starts the program and then hangs, like a profiler stuck on exit
    _fake_tool(bin_dir, "nsys", 'sleep 60 &\necho started $$ > "$NSYS_PIDFILE"\nsleep 60')
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("NSYS_PIDFILE", str(tmp_path / "pid"))
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    from tests.child_runner import standalone_runner

    runner = standalone_runner("test_x.py::test_x", rootdir=tmp_path, device="cpu")
    ctx = CaptureContext(
        "test_x.py::test_x", tmp_path / "out", "cuda", ["k"], timeout_s=2.0,
        deadline=time.monotonic() + 60, run_child=runner,
    )  # fmt: skip
    start = time.monotonic()
    res = NsysCollector().collect(ctx)
    assert time.monotonic() - start < 15
    assert res.status == TIMEOUT and "killed after" in str(res.reason)
    assert (tmp_path / "out" / "nsys" / "profile.log").exists()


def test_run_process_kills_the_whole_process_group(tmp_path: Path) -> None:
    marker = tmp_path / "grandchild.pid"
    code = (
        "import subprocess, sys, time;"
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
        f"open({str(marker)!r}, 'w').write(str(p.pid));"
        "time.sleep(60)"
    )
    run = run_process([sys.executable, "-c", code], timeout_s=1.5)
    assert run.timed_out and run.returncode != 0 and "killed after" in run.output
    pid = int(marker.read_text())
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        # a zombie until reaped by init: check its state
        if (
            Path(f"/proc/{pid}/stat").exists()
            and Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
        ):
            break
        time.sleep(0.1)
    else:
        pytest.fail("the grandchild survived")


def test_run_process_reports_a_missing_program() -> None:
    run = run_process(["/nonexistent/tool", "x"], timeout_s=5)
    assert not run.ok and run.error and "could not start" in run.describe_failure("tool")


def test_capture_does_nothing_in_a_child(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        from pytest_gpuperf.shell.capture import capture
        from pytest_gpuperf.shell.session import SESSION_KEY

        def pytest_sessionfinish(session):
            run = session.config.stash[SESSION_KEY].run
            out = capture(run, "x", [], device="cpu", run_id="r", collectors=[])
            (session.config.rootpath / "out.txt").write_text(repr(out))
        """
    )
    pytester.makepyfile("def test_a():\n    pass\n")
    pytester.runpytest("--gpuperf-child")
    assert (pytester.path / "out.txt").read_text() == "None"


def test_baseline_inventory_from_runs_extras_and_inventories() -> None:
    inv = {
        "schema": 1,
        "kernels": [{"name": "k", "kind": "kernel", "launches": 1.0, "us_per_call": 10.0}],
    }

    class Run:
        def __init__(self) -> None:
            self.extra = {"kernels": inv}

    assert baseline_inventory(None) is None
    assert baseline_inventory([Run()]) == inv
    assert baseline_inventory([{"extra": {"kernels": inv}}]) == inv
    assert baseline_inventory(inv) == inv
    assert baseline_inventory([{"extra": None}]) is None


def test_the_gpu_lock_is_held_for_the_whole_capture(tmp_path: Path) -> None:
    import contextlib

    events: list[str] = []

    @contextlib.contextmanager
    def lock():  # type: ignore[no-untyped-def]
        events.append("locked")
        yield
        events.append("unlocked")

    envs: list[dict[str, str]] = []

    def runner(*, env=None, **kw):  # type: ignore[no-untyped-def]
        envs.append(dict(env or {}))
        events.append("child")
        raise RuntimeError("no child here")

    class UsesChild(Fake):
        def collect(self, ctx: CaptureContext) -> CollectorResult:
            assert ctx.run_child is not None
            ctx.run_child(env={"A": "1"}, timeout_s=1)
            return CollectorResult(self.name)

    rep = capture(
        None, "t.py::test_a", [_result()], device="cpu", run_id="r",
        collectors=[UsesChild("c")], run_child=runner, artifacts_dir=tmp_path, lock=lock,
    )  # fmt: skip
    assert rep is not None and events == ["locked", "child", "unlocked"]
    assert envs == [{"A": "1", "GPUPERF_NO_LOCK": "1"}]
    assert rep.collectors[0].status == FAILED and "no child here" in str(rep.collectors[0].reason)

    def busy():  # type: ignore[no-untyped-def]
        raise TimeoutError("gpu-GPU-1 stayed busy for 120 s")

    rep = capture(
        None, "t.py::test_a", [_result()], device="cpu", run_id="r",
        collectors=[Fake("a"), Fake("b")], artifacts_dir=tmp_path, lock=busy,
    )  # fmt: skip
    assert rep is not None
    assert [c.status for c in rep.collectors] == [SKIPPED, SKIPPED]
    assert "the GPU stayed busy" in str(rep.collectors[0].reason)


def test_progress_names_the_tool_that_runs(tmp_path: Path) -> None:
    from pytest_gpuperf.shell.progress import Progress

    lines: list[str] = []
    clock = iter(range(0, 1000, 5))
    progress = Progress(
        lines.append, delay_s=0.0, every_s=1.0, clock=lambda: float(next(clock)), ticker=False
    )

    class Ticking(Fake):
        def collect(self, ctx: CaptureContext) -> CollectorResult:
            progress.tick()
            return super().collect(ctx)

    capture(
        None, "t.py::test_a", [_result()], device="cpu", run_id="r",
        collectors=[Ticking("one"), Ticking("two")], artifacts_dir=tmp_path, progress=progress,
    )  # fmt: skip
    text = "\n".join(lines)
    assert "capturing evidence for test_a (one, tool 1 of 2)" in text
    assert "(two, tool 2 of 2)" in text


def test_a_folder_that_cannot_be_made_is_a_reason_not_an_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    rep = capture(
        None, "t.py::test_a", [_result()], device="cpu", run_id="r",
        collectors=[Fake("a")], artifacts_dir=blocker / "art",
    )  # fmt: skip
    assert rep is not None
    (c,) = rep.collectors
    assert c.status == FAILED and "the capture failed" in str(c.reason)
    assert rep.diagnoses == {} and "capture: failed" in rep.message()


def test_work_left_running_by_a_collector_ends_before_the_diagnosis(tmp_path: Path) -> None:
    import threading

    order: list[str] = []
    started, next_ran = threading.Event(), threading.Event()

    class Leaves(Fake):
        def collect(self, ctx: CaptureContext) -> CollectorResult:
            res = super().collect(ctx)

            def summarize() -> None:
                started.set()
                next_ran.wait(10)  # it ends only once the next collector has run
                order.append("summary")
                res.summary["read"] = True

            ctx.later(summarize)
            return res

    class Next(Fake):
        def collect(self, ctx: CaptureContext) -> CollectorResult:
            started.wait(10)
            order.append("next")  # while the summary was still being read
            next_ran.set()
            return super().collect(ctx)

    rep = capture(
        None, "t.py::test_a", [_result()], device="cpu", run_id="r",
        collectors=[Leaves("first"), Next("second")], artifacts_dir=tmp_path,
    )  # fmt: skip
    assert rep is not None and order == ["next", "summary"]
    assert rep.collectors[0].summary["read"] is True


def test_the_face_types_what_it_loads() -> None:
    # the names a type checker sees (TYPE_CHECKING imports) are the names loaded on first use
    import ast

    import pytest_gpuperf.artifacts as face

    tree = ast.parse(Path(face.__file__).read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If))
    typed = {a.name for n in block.body if isinstance(n, ast.ImportFrom) for a in n.names}
    assert typed == set(face._HOMES) == set(face.__all__)
    assert all(getattr(face, name) is not None for name in face.__all__)
