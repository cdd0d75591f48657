"""Telemetry end to end on the CPU backend: the header, the JSON and the user's hook."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import requires_cuda

BENCH = """
import torch

def test_add(gpu_bench):
    x = torch.ones(4096, device=gpu_bench.device)
    gpu_bench(x.add_, 1)
"""

HOOK = """
def pytest_gpuperf_telemetry(config, bench_id, telemetry):
    telemetry["lab"] = "rack-7"
    telemetry["bench"] = bench_id.key
"""


def run_json(
    pytester: pytest.Pytester, fast_args: list[str], *args: str, fresh: bool = False
) -> tuple[Any, Any]:
    """A run in this process (torch already imported: fast), or in a ``fresh`` one where a
    test looks at what the run imported."""
    runner = pytester.runpytest_subprocess if fresh else pytester.runpytest
    result = runner(*fast_args, "--gpuperf-json=out.json", *args)
    result.assert_outcomes(passed=1)
    return result, json.loads((pytester.path / "out.json").read_text())


def test_a_cpu_run_says_where_it_measures_and_never_touches_nvml(
    pytester: pytest.Pytester, fast_args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # a lock folder of its own: a sibling test measuring on the CPU would add a
    # (legitimate) "waiting for cpu" line to the output this test counts
    monkeypatch.setenv("GPUPERF_LOCK_DIR", str(pytester.path / "locks"))
    pytester.makepyfile(
        BENCH
        + """
    import sys
    # after the header and the measurement: nothing asked NVML about GPUs (torch itself
    # imports pynvml, so that import says nothing)
    assert "pytest_gpuperf.telemetry.header" not in sys.modules
"""
    )
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: auto measures on the GPU")
    result, doc = run_json(pytester, fast_args, fresh=True)
    result.stdout.fnmatch_lines(["collected 1 item", "gpuperf: measuring on the CPU: *"])
    header = [line for line in result.outlines if line.startswith("gpuperf:")]
    assert len(header) == 1, header  # one line, no NVML message, no GPU advice
    assert doc["session"]["gpu_state"] is None
    tel = doc["results"][0]["telemetry"]
    assert tel == {
        "available": False,
        "reason": "the benchmark ran on the CPU: NVML telemetry covers CUDA benchmarks",
    }
    assert not any("telemetry" in n or "GPU" in n for n in doc["results"][0]["notes"])


def test_a_conftest_hook_adds_telemetry_fields(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    pytester.makepyfile(BENCH)
    pytester.makeconftest(HOOK)
    _, doc = run_json(pytester, fast_args, "--gpuperf-device=cpu")
    tel = doc["results"][0]["telemetry"]
    assert tel["lab"] == "rack-7"
    assert tel["bench"] == "test_a_conftest_hook_adds_telemetry_fields.py::test_add@cpu"
    assert tel["available"] is False


def test_telemetry_off(pytester: pytest.Pytester, fast_args: list[str]) -> None:
    pytester.makepyfile(BENCH)
    result, doc = run_json(pytester, fast_args, "--gpuperf-telemetry=false", "--gpuperf-nvtx=off")
    assert not any("telemetry unavailable" in line for line in result.outlines)
    assert doc["session"]["gpu_state"] is None
    assert doc["results"][0]["telemetry"] == {
        "available": False,
        "reason": "turned off (--gpuperf-telemetry=false)",
    }


def test_no_gpu_header_with_device_cpu_or_collect_only(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    pytester.makepyfile(BENCH)
    result = pytester.runpytest(*fast_args, "--gpuperf-device=cpu")
    assert not any("telemetry" in line for line in result.outlines)
    result = pytester.runpytest("--collect-only")
    assert not any("telemetry" in line or "gpuperf:" in line for line in result.outlines)


def test_no_gpu_header_without_benchmarks(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_plain():\n    pass\n")
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    assert not any("telemetry" in line for line in result.outlines)


@requires_cuda
def test_quiet_runs_keep_the_gpu_state_in_the_json(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    pytester.makepyfile(BENCH)
    result, doc = run_json(pytester, fast_args, "-q")
    assert not any("telemetry" in line for line in result.outlines)
    assert doc["session"]["gpu_state"]["available"] in (True, False)


def test_a_bad_interval_names_the_option(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(BENCH)
    result = pytester.runpytest_subprocess("--gpuperf-telemetry-interval-ms=0.1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--gpuperf-telemetry-interval-ms: expected a sampling interval from 1 to 1000 ms*"]
    )


def test_telemetry_options_from_the_ini_file(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ngpuperf_telemetry_interval_ms = 25\ngpuperf_telemetry_raw = true\n")
    pytester.makepyfile(
        """
        def test_cfg(request):
            from pytest_gpuperf.shell.session import SESSION_KEY
            telemetry = request.config.stash[SESSION_KEY].settings.telemetry
            assert telemetry.interval_ms == 25.0
            assert telemetry.raw is True
            assert telemetry.enabled is True and telemetry.nvtx is True
        """
    )
    pytester.runpytest_subprocess().assert_outcomes(passed=1)


def test_loading_the_plugin_imports_neither_pynvml_nor_nvtx(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import sys

        def test_modules():
            assert "pynvml" not in sys.modules
            assert "nvtx" not in sys.modules
        """
    )
    # -q: no header, so nothing asks NVML about the GPUs
    pytester.runpytest_subprocess("-q").assert_outcomes(passed=1)


def test_what_telemetry_shows_reaches_the_flags(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    """Notes are made from the telemetry after the hook: a hook can stand in for NVML here."""
    pytester.makepyfile(BENCH)
    pytester.makeconftest(
        """
        def pytest_gpuperf_telemetry(config, bench_id, telemetry):
            telemetry.update(
                available=True,
                sm_clock_mhz={"min": 1350, "median": 1545, "max": 1980},
                sm_clock_max_mhz=1980,
                clock_events={"SW power cap": 0.97},
                throttled_share=0.97,
                rounds_checked=10,
                throttled_rounds=list(range(10)),
            )
        """
    )
    result, doc = run_json(pytester, fast_args, "--gpuperf-device=cpu")
    result.stdout.fnmatch_lines(
        ["flags:", "*test_add: clock limited: SW power cap 97 % of the measurement; SM clock*"]
    )
    assert any(n.startswith("clock limited") for n in doc["results"][0]["notes"])
