"""Benchmarks with regressions that can be planted, to check what a failure's diagnosis says.

Off by default: these run like any benchmark. With ``GPUPERF_PLANT`` set
(names separated by commas) each named plant slows its benchmark:

* ``sync``: a host-device sync (``.item()``) inside the benchmarked loop;
* ``variant``: the matrix product runs in float32 instead of bfloat16, so the
  library picks another, slower GEMM kernel;
* ``h2d``: a host-to-device copy of a pageable CPU tensor on every call;
* ``graph_break``: a graph break in the compiled model of
  ``test_compiled_model.py``.

Save a baseline without plants, then compare with one planted::

    pytest examples --gpuperf-save=plain
    GPUPERF_PLANT=sync pytest examples/test_planted.py --gpuperf-baseline=plain
"""

from __future__ import annotations

import os

import pytest
import torch

PLANT = set(os.environ.get("GPUPERF_PLANT", "").replace(",", " ").split())
ON_GPU = torch.cuda.is_available()

N = 4 * 2**20 if ON_GPU else 2**18  # elements of the elementwise chain
K = 2048 if ON_GPU else 256  # matrix size
M = 2**20 if ON_GPU else 2**16  # elements scaled by a host tensor


@pytest.mark.gpuperf
def test_elementwise_chain(gpu_bench):
    x = torch.randn(N, device=gpu_bench.device)

    def chain(x: torch.Tensor) -> torch.Tensor:
        for _ in range(8):
            x = x.mul(0.999).add_(0.001)
            if "sync" in PLANT:
                x[0].item()  # planted: the host waits for the GPU
        return x

    out = gpu_bench(chain, x)
    assert out.shape == x.shape


@pytest.mark.gpuperf(flops=2 * K**3)
def test_matmul_bf16(gpu_bench):
    dtype = torch.float32 if "variant" in PLANT else torch.bfloat16  # planted: another GEMM
    a = torch.randn(K, K, device=gpu_bench.device, dtype=dtype)
    b = torch.randn(K, K, device=gpu_bench.device, dtype=dtype)
    out = gpu_bench(torch.matmul, a, b)
    assert out.shape == (K, K)


@pytest.mark.gpuperf(bytes=2 * 4 * M)
def test_scale_by_table(gpu_bench):
    table_cpu = torch.rand(M)
    table = table_cpu.to(gpu_bench.device)
    x = torch.randn(M, device=gpu_bench.device)

    def scale(x: torch.Tensor) -> torch.Tensor:
        t = table_cpu.to(x.device) if "h2d" in PLANT else table  # planted: a copy per call
        return x * t

    out = gpu_bench(scale, x)
    assert out.shape == x.shape
