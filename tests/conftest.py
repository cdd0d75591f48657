"""Shared test set-up: pytester, and capability marks for tests that need a GPU or a tool."""

from __future__ import annotations

import shutil

import pytest

pytest_plugins = ["pytester"]


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


requires_cuda = pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU (runs on the GPU machine)")
requires_nsys = pytest.mark.skipif(
    shutil.which("nsys") is None, reason="needs Nsight Systems (nsys)"
)
requires_ncu = pytest.mark.skipif(shutil.which("ncu") is None, reason="needs Nsight Compute (ncu)")

#: Small budgets so that end-to-end runs stay fast on a 2-core CPU machine.
FAST = [
    "--gpuperf-warmup-ms=30",
    "--gpuperf-min-warmup-ms=5",
    "--gpuperf-round-ms=1",
    "--gpuperf-rounds=10",
]


@pytest.fixture
def fast_args() -> list[str]:
    return list(FAST)
