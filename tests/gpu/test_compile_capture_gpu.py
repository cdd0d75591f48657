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

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_gpuperf.artifacts.analysis import diagnose as dg
from pytest_gpuperf.model import Result
from pytest_gpuperf.reporting.json_report import load_results
from pytest_gpuperf.shell import capture
from pytest_gpuperf.shell.capture import standalone_runner
from pytest_gpuperf.verdict import REGRESSION, Comparison
from tests.conftest import requires_cuda

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


def _measure(root: Path, nodeid: str, plant: str, inventory: str, out: Path) -> Result:
    env = dict(os.environ, GPUPERF_PLANT=plant)
    env.pop("PYTEST_ADDOPTS", None)
    cmd = [sys.executable, "-m", "pytest", nodeid, "-q", "-p", "no:cacheprovider",
           "--gpuperf-device=cuda", f"--gpuperf-json={out}", f"--gpuperf-inventory={inventory}"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (r,) = load_results(json.loads(out.read_text()))
    return r


@pytest.mark.parametrize(("plant", "test", "cause", "opening"), PLANTS, ids=[p[0] for p in PLANTS])
def test_a_compiler_regression_is_named_first(
    plant: str, test: str, cause: str, opening: str, tmp_path: Path
) -> None:
    (tmp_path / "test_compiled_gpu.py").write_text(BENCH)
    reports = Path(os.environ.get("GPUPERF_REPORTS") or tmp_path)
    nodeid = f"test_compiled_gpu.py::{test}"
    base = _measure(tmp_path, nodeid, "", "always", tmp_path / "base.json")
    assert base.extra["kernels"]["compiled"], base.extra
    cur = _measure(tmp_path, nodeid, plant, "never", tmp_path / "cur.json")
    key = cur.id.key
    comparison = Comparison(
        kind=REGRESSION, final=True, look=1, looks=1, baseline_s=base.median, current_s=cur.median
    )
    runner = standalone_runner(
        nodeid, rootdir=tmp_path, device="cuda", env={"GPUPERF_PLANT": plant}
    )
    rep = capture(
        None, None, nodeid, [cur], {key: comparison}, device="cuda", run_id=f"compile-{plant}",
        baselines={key: [{"extra": base.extra}]}, run_child=runner,
        artifacts_dir=reports / "artifacts",
    )  # fmt: skip
    assert rep is not None
    text = rep.message()
    print(f"\n===== {plant} =====\n{text}")
    reports.mkdir(parents=True, exist_ok=True)
    (reports / f"compile_{plant}.txt").write_text(text)
    status = {c.name: c for c in rep.collectors}
    assert status["torch_trace"].ok, status["torch_trace"].reason
    assert rep.wall_s < 150, f"capture took {rep.wall_s:.0f} s"
    d = rep.diagnoses[key]
    assert d.cause == cause, text
    assert d.paragraph.split("Likely cause: ", 1)[1].startswith(opening), text
