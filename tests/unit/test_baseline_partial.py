"""A session's load keeps only the runs of the tests it collected.

``BaselineStore.load(name, nodeids=...)`` is what ``--gpuperf-baseline`` does after
collection; its errors are those of a whole load.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf.baseline import schema
from pytest_gpuperf.baseline.records import RunRecord
from pytest_gpuperf.baseline.store import BaselineStore
from pytest_gpuperf.errors import CorruptBaseline
from tests.unit.test_baseline import KEY, T0, make_result, store_files

MM = "tests/test_ops.py::test_mm[4096-bf16]"
ADD = "tests/test_ops.py::test_add"
ADD_KEY = f"{ADD}@cuda-events"


@pytest.fixture
def store(tmp_path: Path) -> BaselineStore:
    s = BaselineStore(tmp_path / "baselines")
    for day in range(3):
        results = [make_result(MM, run_id=f"r{day}"), make_result(ADD, run_id=f"r{day}")]
        s.save("main", results, now=T0 + dt.timedelta(days=day))
    return s


def _segments(store: BaselineStore) -> list[Path]:
    return sorted((store.root / "main.runs").glob("*.json"))


def _forge(store: BaselineStore, seg: Path, key: str, **fields: Any) -> None:
    """Change a run of ``key`` in ``seg``, written as a save lays it out, and record the
    segment's new SHA-256 in the index (what a forger who knows the format does)."""
    doc = json.loads(seg.read_text())
    next(iter(doc["runs"][key].values())).update(fields)
    seg.write_text(schema.dumps(doc, compact_depth=3))
    sha = hashlib.sha256(seg.read_bytes()).hexdigest()
    index = json.loads(store.path("main").read_text())
    index["segments"][seg.stem]["sha256"] = sha
    store.path("main").write_text(schema.dumps(index))


def test_only_the_collected_tests_runs_are_kept_and_they_are_those_of_a_whole_load(
    store: BaselineStore,
) -> None:
    whole = store.load("main")
    part = store.load("main", nodeids=[MM, "tests/test_other.py::test_not_in_it"])
    assert list(part.benchmarks) == [KEY]
    assert part.benchmarks[KEY] == whole.benchmarks[KEY]
    assert (part.fingerprints, part.policies) == (whole.fingerprints, whole.policies)
    assert store.load("main", nodeids=()).benchmarks == {}


def test_a_forged_run_of_a_collected_test_is_refused_as_a_whole_load_refuses_it(
    store: BaselineStore,
) -> None:
    seg = _segments(store)[1]
    _forge(store, seg, KEY, median="fast")
    before = store_files(store)
    with pytest.raises(CorruptBaseline) as whole:
        store.load("main")
    loaded = store.load("main", nodeids=[MM])  # its runs are read when first used
    for use in (lambda: loaded.benchmarks[KEY], lambda: loaded.match(KEY, {}, None)):
        with pytest.raises(CorruptBaseline) as part:
            use()
        assert str(part.value) == str(whole.value)
    assert f"baseline file {seg} (a segment of main.json) cannot be used" in str(part.value)
    assert store_files(store) == before


def test_a_forged_run_of_a_test_not_collected_is_not_read(store: BaselineStore) -> None:
    """Only the runs a session uses are parsed and validated (where the segment is the one
    the index records); a whole load (the CLI) still refuses the forged one."""
    _forge(store, _segments(store)[1], ADD_KEY, median="fast")
    with pytest.raises(CorruptBaseline):
        store.load("main")
    assert len(store.load("main", nodeids=[MM]).benchmarks[KEY].runs) == 3


@pytest.mark.parametrize("damage", ["missing", "truncated", "edited"])
def test_a_broken_segment_is_refused_even_with_no_collected_test_in_it(
    store: BaselineStore, damage: str
) -> None:
    """A missing or cut segment is found at its two ends, as before collection; one edited
    by hand (its SHA-256 no longer the index's) is read whole and validated."""
    seg = _segments(store)[0]
    if damage == "missing":
        seg.unlink()
    elif damage == "truncated":
        seg.write_bytes(seg.read_bytes()[:100])
    else:
        seg.write_text(seg.read_text().replace('"median": ', '"median": "fast", "x": ', 1))
    with pytest.raises(CorruptBaseline) as whole:
        store.load("main")
    with pytest.raises(CorruptBaseline) as part:
        store.load("main", nodeids=[MM] if damage == "edited" else ())
    assert str(part.value) == str(whole.value)
    assert re.search(r"main\.runs/.*\.json", str(part.value))


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The run ids :meth:`RunRecord.from_dict` makes records of, from now on."""
    made: list[str] = []
    real = RunRecord.from_dict

    def counted(d: Any, policies: Any) -> RunRecord:
        made.append(d["run_id"])
        return real(d, policies)

    monkeypatch.setattr(RunRecord, "from_dict", counted)
    return made


def test_a_session_load_reads_a_benchmarks_runs_when_first_used_and_keeps_few(
    store: BaselineStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With every test collected, no run is parsed by the load itself: a benchmark's are
    read when the gate first asks for them, and only the last few entries are kept."""
    from pytest_gpuperf.baseline import records

    whole = store.load("main")
    made = _counting(monkeypatch)
    part = store.load("main", nodeids=[MM, ADD])
    assert made == [] and set(part.benchmarks) == {KEY, ADD_KEY}
    assert part.stored_runs() == 6 and KEY in part.benchmarks
    assert part.benchmarks[KEY] == whole.benchmarks[KEY]
    assert made == ["r0", "r1", "r2"]
    assert part.benchmarks.get(KEY) is part.benchmarks[KEY]  # kept while recent
    monkeypatch.setattr(records._Entries, "KEEP", 1)
    assert part.benchmarks[ADD_KEY] == whole.benchmarks[ADD_KEY]
    assert part.benchmarks[KEY] == whole.benchmarks[KEY]  # let go, so read again
    assert len(made) == 9


