"""Baseline storage: round trip, bad input, trimming, concurrency, killed saves, versions."""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import math
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf import __version__
from pytest_gpuperf.baseline import schema
from pytest_gpuperf.baseline.filelock import locked
from pytest_gpuperf.baseline.fingerprint import fingerprint
from pytest_gpuperf.baseline.records import (
    MATCH,
    NO_BENCHMARK,
    OTHER_ENVIRONMENT,
    OTHER_POLICY,
    record_from_result,
)
from pytest_gpuperf.baseline.schema import fingerprint_id
from pytest_gpuperf.baseline.store import BaselineStore
from pytest_gpuperf.errors import (
    BaselineError,
    BaselineLocked,
    CorruptBaseline,
    GpuPerfError,
    InvalidBaselineName,
    UnknownBaseline,
)
from pytest_gpuperf.model import BenchId, Result
from tests.unit.reporting_data import CPU_ENV, GPU_ENV
from tests.unit.test_locks import needs_root

DATA = Path(__file__).parent.parent / "data"
T0 = dt.datetime(2025, 11, 29, 19, 38, tzinfo=dt.timezone.utc)

POLICY = {"round_ms": 5.0, "rounds": 20, "warmup_ms": 500.0, "l2_flush": True}
KEY = "tests/test_ops.py::test_mm[4096-bf16]@cuda-events"


def make_result(
    nodeid: str = "tests/test_ops.py::test_mm[4096-bf16]",
    *,
    name: str | None = None,
    mode: str = "cuda-events",
    level: float = 5.9312345e-4,
    n: int = 20,
    env: dict[str, Any] | None = None,
    run_id: str | None = "run-1",
    policy: dict[str, Any] | None = None,
    **kw: Any,
) -> Result:
    """A Result as the fixture makes it, with deterministic rounds around ``level`` seconds."""
    params = (("shape", "4096"), ("dtype", "bf16")) if "[" in nodeid else ()
    rounds = [level * (1 + 0.002 * ((i * 7) % 5 - 2)) for i in range(n)]
    fields: dict[str, Any] = {
        "device": "cuda" if mode != "cpu" else "cpu",
        "calls_per_round": 8,
        "first_call_s": 0.84123456,
        "peak_memory_bytes": 1 << 30,
        "flops": 2.0 * 4096**3,
        "bytes": 3.0 * 2 * 4096**2,
        "environment": GPU_ENV if env is None else env,
        "policy": POLICY if policy is None else policy,
        "run_id": run_id,
    }
    fields.update(kw)
    return Result(id=BenchId(nodeid, name, mode, params), rounds=rounds, **fields)


@pytest.fixture
def store(tmp_path: Path) -> BaselineStore:
    return BaselineStore(tmp_path / "baselines")


def fp_id(env: dict[str, Any]) -> str:
    return fingerprint_id(fingerprint(env))


def stored_runs(store: BaselineStore, name: str = "main") -> list[dict[str, Any]]:
    """Every run as written in the baseline's segments (``NAME.runs/*.json``)."""
    out = []
    for path in sorted((store.root / f"{name}.runs").glob("*.json")):
        for by_digest in json.loads(path.read_text())["runs"].values():
            out.extend(by_digest.values())
    return out


def store_files(store: BaselineStore, name: str = "main") -> dict[str, bytes]:
    """Every file of baseline ``name`` (index and segments), by path relative to the folder."""
    paths = [store.root / f"{name}.json", *sorted((store.root / f"{name}.runs").glob("*"))]
    return {str(p.relative_to(store.root)): p.read_bytes() for p in paths if p.is_file()}


# --- round trip ----------------------------------------------------------------


def test_save_then_load_keeps_every_field(store: BaselineStore) -> None:
    r = make_result(telemetry={"sm_clock_mhz": {"median": 1980}}, warmup=[6e-4] * 7, trimmed=2)
    inventory = {"kernels": [{"name": "sm90_xmma_gemm", "launches": 1, "gpu_s": 5.9e-4}]}
    summary = store.save(
        "main",
        [r],
        meta={"git_sha": "deadbeef", "ci_job": 42},
        extras={KEY: inventory},
        now=T0,
    )
    assert summary.created and summary.added == 1 and summary.dropped == 0
    assert summary.path == store.path("main") == store.root / "main.json"

    b = store.load("main")
    assert b.name == "main" and b.read_version == schema.SCHEMA_VERSION
    assert b.created == b.updated == "2025-11-29T19:38:00+00:00"
    assert list(b.fingerprints) == [fp_id(GPU_ENV)]
    entry = b.benchmarks[KEY]
    assert (entry.nodeid, entry.name, entry.mode) == (r.id.nodeid, None, "cuda-events")
    assert entry.params == {"shape": "4096", "dtype": "bf16"}
    [run] = b.runs(KEY, fp_id(GPU_ENV), POLICY)
    assert run.run_id == "run-1"
    assert run.timestamp == "2025-11-29T19:38:00+00:00"
    assert run.meta == {"git_sha": "deadbeef", "ci_job": 42}
    assert run.rounds == tuple(float(f"{x:.4g}") for x in r.rounds)  # 4 significant figures
    assert run.median == pytest.approx(r.median, rel=1e-6)
    assert run.log_median == pytest.approx(math.log(r.median), abs=1e-5)
    assert run.rel_iqr == pytest.approx(r.summary.rel_iqr, rel=1e-3)
    assert run.calls_per_round == 8 and run.stability == "steady"
    assert run.first_call_s == 0.8412
    assert run.peak_memory_bytes == 1 << 30
    assert (run.flops, run.bytes) == (r.flops, r.bytes)
    assert run.policy == POLICY
    assert run.telemetry == {"sm_clock_mhz": {"median": 1980}}
    assert run.extra == inventory
    assert (run.warmup_rounds, run.trimmed) == (7, 2)
    assert run.plugin_version == __version__
    assert b.policies == {run.policy_id: POLICY}


def test_runs_share_one_policy_entry_and_stale_policies_go(store: BaselineStore) -> None:
    for i in range(3):
        store.save("main", [make_result(run_id=f"a{i}")], keep_runs=2, now=T0)
    assert len(store.load("main").policies) == 1
    other = dict(POLICY, round_ms=2.0)
    for i in range(2):
        store.save("main", [make_result(run_id=f"b{i}", policy=other)], keep_runs=2, now=T0)
    b = store.load("main")  # the newest two runs both use the new policy
    assert list(b.policies.values()) == [other]
    assert [r.run_id for r in b.runs(KEY, fp_id(GPU_ENV), other)] == ["b0", "b1"]


def test_runs_without_a_value_leave_the_field_out(store: BaselineStore) -> None:
    store.save("main", [make_result(flops=None, bytes=None, peak_memory_bytes=None)], now=T0)
    [run] = stored_runs(store)
    assert not {"flops", "bytes", "peak_memory_bytes", "telemetry", "extra", "meta"} & set(run)
    [rec] = store.load("main").benchmarks[KEY].runs
    assert (rec.flops, rec.bytes, rec.extra, rec.meta) == (None, None, None, {})


def test_record_from_result_accepts_the_dict_that_travels_from_workers() -> None:
    r = make_result()
    a = record_from_result(r, fingerprint_id="f", timestamp="2025-01-01T00:00:00+00:00")
    b = record_from_result(r.to_dict(), fingerprint_id="f", timestamp="2025-01-01T00:00:00+00:00")
    assert a == b


def test_numbers_of_other_types_are_saved_as_plain_numbers(store: BaselineStore) -> None:
    """A result made in this process keeps what the user gave (``flops=np.prod(shape)`` is a
    NumPy integer); the file holds plain JSON numbers."""
    from decimal import Decimal

    r = make_result(flops=Decimal(2_000), bytes=Decimal("512.5"), peak_memory_bytes=4096.0)
    store.save("main", [r], now=T0)
    [run] = stored_runs(store)
    assert (run["flops"], run["bytes"], run["peak_memory_bytes"]) == (2000.0, 512.5, 4096)
    assert type(run["peak_memory_bytes"]) is int


