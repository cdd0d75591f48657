"""Telemetry and NVTX on a real GPU (skipped without CUDA; run on the H200 machine).

Run with ``-s`` to see what NVML reported (clocks, power, the throttle reasons seen).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import pytest

from pytest_gpuperf.measure import engine
from pytest_gpuperf.measure.backend import Invocation
from pytest_gpuperf.measure.cuda import CudaEventsTimer
from pytest_gpuperf.measure.names import MODE_EVENTS
from pytest_gpuperf.measure.nvtx_ranges import NvtxRanges
from pytest_gpuperf.measure.policy import MeasurePolicy
from pytest_gpuperf.model import BenchId
from pytest_gpuperf.telemetry import nvml
from pytest_gpuperf.telemetry.header import collect_gpu_state, render_header
from pytest_gpuperf.telemetry.probe import NvmlTelemetry
from tests.conftest import requires_cuda, requires_nsys

pytestmark = requires_cuda


def _torch_uuid() -> str:
    import torch

    return str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)


def _sustained_matmul(seconds: float) -> None:
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(20):
            torch.mm(a, a)
        torch.cuda.synchronize()


def test_header_reads_the_gpu() -> None:
    state = collect_gpu_state()
    print("\n".join(render_header(state, interval_ms=10)))
    assert state["available"], state.get("reason")
    assert state["driver"] and state["cuda_driver"] and state["torch"]
    g = state["gpus"][0]
    assert g["name"] and "NVIDIA" in g["name"]
    assert 100 < g["sm_clock_max_mhz"] < 5000 and g["mem_clock_max_mhz"] > 500
    assert g["power_limit_w"] and g["power_limit_w"] > 50
    assert g["persistence"] in (True, False) and g["mig"] in (True, False)


def test_the_nvml_device_is_the_one_torch_uses() -> None:
    import torch

    tel = NvmlTelemetry()
    assert tel._open() is None, tel._open()
    dev = tel._device()
    tel.close()
    assert dev.selected_by == "uuid"
    assert nvml.normalize_uuid(dev.uuid or "") == nvml.normalize_uuid(_torch_uuid())
    assert dev.name == torch.cuda.get_device_name()


def test_sustained_matmul_telemetry_shows_clocks_power_and_reasons() -> None:
    """A 4096^3 bf16 matmul for a few seconds: on the H200 the power cap pulls the clock down."""
    import torch

    _sustained_matmul(1.0)  # leave idle clocks behind
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    timer = CudaEventsTimer(Invocation(torch.mm, (a, a)), l2_flush=True)
    timer.first_call()
    timer.prepare()
    policy = MeasurePolicy(warmup_ms=2000, min_warmup_ms=1500, round_ms=10, rounds=100)
    tel = NvmlTelemetry(interval_ms=10, raw=True)
    with tel.probe(BenchId("gpu::sustained", None, MODE_EVENTS), time.perf_counter) as finish:
        raw = engine.run(timer, policy)
        out = finish(raw)
    timer.close()
    tel.close()
    rows = out.pop("raw", {}).get("rows", [])
    print(json.dumps(out, indent=1))
    if rows:
        sm = [r[1] for r in rows]
        print(f"SM clock over the run: first {sm[0]}, min {min(sm)}, last {sm[-1]} MHz")
    assert out["available"], out.get("reason")
    assert out["device"]["selected_by"] == "uuid"
    smc = out["sm_clock_mhz"]
    assert 300 < smc["min"] <= smc["median"] <= smc["max"] <= out["sm_clock_max_mhz"]
    assert out["mem_clock_mhz"]["median"] > 500
    assert out["power_w"]["median"] > 100  # a large matmul draws far above idle
    assert 10 < out["temperature_c"]["median"] < 110
    assert out["gpu_util_pct"]["median"] > 50
    assert out["rounds_checked"] == len(raw.rounds)
    assert isinstance(out["clock_events"], dict)
    seen = out["whole_run"]["clock_events"]
    print(f"clock-event reasons seen: {seen or 'none'}")
    if "SW power cap" in seen:
        # the power cap holds the clock below its maximum
        assert out["whole_run"]["sm_clock_mhz"]["min"] < out["sm_clock_max_mhz"]
    # sampling keeps its interval under a GPU-bound measurement (the main thread waits in sync)
    times = [r[0] for r in rows]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert gaps and statistics.median(gaps) < 0.03, statistics.median(gaps)


def test_the_report_shows_telemetry_end_to_end(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import torch

        def test_mm(gpu_bench):
            a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
            end = __import__("time").perf_counter() + 2
            while __import__("time").perf_counter() < end:
                torch.mm(a, a)
            gpu_bench(torch.mm, a, a, warmup_ms=1000, rounds=60, round_ms=10)
        """
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--gpuperf-device=cuda", "--gpuperf-json=o.json"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["gpuperf: driver *", "gpuperf: GPU * NVIDIA *"])
    doc = json.loads((pytester.path / "o.json").read_text())
    tel = doc["results"][0]["telemetry"]
    print(json.dumps(tel, indent=1))
    assert tel["available"] and tel["sm_clock_mhz"]["median"] > 300
    assert doc["session"]["gpu_state"]["available"]
    if tel["throttled_share"] > 0:  # the power cap, on the H200: named in the flags
        result.stdout.fnmatch_lines(["*test_mm*: * % of the measurement; SM clock *"])


def test_nvtx_uses_a_real_backend_on_cuda() -> None:
    ranges = NvtxRanges()
    with ranges(BenchId("gpu::x"), "benchmark"):
        pass
    assert ranges.backend in ("nvtx", "torch.cuda.nvtx")


@requires_nsys
def test_nvtx_ranges_appear_in_nsight_systems(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_nv="""
        import torch

        def test_add(gpu_bench):
            x = torch.zeros(2**20, device="cuda")
            gpu_bench(x.add_, 1, cuda_graph=True)
        """
    )
    cmd = [
        shutil.which("nsys") or "nsys", "profile", "-t", "cuda,nvtx", "--sample=none",
        "--cpuctxsw=none", "-o", "rep", "-f", "true", sys.executable, "-m", "pytest",
        "-p", "no:cacheprovider", "--gpuperf-device=cuda", "--gpuperf-warmup-ms=100",
        "--gpuperf-rounds=10", "test_nv.py",
    ]  # fmt: skip
    env = dict(os.environ)
    run = subprocess.run(
        cmd, cwd=pytester.path, env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    stats = ""
    for report in ("nvtx_sum", "nvtx_pushpop_sum"):
        s = subprocess.run(
            ["nsys", "stats", "--report", report, "--format", "csv", "rep.nsys-rep"],
            cwd=pytester.path, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        stats += s.stdout
        if "gpuperf/" in s.stdout:
            break
    print(stats)
    assert "gpuperf/test_nv.py::test_add@cuda-graph" in stats
    assert "/measure" in stats and "/warmup" in stats
