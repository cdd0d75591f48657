"""Compiler regressions on the GPU: eager fallback and recompiles to the limit (the H200 machine).

The same two plants as tests/plugin/test_compile_diagnosis.py, on CUDA with
Inductor's Triton kernels: a data-dependent ``.item()`` inside a loop of a
compiled function (dynamo skips the frame, the Triton kernels vanish), and a
Python float that changes on every call under ``dynamic=False`` (recompiles
to the limit, then eager). The baseline is measured with its kernel inventory,
the planted run without; the whole capture must take TORCH_TRACE because the
*baseline* ran compiled code, and open with the compiler's cause.

Opt-in like the other planted captures::

    GPUPERF_CAPTURE_TESTS=1 python3 -m pytest tests/gpu/test_compile_capture_gpu.py -v -s
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_gpuperf.artifacts.analysis import diagnose as dg
from tests.conftest import requires_cuda
from tests.gpu.planted import capture_planted, measure

pytestmark = [
    requires_cuda,
    pytest.mark.skipif(
        os.environ.get("GPUPERF_CAPTURE_TESTS") != "1",
        reason="long (1-2 min per plant): set GPUPERF_CAPTURE_TESTS=1 to run the planted captures",
    ),
]

BENCH = """
import os

import torch

PLANT = os.environ.get("GPUPERF_PLANT", "")


def chain(x):
    for _ in range(8):
        x = torch.sin(x) * 2 + 1
        if "loop_break" in PLANT and x.sum().item() > 1e9:
            x = x + 1
    return x


def scaled(x, scale):
    return torch.nn.functional.gelu(x) * scale + 1


compiled_chain = torch.compile(chain)
compiled_scaled = torch.compile(scaled, dynamic=False)


def test_loop(gpu_bench):
    x = torch.randn(1 << 16, device="cuda")
    gpu_bench(compiled_chain, x)


def test_scale(gpu_bench):
    x = torch.randn(1 << 16, device="cuda")
    state = {"scale": 1.0}

    def call():
        if "drift" in PLANT:
            state["scale"] += 0.001
        return compiled_scaled(x, state["scale"])

    gpu_bench(call)
"""

PLANTS = [
    ("loop_break", "test_loop", dg.COMPILED_CODE_GONE, "the compiled code is gone"),
    ("drift", "test_scale", dg.RECOMPILE, "torch.compile recompiled `scaled`"),
]


@pytest.mark.parametrize(("plant", "test", "cause", "opening"), PLANTS, ids=[p[0] for p in PLANTS])
def test_a_compiler_regression_is_named_first(
    plant: str, test: str, cause: str, opening: str, tmp_path: Path
) -> None:
    (tmp_path / "test_compiled_gpu.py").write_text(BENCH)
    reports = Path(os.environ.get("GPUPERF_REPORTS") or tmp_path)
    nodeid = f"test_compiled_gpu.py::{test}"
    base = measure(tmp_path, nodeid, "", "always", tmp_path / "base.json")
    assert base.run.extra["kernels"]["compiled"], base.run.extra
    cur = measure(tmp_path, nodeid, plant, "never", tmp_path / "cur.json")
    key = cur.id.key
    rep = capture_planted(
        tmp_path, nodeid, plant, base, cur,
        run_id=f"compile-{plant}", reports=reports, name=f"compile_{plant}",
    )  # fmt: skip
    text = rep.message()
    status = {c.name: c for c in rep.collectors}
    assert status["torch_trace"].ok, status["torch_trace"].reason
    assert rep.wall_s < 150, f"capture took {rep.wall_s:.0f} s"
    d = rep.diagnoses[key]
    assert d.cause == cause, text
    assert dg.lead(d.paragraph).startswith(opening), text
