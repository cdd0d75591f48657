"""gpu_bench(fn, setup=...) on a real GPU: fresh inputs per call, setup's GPU work untimed.

Skipped without CUDA; run on the H200 machine.
"""

from __future__ import annotations

import statistics
from typing import Any

import pytest

from pytest_gpuperf.errors import GpuPerfError
from pytest_gpuperf.measure import engine
from pytest_gpuperf.measure.backend import Invocation
from pytest_gpuperf.measure.cuda import CudaEventsTimer
from pytest_gpuperf.measure.policy import MeasurePolicy
from pytest_gpuperf.shell.config import GpuPerfConfig
from pytest_gpuperf.shell.fixture import BenchContext, GpuBench
from tests.conftest import requires_cuda

pytestmark = requires_cuda

N = 2**20  # 4 MiB of fp32: a ~5 µs in-place op
BIG = 2**28  # 1 GiB of fp32: a setup that takes far longer than the op


def _bench(**options: Any) -> GpuBench:
    cfg = GpuPerfConfig.from_values({"rounds": 10, "warmup_ms": 100, **options}, {})
    return GpuBench(BenchContext("t.py::test_x", cfg, "cuda", record=lambda r: None))


@pytest.mark.parametrize("l2_flush", [True, False])
def test_an_in_place_op_gets_fresh_inputs_on_the_gpu(l2_flush: bool) -> None:
    """Every call finds ones in its input (never the doubled tensor of a call before)."""
    import torch

    wrong = torch.zeros((), device="cuda", dtype=torch.int64)
    made = [0]
    called = [0]

    def fresh() -> tuple[tuple[Any, ...], dict[str, Any]]:
        made[0] += 1
        return (torch.ones(N, device="cuda"),), {}

    def double(t: Any) -> Any:
        called[0] += 1
        wrong.add_((t[:1] != 1).sum())  # on the GPU: no sync inside the timed call
        return t.mul_(2)

    _bench(l2_flush=l2_flush)(double, setup=fresh)
    torch.cuda.synchronize()
    assert int(wrong) == 0
    assert made[0] == called[0] > 20


@pytest.mark.parametrize("l2_flush", [True, False])
def test_setup_gpu_work_is_not_timed(l2_flush: bool) -> None:
    """A setup that fills 1 GiB (~0.3 ms on an H200) before a ~5 µs op: the op's time only."""
    import torch

    big = torch.empty(BIG, device="cuda")
    x = torch.ones(N, device="cuda")
    call = Invocation(x.mul_, (1.0,), setup=lambda: big.fill_(1.0))
    timer = CudaEventsTimer(call, l2_flush=l2_flush)
    timer.first_call()
    timer.prepare()
    raw = engine.run(timer, MeasurePolicy(rounds=10))
    timer.close()
    op = statistics.median(raw.rounds)

    fill = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fill[0].record()
    big.fill_(1.0)
    fill[1].record()
    torch.cuda.synchronize()
    fill_s = fill[0].elapsed_time(fill[1]) / 1e3
    print(f"op {op * 1e6:.2f} us with setup= of {fill_s * 1e6:.1f} us (l2_flush={l2_flush})")
    assert op < fill_s / 5


def test_cuda_graph_mode_refuses_setup_with_the_remedy() -> None:
    import torch

    x = torch.ones(N, device="cuda")
    with pytest.raises(GpuPerfError, match="Pass cuda_graph=False to this gpu_bench call"):
        _bench()(torch.Tensor.mul_, x, 2.0, setup=lambda: x.fill_(1.0), cuda_graph=True)
