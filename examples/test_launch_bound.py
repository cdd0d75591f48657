"""A tiny, launch-bound op, measured with and without CUDA graphs.

With ``cuda_graph="both"`` the report shows the per-call time with CUDA
events (what an eager caller pays, launch included) next to the graph
replay time (the kernel alone), and the launch-overhead share.
"""

from __future__ import annotations

import pytest
import torch


@pytest.mark.gpuperf(shapes=[(2**20,)], cuda_graph="both", bytes=lambda shape: 2 * 4 * shape[0])
def test_tiny_add(gpu_bench, shape):
    x = torch.zeros(*shape, device=gpu_bench.device)
    gpu_bench(x.add_, 1)
    assert x[0].item() > 0
