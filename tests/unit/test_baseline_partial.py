"""A session's load keeps only the runs of the tests it collected, as they were at the load.

``BaselineStore.load(name, nodeids=...)`` is what ``--gpuperf-baseline`` does after
collection; its errors are those of a whole load.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf.baseline import codec, fileio
from pytest_gpuperf.baseline.fingerprint import fingerprint
from pytest_gpuperf.baseline.store import BaselineStore
from pytest_gpuperf.errors import CorruptBaseline
from pytest_gpuperf.model import Result
from tests.unit.reporting_data import GPU_ENV
from tests.unit.test_baseline import KEY, T0, make_run, store_files

MM = "tests/test_ops.py::test_mm[4096-bf16]"
ADD = "tests/test_ops.py::test_add"
ADD_KEY = f"{ADD}@cuda-events"


@pytest.fixture
def store(tmp_path: Path) -> BaselineStore:
    s = BaselineStore(tmp_path / "baselines")
    for day in range(3):
        results = [make_run(MM, run_id=f"r{day}"), make_run(ADD, run_id=f"r{day}")]
        s.save("main", results, now=T0 + dt.timedelta(days=day))
    return s


def _segments(store: BaselineStore) -> list[Path]:
    return sorted((store.root / "main.runs").glob("*.json"))


def _forge(store: BaselineStore, seg: Path, key: str, **fields: Any) -> None:
    """Change a run of ``key`` in ``seg``, written as a save lays it out, and record the
    segment's new SHA-256 in the index (what a forger who knows the format does)."""
    doc = json.loads(seg.read_text())
    next(iter(doc["runs"][key].values())).update(fields)
    seg.write_text(fileio.dumps(doc, compact_depth=3))
    sha = hashlib.sha256(seg.read_bytes()).hexdigest()
    index = json.loads(store.path("main").read_text())
    index["segments"][seg.stem]["sha256"] = sha
    store.path("main").write_text(fileio.dumps(index))


def test_only_the_collected_tests_runs_are_kept_and_they_are_those_of_a_whole_load(
    store: BaselineStore,
) -> None:
    whole = store.load("main")
    part = store.load("main", nodeids=[MM, "tests/test_other.py::test_not_in_it"])
    assert list(part.benchmarks) == [KEY]
    assert part.benchmarks[KEY].runs == whole.benchmarks[KEY].runs
    assert (part.fingerprints, part.policies) == (whole.fingerprints, whole.policies)
    assert store.load("main", nodeids=()).benchmarks == {}


def test_a_forged_run_of_a_collected_test_is_refused_as_a_whole_load_refuses_it(
    store: BaselineStore,
) -> None:
    seg = _segments(store)[1]
    _forge(store, seg, KEY, calls_per_round="fast")
    before = store_files(store)
    with pytest.raises(CorruptBaseline) as whole:
        store.load("main")
    loaded = store.load("main", nodeids=[MM, ADD])  # that test's verdict says it, not the load
    here = fingerprint(GPU_ENV)
    for use in (lambda: loaded.benchmarks[KEY].runs, lambda: loaded.match(KEY, here, None)):
        with pytest.raises(CorruptBaseline) as part:
            use()
        assert str(part.value) == str(whole.value)
    assert f"baseline file {seg} (a segment of main.json) cannot be used" in str(part.value)
    assert len(loaded.benchmarks[ADD_KEY].runs) == 3  # the other test's runs are read
    assert store_files(store) == before


def test_a_forged_run_of_a_test_not_collected_is_not_read(store: BaselineStore) -> None:
    """Only the runs a session uses are parsed and checked (where the segment is the one
    the index records); a whole load (the CLI) still refuses the forged one."""
    _forge(store, _segments(store)[1], ADD_KEY, calls_per_round="fast")
    with pytest.raises(CorruptBaseline):
        store.load("main")
    assert len(store.load("main", nodeids=[MM]).benchmarks[KEY].runs) == 3


