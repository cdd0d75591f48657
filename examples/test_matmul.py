"""Matrix multiplication over shapes and dtypes, with achieved TFLOP/s."""

from __future__ import annotations

import pytest
import torch

ON_GPU = torch.cuda.is_available()

# (M, N, K): a large compute-bound GEMM and a small one.
SHAPES = [(4096, 4096, 4096), (256, 256, 256)] if ON_GPU else [(512, 512, 512), (128, 128, 128)]


@pytest.mark.gpuperf(
    shapes=SHAPES,
    dtypes=[torch.bfloat16, torch.float32],
    flops=lambda shape: 2 * shape[0] * shape[1] * shape[2],
)
def test_matmul(gpu_bench, shape, dtype):
    m, n, k = shape
    a = torch.randn(m, k, device=gpu_bench.device, dtype=dtype)
    b = torch.randn(k, n, device=gpu_bench.device, dtype=dtype)
    out = gpu_bench(torch.matmul, a, b)
    assert out.shape == (m, n)
