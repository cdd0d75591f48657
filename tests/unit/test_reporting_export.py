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
    assert s["mean"] == pytest.approx(statistics.fmean(r.run.rounds))
    assert s["ops"] == pytest.approx(1 / s["mean"])
    assert s["stddev"] == pytest.approx(statistics.stdev(r.run.rounds))
    assert s["rounds"] == len(r.run.rounds)
    # Bencher (python_pytest): fullname, median, iqr (seconds)
    assert s["median"] == pytest.approx(r.run.median)
    assert s["iqr"] == pytest.approx(s["q3"] - s["q1"])
    assert s["data"] == list(r.run.rounds) and s["iterations"] == r.run.calls_per_round
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
    r = result(kind=None, measured={"rounds": []})
    assert json.loads(pytest_benchmark([r]))["benchmarks"] == []


def test_csv_cells_that_a_spreadsheet_would_run_are_made_plain_text() -> None:
    """T11: `=HYPERLINK(...)`, `+1+1`, `-2+3`, `@SUM(A1)` reached the CSV raw."""
    import csv
    import io

    from pytest_gpuperf.model import BenchId
    from pytest_gpuperf.reporting import csv_report

    attacks = ['=HYPERLINK("http://x","c")', "+1+1", "-2+3", "@SUM(A1)"]
    assert csv_report.cell("\t=1") == "'\t=1" and csv_report.cell("\r=1") == "'\r=1"
    results = []
    for i, attack in enumerate(attacks):
        bid = BenchId(f"tests/test_ops.py::test_p[{i}]", attack, "cuda-events",
                      (("p", attack), ("n", "-1.5")))  # fmt: skip
        results.append(result(f"test_p[{i}]", ratio=0.5, measured={"id": bid}))
    rows = list(csv.DictReader(io.StringIO(csv_report.render(results))))
    assert len(rows) == len(attacks)
    for got, attack in zip(rows, attacks, strict=True):
        for column in ("name", "param:p"):
            assert got[column] == "'" + attack  # text, shown as typed
        assert all(not str(x).startswith(("=", "+", "@", "\t")) for x in got.values())
        assert got["param:n"] == "-1.5"  # a number is not a formula
        assert float(got["median_s"]) > 0 and got["ratio"] == "0.5"
