"""The CUDA backends on a real GPU (skipped without CUDA; run on the H200 machine)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from pytest_gpuperf.measure import engine
from pytest_gpuperf.measure.backend import Invocation, Timer
from pytest_gpuperf.measure.cuda import CudaEventsTimer, CudaGraphTimer
from pytest_gpuperf.measure.policy import MeasurePolicy
from tests.conftest import requires_cuda

pytestmark = requires_cuda


def _median(timer: Timer, **policy: Any) -> float:
    timer.first_call()
    timer.prepare()
    raw = engine.run(timer, MeasurePolicy(**policy))
    timer.close()
    return statistics.median(raw.rounds)


def test_events_agree_with_hand_written_event_timing() -> None:
    """The same method written by hand (a spin holding the GPU while the host enqueues a flush
    and an event pair per call, one sync), run right after. A memory-bound op: a GEMM under
    the power cap moved 5 % between two such measurements on an H200 (its clock regime)."""
    import torch

    x = torch.randn(64 * 2**20, device="cuda")
    ours = _median(CudaEventsTimer(Invocation(x.mul_, (1.0,)), l2_flush=True))
    flush = torch.empty(128 * 2**20 // 4, dtype=torch.int32, device="cuda")
    refs = []
    for _ in range(10):
        pairs = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(30)
        ]
        torch.cuda._sleep(20_000_000)  # ~10 ms at the top clock: longer than the enqueue
        for s, e in pairs:
            flush.zero_()
            s.record()
            x.mul_(1.0)
            e.record()
        torch.cuda.synchronize()
        refs.append(statistics.median(s.elapsed_time(e) / 1e3 for s, e in pairs))
    ref = statistics.median(refs)
    print(f"gpu_bench {ours * 1e6:.2f} us, by hand {ref * 1e6:.2f} us")
    assert ours == pytest.approx(ref, rel=0.02)


def _raw(timer: Timer, **policy: Any) -> tuple[engine.RawMeasurement, bool | None]:
    timer.first_call()
    timer.prepare()
    raw = engine.run(timer, MeasurePolicy(**policy))
    hidden = timer.host_hidden(len(raw.rounds)) if hasattr(timer, "host_hidden") else None
    timer.close()
    return raw, hidden


def _kernel_time(fn: Callable[[], Any], calls: int = 50) -> float:
    """GPU time of one call's kernels, summed, from torch.profiler (seconds)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return sum(e.device_time for e in kernels) / 1e6 / calls  # us -> s


def test_graph_replay_approaches_kernel_time_for_a_tiny_op() -> None:
    """x.add_(1) on 1M fp32: end-to-end pays the launch, graph replay nearly does not."""
    import torch

    x = torch.zeros(2**20, device="cuda")
    graph = _median(CudaGraphTimer(Invocation(x.add_, (1,))))
    raw, _ = _raw(CudaEventsTimer(Invocation(x.add_, (1,)), l2_flush=False))
    e2e = statistics.median(raw.e2e_rounds)
    kernel = _kernel_time(lambda: x.add_(1))
    print(f"graph {graph * 1e6:.2f} us, e2e {e2e * 1e6:.2f} us, kernel {kernel * 1e6:.2f} us")
    assert graph < e2e
    assert graph == pytest.approx(kernel, rel=0.25)


def test_device_figure_hides_the_host_of_launch_bound_work() -> None:
    """20 small adds per call: the host's launches dominate end to end; the device figure,
    with the host held behind a spin kernel, is the kernels' own time."""
    import torch

    x = torch.zeros(2**16, device="cuda")

    def launches() -> None:
        for _ in range(20):
            x.add_(1)

    for flush in (True, False):
        raw, hidden = _raw(CudaEventsTimer(Invocation(launches), l2_flush=flush))
        device = statistics.median(raw.rounds)
        e2e = statistics.median(raw.e2e_rounds)
        kernel = _kernel_time(launches)
        print(
            f"l2_flush={flush}: device {device * 1e6:.2f} us, e2e {e2e * 1e6:.2f} us, "
            f"kernels {kernel * 1e6:.2f} us, host hidden {hidden}"
        )
        assert hidden is True
        assert len(raw.e2e_rounds) == len(raw.rounds)
        assert device < 0.5 * e2e
        # the kernels, plus the GPU's own gap between queued launches (~1.2 us each on an
        # H200: 43.7 us for 20 kernels of 0.93 us)
        assert 0.9 * kernel <= device <= kernel + 20 * 2.0e-6


