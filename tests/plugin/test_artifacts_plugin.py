"""Capture end to end on the CPU: the profiler child, inventories in baselines, hooks.

nsys, ncu and tlparse are absent here (skipped with the reason); the GPU
paths are exercised by tests/gpu/test_capture_gpu.py on the H200 machine.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gpuperf.baseline.store import BaselineStore
from pytest_gpuperf.reporting.json_report import load_results

BENCH = """
import os
import torch

PLANT = os.environ.get("GPUPERF_PLANT", "")


def test_chain(gpu_bench):
    x = torch.randn(20_000)

    def chain(x):
        y = x * 2 + 1
        if "sort" in PLANT:
            y = torch.sort(y).values  # planted: an extra operator
        return y

    gpu_bench(chain, x)
"""


def _results(path: Path) -> list:
    return load_results(json.loads(path.read_text()))


def test_inventory_goes_with_the_result_into_a_baseline(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    pytester.makepyfile(test_bench=BENCH)
    result = pytester.runpytest_subprocess(
        *fast_args, "--gpuperf-inventory=always", "--gpuperf-json=o.json"
    )
    result.assert_outcomes(passed=1)
    (r,) = _results(pytester.path / "o.json")
    inv = r.run.extra["kernels"]
    assert inv["schema"] == 1 and inv["device"] == "cpu" and inv["calls"] >= 2
    assert {"aten::mul", "aten::add"} <= {k["name"] for k in inv["kernels"]}
    store = BaselineStore(pytester.path / "bl")
    store.save("main", [r.run])
    (run,) = store.load("main").benchmarks[r.id.key].runs
    assert run.extra is not None and run.extra["kernels"]["kernels"] == inv["kernels"]


def test_no_inventory_unless_asked(pytester: pytest.Pytester, fast_args: list[str]) -> None:
    pytester.makepyfile(test_bench=BENCH)
    pytester.runpytest(*fast_args, "--gpuperf-json=o.json").assert_outcomes(passed=1)
    (r,) = _results(pytester.path / "o.json")
    assert r.run.extra == {}


CONFTEST = """
import json
import os

from pytest_gpuperf.artifacts import CollectorResult
from pytest_gpuperf.shell.capture import capture
from pytest_gpuperf.shell.session import SESSION_KEY
from pytest_gpuperf.outcome import Comparison, FigureVerdict


class Env:
    name = "env"

    def available(self):
        return None

    def collect(self, ctx):
        out = ctx.folder(self.name) / "env.json"
        out.write_text(json.dumps({"plant": os.environ.get("GPUPERF_PLANT")}))
        return CollectorResult(self.name, files=[out], summary={"hotspots": len(ctx.state.get("hotspots", []))})


def pytest_gpuperf_collectors(config):
    return [Env()]


def pytest_gpuperf_diagnose(config, result, analysis):
    return [f"hook saw {analysis.key} with a profile: {analysis.analysis is not None}"]


def pytest_sessionfinish(session):
    sess = session.config.stash[SESSION_KEY]
    if not sess.results or os.environ.get("GPUPERF_CHILD") == "1":
        return
    base = json.loads((session.config.rootpath / "base.json").read_text())["results"][0]
    (r,) = sess.results
    b, c = base["summary"]["median"], r.run.median
    lead = FigureVerdict(
        figure="time", klass="cpu", kind="regression", final=True, k=1, r=1, baseline_s=b,
        current_s=c, ratio=c / b, ratio_low=c / b, ratio_high=c / b, slower=c / b - 1,
        cutoff=0.03, cutoff_reason="threshold", decisive=0.03, one_run=0.03, noise=0.01,
        noise_prior=0.01, noise_own=None, se=0.01, z=1.0, resolution=0.05, runs_needed=1,
    )
    comparison = Comparison(kind="regression", final=True, look=1, lead=lead, figures=(lead,))
    report = capture(
        sess.run, r.id.nodeid, [r], {r.id.key: comparison},
        device="cpu", run_id=sess.run_id, baselines={r.id.key: [{"extra": base["extra"]}]},
    )
    (session.config.rootpath / "report.txt").write_text(report.message())
    (session.config.rootpath / "report.json").write_text(json.dumps(report.to_dict()))
