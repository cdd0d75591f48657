"""A timing backend from outside the package: one timer class and one registry entry.

The conftest below is all a new backend needs: a deterministic virtual-clock timer
(every call costs exactly 0.5 ms x SLOWDOWN) and its :class:`~pytest_gpuperf.measure.
backend.Mode`, with a noise class of its own. It replaces the CPU mode's place for these
runs (the CPU mode is deselected), so what is measured cannot depend on the machine.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import FAST
from tests.plugin.virtual_clock import TIMER

BACKEND_CONFTEST = f"""
import dataclasses
import os

import pytest

from pytest_gpuperf.measure import backend
from pytest_gpuperf.verdict.policy import NoiseClass


{TIMER}

def make(call, policy):
    return VirtualClockTimer(call)


VIRTUAL = backend.Mode(
    "virtual-clock",
    device="cpu",
    selected=lambda policy: True,
    factory=make,
    comparable=("noise_threshold",),
    record=(("clock", "virtual"),),
    noise_class=NoiseClass("virtual", noise=0.001, mode=1.05, runs=1),
    noisy_remedy="check the virtual clock, ",
)


@pytest.fixture(autouse=True)
def virtual_clock_mode(monkeypatch):
    # For the test's duration only: pytester runs in this process.
    monkeypatch.setitem(backend.MODES, VIRTUAL.name, VIRTUAL)
    cpu = backend.MODES["cpu"]
    monkeypatch.setitem(
        backend.MODES, "cpu", dataclasses.replace(cpu, selected=lambda policy: False)
    )
"""

TESTS = """
def test_sum(gpu_bench):
    assert gpu_bench(sum, [1, 2, 3]) == 6
"""


def run(pytester: pytest.Pytester, *args: str, slowdown: float = 1.0) -> pytest.RunResult:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLOWDOWN", str(slowdown))
        return pytester.runpytest(
            "-p", "no:cacheprovider", "--gpuperf-capture=never", *FAST, *args
        )  # fmt: skip


def _results(pytester: pytest.Pytester) -> list[dict[str, object]]:
    doc = json.loads((pytester.path / "out.json").read_text())
    results: list[dict[str, object]] = doc["results"]
    return results


def test_a_registered_backend_measures_saves_and_judges(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(BACKEND_CONFTEST)
    pytester.makepyfile(test_virtual=TESTS)
    for _ in range(2):
        run(pytester, "--gpuperf-save=main", "--gpuperf-json=out.json").assert_outcomes(passed=1)
    (result,) = _results(pytester)
    assert result["id"] == {
        "nodeid": "test_virtual.py::test_sum",
        "name": None,
        "mode": "virtual-clock",
        "params": {},
        "key": "test_virtual.py::test_sum@virtual-clock",
    }
    assert set(result["rounds"]) == {0.0005}  # type: ignore[arg-type]
    assert result["peak_memory_bytes"] == 1234
    assert result["policy"] == {
        "round_ms": 1.0,
        "rounds": 10,
        "warmup_ms": 30.0,
        "noise_threshold": 0.05,
        "clock": "virtual",
    }
    assert not result["l2_flush"]

    same = run(pytester, "--gpuperf-baseline=main", "--gpuperf-json=out.json")
    same.assert_outcomes(passed=1)
    (result,) = _results(pytester)
    assert result["comparison"]["kind"] == "no-change"  # type: ignore[index]

    slower = run(pytester, "--gpuperf-baseline=main", "--gpuperf-json=out.json", slowdown=1.5)
    slower.assert_outcomes(failed=1)
    slower.stdout.fnmatch_lines(["*test_sum: REGRESSION +* time (90 % CI*), 1 run*"])
    (result,) = _results(pytester)
    comparison = result["comparison"]
    assert comparison["kind"] == "regression"  # type: ignore[index]
    # judged against the backend's own noise class: one run is evidence enough
    assert comparison["r"] == 1  # type: ignore[index]
