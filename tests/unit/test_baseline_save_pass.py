"""A save in one pass: what it writes, and what it refuses, is what it was."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf.baseline import schema
from pytest_gpuperf.baseline.fingerprint import fingerprint
from pytest_gpuperf.baseline.records import record_from_result
from pytest_gpuperf.baseline.store import BaselineStore
from pytest_gpuperf.errors import BaselineError
from tests.unit.reporting_data import GPU_ENV
from tests.unit.test_baseline import T0, make_result

NUMERICS = [
    {
        "path": "out",
        "shape": [4],
        "dtype": "float32",
        "numel": 4,
        "nan": 0,
        "inf": 0,
        "stats": {"mean": 1.5, "abs_mean": 1.5, "min": 1.0, "max": 2.0, "std": 0.5},
        "samples": [1.0, 2.0],
    }
]


def _deep(levels: int) -> Any:
    value: Any = 1.0
    for _ in range(levels):
        value = {"x": value}
    return value


def test_a_run_the_store_would_refuse_to_read_is_not_written(tmp_path: Path) -> None:
    """An opaque value nested deeper than a reader accepts: the save names the segment it
    refuses to write, and leaves no file behind (no index, no runs folder)."""
    store = BaselineStore(tmp_path)
    with pytest.raises(BaselineError, match=r"refusing to write an invalid segment \S+ of "):
        store.save("main", [make_result()], extras={"k": {}}, meta={"deep": _deep(40)}, now=T0)
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == []


def test_a_refused_save_into_an_existing_baseline_leaves_it_as_it_was(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    store.save("main", [make_result(run_id="a")], now=T0)
    before = {p.name: p.read_bytes() for p in tmp_path.rglob("*.json")}
    with pytest.raises(BaselineError, match="refusing to write an invalid segment"):
        store.save("main", [make_result(run_id="b")], meta={"deep": _deep(40)}, now=T0)
    assert {p.name: p.read_bytes() for p in tmp_path.rglob("*.json")} == before
    assert [r.run_id for r in store.load("main").benchmarks[make_result().id.key].runs] == ["a"]


def test_a_record_given_the_fingerprint_is_the_record_given_its_id() -> None:
    fp = fingerprint(GPU_ENV)
    r = make_result(numerics=NUMERICS)
    by_fp = record_from_result(r, timestamp="2026-01-01T00:00:00+00:00", fingerprint=fp)
    by_id = record_from_result(
        r, timestamp="2026-01-01T00:00:00+00:00", fingerprint_id=schema.fingerprint_id(fp)
    )
    assert by_fp == by_id and list(by_fp) == list(by_id)
    assert by_fp["numerics"] == NUMERICS


def test_a_numerics_value_that_is_no_fingerprint_is_left_out_and_the_run_saved(
    tmp_path: Path,
) -> None:
    store = BaselineStore(tmp_path)
    summary = store.save("main", [make_result(numerics=[{"path": "out"}])], now=T0)
    assert summary.added == 1
    [seg] = (tmp_path / "main.runs").glob("*.json")
    runs = json.loads(seg.read_text())["runs"]
    [run] = [r for by_digest in runs.values() for r in by_digest.values()]
    assert "numerics" not in run


def test_a_saved_numerics_fingerprint_is_read_back(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    store.save("main", [make_result(numerics=NUMERICS)], now=T0)
    [run] = store.load("main").benchmarks[make_result().id.key].runs
    assert run.numerics == tuple(NUMERICS)
