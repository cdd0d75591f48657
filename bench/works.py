"""The work items of the measurement benchmarks (shared by every method).

Each factory returns ``(fn, flops, bytes)`` with inputs already on the GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _mlp(width: int) -> Any:
    import torch

    class MLP(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(
                torch.nn.Linear(width, 4 * width),
                torch.nn.GELU(),
                torch.nn.Linear(4 * width, width),
                torch.nn.LayerNorm(width),
            )

        def forward(self, x: Any) -> Any:
            return self.net(x) + x

    return MLP()


def add_1m() -> tuple[Callable[[], Any], float, float]:
    import torch

    x = torch.zeros(2**20, device="cuda")
    return (lambda: x.add_(1)), 2**20, 8 * 2**20


def mul_256m() -> tuple[Callable[[], Any], float, float]:
    import torch

    x = torch.randn(256 * 2**20, device="cuda")
    return (lambda: x.mul_(1.0)), 256 * 2**20, 8 * 256 * 2**20


def _mm(n: int) -> tuple[Callable[[], Any], float, float]:
    import torch

    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    return (lambda: torch.mm(a, b)), 2 * n**3, 3 * 2 * n * n


def mm_4096() -> tuple[Callable[[], Any], float, float]:
    return _mm(4096)


def mm_256() -> tuple[Callable[[], Any], float, float]:
    return _mm(256)


def compiled_mlp() -> tuple[Callable[[], Any], float, float]:
    import torch

    torch.manual_seed(0)
    model = _mlp(1024).cuda().eval()
    compiled = torch.compile(model)
    x = torch.randn(256, 1024, device="cuda")

    def run() -> Any:
        with torch.no_grad():
            return compiled(x)

    return run, 2 * 2 * 256 * 1024 * 4096, 0.0


WORKS: dict[str, Callable[[], tuple[Callable[[], Any], float, float]]] = {
    "add_1M_fp32": add_1m,
    "mul_256M_fp32": mul_256m,
    "mm_4096_bf16": mm_4096,
    "mm_256_bf16": mm_256,
    "compiled_mlp": compiled_mlp,
}