def test_a_result_kept_in_process_saves_what_a_workers_dict_saves(store: BaselineStore) -> None:
    """In one process the session keeps the result objects and makes their free-form fields
    plain (``Result.make_plain``); an xdist worker sends ``to_dict()``. Both save the same
    run, the output fingerprint included, whose standard deviation overflowed to inf."""
    fp = [
        {"path": "out", "shape": (2,), "dtype": "torch.float64", "numel": 2, "nan": 0,
         "inf": 0, "samples": [1e200, -1e200],
         "stats": {"mean": 0.0, "abs_mean": 1e200, "min": -1e200, "max": 1e200,
                   "std": math.inf}},
    ]  # fmt: skip
    kept = make_result(numerics=fp, telemetry={"clocks": (1980, 1755), "power_w": math.nan})
    sent = Result.from_dict(kept.to_dict())
    kept.make_plain()
    assert kept.numerics == sent.numerics and kept.telemetry == sent.telemetry
    assert kept.telemetry == {"clocks": [1980, 1755], "power_w": None}
    stamp = "2025-01-01T00:00:00+00:00"
    a = record_from_result(kept, fingerprint_id="f", timestamp=stamp)
    b = record_from_result(sent, fingerprint_id="f", timestamp=stamp)
    assert a == b and a["numerics"][0]["stats"]["std"] is None


def test_results_that_cannot_be_runs_are_skipped_with_a_reason(store: BaselineStore) -> None:
    good = make_result()
    empty = make_result("tests/t.py::test_empty", n=0)
    no_env = make_result("tests/t.py::test_noenv", environment=None)
    summary = store.save("main", [good, empty, no_env], now=T0)
    assert summary.added == 1
    assert dict(summary.skipped) == {
        "tests/t.py::test_empty@cuda-events": "tests/t.py::test_empty@cuda-events: "
        "no measured rounds",
        "tests/t.py::test_noenv@cuda-events": "no environment recorded, so no fingerprint",
    }
    assert "skipped 2 result(s)" in summary.describe()


def test_saving_the_same_run_again_adds_nothing(store: BaselineStore) -> None:
    store.save("main", [make_result()], now=T0)
    before = store_files(store)
    again = store.save("main", [make_result()], now=T0 + dt.timedelta(hours=1))
    assert again.added == 0 and again.skipped == ((KEY, "run run-1 is already saved"),)
    assert store_files(store) == before
    # Another run that happens to share the run id (a subprocess of one session) is kept.
    store.save("main", [make_result(level=6e-4)], now=T0)
    assert len(store.load("main").benchmarks[KEY].runs) == 2


def test_nothing_to_save_writes_nothing(store: BaselineStore) -> None:
    summary = store.save("main", [], now=T0)
    assert summary.added == 0 and not store.exists("main")


# --- names ---------------------------------------------------------------------


def test_names_lists_baselines_and_ignores_everything_else(store: BaselineStore) -> None:
    assert store.names() == []  # the directory does not exist yet
    store.save("main", [make_result()], now=T0)
    store.save("nightly-h200", [make_result()], now=T0)
    (store.root / ".main.json.abc.tmp").write_text("{")  # left by a killed save
    (store.root / "notes.txt").write_text("hi")
    (store.root / "bad name.json").write_text("{}")
    assert store.names() == ["main", "nightly-h200"]


@pytest.mark.parametrize("name", ["", "../x", "a/b", ".hidden", "..", "a b", "x" * 101, "é"])
def test_invalid_names_are_refused(store: BaselineStore, name: str) -> None:
    with pytest.raises(InvalidBaselineName, match="invalid baseline name"):
        store.path(name)
    with pytest.raises(InvalidBaselineName):
        store.save(name, [make_result()], now=T0)
    assert not store.root.exists()


def test_a_name_ending_in_json_is_refused_with_the_name_to_use(store: BaselineStore) -> None:
    """--gpuperf-save=main.json made main.json.json, listed as main.json, which show could not
    open."""
    with pytest.raises(InvalidBaselineName, match=r"'main\.json'.* without \.json: use 'main'"):
        store.save("main.json", [make_result()], now=T0)
    assert not store.root.exists()
    store.root.mkdir()
    (store.root / "main.json.json").write_text("{}")  # left by an older version
    assert store.names() == []


def test_unknown_name_lists_the_existing_ones(store: BaselineStore) -> None:
    store.save("main", [make_result()], now=T0)
    store.save("nightly", [make_result()], now=T0)
    with pytest.raises(UnknownBaseline) as exc:
        store.load("mian")
    msg = str(exc.value)
    assert "no baseline named 'mian'" in msg
    assert str(store.root) in msg
    assert "it has: main, nightly" in msg
    assert "Did you mean 'main'?" in msg
    assert exc.value.existing == ["main", "nightly"]
    assert isinstance(exc.value, GpuPerfError)


def test_unknown_name_in_an_empty_directory_says_how_to_create_one(store: BaselineStore) -> None:
    with pytest.raises(UnknownBaseline, match=r"holds no baselines yet.*--gpuperf-save=main"):
        store.load("main")


# --- bad files -----------------------------------------------------------------


def _valid_text(tmp_path: Path) -> str:
    """A valid one-file baseline (schema version 2), as releases before version 3 wrote it."""
    from pytest_gpuperf.baseline import layout

    s = BaselineStore(tmp_path / "src")
    s.save("main", [make_result()], meta={"git_sha": "abc"}, now=T0)
    s.save("main", [make_result(run_id="run-2")], now=T0)
    doc, _ = layout.load(s.files("main"))
    return schema.dumps(doc)


def _edit(fn: Callable[[dict[str, Any]], Any]) -> Callable[[str], str]:
    def apply(text: str) -> str:
        doc = json.loads(text)
        fn(doc)
        return schema.dumps(doc)

    return apply


def _runs(doc: dict[str, Any]) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = doc["benchmarks"][KEY]["runs"]
    return runs


