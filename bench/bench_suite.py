"""The A/A and A/B campaign's suite: 8 benchmarks, tiny (launch-bound) and large (>= 100 us).

``GPUPERF_SLOWDOWN=0.05`` scales the work of every benchmark by 5 % (one dimension of
the problem grows by that fraction), which is how verdict_campaign.py injects a slowdown.
"""

from __future__ import annotations

import os

import pytest
import torch

THETA = float(os.environ.get("GPUPERF_SLOWDOWN", "0"))
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
#: On the CPU (a smoke test of the campaign script) every problem is 64x smaller.
SCALE = 1 if DEVICE == "cuda" else 64


def grow(n: int, multiple: int = 1) -> int:
    """n scaled by 1 + THETA, rounded to a multiple (GEMM tiles)."""
    return max(multiple, round(n / SCALE * (1 + THETA) / multiple) * multiple)


def _mm(m: int, n: int, k: int):
    a = torch.randn(m, grow(k, 8), device=DEVICE, dtype=torch.bfloat16)
    b = torch.randn(grow(k, 8), n, device=DEVICE, dtype=torch.bfloat16)
    return lambda: torch.mm(a, b)


def _add(n: int):
    x = torch.zeros(grow(n, 256), device=DEVICE)
    return lambda: x.add_(1)


def _mul(n: int):
    x = torch.randn(grow(n, 256), device=DEVICE)
    return lambda: x.mul_(1.0)


def _softmax(rows: int, cols: int):
    x = torch.randn(grow(rows), cols, device=DEVICE)
    return lambda: torch.softmax(x, dim=-1)


def _layernorm(rows: int, cols: int):
    x = torch.randn(grow(rows), cols, device=DEVICE, dtype=torch.bfloat16)
    ln = torch.nn.LayerNorm(cols, device=DEVICE, dtype=torch.bfloat16)
    return lambda: ln(x)


SUITE = {
    # tiny, launch-bound: measured with CUDA-graph replay (kernel time) or events
    "add_1M_graph": (lambda: _add(2**20), True),
    "mm_256_graph": (lambda: _mm(256, 256, 256), True),
    "add_1M_events": (lambda: _add(2**20), False),
    "softmax_4Kx4K": (lambda: _softmax(4096, 4096), False),
    # large: >= 100 us per call
    "mm_4096_bf16": (lambda: _mm(4096, 4096, 4096), False),
    "mm_8192x8192x2048": (lambda: _mm(8192, 8192, 2048), False),
    "mul_256M": (lambda: _mul(256 * 2**20), False),
    "layernorm_16Kx8K": (lambda: _layernorm(16384, 8192), False),
}


@pytest.mark.parametrize("work", list(SUITE))
def test_suite(gpu_bench, work):
    make, graph = SUITE[work]
    with torch.no_grad():
        gpu_bench(make(), cuda_graph=graph)
