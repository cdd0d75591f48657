"""The benchmarks of ``pytest-gpuperf demo`` (copied into its folder as test_demo.py). On the
CPU one thread: a second one, scheduled late, makes timings jump between processes."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest
import torch

if TYPE_CHECKING:
    from pytest_gpuperf.shell.fixture import GpuBench

PLANTED = os.environ.get("GPUPERF_DEMO_PLANT") == "row_loop"
ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    torch.set_num_threads(1)

ROWS, WIDTH = (4096, 1024) if ON_GPU else (256, 512)
N = 2048 if ON_GPU else 192


@pytest.mark.gpuperf(flops=2 * N**3)
def test_matmul(gpu_bench: GpuBench) -> None:
    torch.manual_seed(0)
    a = torch.randn(N, N, device=gpu_bench.device)
    b = torch.randn(N, N, device=gpu_bench.device)
    out = gpu_bench(torch.mm, a, b)
    assert out.shape == (N, N)


@pytest.mark.gpuperf(bytes=2 * 4 * ROWS * WIDTH)
def test_layer_norm(gpu_bench: GpuBench) -> None:
    torch.manual_seed(0)
    x = torch.randn(ROWS, WIDTH, device=gpu_bench.device)
    norm = torch.nn.LayerNorm(WIDTH).to(gpu_bench.device)
    with torch.no_grad():
        out = gpu_bench(norm, x)
    assert out.shape == x.shape


def normalize_rows(x: torch.Tensor) -> torch.Tensor:
    if PLANTED:  # the planted slowdown: one small op per row
        return torch.stack([row / row.norm() for row in x])
    return x / x.norm(dim=1, keepdim=True)


@pytest.mark.gpuperf(bytes=2 * 4 * ROWS * WIDTH)
def test_normalize_rows(gpu_bench: GpuBench) -> None:
    torch.manual_seed(0)
    x = torch.randn(ROWS, WIDTH, device=gpu_bench.device)
    out = gpu_bench(normalize_rows, x)
    torch.testing.assert_close(out.norm(dim=1), torch.ones(ROWS, device=gpu_bench.device))