def test_a_function_that_waits_for_the_gpu_is_measured_and_flagged() -> None:
    """.item() in the timed call: no spin can hide the host; the result says so, in time."""
    import time

    import torch

    x = torch.ones(2**20, device="cuda")
    t = time.perf_counter()
    raw, hidden = _raw(CudaEventsTimer(Invocation(lambda: x.sum().item()), l2_flush=True))
    wall = time.perf_counter() - t
    print(f"device {statistics.median(raw.rounds) * 1e6:.2f} us, "
          f"e2e {statistics.median(raw.e2e_rounds) * 1e6:.2f} us, {wall:.2f} s")  # fmt: skip
    assert hidden is False
    assert wall < 5.0


def test_a_fresh_process_finds_that_a_pageable_copy_waits_for_the_gpu() -> None:
    """In a fresh process (a confirmation or capture child) the spin's first launch loads its
    kernel: the rate is still right, and a pageable copy is found to wait for the GPU."""
    code = (
        "import torch\n"
        "from pytest_gpuperf.measure.backend import Invocation\n"
        "from pytest_gpuperf.measure.cuda import CudaEventsTimer\n"
        "src = torch.rand(2 * 2**20)\n"
        "timer = CudaEventsTimer(Invocation(lambda: src.to('cuda')), l2_flush=True)\n"
        "timer.first_call()\n"
        "timer.prepare()\n"
        "print(timer.hiding.hideable)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.split() == ["False"], out.stdout + out.stderr


def test_a_long_call_with_many_kernels_is_hidden_despite_the_launch_queue() -> None:
    """300 kernels per call fill the GPU's launch queue: the timer enqueues fewer calls."""
    import torch

    x = torch.zeros(1024, device="cuda")

    def many() -> None:
        for _ in range(300):
            x.add_(1)

    raw, hidden = _raw(CudaEventsTimer(Invocation(many), l2_flush=False))
    device = statistics.median(raw.rounds)
    e2e = statistics.median(raw.e2e_rounds)
    kernel = _kernel_time(many, calls=5)
    print(f"device {device * 1e6:.1f} us, e2e {e2e * 1e6:.1f} us, kernels {kernel * 1e6:.1f} us, "
          f"hidden {hidden}")  # fmt: skip
    assert hidden is True
    assert device < 0.7 * e2e
    assert device <= kernel + 300 * 2.0e-6  # kernels plus the queue's gaps


def test_l2_flush_slows_work_whose_data_fits_in_l2() -> None:
    """x.mul_ on 32 MiB (fits in the H200's 60 MB L2): flushed, the data comes from HBM."""
    import torch

    x = torch.randn(8 * 2**20, device="cuda")
    hot = _median(CudaEventsTimer(Invocation(x.mul_, (1.0,)), l2_flush=False))
    cold = _median(CudaEventsTimer(Invocation(x.mul_, (1.0,)), l2_flush=True))
    print(f"hot {hot * 1e6:.2f} us, cold {cold * 1e6:.2f} us")
    assert cold > hot


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "--gpuperf-device=cuda", *args)


def test_both_modes_report_launch_overhead_and_environment(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest, torch

        @pytest.mark.gpuperf(cuda_graph="both", shapes=[(2**20,)])
        def test_tiny(gpu_bench, shape):
            x = torch.zeros(*shape, device=gpu_bench.device)
            assert gpu_bench.device == "cuda"
            gpu_bench(x.add_, 1)
        """
    )
    result = _run(pytester, "--gpuperf-json=o.json")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*cuda-events*", "*cuda-graph*", "launch overhead*", "*of the eager time*"]
    )
    doc = json.loads((pytester.path / "o.json").read_text())
    modes = {r["id"]["mode"] for r in doc["results"]}
    assert modes == {"cuda-events", "cuda-graph"}
    env = next(iter(doc["environments"].values()))
    assert env["gpu_name"] and env["sm_count"] > 0 and env["cuda_runtime"] and env["driver"]


def test_graph_hazards_are_explained_and_the_session_goes_on(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest, torch

        @pytest.mark.gpuperf(cuda_graph=True)
        def test_item(gpu_bench):
            x = torch.ones(1024, device="cuda")
            gpu_bench(lambda: x.sum().item())

        @pytest.mark.gpuperf(cuda_graph=True)
        def test_host_work(gpu_bench):
            x = torch.ones(1024, device="cuda")
            gpu_bench(lambda: x.add_(torch.randn(1024).sum().item() * 0))

        @pytest.mark.gpuperf(cuda_graph=True)
        def test_host_copy(gpu_bench):
            x = torch.ones(1024, device="cuda")
            gpu_bench(lambda: x.add_(torch.arange(1024.0).cuda(non_blocking=True)))

        @pytest.mark.gpuperf(cuda_graph=True)
        def test_fine_after(gpu_bench):
            x = torch.ones(1 << 20, device="cuda")
            gpu_bench(x.mul_, 1.0)
        """
    )
    result = _run(pytester)
    result.assert_outcomes(failed=3, passed=1)
    result.stdout.fnmatch_lines(
        [
            "*cannot be measured by CUDA-graph replay*",
            "*aten._local_scalar_dense synchronizes the host with the GPU*",
            "*runs on the CPU: a CUDA graph does not replay host work*",
            "*copies host data to the GPU*",
        ]
    )


