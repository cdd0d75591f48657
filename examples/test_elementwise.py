"""A memory-bound elementwise op, with achieved bandwidth (GB/s)."""

from __future__ import annotations

import pytest
import torch

ON_GPU = torch.cuda.is_available()

# Elements of fp32: 256M (1 GiB, far beyond the L2) on a GPU, 16M on the CPU.
SIZES = [(256 * 2**20,)] if ON_GPU else [(16 * 2**20,)]


@pytest.mark.gpuperf(shapes=SIZES, bytes=lambda shape: 2 * 4 * shape[0])  # read + write
def test_scale_inplace(gpu_bench, shape):
    x = torch.randn(*shape, device=gpu_bench.device)
    gpu_bench(x.mul_, 1.0000001)
    assert torch.isfinite(x[:16]).all()
