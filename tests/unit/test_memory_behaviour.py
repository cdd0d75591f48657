"""Memory behaviour per call: the allocator's counters to figures, their storage in a baseline
(the golden file holds them: tests/unit/test_baseline.py), their verdict and their gate."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf.baseline.store import BaselineStore
from pytest_gpuperf.measure import allocation
from pytest_gpuperf.model import Result
from pytest_gpuperf.reporting.activity import memory_changes, memory_line
from pytest_gpuperf.reporting.explain import failure_words, secondary_words
from pytest_gpuperf.telemetry.regime import baseline_telemetry
from pytest_gpuperf.verdict.judge import Judge
from pytest_gpuperf.verdict.policy import VerdictSettings
from pytest_gpuperf.verdict.secondary import (
    ALLOC_RETRIES,
    ALLOCATIONS,
    DEVICE_ALLOCS,
    HIGHER,
    SAME,
    TRANSFERS,
    compare_secondary,
    transfer_bytes,
)
from tests.unit.reporting_data import GPU_ENV
from tests.unit.test_baseline import KEY, POLICY, T0, fp_id, make_run

MIB = float(2**20)


def snap(allocs: int, frees: int, nbytes: int, segs: int, retries: int = 0, reserved: int = 0):  # type: ignore[no-untyped-def]
    """A torch.cuda.memory_stats() dict as torch 2.11 spells it."""
    return {
        "allocation.all.allocated": allocs,
        "allocation.all.freed": frees,
        "allocated_bytes.all.allocated": nbytes,
        "num_device_alloc": segs,
        "num_device_free": segs,
        "num_alloc_retries": retries,
        "num_ooms": 0,
        "reserved_bytes.all.current": reserved,
        "reserved_bytes.all.peak": reserved,
        "active.all.current": 3,  # not a counter we read
    }


def test_the_counters_are_found_under_both_spellings() -> None:
    new = {"allocated.all.allocated": 7, "segment.all.allocated": 2, "num_alloc_retries": 1}
    assert allocation.pick(new) == {"allocations": 7, "device_allocs": 2, "alloc_retries": 1}
    assert allocation.pick(snap(5, 4, 100, 1))["allocations"] == 5


def test_per_call_figures_come_from_the_window_and_totals_from_the_measurement() -> None:
    m0, m1 = snap(100, 100, 0, 4, reserved=64 * 2**20), snap(2100, 2100, 0, 6, 1, 96 * 2**20)
    w0, w1 = snap(2100, 2100, 0, 6, 1, 96 * 2**20), snap(2600, 2600, 500 * 2**20, 6, 1, 96 * 2**20)
    f = allocation.figures(*map(allocation.pick, (m0, m1, w0, w1)), calls=500)
    assert f["available"] and f["calls"] == 500
    assert f["allocations_per_call"] == 1.0 and f["frees_per_call"] == 1.0
    assert f["allocated_bytes_per_call"] == MIB and f["device_allocs_per_call"] == 0.0
    assert f["alloc_retries"] == 1 and f["device_allocs"] == 2
    assert f["reserved_growth_bytes"] == 32 * 2**20 and f["reserved_bytes"] == 96 * 2**20
    line = memory_line(f)
    assert line.startswith("1 allocation(s) per call (1.0 MiB), 0 cudaMalloc per call")
    assert "reserved +32.0 MiB during the measurement" in line and "1 allocator retry" in line
    assert memory_line(allocation.unavailable(allocation.CPU_REASON)).startswith(
        "unavailable: the CPU has no caching-allocator counters"
    )


def test_counts_are_compared_with_half_an_allocation_of_slack() -> None:
    assert compare_secondary([0.0, 0.0, 0.0], 0.0, 0.05, metric=ALLOCATIONS).kind == SAME
    higher = compare_secondary([2.0, 2.0], 3.0, 0.05, metric=ALLOCATIONS)
    assert higher.kind == HIGHER
    assert secondary_words(higher) == (
        "allocations per call 3 vs 2 baseline (+50.0 %; within 1.4 to 2.6 is the same): higher"
    )
    assert compare_secondary([0.0], 0.4, 0.05, metric=DEVICE_ALLOCS).kind == SAME
    assert compare_secondary([0.0], 3.0, 0.05, metric=ALLOC_RETRIES).kind == HIGHER
    tr = compare_secondary([8 * MIB], 16 * MIB, 0.05, metric=TRANSFERS)
    assert tr.kind == HIGHER and "host-device transfers per call 16.0 MiB" in secondary_words(tr)
    assert transfer_bytes({"h2d_bytes_per_call": 8.0, "d2h_bytes_per_call": 2.0}) == 10.0
    assert transfer_bytes({"h2d_bytes_per_call": 8.0}) == 8.0  # an older inventory
    assert transfer_bytes({}) is None


# --- storage ---------------------------------------------------------------------------

MEMORY = {
    "available": True,
    "source": "torch.cuda.memory_stats",
    "calls": 500,
    "allocations_per_call": 0.0,
    "frees_per_call": 0.0,
    "allocated_bytes_per_call": 0.0,
    "device_allocs_per_call": 0.0,
    "device_frees_per_call": 0.0,
    "alloc_retries": 0,
    "device_allocs": 0,
    "reserved_bytes": 402653184,
    "reserved_growth_bytes": 0,
}
ACTIVITY = {
    "available": True,
    "source": "nvml-gpm",
    "window_s": 0.121,
    "calls": 683,
    "sm_util_pct": 71.0,
    "sm_occupancy_pct": 10.5,
    "tensor_pct": 68.9,
    "dram_bw_util_pct": 13.0,
    "unsupported": ["nvlink_tx_mib_s"],
}
TELEMETRY = {"available": True, "sm_clock_mhz": {"median": 1980.0}, "activity": ACTIVITY,
             "samples": 40, "raw": {"rows": []}}  # fmt: skip


def _saved(store: BaselineStore, **kw: Any) -> Any:
    r = make_run(**kw)
    r = replace(r, telemetry=baseline_telemetry(r.telemetry))  # what shell.save.save keeps
    store.save("main", [r], now=T0)
    return store.load("main").runs(KEY, fp_id(GPU_ENV), POLICY)[0]


def test_a_run_keeps_its_allocator_figures_and_activity_summary(tmp_path: Path) -> None:
    run = _saved(BaselineStore(tmp_path), memory=MEMORY, telemetry=TELEMETRY)
    assert run.memory == MEMORY
    kept = {k: v for k, v in ACTIVITY.items() if k not in ("unsupported", "source")}
    assert run.telemetry["activity"] == kept
    assert "raw" not in run.telemetry and "samples" not in run.telemetry


def test_an_unavailable_memory_figure_is_not_stored(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    run = _saved(store, memory=allocation.unavailable("no"), telemetry={"available": False})
    assert run.memory is None and run.telemetry is None
    text = "".join(p.read_text() for p in (store.root / "main.runs").glob("*.json"))
    assert '"memory"' not in text


# --- the verdict and the gate ------------------------------------------------------------


def _judge(tmp_path: Path, gate: str, per_call: float = 0.0) -> Any:
    store = BaselineStore(tmp_path)
    for i in range(3):
        r = make_run(run_id=f"b{i}", memory={**MEMORY, "allocations_per_call": per_call})
        store.save("main", [r], now=T0 + dt.timedelta(days=i))
    return Judge(store.load("main"), settings=VerdictSettings(gate_secondary=gate))


@pytest.mark.parametrize(("gate", "fails"), [("allocations", True), ("all", True),
                                             ("memory", False), ("none", False)])  # fmt: skip
def test_more_allocations_per_call_fail_only_when_gated(
    tmp_path: Path, gate: str, fails: bool
) -> None:
    judge = _judge(tmp_path, gate)
    cur = Result(make_run(run_id="now", memory={**MEMORY, "allocations_per_call": 2.0,
                                                "allocated_bytes_per_call": 64 * MIB}))  # fmt: skip
    v = judge.verdict(cur, [cur], last=True)
    by_metric = {s.metric: s for s in v.comparison.secondary}
    assert by_metric[ALLOCATIONS].kind == HIGHER
    assert by_metric[DEVICE_ALLOCS].kind == SAME
    assert TRANSFERS not in by_metric  # no inventory on this run: not compared
    said = [failure_words(cur.id.display, f) for f in v.failures]
    failed = [f for f in said if "allocations per call" in f]
    assert bool(failed) == fails
    if fails:
        assert failed[0].endswith(
            "allocations per call 2 vs 0 baseline (+2; within 0 to 0.5 is the same): higher"
        )
    cur.comparison = v.comparison
    assert any(c.startswith("allocations per call 2 vs 0") for c in memory_changes(cur))


def test_a_cpu_result_compares_no_memory_behaviour(tmp_path: Path) -> None:
    judge = _judge(tmp_path, "all")
    cur = Result(make_run(run_id="now", memory=allocation.unavailable(allocation.CPU_REASON)))
    v = judge.verdict(cur, [cur], last=True)
    assert {s.metric for s in v.comparison.secondary} == {"peak_memory", "first_call"}