@pytest.mark.parametrize("damage", ["missing", "truncated", "edited"])
def test_a_broken_segment_is_refused_even_with_no_collected_test_in_it(
    store: BaselineStore, damage: str
) -> None:
    """A missing or cut segment is found at its two ends, as before collection; one edited
    by hand (its SHA-256 no longer the index's) is read whole and checked."""
    seg = _segments(store)[0]
    if damage == "missing":
        seg.unlink()
    elif damage == "truncated":
        seg.write_bytes(seg.read_bytes()[:100])
    else:
        text = seg.read_text().replace('"calls_per_round": ', '"calls_per_round": "x", "x": ', 1)
        seg.write_text(text)
    with pytest.raises(CorruptBaseline) as whole:
        store.load("main")
    with pytest.raises(CorruptBaseline) as part:
        store.load("main", nodeids=[MM] if damage == "edited" else ())
    assert str(part.value) == str(whole.value)
    assert re.search(r"main\.runs/.*\.json", str(part.value))


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The run ids of the lines :func:`codec.check_line` checks, from now on."""
    checked: list[str] = []
    real = codec.check_line

    def counted(line: Any, where: str) -> None:
        checked.append(line["run_id"])
        real(line, where)

    monkeypatch.setattr(codec, "check_line", counted)
    return checked


def test_a_session_load_parses_only_the_runs_of_its_tests(
    store: BaselineStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked = _counting(monkeypatch)
    part = store.load("main", nodeids=[MM])
    assert checked == ["r0", "r1", "r2"] and part.stored_runs() == 3
    checked.clear()
    store.load("main")
    assert sorted(checked) == ["r0", "r0", "r1", "r1", "r2", "r2"]


def test_saves_during_a_compare_change_nothing_of_what_it_judges(tmp_path: Path) -> None:
    """R1: a compare read its runs when it judged each test; saves meanwhile that dropped
    old runs (keep-runs) deleted their segments, and every test with runs there failed "the
    file is missing, and main.json lists runs in it". The runs of a load are the baseline as
    it was at the load, whatever is saved or pruned after."""
    from pytest_gpuperf.verdict.judge import Judge

    store = BaselineStore(tmp_path / "baselines")
    for day in range(20):  # a full baseline, at the default keep-runs
        runs = [make_run(MM, run_id=f"r{day}"), make_run(ADD, run_id=f"r{day}")]
        store.save("main", runs, now=T0 + dt.timedelta(days=day))
    first = _segments(store)[0]
    judge = Judge(store.load("main", nodeids=[MM, ADD]))  # the gate's load, after collection
    for day in (20, 21):  # two ordinary saves: the oldest runs go, and their segments
        store.save("main", [make_run(MM, run_id=f"r{day}")], now=T0 + dt.timedelta(days=day))
    store.prune("main", keep_runs=1)
    store.save("main", [make_run(ADD, run_id="r22")], now=T0 + dt.timedelta(days=22))
    assert not first.exists()
    for nodeid in (MM, ADD):
        match = judge.match(Result(make_run(nodeid, run_id="now")))
        assert match.status == "match"
        assert [r.run_id for r in match.runs] == [f"r{day}" for day in range(20)]


def test_a_judge_lets_go_of_the_runs_of_the_benchmarks_it_judged(store: BaselineStore) -> None:
    from pytest_gpuperf.verdict.judge import Judge

    judge = Judge(store.load("main", nodeids=[MM, ADD]))
    mm, add = Result(make_run(MM, run_id="now")), Result(make_run(ADD, run_id="now"))
    first = judge.match(mm)
    assert first.status == "match" and len(first.runs) == 3
    judge.match(add)
    judge.forget([KEY])
    assert [k for k, _ in judge._matches] == [ADD_KEY]
    assert judge.match(mm) == first


@pytest.mark.parametrize("layout", ["as saved", "reindented"])
def test_odd_names_and_a_segment_laid_out_otherwise_give_the_runs_of_a_whole_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    """Keys with quotes, backslashes and accents are found in a segment as saved; a segment
    laid out otherwise (its SHA-256 recorded) is read and checked whole."""
    odd = 'tests/test_ops.py::test_x[é"\\\\ 1]'
    store = BaselineStore(tmp_path / "baselines")
    for day in range(2):
        runs = [make_run(odd, run_id=f"r{day}"), make_run(ADD, run_id=f"r{day}")]
        store.save("main", runs, now=T0 + dt.timedelta(days=day))
    if layout == "reindented":
        for seg in _segments(store):
            seg.write_text(json.dumps(json.loads(seg.read_text()), indent=1))
            index = json.loads(store.path("main").read_text())
            index["segments"][seg.stem]["sha256"] = hashlib.sha256(seg.read_bytes()).hexdigest()
            store.path("main").write_text(fileio.dumps(index))
    whole = store.load("main")
    checked = _counting(monkeypatch)
    part = store.load("main", nodeids=[odd])
    assert len(checked) == (4 if layout == "reindented" else 2)
    (key,) = part.benchmarks
    assert part.benchmarks[key].runs == whole.benchmarks[key].runs
    assert len(whole.benchmarks[key].runs) == 2
