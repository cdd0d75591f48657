"""A capture in two passes (first diagnosis now, the rest later) and the session's ledger."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf.artifacts import OK, CaptureContext, CollectorResult
from pytest_gpuperf.artifacts.analysis.layout import read_manifest
from pytest_gpuperf.artifacts.collectors.base import DEFERRED, SKIPPED
from pytest_gpuperf.model import BenchId, Result, Run
from pytest_gpuperf.shell.capture import NO_TIME, PassPlan, capture, could_run
from pytest_gpuperf.shell.capture_budget import EXPECTED_S, Ledger, _tests
from pytest_gpuperf.verdict import REGRESSION
from tests.unit.reporting_data import comparison


def _result(nodeid: str = "t.py::test_a", ratio: float = 2.0) -> Result:
    r = Result(Run(BenchId(nodeid, None, "cpu"), "cpu", (1e-3,) * 5, 1, 1e-3))
    r.comparison = comparison(REGRESSION, ratio, baseline_s=1e-3 / ratio)
    return r


class Tool:
    """A collector that notes what it saw of the earlier collectors' findings."""

    def __init__(self, name: str, seconds: float = 0.0, why: str | None = None) -> None:
        self.name = name
        self.seconds = seconds
        self.why = why
        self.saw: dict[str, Any] | None = None

    def available(self) -> str | None:
        return self.why

    def collect(self, ctx: CaptureContext) -> CollectorResult:
        self.saw = dict(ctx.state)
        time.sleep(self.seconds)
        ctx.state[f"{self.name}_ran"] = True
        out = ctx.folder(self.name) / "out.txt"
        out.write_text(self.name)
        return CollectorResult(self.name, files=[out], wall_s=self.seconds)


def test_a_pass_defers_tools_and_a_later_pass_resumes_from_the_folder(tmp_path: Path) -> None:
    r = _result()
    verdict_at = time.time() - 1.0
    first = capture(
        None, r.id.nodeid, [r], device="cpu", run_id="run",
        collectors=[Tool("torch_profiler"), Tool("nsys_like"), Tool("gone", why="not here")],
        artifacts_dir=tmp_path,
        plan=PassPlan(defer=frozenset({"nsys_like", "gone"}), defer_reason="later", verdict_at=verdict_at),
    )  # fmt: skip
    assert first is not None
    st = {c.name: c for c in first.collectors}
    assert st["torch_profiler"].status == OK
    assert st["nsys_like"].status == DEFERRED and st["nsys_like"].reason == "later"
    assert st["gone"].status == SKIPPED  # a tool that cannot run here is not deferred
    assert "nsys_like: deferred: later" in first.details()
    timing = first.timing
    assert timing["verdict_at"] == verdict_at and timing["first_diagnosis_s"] >= 1.0
    (entry,) = [a for a in first.artifacts() if a["collector"] == "nsys_like"]
    assert entry["verdict_at"] == verdict_at  # what a controller needs to time it later
    first.apply([r])

    later_tool = Tool("nsys_like")
    second = capture(
        None, r.id.nodeid, [r], device="cpu", run_id="run", collectors=[later_tool],
        artifacts_dir=tmp_path, plan=PassPlan(resume=True, verdict_at=verdict_at),
    )  # fmt: skip
    assert second is not None
    assert [c.name for c in second.collectors] == ["torch_profiler", "nsys_like", "gone"]
    assert {c.name: c.status for c in second.collectors}["nsys_like"] == OK
    assert second.timing["first_diagnosis_s"] == timing["first_diagnosis_s"]  # kept
    assert len(second.timing["passes"]) == 2
    doc = read_manifest(second.directory)
    assert {c["name"]: c["status"] for c in doc["collectors"]} == {
        "torch_profiler": "ok", "nsys_like": "ok", "gone": "skipped",
    }  # fmt: skip
    assert set(doc["timing"]["passes"][1]["tools"]) == {"nsys_like"}  # what that pass ran
    second.apply([r])
    statuses = [a["status"] for a in r.artifacts if a["collector"] == "nsys_like"]
    assert statuses == ["ok"]  # the later pass's entry replaced the deferred one


