"""Activity (NVML GPM), allocator figures and the algorithm probe on a real GPU (skipped without
CUDA; run on the H200 machine with ``-s`` to see the figures). About 5 s in all."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_gpuperf.artifacts.collectors import algorithms
from pytest_gpuperf.measure import allocation
from pytest_gpuperf.measure.backend import Invocation
from pytest_gpuperf.measure.cuda import CudaEventsTimer
from pytest_gpuperf.measure.memory import allocator_counters
from pytest_gpuperf.shell.fixture import LEAD_S, WINDOW_S, plain_window
from pytest_gpuperf.telemetry import activity as act
from pytest_gpuperf.telemetry.probe import NvmlTelemetry
from tests.conftest import requires_cuda

pytestmark = requires_cuda


def _window(fn: Any, *args: Any) -> dict[str, Any]:
    timer = CudaEventsTimer(Invocation(fn, args))
    timer.first_call()
    tel = NvmlTelemetry()
    try:
        w = tel.activity_window()
        if not w.wanted:
            pytest.skip(f"no GPM here: {w.reason}")
        # as the fixture reads it: the GPU busy with the same calls for one GPM refresh first
        plain_window(timer.plain_calls, 1e-3, LEAD_S, 100_000)
        w.start()
        calls, seconds = plain_window(timer.plain_calls, 1e-3, WINDOW_S, 100_000)
        return w.stop(window_s=seconds, calls=calls)
    finally:
        tel.close()


def test_gpm_calls_a_memory_bound_kernel_memory_bound() -> None:
    import torch

    x = torch.ones(256 * 2**20, device="cuda")
    a = _window(x.mul_, 1.0001)
    print(json.dumps(a, indent=1))
    assert a["available"] and a["window_s"] >= 0.11
    b = act.bound(a)
    assert b is not None and b.label == "memory-bound", a


def test_gpm_sees_a_bf16_gemm_on_the_tensor_cores() -> None:
    import torch

    m = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    a = _window(torch.mm, m, m)
    print(json.dumps(a, indent=1))
    assert a["available"] and a["tensor_pct"] > 20, a


def test_the_allocator_counts_a_buffer_allocated_per_call() -> None:
    import torch

    src = torch.ones(2**20, device="cuda")
    out = torch.empty_like(src)
    timer = CudaEventsTimer(Invocation(lambda: torch.mul(src, 2, out=out)))
    churn = CudaEventsTimer(Invocation(lambda: src * 2))  # a fresh 4 MiB buffer per call
    figures = []
    for t in (timer, churn):
        t.first_call()
        before = allocator_counters()
        t.plain_calls(50)
        after = allocator_counters()
        assert before is not None and after is not None
        figures.append(allocation.figures(before, after, before, after, 50))
    print(figures)
    assert figures[0]["allocations_per_call"] == 0
    assert figures[1]["allocations_per_call"] == 1
    assert figures[1]["allocated_bytes_per_call"] == 4 * 2**20
    assert figures[1]["device_allocs_per_call"] == 0  # the cache serves it


def test_the_probe_asks_sdpa_which_backend_it_picks() -> None:
    import torch
    import torch.nn.functional as F

    q = torch.randn(2, 8, 512, 64, device="cuda", dtype=torch.bfloat16)
    mask = torch.zeros(512, 512, device="cuda", dtype=torch.bfloat16)
    causal = algorithms.probe(lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True))
    masked = algorithms.probe(lambda: F.scaled_dot_product_attention(q, q, q, attn_mask=mask))
    c = causal["ops"]["scaled_dot_product_attention"][0]
    m = masked["ops"]["scaled_dot_product_attention"][0]
    print(c, m, sep="\n")
    assert c["backend"] in ("flash", "cudnn", "mem-efficient") and m["mask"] is True
    assert m["backend"] != "flash"  # flash takes no mask