def test_a_segment_changed_or_removed_after_the_load_is_caught_when_its_runs_are_read(
    store: BaselineStore,
) -> None:
    """The run lines found at the load are read again only from the same file; a file
    replaced since is read whole and validated, a removed one is reported missing."""
    seg = _segments(store)[1]
    part = store.load("main", nodeids=[MM])
    _forge(store, seg, KEY, median="fast")
    with pytest.raises(CorruptBaseline) as whole:
        store.load("main")
    with pytest.raises(CorruptBaseline) as late:
        part.benchmarks[KEY]
    assert str(late.value) == str(whole.value)
    seg.unlink()
    with pytest.raises(CorruptBaseline, match=r"the file is missing, and main\.json lists"):
        part.benchmarks[KEY]


def _replace(seg: Path, tick: int, **fields: Any) -> None:
    """``seg`` replaced by a new file renamed over it, as a save writes one, with ``fields``
    changed in every run (its modification time ``tick`` seconds on, so that a file of the
    same size on a reused inode is still another file)."""
    doc = json.loads(seg.read_text())
    for runs in doc["runs"].values():
        for run in runs.values():
            run.update(fields)
    new = seg.with_suffix(".new")
    new.write_text(schema.dumps(doc, compact_depth=3))
    at = seg.stat().st_mtime_ns + tick * 1_000_000_000
    os.utime(new, ns=(at, at))
    os.replace(new, seg)


def test_a_segment_replaced_after_the_load_is_read_once_for_all_its_benchmarks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A segment replaced since the load is read whole and validated once, and each of its
    benchmarks' runs served from that read (then let go); replaced again, it is read again."""
    from pytest_gpuperf.baseline import layout, records

    nodeids = [f"tests/test_ops.py::test_op[{i}]" for i in range(6)]
    store = BaselineStore(tmp_path / "baselines")
    for day in range(2):
        results = [make_result(n, run_id=f"r{day}") for n in nodeids]
        store.save("main", results, now=T0 + dt.timedelta(days=day))
    seg = _segments(store)[0]
    part = store.load("main", nodeids=nodeids)
    keys = list(part.benchmarks)
    reads: list[str] = []
    read_segment = layout.read_segment

    def counted(files: Any, sid: str, *args: Any) -> dict[str, Any]:
        reads.append(sid)
        return read_segment(files, sid, *args)

    monkeypatch.setattr(layout, "read_segment", counted)
    monkeypatch.setattr(records._Entries, "KEEP", 1)  # every access reads the runs again

    def medians(key: str) -> list[float]:
        return [r.median for r in part.benchmarks[key].runs]

    before = [medians(k) for k in keys]
    assert reads == [] and all(m[0] != 7e-4 for m in before)
    _replace(seg, 1, median=7e-4)
    got = {k: part.benchmarks[k] for k in keys}
    assert reads == [seg.stem]  # six benchmarks, one read
    lazy = [part.benchmarks._benches[k]["runs"] for k in keys]  # type: ignore[attr-defined]
    assert all(later._later[0][1].reread.runs == {} for later in lazy)  # all let go
    whole = store.load("main")
    assert got == {k: whole.benchmarks[k] for k in keys}
    assert [[r.median for r in e.runs] for e in got.values()] == [[7e-4, m[1]] for m in before]
    reads.clear()
    _replace(seg, 2, median=8e-4)
    assert [medians(k)[0] for k in keys[:3]] == [8e-4] * 3
    assert reads == [seg.stem]
    _replace(seg, 3, median=9e-4)  # the runs kept for the other three are of the file before
    assert [medians(k)[0] for k in keys[3:]] == [9e-4] * 3
    assert reads == [seg.stem] * 2
    _forge(store, seg, keys[0], median="fast")
    with pytest.raises(CorruptBaseline, match="median"):
        part.benchmarks[keys[0]]


def test_a_judge_lets_go_of_the_runs_of_the_benchmarks_it_judged(store: BaselineStore) -> None:
    from pytest_gpuperf.verdict.judge import Judge

    judge = Judge(store.load("main", nodeids=[MM, ADD]))
    mm, add = make_result(MM, run_id="now"), make_result(ADD, run_id="now")
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
    """Keys with quotes, backslashes and accents are found in a segment as saved (read on
    first use); a segment laid out otherwise (its SHA-256 recorded) is read at the load."""
    odd = 'tests/test_ops.py::test_x[é"\\\\ 1]'
    store = BaselineStore(tmp_path / "baselines")
    for day in range(2):
        results = [make_result(odd, run_id=f"r{day}"), make_result(ADD, run_id=f"r{day}")]
        store.save("main", results, now=T0 + dt.timedelta(days=day))
    if layout == "reindented":
        for seg in _segments(store):
            seg.write_text(json.dumps(json.loads(seg.read_text()), indent=1))
            index = json.loads(store.path("main").read_text())
            index["segments"][seg.stem]["sha256"] = hashlib.sha256(seg.read_bytes()).hexdigest()
            store.path("main").write_text(schema.dumps(index))
    whole = store.load("main")
    made = _counting(monkeypatch)
    part = store.load("main", nodeids=[odd])
    assert len(made) == (2 if layout == "reindented" else 0)
    (key,) = part.benchmarks
    assert part.benchmarks[key] == whole.benchmarks[key] and len(whole.benchmarks[key].runs) == 2