def test_capture_failure_without_a_visible_op_is_explained(pytester: pytest.Pytester) -> None:
    """torch.cuda.synchronize() is not an aten op: the capture itself fails."""
    pytester.makepyfile(
        """
        import pytest, torch

        @pytest.mark.gpuperf(cuda_graph=True)
        def test_sync(gpu_bench):
            x = torch.ones(1024, device="cuda")
            def f():
                x.add_(1)
                torch.cuda.synchronize()
            gpu_bench(f)

        def test_next(gpu_bench):
            x = torch.ones(1024, device="cuda")
            gpu_bench(x.add_, 1)
        """
    )
    result = _run(pytester)
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(
        ["*could not be captured in a CUDA graph*not permitted when stream is capturing*"]
    )


def test_out_of_memory_fails_that_test_and_releases_memory(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import torch

        def test_oom(gpu_bench):
            keep = torch.empty(8 * 2**30, dtype=torch.uint8, device="cuda")  # held by the test
            gpu_bench(lambda: torch.empty(400 * 2**30, dtype=torch.uint8, device="cuda"))

        def test_after(gpu_bench):
            import gc, sys
            gc.collect()
            if torch.cuda.memory_allocated() >= 2**30:
                big = [o for o in gc.get_objects() if isinstance(o, torch.Tensor) and o.numel() >= 2**30]
                holders = [type(r).__name__ + ":" + repr(r)[:80] for b in big for r in gc.get_referrers(b)]
                raise AssertionError(f"still allocated, held by {holders}; last_tb={getattr(sys, 'last_traceback', None)}")
            x = torch.ones(1024, device="cuda")
            gpu_bench(x.add_, 1)
        """
    )
    result = _run(pytester)
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(
        [
            "*CUDA out of memory while benchmarking test_oom*",
            "*memory this benchmark held has been released and the session goes on*",
        ]
    )


def test_peak_memory_of_the_steady_state_calls(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import torch

        def test_tmp(gpu_bench):
            x = torch.ones(1 << 20, device="cuda")
            gpu_bench(lambda: (x.repeat(64) * 2).sum())  # a 256 MiB temporary per call
        """
    )
    result = _run(pytester, "--gpuperf-json=o.json")
    result.assert_outcomes(passed=1)
    (r,) = json.loads((pytester.path / "o.json").read_text())["results"]
    assert r["peak_memory_bytes"] >= 256 * 2**20


def test_compiled_function_in_a_graph(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest, torch

        @pytest.mark.gpuperf(cuda_graph="both")
        def test_compiled(gpu_bench):
            f = torch.compile(lambda x: torch.nn.functional.gelu(x) * 2 + 1)
            x = torch.randn(1 << 20, device="cuda")
            out = gpu_bench(f, x)
            torch.testing.assert_close(out, torch.nn.functional.gelu(x) * 2 + 1)
        """
    )
    result = _run(pytester, "--gpuperf-json=o.json")
    result.assert_outcomes(passed=1)
    res = json.loads((pytester.path / "o.json").read_text())["results"]
    assert {r["id"]["mode"] for r in res} == {"cuda-events", "cuda-graph"}
    assert all(r["first_call_s"] > 10 * r["summary"]["median"] for r in res)