"""


def test_capture_from_a_session_reruns_the_test_and_diagnoses(
    pytester: pytest.Pytester, fast_args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_bench=BENCH)
    pytester.runpytest_subprocess(
        *fast_args, "--gpuperf-inventory=always", "--gpuperf-json=base.json"
    ).assert_outcomes(passed=1)
    pytester.makeconftest(CONFTEST)
    monkeypatch.setenv("GPUPERF_PLANT", "sort")
    monkeypatch.setenv("PATH", str(Path(__import__("sys").executable).parent))  # no nsys, ncu
    result = pytester.runpytest_subprocess(*fast_args, "--gpuperf-artifacts-dir=art")
    result.assert_outcomes(passed=1)
    text = (pytester.path / "report.txt").read_text()
    doc = json.loads((pytester.path / "report.json").read_text())
    status = {c["name"]: c for c in doc["collectors"]}
    assert status["torch_profiler"]["status"] == "ok", status["torch_profiler"]
    assert status["nsys"]["reason"] == "nsys not found on PATH"
    assert status["ncu"]["reason"] == "ncu not found on PATH"
    assert status["torch_trace"]["status"] == "skipped"
    assert status["env"]["status"] == "ok"  # a user's collector, through the hook
    (diag,) = doc["diagnoses"].values()
    assert "appeared: aten::sort" in "\n".join(diag["details"])
    assert "aten::sort" in diag["paragraph"]
    assert diag["paragraph"].endswith("with a profile: True.")
    assert text.startswith("test_chain is ")
    d = Path(doc["directory"])
    assert d.parent.parent == pytester.path / "art"
    manifest = json.loads((d / "manifest.json").read_text())
    files = [f for c in manifest["collectors"] for f in c["files"]]
    assert any(f.endswith(".trace.json") for f in files)
    assert any(f.endswith(".kernels.txt") for f in files)
    assert json.loads((d / "env" / "env.json").read_text()) == {"plant": "sort"}


XDIST_CONFTEST = """
import json

import pytest

from pytest_gpuperf.shell.capture import capture
from pytest_gpuperf.shell.session import RESULTS_KEY, SESSION_KEY


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    # where the plugin's verdict step runs: in the process that ran the test
    yield
    sess = item.config.stash[SESSION_KEY]
    results = item.stash.get(RESULTS_KEY, [])
    report = capture(sess.run, item.nodeid, results, device="cpu", run_id=sess.run_id)
    if report is not None:
        name = item.name + ".json"
        (item.config.rootpath / name).write_text(json.dumps(report.to_dict()))
"""


def test_captures_under_xdist_share_the_run_folder(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    pytester.makepyfile(
        test_two="""
        import torch

        def test_a(gpu_bench):
            gpu_bench(torch.mul, torch.randn(5000), 2.0)

        def test_b(gpu_bench):
            gpu_bench(torch.add, torch.randn(5000), 2.0)
        """
    )
    pytester.makeconftest(XDIST_CONFTEST)
    result = pytester.runpytest_subprocess(*fast_args, "-n", "2", "--gpuperf-capture-skip=nsys,ncu")
    result.assert_outcomes(passed=2)
    docs = [json.loads((pytester.path / f"{n}.json").read_text()) for n in ("test_a", "test_b")]
    dirs = {Path(d["directory"]).parent for d in docs}
    assert len(dirs) == 1  # one run id for the controller and both workers
    for d in docs:
        status = {c["name"]: c["status"] for c in d["collectors"]}
        assert status["torch_profiler"] == "ok", d["collectors"]
        assert status["nsys"] == "skipped"
        assert (Path(d["directory"]) / "manifest.json").exists()
