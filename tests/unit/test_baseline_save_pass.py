"""A save in one pass: what it writes, and what it refuses, is what it was."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf.baseline.store import BaselineStore
from pytest_gpuperf.errors import BaselineError
from pytest_gpuperf.model import thawed
from tests.unit.test_baseline import T0, make_run

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
    """An opaque value nested deeper than a reader accepts: the run is not saved, with why,
    and no file is left behind (no index, no runs folder)."""
    store = BaselineStore(tmp_path)
    summary = store.save("main", [make_run()], meta={"deep": _deep(40)}, now=T0)
    assert summary.added == 0 and "nested more than 32 levels deep" in summary.skipped[0][1]
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == []


def test_a_refused_save_into_an_existing_baseline_leaves_it_as_it_was(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    store.save("main", [make_run(run_id="a")], now=T0)
    before = {p.name: p.read_bytes() for p in tmp_path.rglob("*.json")}
    summary = store.save("main", [make_run(run_id="b")], meta={"deep": _deep(40)}, now=T0)
    assert summary.added == 0 and "nothing saved" in summary.describe()
    assert {p.name: p.read_bytes() for p in tmp_path.rglob("*.json")} == before
    assert [r.run_id for r in store.load("main").benchmarks[make_run().id.key].runs] == ["a"]


def test_an_invalid_segment_is_never_written(tmp_path: Path, monkeypatch: Any) -> None:
    """What a save made that it would refuse to read (a bug) is refused with the segment."""
    from pytest_gpuperf.baseline import codec

    store = BaselineStore(tmp_path)
    store.save("main", [make_run(run_id="a")], now=T0)
    before = {p.name: p.read_bytes() for p in tmp_path.rglob("*.json")}
    line, check = codec.run_line, codec.check_line
    monkeypatch.setattr(codec, "run_line", lambda run: {**line(run), "x": 1})
    # the save's own check of each run let through: the segment's check still refuses it
    monkeypatch.setattr(
        codec, "check_line", lambda d, where: check(d, where) if where.startswith("runs[") else None
    )
    with pytest.raises(BaselineError, match=r"refusing to write an invalid segment \S+ of "):
        store.save("main", [make_run(run_id="b")], now=T0)
    assert {p.name: p.read_bytes() for p in tmp_path.rglob("*.json")} == before


def test_a_numerics_value_that_is_no_fingerprint_is_left_out_and_the_run_saved(
    tmp_path: Path,
) -> None:
    store = BaselineStore(tmp_path)
    summary = store.save("main", [make_run(numerics=[{"path": "out"}])], now=T0)
    assert summary.added == 1
    [seg] = (tmp_path / "main.runs").glob("*.json")
    runs = json.loads(seg.read_text())["runs"]
    [run] = [r for by_digest in runs.values() for r in by_digest.values()]
    assert "numerics" not in run


def test_a_saved_numerics_fingerprint_is_read_back(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    store.save("main", [make_run(numerics=NUMERICS)], now=T0)
    [run] = store.load("main").benchmarks[make_run().id.key].runs
    assert thawed(run.numerics) == NUMERICS