def test_a_later_pass_keeps_within_the_test_budget_spent_before(tmp_path: Path) -> None:
    from pytest_gpuperf.artifacts.collectors.base import CaptureSettings

    r = _result()
    settings = CaptureSettings(budget_s=1.6)
    capture(
        None, r.id.nodeid, [r], device="cpu", run_id="run",
        collectors=[Tool("torch_profiler", 1.0), Tool("x")], artifacts_dir=tmp_path,
        settings=settings, plan=PassPlan(defer=frozenset({"x"})),
    )  # fmt: skip
    rep = capture(
        None, r.id.nodeid, [r], device="cpu", run_id="run", collectors=[Tool("x")],
        artifacts_dir=tmp_path, settings=settings, plan=PassPlan(resume=True),
    )  # fmt: skip
    assert rep is not None
    x = next(c for c in rep.collectors if c.name == "x")
    assert x.status == SKIPPED and str(x.reason).startswith(NO_TIME)


def test_the_session_deadline_ends_a_pass(tmp_path: Path) -> None:
    r = _result()
    rep = capture(
        None, r.id.nodeid, [r], device="cpu", run_id="run",
        collectors=[Tool("a", 2.2), Tool("b")], artifacts_dir=tmp_path,
        plan=PassPlan(deadline=time.monotonic() + 3.0),
    )  # fmt: skip
    assert rep is not None
    assert [c.status for c in rep.collectors] == [OK, SKIPPED]


def test_could_run() -> None:
    from pytest_gpuperf.artifacts.collectors.nsys import NsysCollector

    assert could_run(Tool("a"), "cpu") and not could_run(Tool("a"), "cpu", skip={"a"})
    assert not could_run(Tool("a", why="no tool"), "cuda")
    assert not could_run(NsysCollector(), "cpu")  # a CUDA tool, for a CPU benchmark


def test_the_ledger_is_shared_through_its_file(tmp_path: Path) -> None:
    path = tmp_path / "run" / "capture-ledger.jsonl"
    worker, controller = Ledger(path), Ledger(path)
    assert controller.spent() == 0.0
    assert controller.expected(["torch_profiler", "nsys", "mine"]) == pytest.approx(
        EXPECTED_S["torch_profiler"] + EXPECTED_S["nsys"] + 5.0
    )
    worker.add("t.py::a", 1, 6.0, {"torch_profiler": 5.5})
    worker.add("t.py::b", 1, 4.0, {"torch_profiler": 3.5})
    controller.add("t.py::a", 2, 20.0, {"nsys": 11.0, "ncu": 8.0})
    assert controller.spent() == pytest.approx(30.0) and worker.spent(phase=1) == 10.0
    assert controller.expected(["torch_profiler"]) == pytest.approx(4.5)  # this session's mean
    assert controller.expected(["nsys", "ncu"]) == pytest.approx(19.0)
    path.write_text(path.read_text() + "not json\n")
    assert len(controller.entries()) == 3


def test_a_ledger_that_cannot_be_written_keeps_this_process_count(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    ledger = Ledger(blocker / "ledger.jsonl")
    ledger.add("t.py::a", 1, 2.5, {})
    assert ledger.path is None and ledger.spent() == 2.5


def test_tests_are_read_from_their_results_artifacts() -> None:
    big, small, plain = _result("t.py::big", 9.0), _result("t.py::small", 1.5), _result("t.py::p")
    big.artifacts = [
        {"collector": "torch_profiler", "status": "ok", "wall_s": 3.0},
        {"collector": "nsys", "status": "deferred", "reason": "later", "verdict_at": 100.0},
        {"collector": "ncu", "status": "skipped", "reason": NO_TIME + " (...)"},
        {"collector": "manifest", "status": "ok", "timing": {"first_diagnosis_s": 3.5}},
    ]
    small.artifacts = [{"collector": "torch_profiler", "status": "deferred", "verdict_at": 5.0}]
    tests = _tests([big, small, plain])
    assert set(tests) == {"t.py::big", "t.py::small"}  # no capture entries: not captured
    assert tests["t.py::big"].waiting() == ["nsys", "ncu"]
    assert tests["t.py::big"].first_diagnosis_s == 3.5 and tests["t.py::big"].verdict_at == 100.0
    assert tests["t.py::big"].slowdown == 9.0 and tests["t.py::big"].change == "9x time"
    assert tests["t.py::small"].waiting() == ["torch_profiler"]
    assert json.dumps([t.tools for t in tests.values()])
