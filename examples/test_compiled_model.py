"""A small torch.compile'd model: compile time lands in the first call, not in the median."""

from __future__ import annotations

import os

import pytest
import torch

ON_GPU = torch.cuda.is_available()

# small enough that the host side of a call matters on a GPU, as in a serving loop:
# a graph break (its extra compiled region and resume frame) then shows in the time
BATCH, WIDTH = (64, 512) if ON_GPU else (64, 256)
#: GPUPERF_PLANT=graph_break plants a graph break (see test_planted.py)
GRAPH_BREAK = "graph_break" in os.environ.get("GPUPERF_PLANT", "")


class MLP(torch.nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(width, 4 * width),
            torch.nn.GELU(),
            torch.nn.Linear(4 * width, width),
            torch.nn.LayerNorm(width),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.net(x)
        if GRAPH_BREAK:
            torch._dynamo.graph_break()
        return y + x


@pytest.mark.gpuperf(flops=2 * 2 * BATCH * WIDTH * 4 * WIDTH)
def test_compiled_mlp(gpu_bench):
    torch.manual_seed(0)
    model = MLP(WIDTH).to(gpu_bench.device).eval()
    compiled = torch.compile(model)
    x = torch.randn(BATCH, WIDTH, device=gpu_bench.device)
    with torch.no_grad():
        out = gpu_bench(compiled, x)
        torch.testing.assert_close(out, model(x), rtol=2e-2, atol=2e-2)
