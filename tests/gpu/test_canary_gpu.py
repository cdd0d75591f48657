"""The host-speed canary on a real GPU: one kernel launch per op, timed on the host (cheap)."""

from __future__ import annotations

import contextlib

import pytest

from pytest_gpuperf.measure import canary
from tests.conftest import requires_cuda

pytestmark = requires_cuda


def test_the_cuda_canary_times_launches_and_leaves_the_queue_empty() -> None:
    import torch

    c = canary.HostCanary("cuda")
    assert c.kind == canary.KIND_CUDA
    per_op = sorted(c.burst() for _ in range(9))[4]
    # a launch from Python costs microseconds of host time: not the kernel, not a sync
    assert 0.5e-6 < per_op < 100e-6, per_op
    window = canary.CanaryWindow(c)
    with window.phase(lambda name: contextlib.nullcontext())(canary.PHASE):
        torch.cuda._sleep(1_000_000)  # the rounds: work on the GPU
        torch.cuda.synchronize()
    record = window.record()
    assert record is not None and record["kind"] == "cuda-launch"
    assert record["op_s"] == pytest.approx(per_op, rel=1.0)
    assert len(record["bursts"]) == 2 * canary.BURSTS
    assert 0 < record.get("share", 1.0) <= 1.0
    assert record["cost_s"] < 0.05
