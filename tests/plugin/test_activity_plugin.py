"""Activity and memory behaviour end to end on the CPU backend: what a CPU result says it lacks,
and that a baseline saved and compared with the new gate value runs (GPU paths: tests/gpu)."""

from __future__ import annotations

import json

import pytest

from pytest_gpuperf.measure.allocation import CPU_REASON

BENCH = """
import torch

def test_add(gpu_bench):
    x = torch.ones(4096, device=gpu_bench.device)
    gpu_bench(x.add_, 1, flops=4096, bytes=8 * 4096)
"""


def test_a_cpu_result_says_why_it_has_no_memory_behaviour_and_no_peak_fraction(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    pytester.makepyfile(BENCH)
    args = [*fast_args, "--gpuperf-device=cpu", "--gpuperf-json=out.json", "-v"]
    result = pytester.runpytest(*args, "--gpuperf-save=main")
    result.assert_outcomes(passed=1)
    (res,) = json.loads((pytester.path / "out.json").read_text())["results"]
    assert res["memory"] == {"available": False, "reason": CPU_REASON}
    assert res["of_peak"] is None  # no GPU, no datasheet peak
    assert "activity" not in (res["telemetry"] or {})
    assert not any(line.startswith("activity (NVML GPM") for line in result.outlines)
    # the new gate value is accepted, and a CPU result is compared on nothing new
    result = pytester.runpytest(
        *args, "--gpuperf-baseline=main", "--gpuperf-gate-secondary=allocations"
    )
    result.assert_outcomes(passed=1)
    (res,) = json.loads((pytester.path / "out.json").read_text())["results"]
    metrics = {s["metric"] for s in res["comparison"]["secondary"]}
    assert metrics == {"peak_memory", "first_call"}


def test_activity_can_be_turned_off(pytester: pytest.Pytester, fast_args: list[str]) -> None:
    pytester.makepyfile(
        """
        def test_cfg(request):
            from pytest_gpuperf.shell.session import SESSION_KEY
            assert request.config.stash[SESSION_KEY].settings.telemetry.activity is False
        """
    )
    pytester.runpytest("--gpuperf-activity=false").assert_outcomes(passed=1)