CORRUPTIONS: dict[str, tuple[Callable[[str], str], str]] = {
    "empty": (lambda t: "", "the file is empty"),
    "truncated": (lambda t: t[: len(t) // 2], r"truncated: the JSON ends before it is complete"),
    "truncated-at-a-line": (
        lambda t: "\n".join(t.splitlines()[:30]) + "\n",
        r"truncated: .*the parser stopped at line 31, column 1",
    ),
    "hand-broken": (
        lambda t: t.replace('"mode": "cuda-events",', '"mode": "cuda-events"', 1),
        r"invalid JSON at line 5, column 7: Expecting ',' delimiter",
    ),
    "not-utf8": (lambda t: t.replace('"abc"', '"\udcff"', 1), r"not UTF-8 text \(invalid byte at"),
    "merge-conflict": (
        lambda t: "<<<<<<< HEAD\n" + t + "=======\n" + t + ">>>>>>> main\n",
        "git merge-conflict markers",
    ),
    "top-level-list": (lambda t: "[" + t + "]", "top level: expected an object, got a list of 1"),
    "not-a-baseline": (
        _edit(lambda d: d.update(schema="pytest-gpuperf/results")),
        "not a pytest-gpuperf baseline file",
    ),
    "no-schema": (_edit(lambda d: d.pop("schema")), "missing field 'schema'"),
    "version-not-int": (
        _edit(lambda d: d.update(schema_version="1")),
        "schema_version: expected a whole number >= 1, got the string '1'",
    ),
    "missing-field": (
        _edit(lambda d: d["benchmarks"][KEY].pop("runs")),
        re.escape(f"benchmarks['{KEY}']: missing field 'runs'"),
    ),
    "missing-run-field": (
        _edit(lambda d: _runs(d)[1].pop("median")),
        re.escape(f"benchmarks['{KEY}'].runs[1]: missing field 'median'"),
    ),
    "wrong-type": (
        _edit(lambda d: _runs(d)[0].update(rounds="fast")),
        re.escape(f"benchmarks['{KEY}'].runs[0].rounds: expected a non-empty list of numbers"),
    ),
    "negative-median": (
        _edit(lambda d: _runs(d)[0].update(median=-1)),
        r"runs\[0\]\.median: expected a number > 0, got int -1",
    ),
    "bool-count": (
        _edit(lambda d: _runs(d)[0].update(calls_per_round=True)),
        r"calls_per_round: expected a whole number >= 1, got the boolean true",
    ),
    "nan": (
        lambda t: re.sub(r'"rel_iqr": [^,]+', '"rel_iqr": NaN', t, count=1),
        r"rel_iqr: expected a number >= 0, got float nan",
    ),
    "bad-timestamp": (
        _edit(lambda d: _runs(d)[0].update(timestamp="yesterday")),
        r"timestamp: expected an ISO 8601 timestamp with a time zone",
    ),
    "naive-timestamp": (
        _edit(lambda d: d.update(updated="2025-11-29T19:38:00")),
        r"updated: expected an ISO 8601 timestamp with a time zone, got the string",
    ),
    "huge-number": (
        lambda t: re.sub(r'"median": [^,]+', '"median": 1' + "0" * 400, t, count=1),
        r"runs\[0\]\.median: expected a number > 0, got int 1" + "0" * 36 + r"\.\.\.",
    ),
    "duplicate-key": (
        lambda t: t.replace('"median": ', '"median": 1.0,\n          "median": ', 1),
        r"the key 'median' appears twice in one object",
    ),
    "unknown-field": (
        _edit(lambda d: _runs(d)[0].update(medain=1.0)),
        r"unknown field 'medain'",
    ),
    "dangling-fingerprint": (
        _edit(lambda d: _runs(d)[0].update(fingerprint="0123456789ab")),
        r"fingerprint: '0123456789ab' is not in the fingerprints table",
    ),
    "dangling-policy": (
        _edit(lambda d: _runs(d)[1].update(policy="0123456789ab")),
        r"runs\[1\]\.policy: '0123456789ab' is not in the policies table",
    ),
    "null-optional-field": (
        _edit(lambda d: _runs(d)[0].update(flops=None)),
        r"runs\[0\]\.flops: expected a number >= 0, got null",
    ),
    "bad-fingerprint-value": (
        _edit(lambda d: next(iter(d["fingerprints"].values())).update(driver=[580])),
        r"\['driver'\]: expected a string, number, boolean or null, got a list of 1",
    ),
    "future-version": (
        _edit(lambda d: d.update(schema_version=schema.SCHEMA_VERSION + 1)),
        rf"schema_version {schema.SCHEMA_VERSION + 1} was written by a newer pytest-gpuperf",
    ),
}


@pytest.mark.parametrize("kind", list(CORRUPTIONS))
def test_a_bad_file_is_a_clear_error_and_is_left_untouched(
    store: BaselineStore, tmp_path: Path, kind: str
) -> None:
    corrupt, problem = CORRUPTIONS[kind]
    text = corrupt(_valid_text(tmp_path))
    path = store.path("main")
    path.parent.mkdir(parents=True)
    if kind == "not-utf8":
        path.write_bytes(text.encode("utf-8", "surrogateescape"))
    else:
        path.write_text(text, encoding="utf-8")
    before = path.read_bytes()

    with pytest.raises(CorruptBaseline) as exc:
        store.load("main")
    msg = str(exc.value)
    assert msg.startswith(f"baseline file {path} cannot be used: ")
    assert re.search(problem, msg), msg
    assert "The file was left untouched." in msg
    assert exc.value.path == str(path)
    if kind == "future-version":
        assert "Upgrade pytest-gpuperf" in msg
    elif kind == "merge-conflict":
        assert "keeping one side" in msg
    else:
        assert f"Restore it from version control (git checkout -- {path})" in msg

    # A save into the broken file refuses too, and changes nothing.
    with pytest.raises(CorruptBaseline):
        store.save("main", [make_result(run_id="run-3")], now=T0)
    with pytest.raises(CorruptBaseline):
        store.prune("main", keep_runs=1)
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == [".main.json.lock", "main.json"]


def _segments(store: BaselineStore, name: str = "main") -> list[Path]:
    return sorted((store.root / f"{name}.runs").glob("*.json"))


def _edit_json(path: Path, fn: Callable[[dict[str, Any]], Any]) -> None:
    doc = json.loads(path.read_text())
    fn(doc)
    path.write_text(schema.dumps(doc))


def _first_ref(doc: dict[str, Any]) -> list[str]:
    ref: list[str] = doc["benchmarks"][KEY]["runs"][0]
    return ref


def _first_run(doc: dict[str, Any]) -> dict[str, Any]:
    run: dict[str, Any] = next(iter(doc["runs"][KEY].values()))
    return run


#: Corruptions of a version-3 baseline: which file, what is done to it, what the error says.
V3_CORRUPTIONS: dict[str, tuple[str, Callable[[Path], Any], str]] = {
    "index-truncated": (
        "index",
        lambda p: p.write_bytes(p.read_bytes()[:200]),
        "truncated: the JSON ends before it is complete",
    ),
    "index-dangling-segment": (
        "index",
        lambda p: _edit_json(p, lambda d: _first_ref(d).__setitem__(0, "nowhere")),
        r"runs\[0\]: the string 'nowhere' is not in the segments table",
    ),
    "index-bad-digest": (
        "index",
        lambda p: _edit_json(p, lambda d: _first_ref(d).__setitem__(1, "xyz")),
        r"runs\[0\]\[1\]: expected 12 hex digits",
    ),
    "index-segment-id-escapes": (
        "index",
        lambda p: _edit_json(
            p, lambda d: d["segments"].update({"../../x": next(iter(d["segments"].values()))})
        ),
        r"segments\['\.\./\.\./x'\]: expected a segment id",
    ),
    "segment-truncated": (
        "segment",
        lambda p: p.write_bytes(p.read_bytes()[:100]),
        "truncated: the JSON ends before it is complete",
    ),
    "segment-wrong-type": (
        "segment",
        lambda p: _edit_json(p, lambda d: _first_run(d).update(rounds="fast")),
        r"rounds: expected a non-empty list of numbers",
    ),
    "segment-run-missing": (
        "segment",
        lambda p: _edit_json(p, lambda d: d["runs"].pop(KEY)),
        r"it has no run [0-9a-f]{12} of benchmark .* which main\.json lists",
    ),
    "segment-missing": (
        "segment",
        lambda p: p.unlink(),
        "the file is missing, and main.json lists runs in it",
    ),
}


@pytest.mark.parametrize("kind", list(V3_CORRUPTIONS))
def test_a_bad_index_or_segment_is_a_clear_error_naming_it(store: BaselineStore, kind: str) -> None:
    which, corrupt, problem = V3_CORRUPTIONS[kind]
    store.save("main", [make_result(run_id="a")], meta={"git_sha": "abc"}, now=T0)
    store.save("main", [make_result(run_id="b")], now=T0 + dt.timedelta(days=1))
    target = store.path("main") if which == "index" else _segments(store)[0]
    corrupt(target)
    before = store_files(store)
    with pytest.raises(CorruptBaseline) as exc:
        store.load("main")
    msg = str(exc.value)
    assert re.search(problem, msg), msg
    note = "Nothing was changed." if kind == "segment-missing" else "The file was left untouched."
    assert note in msg
    assert str(target) in msg
    if which == "segment":
        assert "Restore main.runs/ together with main.json" in msg
        # T6: the repair that keeps the later runs, not "delete both"
        assert f"prune main --dir {store.root} --before 2025-11-29T19:38:01+00:00" in msg
        assert "delete both" not in msg
    assert store_files(store) == before


def test_a_segment_edited_by_hand_is_validated_and_used(store: BaselineStore) -> None:
    store.save("main", [make_result(run_id="a")], now=T0)
    [seg] = _segments(store)
    _edit_json(seg, lambda d: _first_run(d).update(stability="shift"))  # its SHA-256 changes
    [run] = store.load("main").benchmarks[KEY].runs
    assert run.stability == "shift"


def test_a_save_reads_the_index_only(store: BaselineStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cost of a save does not grow with the runs already stored."""
    from pytest_gpuperf.baseline import layout

    for i in range(3):
        store.save("main", [make_result(run_id=f"r{i}")], now=T0 + dt.timedelta(days=i))

    def no(*args: Any) -> Any:
        raise AssertionError("a save read a segment")

    monkeypatch.setattr(layout, "read_segment", no)
    summary = store.save("main", [make_result(run_id="r3")], keep_runs=2, now=T0 + dt.timedelta(3))
    assert (summary.added, summary.dropped) == (1, 2)
    monkeypatch.undo()
    assert [r.run_id for r in store.load("main").benchmarks[KEY].runs] == ["r2", "r3"]


def test_segments_go_one_save_after_their_last_run(store: BaselineStore) -> None:
    """A segment no run refers to is deleted by the save after the one that dropped it, so a
    reader that read the index before a save still finds every segment it names."""
    from pytest_gpuperf.baseline import layout

    files = store.files("main")
    store.save("main", [make_result(run_id="r0")], keep_runs=1, now=T0)
    old_index = layout.parse_index(files, store.path("main").read_bytes())[0]
    store.save("main", [make_result(run_id="r1")], keep_runs=1, now=T0 + dt.timedelta(1))
    assert len(_segments(store)) == 2  # r0's segment stays for a reader of the old index
    doc = layout.assemble(files, old_index)
    assert [r["run_id"] for r in doc["benchmarks"][KEY]["runs"]] == ["r0"]
    store.save("main", [make_result(run_id="r2")], keep_runs=1, now=T0 + dt.timedelta(2))
    assert len(_segments(store)) == 2
    assert [r.run_id for r in store.load("main").benchmarks[KEY].runs] == ["r2"]


def test_a_reader_whose_segment_vanished_reads_the_index_again(
    store: BaselineStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two saves between a reader's read of the index and of a segment: it starts again."""
    from pytest_gpuperf.baseline import layout

    store.save("main", [make_result(run_id="r0")], keep_runs=1, now=T0)
    real = layout.read_bytes
    armed = [True]

    def read_bytes(path: Path) -> bytes:
        data = real(path)
        if path.name == "main.json" and armed[0]:  # two saves right after the reader's read
            armed[0] = False
            for i in (1, 2):
                when = T0 + dt.timedelta(days=i)
                store.save("main", [make_result(run_id=f"r{i}")], keep_runs=1, now=when)
        return data

    monkeypatch.setattr(layout, "read_bytes", read_bytes)
    assert [r.run_id for r in store.load("main").benchmarks[KEY].runs] == ["r2"]


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("depth", [100_000, 200])
@pytest.mark.parametrize("where", ["one-file", "index", "segment"])
def test_deeply_nested_json_is_a_clear_error_not_a_recursion_error(
    store: BaselineStore, tmp_path: Path, depth: int, where: str
) -> None:
    """A ``meta`` nested 100,000 levels deep raised RecursionError."""
    store.save("main", [make_result(run_id="a")], meta={"git_sha": "abc"}, now=T0)
    if where == "one-file":
        store.path("main").write_text(
            _valid_text(tmp_path).replace('"git_sha": "abc"', f'"git_sha": {_nested(depth)}', 1)
        )
        target = store.path("main")
    elif where == "index":
        target = store.path("main")
        target.write_text(
            target.read_text().replace('"round_ms": 5.0', f'"round_ms": {_nested(depth)}', 1)
        )
    else:
        [target] = _segments(store)
        target.write_text(
            target.read_text().replace('"git_sha": "abc"', f'"git_sha": {_nested(depth)}', 1)
        )
    before = store_files(store)
    with pytest.raises(CorruptBaseline) as exc:
        store.load("main")
    msg = str(exc.value)
    assert str(target) in msg and "nested more than 32 levels deep" in msg, msg
    assert store_files(store) == before


def test_an_unreadable_path_is_an_error_not_a_crash(store: BaselineStore) -> None:
    store.path("main").mkdir(parents=True)  # a directory where the file should be
    with pytest.raises(BaselineError, match=r"main\.json is a folder, not a baseline file"):
        store.load("main")


# --- keeping the last K runs ---------------------------------------------------------


def test_keep_runs_trims_per_benchmark_and_fingerprint(store: BaselineStore) -> None:
    other_key = "tests/test_ops.py::test_add@cuda-events"
    for i in range(5):
        results = [make_result(run_id=f"gpu-{i}")]
        if i == 0:  # a benchmark saved only once must survive later saves
            results.append(make_result("tests/test_ops.py::test_add", run_id="gpu-0"))
        summary = store.save("main", results, keep_runs=3, now=T0 + dt.timedelta(hours=i))
        assert summary.dropped == (1 if i >= 3 else 0)
    for i in range(2):
        store.save("main", [make_result(env=dict(GPU_ENV, driver="575.57.08"), run_id=f"old-{i}")])

    b = store.load("main")
    assert [r.run_id for r in b.runs(KEY, fp_id(GPU_ENV))] == ["gpu-2", "gpu-3", "gpu-4"]
    old_fp = fp_id(dict(GPU_ENV, driver="575.57.08"))
    assert [r.run_id for r in b.runs(KEY, old_fp)] == ["old-0", "old-1"]
    assert [r.run_id for r in b.runs(other_key, fp_id(GPU_ENV))] == ["gpu-0"]
    assert b.created == "2025-11-29T19:38:00+00:00"


def test_keep_runs_must_be_positive(store: BaselineStore) -> None:
    with pytest.raises(ValueError, match="keep_runs must be >= 1"):
        store.save("main", [make_result()], keep_runs=0)


# --- finding comparable runs ------------------------------------------------------------


def test_match_finds_runs_or_says_why_not(store: BaselineStore) -> None:
    store.save("main", [make_result(run_id="a")], now=T0)
    store.save("main", [make_result(run_id="b", env=dict(GPU_ENV, driver="575.57.08"))])
    store.save("main", [make_result(run_id="c")], now=T0)
    b = store.load("main")
    here = fingerprint(GPU_ENV)

    m = b.match(KEY, here, POLICY)
    assert m.status == MATCH and [r.run_id for r in m.runs] == ["a", "c"]
    assert m.reason == "2 comparable baseline run(s)"

    assert b.match("tests/x.py::test_new@cpu", here, POLICY).status == NO_BENCHMARK

    h100 = fingerprint(dict(GPU_ENV, gpu_name="NVIDIA H100 80GB HBM3", driver="570.1"))
    m = b.match(KEY, h100, POLICY)
    assert m.status == OTHER_ENVIRONMENT and m.runs == []
    assert m.fingerprint_id == fp_id(GPU_ENV)  # the most recently saved one
    assert m.differences == [
        "GPU NVIDIA H200 -> NVIDIA H100 80GB HBM3",
        "driver 580.159.04 -> 570.1",
    ]
    assert m.reason.startswith("different environment: GPU NVIDIA H200 -> NVIDIA H100")

    m = b.match(KEY, here, dict(POLICY, round_ms=2.0))
    assert m.status == OTHER_POLICY
    assert m.differences == ["round_ms 5.0 -> 2.0"]
    assert b.match(KEY, here).status == MATCH  # no policy: not filtered

    assert list(b.fingerprints_of(KEY)) == [
        fp_id(GPU_ENV),
        fp_id(dict(GPU_ENV, driver="575.57.08")),
    ]
    assert b.runs("tests/x.py::nope@cpu", fp_id(GPU_ENV)) == []


def test_policy_match_treats_equal_numbers_and_sequences_alike(store: BaselineStore) -> None:
    policy = {"round_ms": 5.0, "rounds": 20, "shape": (4096, 4096)}
    store.save("main", [make_result(policy=policy)], now=T0)
    b = store.load("main")
    assert b.runs(KEY, fp_id(GPU_ENV), {"round_ms": 5, "rounds": 20.0, "shape": (4096, 4096)})
    assert b.match(KEY, fingerprint(GPU_ENV), policy).status == MATCH


def test_a_hand_edited_fingerprint_is_found_under_its_new_content(store: BaselineStore) -> None:
    """Editing a fingerprint (declaring a new driver equivalent) re-keys its runs on load."""
    store.save("main", [make_result()], now=T0)
    path = store.path("main")
    path.write_text(path.read_text().replace("580.159.04", "580.200.01"))
    b = store.load("main")
    new_env = dict(GPU_ENV, driver="580.200.01")
    assert list(b.fingerprints) == [fp_id(new_env)]
    assert len(b.runs(KEY, fp_id(new_env))) == 1


# --- stable text ------------------------------------------------------------------


def test_saving_the_same_data_twice_gives_identical_files(tmp_path: Path) -> None:
    results = [
        make_result(),
        make_result("tests/test_ops.py::test_add", mode="cpu", env=CPU_ENV, flops=None),
    ]
    texts = []
    for where, order in (("a", results), ("b", results[::-1])):
        s = BaselineStore(tmp_path / where)
        s.save("main", order, meta={"git_sha": "abc"}, now=T0)
        texts.append(s.path("main").read_bytes())
    assert texts[0] == texts[1]
    text = texts[0].decode()
    assert text.endswith("}\n") and not text.endswith("\n\n")
    doc = json.loads(text)
    assert list(doc) == sorted(doc)


def test_a_new_run_only_adds_lines(store: BaselineStore) -> None:
    """git diffs stay small: a save adds its own segment file, and in the index one line
    per run and per segment; of the lines already there only ``updated`` changes (and a
    list's last line gains its comma)."""
    import difflib

    store.save("main", [make_result(run_id="a")], now=T0)
    before = store_files(store)
    store.save("main", [make_result(run_id="b")], now=T0 + dt.timedelta(days=1))
    after = store_files(store)
    assert set(before) < set(after) and len(after) == len(before) + 1  # one new segment
    assert all(after[f] == data for f, data in before.items() if f != "main.json")
    old, new = before["main.json"].decode(), after["main.json"].decode()
    removed = [ln[2:] for ln in difflib.ndiff(old.splitlines(), new.splitlines()) if ln[0] == "-"]
    assert '  "updated": "2025-11-29T19:38:00+00:00"' in removed
    assert all(f"{ln},\n" in new for ln in removed if '"updated"' not in ln), removed


def test_file_size_is_reasonable(store: BaselineStore) -> None:
    """A stored run costs about 0.5 KB per benchmark (20 rounds) when compact.

    A run of 20 rounds with meta takes about 0.75 KB in its segment and 0.1 KB in the
    index: 300 benchmarks with 20 runs each make about 5 MB. This keeps it from creeping up.
    """
    for i in range(10):
        results = [make_result(f"tests/t.py::test_{j}", run_id=f"r{i}") for j in range(30)]
        store.save("main", results, meta={"git_sha": "a" * 40}, now=T0)
    per_run = sum(len(data) for data in store_files(store).values()) / 300
    assert per_run < 1000, per_run


# --- concurrency and interrupted saves ----------------------------------------------------

_HELPERS = f"""
import datetime as dt, sys, time
from pathlib import Path
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_baseline import make_result, T0
from pytest_gpuperf.baseline.store import BaselineStore
"""


def _python(code: str, *args: str, **kw: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _HELPERS + textwrap.dedent(code), *args], text=True, **kw
    )


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file locks")
def test_concurrent_saves_from_many_processes_lose_nothing(tmp_path: Path) -> None:
    root, go = tmp_path / "baselines", tmp_path / "go"
    workers, saves = 4, 6
    code = """
        root, worker, saves, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
        while not go.exists():
            time.sleep(0.001)
        store = BaselineStore(root)
        for i in range(saves):
            store.save("main", [
                make_result("tests/t.py::test_shared", run_id=f"w{worker}-{i}"),
                make_result(f"tests/t.py::test_only_{worker}", run_id=f"w{worker}-{i}"),
            ], keep_runs=1000)
    """
    procs = [_python(code, str(root), str(w), str(saves), str(go)) for w in range(workers)]
    time.sleep(0.5)  # let every process start and wait at the barrier
    go.touch()
    assert [p.wait(timeout=120) for p in procs] == [0] * workers

    b = BaselineStore(root).load("main")
    fid = fp_id(GPU_ENV)
    shared = [r.run_id for r in b.runs("tests/t.py::test_shared@cuda-events", fid)]
    expected = {f"w{w}-{i}" for w in range(workers) for i in range(saves)}
    assert sorted(shared) == sorted(expected)
    for w in range(workers):
        own = b.runs(f"tests/t.py::test_only_{w}@cuda-events", fid)
        assert [r.run_id for r in own] == [f"w{w}-{i}" for i in range(saves)]


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_a_save_killed_while_writing_leaves_the_old_file_whole(store: BaselineStore) -> None:
    store.save("main", [make_result(run_id="old")], now=T0)
    before = store.path("main").read_bytes()
    code = """
        import os
        def hang(fd):
            print("writing", flush=True)
            time.sleep(120)
        os.fsync = hang  # atomic_write_text has written the temporary file, not renamed it
        BaselineStore(sys.argv[1]).save("main", [make_result(run_id="killed")], keep_runs=1)
    """
    proc = _python(code, str(store.root), stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "writing\n"
        # While it hangs inside the save, it holds the lock: another save waits, then says so.
        with pytest.raises(BaselineLocked, match=r"stayed locked by pid \d+ on "):
            BaselineStore(store.root, lock_timeout=0.2).save("main", [make_result()], now=T0)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
        if proc.stdout:
            proc.stdout.close()
    assert store.path("main").read_bytes() == before
    assert store.names() == ["main"]  # the orphaned temporary file is not a baseline
    assert [r.run_id for r in store.load("main").benchmarks[KEY].runs] == ["old"]
    assert list(store.root.rglob("*.tmp"))  # what the killed save was writing
    # The kernel released the dead process's lock: the next save goes through at once, and
    # removes the temporary file the killed one left.
    BaselineStore(store.root, lock_timeout=5).save("main", [make_result(run_id="next")], now=T0)
    assert [r.run_id for r in store.load("main").benchmarks[KEY].runs] == ["old", "next"]
    assert not list(store.root.rglob("*.tmp"))


@pytest.mark.parametrize("which", ["segment", "index"])
def test_a_failed_rename_leaves_the_old_file_and_no_litter(
    store: BaselineStore, monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    store.save("main", [make_result(run_id="old")], now=T0)
    before = store_files(store)
    real = os.replace

    def fail(src: Any, dst: Any) -> None:
        if (Path(dst).name == "main.json") == (which == "index"):
            raise OSError(28, "No space left on device")
        real(src, dst)

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(BaselineError) as exc:
        store.save("main", [make_result(run_id="new")], now=T0)
    assert str(exc.value) == (
        f"cannot save into baseline file {store.path('main')}: No space left on device. "
        "The file is as it was before."
    )
    monkeypatch.undo()
    assert store_files(store) == before  # the new segment went with the failed commit
    assert sorted(p.name for p in store.root.iterdir()) == [
        ".main.json.lock",
        "main.json",
        "main.runs",
    ]


def test_a_symlink_planted_as_the_baseline_lock_truncates_nothing(
    store: BaselineStore, tmp_path: Path
) -> None:
    """.NAME.json.lock followed a symbolic link and truncated its target (defect 1)."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    store.root.mkdir(parents=True)
    (store.root / ".main.json.lock").symlink_to(victim)
    with pytest.raises(BaselineError, match=r"\.main\.json\.lock is a symbolic link"):
        store.save("main", [make_result()], now=T0)
    assert victim.read_text() == "precious"
    assert not store.exists("main")


@pytest.mark.parametrize(
    "setup, problem",
    [
        ("folder-is-a-file", r"baselines is a file, not a folder; point --gpuperf-baseline-dir"),
        ("parent-is-a-file", r"parent is a file, not a folder"),
        ("index-is-a-folder", r"main\.json is a folder, not a baseline file"),
        ("runs-is-a-file", r"main\.runs is not a folder"),
        ("index-is-a-symlink", r"main\.json is a symbolic link \(to .*elsewhere\.json\)"),
        ("runs-is-a-symlink", r"main\.runs is a symbolic link"),
        ("lock-is-a-symlink", r"lock file .*\.main\.json\.lock is a symbolic link \(to .*victim"),
        ("lock-is-a-hard-link", r"lock file .*\.main\.json\.lock has other names \(hard links\)"),
    ],
)
def test_check_before_measuring_finds_what_would_stop_a_save(
    tmp_path: Path, setup: str, problem: str
) -> None:
    """A baseline folder that is a file and a NAME.json that is a folder were only found after
    measuring (defect 15); a NAME.json symlink was replaced by a file (defect 12); a planted
    lock file was refused only by the lock, after measuring."""
    root = tmp_path / "baselines"
    if setup == "folder-is-a-file":
        root.write_text("")
    elif setup == "parent-is-a-file":
        (tmp_path / "parent").write_text("")
        root = tmp_path / "parent" / "baselines"
    else:
        BaselineStore(root).save("main", [make_result()], now=T0)
        index, runs = root / "main.json", root / "main.runs"
        if setup == "index-is-a-folder":
            index.unlink()
            index.mkdir()
        elif setup == "runs-is-a-file":
            for f in runs.iterdir():
                f.unlink()
            runs.rmdir()
            runs.write_text("")
        elif setup in ("lock-is-a-symlink", "lock-is-a-hard-link"):
            lock = root / ".main.json.lock"
            lock.unlink(missing_ok=True)
            (tmp_path / "victim").write_text("precious")
            if setup == "lock-is-a-symlink":
                lock.symlink_to(tmp_path / "victim")
            else:
                os.link(tmp_path / "victim", lock)
        elif setup == "index-is-a-symlink":
            index.rename(tmp_path / "elsewhere.json")
            index.symlink_to(tmp_path / "elsewhere.json")
        else:
            runs.rename(tmp_path / "elsewhere.runs")
            runs.symlink_to(tmp_path / "elsewhere.runs")
    store = BaselineStore(root)
    before = sorted((str(p), p.is_symlink()) for p in tmp_path.rglob("*"))
    with pytest.raises(BaselineError, match=problem):
        store.check("main")
    with pytest.raises(BaselineError, match=problem):
        store.save("main", [make_result(run_id="new")], now=T0)
    assert sorted((str(p), p.is_symlink()) for p in tmp_path.rglob("*")) == before
    if setup.startswith("lock-"):
        assert (tmp_path / "victim").read_text() == "precious"


def test_a_held_lock_times_out_with_a_clear_error(store: BaselineStore) -> None:
    store.save("main", [make_result()], now=T0)
    slow = BaselineStore(store.root, lock_timeout=0.1)
    with locked(store.root / ".main.json.lock"):
        with pytest.raises(BaselineLocked, match=r"\.main\.json\.lock stayed locked"):
            slow.save("main", [make_result(run_id="x")], now=T0)
        with pytest.raises(BaselineLocked):
            slow.delete("main")


# --- delete and prune ------------------------------------------------------------------


def test_delete(store: BaselineStore) -> None:
    store.save("main", [make_result()], now=T0)
    assert store.delete("main") == store.path("main")
    assert store.names() == []
    with pytest.raises(UnknownBaseline):
        store.delete("main")


def _three_fingerprints(store: BaselineStore) -> tuple[str, str, str]:
    envs = [GPU_ENV, dict(GPU_ENV, driver="575.57.08"), CPU_ENV]
    for day in range(4):
        for j, env in enumerate(envs):
            mode = "cpu" if env is CPU_ENV else "cuda-events"
            store.save(
                "main",
                [make_result(mode=mode, env=env, run_id=f"d{day}-e{j}")],
                now=T0 + dt.timedelta(days=day),
            )
    a, b, c = (fp_id(e) for e in envs)
    return a, b, c


def test_prune_runs_of_a_fingerprint(store: BaselineStore) -> None:
    new, old, cpu = _three_fingerprints(store)
    s = store.prune("main", fingerprint_id=old)
    assert (s.removed_runs, s.removed_benchmarks, s.removed_fingerprints) == (4, 0, 1)
    assert s.describe().startswith(f"baseline 'main' ({store.path('main')}): removed 4 run(s)")
    b = store.load("main")
    assert set(b.fingerprints) == {new, cpu}
    assert len(b.runs(KEY, new)) == 4


def test_prune_keeps_the_newest_runs(store: BaselineStore) -> None:
    new, old, _ = _three_fingerprints(store)
    s = store.prune("main", keep_runs=1)
    assert s.removed_runs == 9
    b = store.load("main")
    assert [r.run_id for r in b.runs(KEY, new)] == ["d3-e0"]
    assert [r.run_id for r in b.runs(KEY, old)] == ["d3-e1"]


def test_prune_before_a_date_and_of_a_benchmark(store: BaselineStore) -> None:
    *_, cpu = _three_fingerprints(store)
    cpu_key = "tests/test_ops.py::test_mm[4096-bf16]@cpu"
    s = store.prune("main", before=T0 + dt.timedelta(days=2), keys=[cpu_key])
    assert s.removed_runs == 2
    b = store.load("main")
    assert [r.run_id for r in b.runs(cpu_key, cpu)] == ["d2-e2", "d3-e2"]
    s = store.prune("main", keys=[cpu_key])
    assert (s.removed_runs, s.removed_benchmarks, s.removed_fingerprints) == (2, 1, 1)
    assert cpu_key not in store.load("main").benchmarks


def test_prune_refuses_unknown_fingerprints_and_empty_requests(store: BaselineStore) -> None:
    _three_fingerprints(store)
    with pytest.raises(BaselineError, match=r"no fingerprint 'nope'; it has: "):
        store.prune("main", fingerprint_id="nope")
    with pytest.raises(ValueError, match="prune needs"):
        store.prune("main")
    with pytest.raises(UnknownBaseline):
        store.prune("other", keep_runs=3)
    before = store_files(store)
    with pytest.raises(ValueError, match="timezone-aware"):
        store.prune("main", before=dt.datetime(2025, 1, 1))
    assert store_files(store) == before


def test_prune_removes_only_what_its_selectors_name(store: BaselineStore) -> None:
    """--fingerprint X --keep-runs 2 trims X to 2 runs per benchmark; no other environment is
    touched (it used to remove all of X's runs and trim every other environment to 2)."""
    new, old, cpu = _three_fingerprints(store)
    s = store.prune("main", fingerprint_id=old, keep_runs=2)
    assert (s.removed_runs, s.removed_benchmarks, s.removed_fingerprints) == (2, 0, 0)
    b = store.load("main")
    assert [r.run_id for r in b.runs(KEY, old)] == ["d2-e1", "d3-e1"]
    assert len(b.runs(KEY, new)) == 4
    assert len(b.runs("tests/test_ops.py::test_mm[4096-bf16]@cpu", cpu)) == 4


def test_prune_keep_runs_protects_the_newest_runs_from_the_other_selectors(
    store: BaselineStore,
) -> None:
    new, *_ = _three_fingerprints(store)
    s = store.prune("main", before=T0 + dt.timedelta(days=3), keep_runs=3)
    assert s.removed_runs == 3  # per environment, only the oldest of 4 runs is neither new...
    assert [r.run_id for r in store.load("main").runs(KEY, new)] == ["d1-e0", "d2-e0", "d3-e0"]


def test_prune_dry_run_says_per_environment_what_it_would_remove_and_changes_nothing(
    store: BaselineStore,
) -> None:
    new, old, cpu = _three_fingerprints(store)
    before = store_files(store)
    dry = store.prune("main", fingerprint_id=old, dry_run=True)
    assert store_files(store) == before
    assert dry.dry_run and (dry.removed_runs, dry.removed_fingerprints) == (4, 1)
    text = dry.describe()
    assert text.startswith("baseline 'main'") and "would remove 4 run(s)" in text
    assert "nothing was changed (--dry-run)" in text
    lines = {ln.split(":")[0].strip(): ln for ln in text.splitlines()[1:]}
    assert set(lines) == {
        f"environment {new} (NVIDIA H200, driver 580.159.04, torch 2.13.0+cu130)",
        f"environment {old} (NVIDIA H200, driver 575.57.08, torch 2.13.0+cu130)",
        f"environment {cpu} (AMD EPYC 9654 96-Core Processor, torch 2.13.0+cpu)",
    }
    assert any(
        "4 of 4 run(s) of 1 benchmark(s), saved 2025-11-29 to 2025-12-02" in ln and old in ln
        for ln in lines.values()
    )
    assert sum("nothing" in ln for ln in lines.values()) == 2
    real = store.prune("main", fingerprint_id=old)
    assert (
        real.describe().replace("removed", "would remove").splitlines()[1:]
        == (text.splitlines()[1:])
    )


def test_prune_and_delete_of_a_missing_baseline_leave_no_trace(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path / "nowhere")
    with pytest.raises(UnknownBaseline):
        store.prune("main", keep_runs=1)
    with pytest.raises(UnknownBaseline):
        store.delete("main")
    assert not store.root.exists()


# --- versions ------------------------------------------------------------------------------


def golden_results() -> list[
    tuple[list[Result], dict[str, Any], dt.datetime, dict[str, dict[str, Any]]]
]:
    """The saves that produce the golden file of the current schema version."""
    h100 = dict(GPU_ENV, gpu_name="NVIDIA H100 80GB HBM3", gpu_memory_bytes=85_520_809_984)
    saves = []
    for i in range(3):
        results = [
            make_result(run_id=f"run-{i}", level=5.9312345e-4 * (1 + 0.003 * i)),
            make_result(
                "tests/test_ops.py::test_softmax",
                name="fwd",
                mode="cuda-graph",
                level=1.2345e-5,
                n=10,
                run_id=f"run-{i}",
                peak_memory_bytes=None,
                flops=None,
                telemetry={"sm_clock_mhz": {"median": 1980, "min": 1965}} if i == 0 else None,
                policy={"round_ms": 5.0, "rounds": 10, "warmup_ms": 500.0},
            ),
        ]
        saves.append((results, {"git_sha": f"{i}" * 40}, T0 + dt.timedelta(days=i), {}))
    cpu = make_result(
        "tests/test_ops.py::test_add", mode="cpu", env=CPU_ENV, run_id="cpu-0", n=5, bytes=None
    )
    inventory = {
        "kernels": [
            {"name": "vectorized_elementwise_kernel", "launches": 1, "gpu_s": 1.1e-6},
        ]
    }
    saves.append(
        (
            [cpu, make_result(env=h100, run_id="h100-0")],
            {},
            T0 + dt.timedelta(days=3),
            {"tests/test_ops.py::test_add@cpu": inventory},
        )
    )
    return saves


def write_golden(store: BaselineStore) -> Path:
    for results, meta, when, extras in golden_results():
        store.save("golden", results, keep_runs=20, meta=meta, extras=extras, now=when)
    return store.path("golden")


def _golden(version: int) -> Path:
    """The golden file of ``version`` (from version 3 on, the index; its runs are beside it)."""
    if version >= 3:
        return DATA / f"baseline-v{version}" / "golden.json"
    return DATA / f"baseline-v{version}.json"


def _install_golden(version: int, root: Path) -> str:
    """Copy the golden baseline of ``version`` into ``root``; returns its name there."""
    root.mkdir(parents=True, exist_ok=True)
    if version < 3:
        (root / "old.json").write_bytes(_golden(version).read_bytes())
        return "old"
    src = _golden(version).parent
    for path in src.rglob("*"):
        if path.is_file():
            (root / path.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
            (root / path.relative_to(src)).write_bytes(path.read_bytes())
    return "golden"


def test_the_current_golden_file_is_what_save_writes(store: BaselineStore) -> None:
    """Catches any unintended format change; set GPUPERF_REGEN_GOLDEN=1 to rewrite it."""
    write_golden(store)
    assert_golden(store, _golden(schema.SCHEMA_VERSION).parent)


def assert_golden(store: BaselineStore, folder: Path) -> None:
    """Baseline ``golden`` of ``store`` holds what ``folder`` holds, byte for byte (but the
    plugin's version); ``GPUPERF_REGEN_GOLDEN=1`` rewrites ``folder`` from it first."""
    files = {
        name: data.decode().replace(
            f'"plugin_version": "{__version__}"', '"plugin_version": "0.1.0"'
        )
        for name, data in store_files(store, "golden").items()
    }
    if os.environ.get("GPUPERF_REGEN_GOLDEN"):
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
        for name, text in files.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text)
    expected = {
        str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()
    }
    assert files == expected


@pytest.mark.parametrize("version", [1, 2, 3])
def test_golden_files_of_every_version_load(tmp_path: Path, version: int) -> None:
    store = BaselineStore(tmp_path)
    name = _install_golden(version, tmp_path)
    before = store_files(store, name)
    b = store.load(name)
    assert b.read_version == version
    assert store_files(store, name) == before  # loading never rewrites
    assert len(b.fingerprints) == 3 and len(b.policies) == 2
    runs = b.runs(KEY, fp_id(GPU_ENV), POLICY)
    assert [r.run_id for r in runs] == ["run-0", "run-1", "run-2"]
    assert [r.meta.get("git_sha") for r in runs] == ["0" * 40, "1" * 40, "2" * 40]
    assert runs[0].median == pytest.approx(5.9312345e-4, rel=1e-5)
    graph = b.benchmarks["tests/test_ops.py::test_softmax::fwd@cuda-graph"]
    assert graph.name == "fwd" and len(graph.runs) == 3
    assert graph.runs[0].telemetry == {"sm_clock_mhz": {"median": 1980, "min": 1965}}
    assert graph.runs[0].flops is None and graph.runs[0].peak_memory_bytes is None
    assert graph.runs[0].policy == {"round_ms": 5.0, "rounds": 10, "warmup_ms": 500.0}
    cpu = b.runs("tests/test_ops.py::test_add@cpu", fp_id(CPU_ENV))
    assert len(cpu) == 1 and len(cpu[0].rounds) == 5
    m = b.match(KEY, fingerprint(dict(GPU_ENV, torch="2.14.0")), POLICY)
    assert m.status == OTHER_ENVIRONMENT and m.differences == ["torch 2.13.0+cu130 -> 2.14.0"]
    if version == 1:  # what version 1 did not record is unknown, not invented
        assert {(r.plugin_version, r.warmup_rounds, r.trimmed, r.extra) for r in runs} == {
            (None, None, None, None)
        }
    else:
        assert cpu[0].extra == {
            "kernels": [{"name": "vectorized_elementwise_kernel", "launches": 1, "gpu_s": 1.1e-6}]
        }
        assert (runs[0].plugin_version, runs[0].warmup_rounds, runs[0].trimmed) == ("0.1.0", 0, 0)


def test_v1_migrates_to_the_same_runs_as_v2_holds(tmp_path: Path) -> None:
    """Both goldens come from the same saves: migration must not change a value."""
    for v in (1, 2):
        (tmp_path / f"v{v}.json").write_bytes(_golden(v).read_bytes())
    old, new = BaselineStore(tmp_path).load("v1"), BaselineStore(tmp_path).load("v2")
    assert old.fingerprints == new.fingerprints and old.policies == new.policies
    assert old.benchmarks.keys() == new.benchmarks.keys()
    v2_only = {"extra", "plugin_version", "warmup_rounds", "trimmed"}
    for key, entry in old.benchmarks.items():
        for a, b in zip(entry.runs, new.benchmarks[key].runs, strict=True):
            da, db = vars(a), vars(b)
            assert {k: v for k, v in da.items() if k not in v2_only} == {
                k: v for k, v in db.items() if k not in v2_only
            }


def test_saving_into_a_v1_file_upgrades_it_and_keeps_every_run(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    store.path("main").write_bytes(_golden(1).read_bytes())
    summary = store.save("main", [make_result(run_id="new")], now=T0 + dt.timedelta(days=9))
    assert summary.migrated_from == 1
    assert "upgraded from schema version 1" in summary.describe()
    doc = json.loads(store.path("main").read_text())
    assert doc["schema_version"] == schema.SCHEMA_VERSION
    b = store.load("main")
    assert b.read_version == schema.SCHEMA_VERSION
    runs = b.runs(KEY, fp_id(GPU_ENV), POLICY)
    assert [r.run_id for r in runs] == ["run-0", "run-1", "run-2", "new"]
    assert sum(len(e.runs) for e in b.benchmarks.values()) == 9
    assert b.created == "2025-11-29T19:38:00+00:00"


def test_an_invalid_v1_file_is_reported_in_v1_terms(tmp_path: Path) -> None:
    doc = json.loads(_golden(1).read_text())
    doc["benchmarks"][KEY]["runs"][0]["policy"] = "fast"
    (tmp_path / "main.json").write_text(json.dumps(doc))
    with pytest.raises(CorruptBaseline, match=r"runs\[0\]\.policy: expected an object"):
        BaselineStore(tmp_path).load("main")


def test_a_broken_migration_is_reported_as_a_bug(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(doc: dict[str, Any]) -> dict[str, Any]:
        raise KeyError("policy")

    monkeypatch.setitem(schema.MIGRATIONS, 1, broken)
    (tmp_path / "main.json").write_bytes(_golden(1).read_bytes())
    with pytest.raises(CorruptBaseline, match=r"cannot migrate it from schema version 1 .*a bug"):
        BaselineStore(tmp_path).load("main")


def test_a_future_schema_version_is_refused(tmp_path: Path) -> None:
    doc = json.loads(_golden(2).read_text())
    doc["schema_version"] = 99
    (tmp_path / "main.json").write_text(json.dumps(doc))
    with pytest.raises(CorruptBaseline) as exc:
        BaselineStore(tmp_path).load("main")
    assert "schema_version 99 was written by a newer pytest-gpuperf" in str(exc.value)
    assert f"reads versions up to {schema.SCHEMA_VERSION}" in str(exc.value)
    assert "Upgrade pytest-gpuperf" in str(exc.value)


def test_stable_dumps_is_valid_json_and_refuses_nan() -> None:
    doc = {"b": [1, 2.5, None, "x"], "a": {"z": [], "y": {}, "x": [{"k": True}]}}
    assert json.loads(schema.dumps(doc)) == doc
    with pytest.raises(ValueError):
        schema.dumps({"x": float("nan")})


# --- options ---------------------------------------------------------------------------


def test_baseline_options_parse_and_default() -> None:
    from pytest_gpuperf.baseline import DEFAULT_DIR, DEFAULT_KEEP_RUNS
    from pytest_gpuperf.shell.config import ConfigError, GpuPerfConfig
    from pytest_gpuperf.shell.options import OPTIONS_BY_NAME

    assert OPTIONS_BY_NAME["baseline_dir"].default == DEFAULT_DIR
    assert OPTIONS_BY_NAME["keep_runs"].default == DEFAULT_KEEP_RUNS

    from pytest_gpuperf.shell.settings import Settings

    cfg = GpuPerfConfig.from_values({"save": "main", "keep_runs": "30"}, {"baseline": "nightly"})
    s = Settings.from_config(cfg).session
    assert (s.save, s.baseline, s.keep_runs) == ("main", "nightly", 30)
    assert s.baseline_dir == ".gpuperf/baselines" and cfg.source("baseline_dir") == "default"
    with pytest.raises(
        ConfigError, match=r"--gpuperf-save: invalid baseline name '\.\./x': use letters"
    ):
        GpuPerfConfig.from_values({"save": "../x"}, {})
    with pytest.raises(ConfigError, match=r"gpuperf_keep_runs in the ini file: .* >= 1"):
        GpuPerfConfig.from_values({}, {"keep_runs": "0"})


def test_the_segment_collector_leaves_files_that_are_not_this_baselines_segments(
    store: BaselineStore,
) -> None:
    """T4: any segment-named ``*.json`` in ``NAME.runs/`` was deleted: a user's notes, the
    index of a baseline saved into that folder, a segment of another baseline."""
    store.save("main", [make_result(run_id="r0")], keep_runs=1, now=T0)
    runs = store.files("main").runs_dir
    [own] = _segments(store)
    nested = BaselineStore(runs)
    nested.save("nested", [make_result(run_id="n0")], now=T0)
    (runs / "notes.json").write_text("{}\n")
    foreign = runs / "20250101T000000Z-0123abcd.json"
    foreign.write_text(own.read_text().replace('"baseline": "main"', '"baseline": "other"'))
    strays = {p: p.read_bytes() for p in (runs / "nested.json", runs / "notes.json", foreign)}
    for i in (1, 2):  # the second save collects r0's segment, dropped by the first
        store.save("main", [make_result(run_id=f"r{i}")], keep_runs=1, now=T0 + dt.timedelta(i))
    assert {p: p.read_bytes() for p in strays} == strays
    assert not own.exists()  # this baseline's own dropped segment still goes
    assert [r.run_id for r in nested.load("nested").benchmarks[KEY].runs] == ["n0"]
    assert nested.names() == ["nested", "notes"]  # main's segments are no baselines
    assert [r.run_id for r in store.load("main").benchmarks[KEY].runs] == ["r2"]


def _forge(store: BaselineStore, edit: Callable[[dict[str, Any]], Any]) -> Path:
    """Edit the one segment of ``main`` and record its new SHA-256 in the index."""
    [seg] = _segments(store)
    doc = json.loads(seg.read_text())
    edit(doc)
    seg.write_text(json.dumps(doc))  # NaN as NaN, as a hand or a tool would write it
    sha = hashlib.sha256(seg.read_bytes()).hexdigest()
    _edit_json(store.path("main"), lambda d: d["segments"][seg.stem].update(sha256=sha))
    return seg


@pytest.mark.parametrize(
    ("value", "problem"),
    [("fast", "median: expected a number > 0"), (math.nan, "median"), (-1e300, "median")],
)
def test_a_segment_whose_sha256_matches_is_still_validated(
    store: BaselineStore, value: Any, problem: str
) -> None:
    """T16: a segment forged with its SHA-256 updated in the index was trusted: "fast" gave
    a bare "could not convert string to float", NaN and -1e300 were accepted."""
    store.save("main", [make_result(run_id="a")], now=T0)
    seg = _forge(store, lambda d: _first_run(d).update(median=value))
    with pytest.raises(CorruptBaseline) as exc:
        store.load("main")
    msg = str(exc.value)
    assert f"baseline file {seg} (a segment of main.json) cannot be used" in msg
    assert problem in msg and "prune main" in msg


def test_the_remedy_for_a_deeply_nested_segment_is_not_garbled(store: BaselineStore) -> None:
    """T16: "(a segment of m.json)" was put inside the suggested git command."""
    store.save("main", [make_result(run_id="a")], now=T0)
    [seg] = _segments(store)
    deep = "[" * 50_000 + "]" * 50_000
    text = seg.read_text().replace('"run_id": "a"', f'"run_id": "a", "x": {deep}', 1)
    seg.write_text(text)
    sha = hashlib.sha256(seg.read_bytes()).hexdigest()
    _edit_json(store.path("main"), lambda d: d["segments"][seg.stem].update(sha256=sha))
    with pytest.raises(CorruptBaseline) as exc:
        store.load("main")
    msg = str(exc.value)
    assert "nested more than" in msg and "git checkout" not in msg
    assert f"baseline file {seg} (a segment of main.json) cannot be used" in msg


@pytest.mark.parametrize("damage", ["missing", "truncated", "empty"])
def test_a_save_into_a_baseline_with_a_broken_segment_is_refused_with_the_repair(
    store: BaselineStore, damage: str
) -> None:
    """T6: the save succeeded and left the baseline unreadable; the remedy said to delete
    everything, although ``prune --before`` repairs it and keeps the later runs."""
    from pytest_gpuperf.cli import main as cli

    store.save("main", [make_result(run_id="r0")], now=T0)
    [broken] = _segments(store)
    store.save("main", [make_result(run_id="r1")], now=T0 + dt.timedelta(days=1))
    if damage == "missing":
        broken.unlink()
    else:
        broken.write_bytes(broken.read_bytes()[: 40 if damage == "truncated" else 0])
    before = store_files(store)
    with pytest.raises(CorruptBaseline) as pre:
        store.check("main")  # the session's check before measuring
    with pytest.raises(CorruptBaseline) as exc:
        store.save("main", [make_result(run_id="r2")], now=T0 + dt.timedelta(days=2))
    assert str(exc.value) == str(pre.value) and str(broken) in str(exc.value)
    assert store_files(store) == before
    repair = re.search(r"pytest-gpuperf (prune .*?) \(", str(exc.value))
    assert repair is not None
    assert cli.main(repair.group(1).split(), out=io.StringIO()) == 0
    assert [r.run_id for r in store.load("main").benchmarks[KEY].runs] == ["r1"]
    store.save("main", [make_result(run_id="r2")], now=T0 + dt.timedelta(days=2))
    assert [r.run_id for r in store.load("main").benchmarks[KEY].runs] == ["r1", "r2"]


def _open_to_all(tmp_path: Path) -> None:
    """Let another user reach ``tmp_path`` (pytest's own folders are private)."""
    import tempfile

    tmp_path.chmod(0o755)
    for parent in tmp_path.parents:
        if parent == Path(tempfile.gettempdir()):
            break
        parent.chmod(parent.stat().st_mode | 0o755)


def _check_as_nobody(root: str) -> str:
    try:
        BaselineStore(root).check("m")
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return "ok"


def _prune_as_nobody(root: str) -> str:
    import contextlib
    import io as _io

    from pytest_gpuperf.cli import main as cli

    err = _io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli.main(["prune", "m", "--dir", root, "--keep-runs", "1"], out=_io.StringIO())
    return f"{code}: {err.getvalue()}"


@needs_root
def test_the_check_before_measuring_sees_files_of_another_user(tmp_path: Path) -> None:
    """T23: a writable folder whose NAME.runs/ (or lock file) belongs to another user passed
    the check before measuring; the save then failed after the measurement."""
    from tests.unit.test_locks import _as_nobody

    _open_to_all(tmp_path)
    root = tmp_path / "baselines"
    BaselineStore(root).save("m", [make_result(run_id="a")], now=T0)  # root's files, 0644/0755
    root.chmod(0o777)
    found = _as_nobody(_check_as_nobody, str(root))
    assert found.startswith("BaselineError: cannot save into baseline 'm':"), found
    assert "m.runs belongs to user root and is not writable by you" in found
    assert "--gpuperf-baseline-dir (the CLI's --dir)" in found
    root.chmod(0o1777)  # sticky: only the index's owner may replace it
    (root / "m.runs").chmod(0o777)
    found = _as_nobody(_check_as_nobody, str(root))
    assert "m.json belongs to user root and is in a sticky folder" in found, found


@needs_root
def test_the_cli_names_its_own_option_for_a_folder_it_cannot_write(tmp_path: Path) -> None:
    """T23: the CLI prune's error named --gpuperf-baseline-dir, not the CLI's --dir."""
    from tests.unit.test_locks import _as_nobody

    _open_to_all(tmp_path)
    root = tmp_path / "baselines"
    BaselineStore(root).save("m", [make_result(run_id="a")], now=T0)
    root.chmod(0o755)
    said = _as_nobody(_prune_as_nobody, str(root))
    assert said.startswith("2: ") and "is not writable" in said, said
    assert "the CLI's --dir" in said
