"""gpu_bench(fn, setup=...): fresh inputs per call, untimed; progress lines for lasting steps."""

from __future__ import annotations

import time
from typing import Any

import pytest

from pytest_gpuperf.errors import GpuPerfError
from pytest_gpuperf.measure.backend import Invocation, SetupError
from pytest_gpuperf.shell.config import GpuPerfConfig
from pytest_gpuperf.shell.fixture import BenchContext, GpuBench
from pytest_gpuperf.shell.progress import Progress

FAST = {"warmup_ms": 10, "min_warmup_ms": 1, "round_ms": 1, "rounds": 5}


def bench(**ctx: Any) -> GpuBench:
    values = {**FAST, **ctx.pop("options", {})}
    cfg = GpuPerfConfig.from_values(values, {})
    return GpuBench(
        BenchContext("t.py::test_x", cfg, "cpu", record=lambda r: None, after_measure=[], **ctx)
    )


def test_an_in_place_op_is_measured_on_fresh_inputs() -> None:
    import torch

    seen: list[float] = []
    made = [0]

    def fresh() -> tuple[tuple[Any, ...], dict[str, Any]]:
        made[0] += 1
        return (torch.zeros(8),), {}

    def bump(t: torch.Tensor) -> torch.Tensor:
        seen.append(float(t[0]))  # what this call found in its input
        return t.add_(1)

    b = bench()
    out = b(bump, setup=fresh)
    assert out.tolist() == [1.0] * 8  # the first call's result
    assert len(seen) > 20 and set(seen) == {0.0}  # every call got zeros, never a bumped tensor
    assert made[0] == len(seen)  # one setup per call


def test_setup_time_is_not_measured() -> None:
    def slow_setup() -> None:
        time.sleep(0.004)

    b = bench()
    b(lambda: None, setup=slow_setup)
    (r,) = b.results
    # A no-op call measured behind a 4 ms setup: far below the setup's own time.
    assert r.run.median < 0.002
    assert r.run.calls_per_round >= 1


def test_setup_returning_none_resets_the_given_arguments_in_place() -> None:
    import torch

    x = torch.zeros(4)
    b = bench()
    b(torch.Tensor.add_, x, 1, setup=lambda: x.zero_())
    assert x.tolist() == [1.0] * 4  # reset before the last call, which added 1 once


@pytest.mark.parametrize(
    ("made", "args", "message"),
    [
        (lambda: 3, (), "must return None * or (args, kwargs)"),
        (lambda: ((1,), {}), (2,), "pass them one way"),
    ],
)
def test_setup_mistakes_are_clear_errors(made: Any, args: tuple[Any, ...], message: str) -> None:
    inv = Invocation(lambda *a: None, args, {}, made)
    with pytest.raises(SetupError) as e:
        inv.prepare()
    import fnmatch

    assert fnmatch.fnmatch(str(e.value), f"*{message}*"), str(e.value)


def test_setup_must_be_callable() -> None:
    with pytest.raises(TypeError, match="needs a callable that makes fn's inputs"):
        bench()(lambda: None, setup=42)


@pytest.mark.parametrize("graph", [True, "both"])
def test_setup_with_cuda_graphs_is_refused_with_the_remedy(graph: Any) -> None:
    """On every device, so that a test that passes on a laptop does not fail on the GPU."""
    with pytest.raises(GpuPerfError) as e:
        bench()(lambda: None, setup=lambda: None, cuda_graph=graph)
    text = str(e.value)
    assert "replays the same input buffers" in text
    assert "Pass cuda_graph=False to this gpu_bench call" in text


def test_disabled_runs_setup_then_fn_once() -> None:
    calls: list[str] = []
    b = bench(disabled=True)
    out = b(lambda v: calls.append("fn") or v, setup=lambda: (calls.append("setup") or (7,), {}))
    assert out == 7 and calls == ["setup", "fn"]


class Clock:
    def __init__(self, step: float) -> None:
        self.t = 0.0
        self.step = step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


def test_a_lasting_measurement_shows_a_line_ticked_between_rounds() -> None:
    """No thread: the measurement loop ticks the progress after each round."""
    out: list[str] = []
    progress = Progress(out.append, clock=Clock(0.25), ticker=False)
    b = bench(progress=progress.task)
    b(lambda: None)
    measuring = [line for line in out if "measuring" in line]
    assert measuring[0].startswith("gpuperf: test_x: measuring (warm-up, then 5 rounds) ... ")
    assert measuring[-1].startswith("gpuperf: test_x: measuring (warm-up, then 5 rounds): done")


def test_a_slow_first_call_shows_a_line() -> None:
    out: list[str] = []
    progress = Progress(out.append, delay_s=0.2)  # the ticker thread, every second
    calls = [0]

    def lazy() -> None:
        calls[0] += 1
        if calls[0] == 1:
            time.sleep(1.2)  # think: torch.compile

    bench(progress=progress.task)(lazy)
    assert any(
        line.startswith("gpuperf: test_x: first call (compile, autotune, lazy init): done in")
        for line in out
    ), out
