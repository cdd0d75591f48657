"""The profile analysis on a real H200 trace and on synthetic traces with a known truth."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gpuperf.artifacts.analysis.timeline import (
    analyze,
    copy_direction,
    load_trace,
    parse_trace,
)
from tests.unit.kineto import FakeTrace, gpu_bound, launch_bound, with_syncs

DATA = Path(__file__).parent.parent / "data" / "artifacts"


def test_real_h200_trace_with_a_sync_and_a_pageable_copy() -> None:
    # fn(): bf16 matmul, x*2+1, z[0].item(), w_cpu.to("cuda"), 3 profiled calls
    a = analyze(parse_trace(load_trace(DATA / "kineto_h200_sync_h2d.json")))
    assert a.calls == 3 and a.device == "cuda"
    assert a.kernels == 12  # matmul, mul, add, add per call
    assert a.syncs_per_call == pytest.approx(2.0)  # .item() and the pageable copy's own sync
    ops = {op for s in a.syncs for op in s.ops}
    assert "aten::_local_scalar_dense" in ops
    h2d, h2d_bytes = a.copies_per_call("HtoD")
    assert h2d == 1 and h2d_bytes == 4 * 2**20
    assert next(c for c in a.copies if c.direction == "HtoD").pageable == 3
    assert a.busy_fraction is not None and a.busy_fraction < 0.5
    assert any("host sync" in g.cause for g in a.gaps)
    assert not a.compiled


def test_gpu_bound_work_keeps_the_gpu_busy() -> None:
    a = analyze(parse_trace(gpu_bound().doc()))
    assert a.calls == 4 and a.kernels == 8
    assert a.busy_fraction is not None and a.busy_fraction > 0.95
    assert a.syncs == [] and a.copies == [] and not a.launch_bound
    assert a.gpu_time_us == pytest.approx(4 * 120.0)


def test_syncs_inside_the_calls_are_found_and_attributed() -> None:
    a = analyze(parse_trace(with_syncs(calls=4, kernels=8).doc()))
    assert a.syncs_per_call == pytest.approx(8.0)
    (sync,) = a.syncs
    assert sync.name == "cudaStreamSynchronize" and sync.ops == ["aten::_local_scalar_dense"]
    assert a.copies_per_call("DtoH") == (8.0, 32.0)
    assert a.busy_fraction is not None and a.busy_fraction < 0.5
    assert a.gaps and all("host sync" in g.cause for g in a.gaps)
    assert not a.launch_bound  # idle because of syncs, not launches


def test_work_outside_the_profiled_calls_is_ignored() -> None:
    t = gpu_bound(calls=2)
    end = max(e["ts"] + e["dur"] for e in t.events)
    t.api("cudaDeviceSynchronize", end + 10, 50.0)  # the profiler's final synchronize
    t.kernel("warmup_kernel", 10.0, 20.0, 500.0)  # before the calls
    a = analyze(parse_trace(t.doc()))
    assert a.syncs == []
    assert a.kernels == 4


def test_many_tiny_kernels_with_gaps_are_launch_bound() -> None:
    a = analyze(parse_trace(launch_bound().doc()))
    assert a.launch_bound
    assert a.busy_fraction is not None and a.busy_fraction < 0.4
    assert "host cannot launch fast enough" in a.launch_notes[0]
    assert all("host late" in g.cause or "launch" in g.cause for g in a.gaps)


def test_a_cpu_trace_has_no_gpu_part() -> None:
    t = FakeTrace()
    for i in range(3):
        t.call(i, 100.0 * i, 50.0)
        t.op("aten::mul", 100.0 * i + 1, 20.0)
    a = analyze(parse_trace(t.doc()))
    assert a.device == "cpu" and a.calls == 3 and a.busy_fraction is None
    assert a.cpu_per_call_us == pytest.approx(50.0)


def test_compiled_code_is_recognised() -> None:
    t = gpu_bound(calls=1, kernels=(("triton_poi_fused_add_mul_0", 5.0),))
    assert analyze(parse_trace(t.doc())).compiled


def test_a_trace_without_call_ranges_is_analysed_whole() -> None:
    t = gpu_bound(calls=2)
    t.events = [e for e in t.events if e["cat"] != "user_annotation"]
    a = analyze(parse_trace(t.doc()))
    assert a.calls == 1 and a.kernels == 4 and a.notes


@pytest.mark.parametrize(
    ("name", "direction"),
    [
        ("Memcpy HtoD (Pageable -> Device)", "HtoD"),
        ("Memcpy DtoH (Device -> Pinned)", "DtoH"),
        ("Memcpy DtoD (Device -> Device)", "DtoD"),
        ("Memset (Device)", "other"),
    ],
)
def test_copy_direction(name: str, direction: str) -> None:
    assert copy_direction(name) == direction


def test_an_analysis_reads_back_from_its_dict() -> None:
    from pytest_gpuperf.artifacts.analysis.timeline import ProfileAnalysis

    a = analyze(parse_trace(load_trace(DATA / "kineto_h200_sync_h2d.json")))
    assert a.gaps and a.syncs and a.copies
    back = ProfileAnalysis.from_dict(json.loads(json.dumps(a.to_dict())))
    assert back == a


def test_the_innermost_operator_is_the_last_one_open_on_that_thread() -> None:
    import random

    from pytest_gpuperf.artifacts.analysis.timeline import _innermost_op

    rng = random.Random(7)
    for _ in range(200):
        ops = []
        for i in range(40):
            s = rng.uniform(0, 100)
            ops.append((s, s + rng.uniform(0, 30), f"op{i}", rng.choice((1, 2))))
        ops.sort(key=lambda o: (o[0], -o[1]))
        ts, tid = rng.uniform(0, 120), rng.choice((1, 2))
        open_ = [o for o in ops if o[0] <= ts <= o[1] and o[3] == tid]
        want = max(open_, key=lambda o: (o[0], -o[1]))[2] if open_ else None
        assert _innermost_op(ts, tid, ops) == want
