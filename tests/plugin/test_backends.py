"""A timing backend from outside the package: one timer class and one hook.

The conftest below is all a new backend needs: a deterministic virtual-clock timer
(every call costs exactly 0.5 ms x SLOWDOWN) and its :class:`~pytest_gpuperf.measure.
backend.Mode`, with a noise class of its own, returned by ``pytest_gpuperf_timing_modes``.
It takes the CPU mode's place (``replaces="cpu"``), so what is measured cannot depend on
the machine; the registry is the session's, so nothing outlives the pytester run.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from tests.conftest import FAST
from tests.plugin.virtual_clock import TIMER

BACKEND_CONFTEST = f"""
import os

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
    replaces="cpu",
)


def pytest_gpuperf_timing_modes():
    return [VIRTUAL]
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


def _install_entry_point(site: Path, module: str, source: str) -> None:
    """A distribution on ``site`` whose ``pytest_gpuperf`` entry point is ``module``."""
    site.mkdir()
    (site / f"{module}.py").write_text(source)
    info = site / f"{module}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[pytest_gpuperf]\nvirtual = {module}\n")


def test_a_mode_of_an_entry_point_is_the_same_mode_in_pytest_and_the_cli(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One module in the ``pytest_gpuperf`` entry-point group: pytest measures in its mode,
    and the CLI, with its own plugin manager, knows the mode's description too."""
    from pytest_gpuperf.cli.main import main
    from pytest_gpuperf.registry import build, plugin_manager

    source = BACKEND_CONFTEST.replace("    replaces=", "    plain_name=True,\n    replaces=")
    _install_entry_point(pytester.path / "site", "gpuperf_virtual_mode", source)
    monkeypatch.syspath_prepend(str(pytester.path / "site"))
    modes = build(plugin_manager().hook).modes
    assert modes.get("virtual-clock").plain_name and "cpu" not in modes

    pytester.makepyfile(test_virtual=TESTS)
    for _ in range(2):
        run(pytester, "--gpuperf-save=main", "--gpuperf-json=out.json").assert_outcomes(passed=1)
    assert [r["id"]["mode"] for r in _results(pytester)] == ["virtual-clock"]  # type: ignore[index]
    run(pytester, "--gpuperf-save=slow", slowdown=1.5).assert_outcomes(passed=1)

    out = io.StringIO()
    assert main(["export", "main", "--format", "pytest-benchmark"], out) == 0
    (bench,) = json.loads(out.getvalue())["benchmarks"]
    assert bench["name"] == "test_sum"  # the mode's plain_name, not "test_sum@virtual-clock"
    out = io.StringIO()
    assert main(["compare", "main", "slow"], out) == 1, out.getvalue()
    assert "REGRESSION" in out.getvalue()
