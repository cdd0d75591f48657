"""The gate and ``pytest-gpuperf compare`` apply one rule: fed the same saved runs (the gate
with ``--gpuperf-reruns=0``, so that it measures nothing beyond its run file), they give the
same verdicts, the same figures and fail the same benchmarks, numerics included.

On the virtual clock (tests/conftest.py): each planted factor is exact in every process.
"""

from __future__ import annotations

import io
import json

import pytest

from pytest_gpuperf.cli.main import load_source
from pytest_gpuperf.cli.main import main as cli
from pytest_gpuperf.cli.runsets import compare, read_file
from pytest_gpuperf.verdict import VerdictSettings
from tests.conftest import FAST, VIRTUAL_TIME_CONFTEST, run_with_env
from tests.plugin.test_baselines import QUIET

#: Each benchmark's planted factor comes from $PLANT ("name=factor,..."); test_out's output
#: changes with $CHANGE.
BENCH = """
import os

import torch


def _factor(name):
    plants = dict(p.split("=") for p in os.environ.get("PLANT", "").split(",") if p)
    return float(plants.get(name, "1"))


def _bench(clock, gpu_bench, name, ns):
    factor = _factor(name)

    def call():
        clock.ns += int(ns * factor)

    gpu_bench(call)


def test_same(clock, gpu_bench):
    _bench(clock, gpu_bench, "same", 300_000)


def test_ten(clock, gpu_bench):
    _bench(clock, gpu_bench, "ten", 200_000)


def test_half(clock, gpu_bench):
    _bench(clock, gpu_bench, "half", 50_000)


def test_out(clock, gpu_bench):
    shift = 0.1 if os.environ.get("CHANGE") else 0.0
    x = torch.arange(64, dtype=torch.float32)

    def call():
        clock.ns += 100_000
        return x * 2 + shift

    gpu_bench(call)
"""


def _run(pytester: pytest.Pytester, *args: str, **env: str) -> pytest.RunResult:
    return run_with_env(pytester, env, "-p", "no:cacheprovider", *FAST, *QUIET, *args)


def test_the_gate_and_compare_give_the_same_verdicts_on_the_same_runs(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(VIRTUAL_TIME_CONFTEST)
    pytester.makepyfile(test_r=BENCH)
    for _ in range(3):
        _run(pytester, "--gpuperf-save=main").assert_outcomes(passed=4)
    gate = _run(
        pytester,
        "--gpuperf-baseline=main",
        "--gpuperf-reruns=0",
        "--gpuperf-numerics=gate",
        "--gpuperf-json=o.json",
        PLANT="ten=30,half=1.6",
        CHANGE="1",
    )
    doc = json.loads((pytester.path / "o.json").read_text())
    gate_kinds = {r["id"]["nodeid"]: r["comparison"]["kind"] for r in doc["results"]}
    gate_changes = {r["id"]["nodeid"]: r["comparison"]["change"] for r in doc["results"]}
    gate_failed = {ln.split()[1] for ln in gate.stdout.lines if ln.startswith("FAILED test_r.py::")}
    # what the gate decided (planted: 30x, 1.6x, an output change)
    assert gate_kinds["test_r.py::test_ten"] == "regression"
    assert gate_kinds["test_r.py::test_same"] == "no-change"
    assert gate_failed == {"test_r.py::test_ten", "test_r.py::test_out"}

    # the command line's compare on the same runs: the baseline, and the gate's run file
    folder = pytester.path / ".gpuperf" / "baselines"
    reference = load_source("main", str(folder))
    candidate = read_file(pytester.path / "o.json")
    outcome = compare(reference, candidate, settings=VerdictSettings(numerics="gate"))
    cli_kinds = {r.id.nodeid: r.comparison.kind for r in outcome.results if r.comparison}
    assert cli_kinds == gate_kinds
    from pytest_gpuperf.reporting.explain import change_text

    cli_changes = {r.id.nodeid: change_text(r.comparison, r.id.mode) for r in outcome.results}
    assert cli_changes == gate_changes
    by_key = {r.id.key: r.id.nodeid for r in outcome.results}
    assert {by_key[k] for k in outcome.failing()} == gate_failed
    # and its exit status says the same
    buf = io.StringIO()
    code = cli(["compare", "main", "o.json", "--dir", str(folder), "--numerics", "gate"], buf)
    assert code == 1, buf.getvalue()
    assert "output changed: test_out" in buf.getvalue()
