"""pytest-benchmark JSON: the fields github-action-benchmark and Bencher read."""

from __future__ import annotations

import datetime as dt
import json
import statistics

import pytest

from pytest_gpuperf.reporting.export import pytest_benchmark
from tests.unit.reporting_data import result

WHEN = dt.datetime(2025, 11, 29, 20, 0, tzinfo=dt.timezone.utc)


def test_fields_read_by_github_action_benchmark_and_bencher() -> None:
    r = result(kind="no-change", ratio=1.0)
    doc = json.loads(pytest_benchmark([r], created=WHEN, commit_info={"id": "abc"}))
    assert set(doc) >= {"machine_info", "commit_info", "benchmarks", "datetime", "version"}
    assert doc["commit_info"] == {"id": "abc"}
    assert doc["datetime"] == "2025-11-29T20:00:00+00:00"
    (b,) = doc["benchmarks"]
    s = b["stats"]
    # github-action-benchmark (tool: pytest): fullname, ops, stddev, mean, rounds
    assert b["fullname"] == "tests/test_ops.py::test_mm[4096-bf16]@cuda-events"
    assert s["mean"] == pytest.approx(statistics.fmean(r.rounds))
    assert s["ops"] == pytest.approx(1 / s["mean"])
    assert s["stddev"] == pytest.approx(statistics.stdev(r.rounds))
    assert s["rounds"] == len(r.rounds)
    # Bencher (python_pytest): fullname, median, iqr (seconds)
    assert s["median"] == pytest.approx(r.median)
    assert s["iqr"] == pytest.approx(s["q3"] - s["q1"])
    assert s["data"] == r.rounds and s["iterations"] == r.calls_per_round
    assert b["extra_info"]["verdict"] == "no-change"
    assert doc["machine_info"]["gpu_name"] == "NVIDIA H200"


def test_fullnames_are_unique_across_modes_and_names() -> None:
    rs = [
        result(kind=None, mode="cuda-events"),
        result(kind=None, mode="cuda-graph"),
        result(kind=None, name="backward"),
    ]
    names = [b["fullname"] for b in json.loads(pytest_benchmark(rs))["benchmarks"]]
    assert len(set(names)) == 3


def test_results_without_rounds_are_left_out() -> None:
    r = result(kind=None)
    r.rounds = []
    assert json.loads(pytest_benchmark([r]))["benchmarks"] == []
