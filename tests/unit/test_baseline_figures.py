"""A saved run keeps both figures of the CUDA events backend, and the verdict reads them back."""

from __future__ import annotations

from pathlib import Path

from pytest_gpuperf.baseline.store import BaselineStore
from pytest_gpuperf.measure.names import MODE_EVENTS
from pytest_gpuperf.model import BenchId, Run
from pytest_gpuperf.verdict.decide import RunStat

ENV = {"device": "cuda", "gpu_name": "NVIDIA H200", "gpu_uuid": "GPU-1", "driver": "580"}


def result(device_s: float, e2e_s: float | None, hidden: bool | None) -> Run:
    """A CUDA events run; with ``e2e_s`` None, one without the second figure."""
    return Run(
        id=BenchId("t.py::test_step", None, MODE_EVENTS),
        device="cuda",
        rounds=(device_s,) * 20,
        calls_per_round=10,
        first_call_s=0.01,
        e2e_rounds=[] if e2e_s is None else [e2e_s] * 20,
        host_hidden=hidden,
        host_s=None if e2e_s is None else 0.6 * e2e_s,
        environment=dict(ENV),
        policy={"round_ms": 5.0, "rounds": 30, "warmup_ms": 500.0, "figures": "device+e2e"},
    )


def test_both_figures_survive_a_save_and_a_load(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    store.save("main", [result(50e-6, 210e-6, True)], keep_runs=20, meta={})
    b = store.load("main")
    (entry,) = b.benchmarks.values()
    (rec,) = entry.runs
    assert rec.e2e_rounds == tuple([210e-6] * 20) and rec.host_hidden is True
    assert rec.host_s == 126e-6
    stat = RunStat.from_run(rec)
    assert stat.level_s == 50e-6 and stat.e2e_s == 210e-6 and stat.host_hidden is True
    assert stat.host_s == 126e-6


def test_a_run_without_the_second_figure_stores_neither_field(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    r = result(50e-6, None, None)
    store.save("main", [r], keep_runs=20, meta={})
    text = "".join(p.read_text() for p in tmp_path.rglob("*.json"))
    assert '"rounds"' in text  # the run is there (its segment)...
    assert "e2e_rounds" not in text and "host_hidden" not in text  # ...without these fields
    assert "host_s" not in text
