"""Capture and diagnosis of the planted regressions in examples/ (needs CUDA; the H200 machine).

For each plant: measure the example without it, with a kernel inventory
(what ``--gpuperf-save`` keeps), measure it planted, then run the whole
capture (profiler child, TORCH_TRACE for compiled code, nsys and ncu where on
PATH) and check that the diagnosis names the planted cause. Each report is
printed (``-s``) and, with ``GPUPERF_REPORTS=<dir>``, written there as
``<plant>.txt`` with the capture's folder beside it.

The planted runs take one to two minutes each, so they run only with
``GPUPERF_CAPTURE_TESTS=1``::

    GPUPERF_CAPTURE_TESTS=1 GPUPERF_REPORTS=/tmp/reports \
        python3 -m pytest tests/gpu/test_capture_gpu.py -v -s -k "sync or h2d"
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from pytest_gpuperf.artifacts.analysis import diagnose as dg
from tests.conftest import requires_cuda
from tests.gpu.planted import capture_planted, measure

pytestmark = requires_cuda
ROOT = Path(__file__).resolve().parents[2]

PLANTS = [
    ("sync", "examples/test_planted.py::test_elementwise_chain", dg.HOST_SYNC),
    ("h2d", "examples/test_planted.py::test_scale_by_table", dg.H2D_COPY),
    ("variant", "examples/test_planted.py::test_matmul_bf16", dg.GEMM_PRECISION),
    ("graph_break", "examples/test_compiled_model.py::test_compiled_mlp", dg.GRAPH_BREAK),
]


@pytest.mark.skipif(
    os.environ.get("GPUPERF_CAPTURE_TESTS") != "1",
    reason="long (1-2 min per plant): set GPUPERF_CAPTURE_TESTS=1 to run the planted captures",
)
@pytest.mark.parametrize(("plant", "nodeid", "cause"), PLANTS, ids=[p[0] for p in PLANTS])
def test_a_planted_regression_is_diagnosed(
    plant: str, nodeid: str, cause: str, tmp_path: Path
) -> None:
    reports = Path(os.environ.get("GPUPERF_REPORTS") or tmp_path)
    base = measure(ROOT, nodeid, "", "always", tmp_path / "base.json")
    assert "kernels" in base.run.extra, base.run.extra
    cur = measure(ROOT, nodeid, plant, "never", tmp_path / "cur.json")
    key = cur.id.key
    assert cur.run.median > 1.03 * base.run.median, (base.run.median, cur.run.median)
    rep = capture_planted(
        ROOT, nodeid, plant, base, cur, run_id=f"planted-{plant}", reports=reports, name=plant
    )
    text = rep.message()
    (reports / f"{plant}.json").write_text(json.dumps(rep.to_dict(), indent=1, default=str))
    status = {c.name: c for c in rep.collectors}
    assert status["torch_profiler"].ok, status["torch_profiler"].reason
    if shutil.which("nsys"):
        assert status["nsys"].ok, status["nsys"].reason
    if shutil.which("ncu"):
        assert status["ncu"].ok, status["ncu"].reason
    if plant == "graph_break":
        assert status["torch_trace"].ok, status["torch_trace"].reason
    assert rep.wall_s < 150, f"capture took {rep.wall_s:.0f} s"
    assert rep.diagnoses[key].cause == cause, text


def test_an_inventory_pass_leaves_later_measurements_alone() -> None:
    """Kernel launches after a profiler pass cost what they cost before (CUPTI detached)."""
    import statistics

    import torch

    from pytest_gpuperf.artifacts.collectors.child import InventoryHook
    from pytest_gpuperf.measure import engine
    from pytest_gpuperf.measure.backend import Invocation
    from pytest_gpuperf.measure.cuda import CudaEventsTimer
    from pytest_gpuperf.measure.policy import MeasurePolicy
    from pytest_gpuperf.model import BenchId

    x = torch.zeros(2**16, device="cuda")

    def launch_bound() -> None:
        for _ in range(20):
            x.add_(1)

    def median() -> float:
        timer = CudaEventsTimer(Invocation(launch_bound), l2_flush=False)
        timer.first_call()
        timer.prepare()
        raw = engine.run(timer, MeasurePolicy())
        timer.close()
        return statistics.median(raw.e2e_rounds)  # what CUPTI would slow: the host's launches

    before = min(median() for _ in range(3))
    extra = InventoryHook("cuda")(BenchId("t.py::t", None, "cuda-events"), launch_bound, before)
    assert extra and "kernels" in extra, extra
    after = min(median() for _ in range(3))
    assert after < 1.08 * before, (before, after)
