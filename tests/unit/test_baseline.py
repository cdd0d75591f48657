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
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf import __version__
from pytest_gpuperf.baseline import codec, fileio
from pytest_gpuperf.baseline.codec import fingerprint_id
from pytest_gpuperf.baseline.filelock import locked
from pytest_gpuperf.baseline.fingerprint import fingerprint
from pytest_gpuperf.baseline.records import (
    MATCH,
    NO_BENCHMARK,
    OTHER_ENVIRONMENT,
    OTHER_POLICY,
)
from pytest_gpuperf.baseline.store import BaselineStore
from pytest_gpuperf.errors import (
    BaselineError,
    BaselineLocked,
    CorruptBaseline,
    GpuPerfError,
    InvalidBaselineName,
    UnknownBaseline,
)
from pytest_gpuperf.model import BenchId, Run, thawed
from tests.unit.reporting_data import CPU_ENV, GPU_ENV
from tests.unit.test_locks import needs_root

DATA = Path(__file__).parent.parent / "data"
T0 = dt.datetime(2025, 11, 29, 19, 38, tzinfo=dt.timezone.utc)

POLICY = {"round_ms": 5.0, "rounds": 20, "warmup_ms": 500.0, "l2_flush": True}
KEY = "tests/test_ops.py::test_mm[4096-bf16]@cuda-events"


def make_run(
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
) -> Run:
    """A run as the fixture makes it, with deterministic rounds around ``level`` seconds."""
    params = (("shape", "4096"), ("dtype", "bf16")) if "[" in nodeid else ()
    rounds = tuple(level * (1 + 0.002 * ((i * 7) % 5 - 2)) for i in range(n))
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
    return Run(id=BenchId(nodeid, name, mode, params), rounds=rounds, **fields)


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


def test_save_then_load_gives_back_the_run(store: BaselineStore) -> None:
    inventory = {"kernels": [{"name": "sm90_xmma_gemm", "launches": 1, "gpu_s": 5.9e-4}]}
    r = make_run(
        telemetry={"sm_clock_mhz": {"median": 1980}}, warmup=[6e-4] * 7, trimmed=2,
        extra=inventory, e2e_rounds=[7e-4] * 20, host_hidden=True, host_s=1.2345678e-4,
        tracer="sys.settrace", wall_s=1.5, warmup_s=0.5, l2_flush=True, device_name="H200",
        memory={"available": True, "allocated_per_call_bytes": 0},
        contention={"waited": 0.01, "threads": 1.0, "clock": "wall"},
    )  # fmt: skip
    summary = store.save("main", [r], meta={"git_sha": "deadbeef", "ci_job": 42}, now=T0)
    assert summary.created and summary.added == 1 and summary.dropped == 0
    assert summary.path == store.path("main") == store.root / "main.json"

    b = store.load("main")
    assert b.name == "main" and b.created == b.updated == "2025-11-29T19:38:00+00:00"
    assert list(b.fingerprints) == [fp_id(GPU_ENV)]
    ident = b.benchmarks[KEY].ident
    assert (ident.nodeid, ident.name, ident.mode) == (r.id.nodeid, None, "cuda-events")
    assert dict(ident.params) == {"shape": "4096", "dtype": "bf16"}
    [run] = b.runs(KEY, fp_id(GPU_ENV), POLICY)
    # the run as saved: the same fields, times to 4 significant figures, with what the save
    # and the index add (when, the commit, the plugin's version, the fingerprint)
    four = {n: getattr(r, n) for n in ("rounds", "warmup", "e2e_rounds")}
    assert run.id.key == r.id.key and dict(run.id.params) == dict(r.id.params)  # keys sorted
    assert run == replace(
        r,
        id=run.id,
        **{n: tuple(float(f"{x:.4g}") for x in v) for n, v in four.items()},
        first_call_s=0.8412,
        host_s=1.235e-4,
        environment=fingerprint(GPU_ENV),
        timestamp="2025-11-29T19:38:00+00:00",
        meta={"git_sha": "deadbeef", "ci_job": 42},
        plugin_version=__version__,
        fingerprint_id=fp_id(GPU_ENV),
    )
    assert run.median == pytest.approx(r.median, rel=1e-3)
    assert b.policies == {codec.content_id(POLICY): POLICY}


def test_runs_share_one_policy_entry_and_stale_policies_go(store: BaselineStore) -> None:
    for i in range(3):
        store.save("main", [make_run(run_id=f"a{i}")], keep_runs=2, now=T0)
    assert len(store.load("main").policies) == 1
    other = dict(POLICY, round_ms=2.0)
    for i in range(2):
        store.save("main", [make_run(run_id=f"b{i}", policy=other)], keep_runs=2, now=T0)
    b = store.load("main")  # the newest two runs both use the new policy
    assert list(b.policies.values()) == [other]
    assert [r.run_id for r in b.runs(KEY, fp_id(GPU_ENV), other)] == ["b0", "b1"]


def test_runs_without_a_value_leave_the_field_out(store: BaselineStore) -> None:
    store.save("main", [make_run(flops=None, bytes=None, peak_memory_bytes=None)], now=T0)
    [line] = stored_runs(store)
    assert not {"flops", "bytes", "peak_memory_bytes", "telemetry", "extra", "meta"} & set(line)
    assert not set(codec.IN_INDEX) & set(line)  # the index holds those
    [run] = store.load("main").benchmarks[KEY].runs
    assert (run.flops, run.bytes, run.extra, run.meta) == (None, None, {}, {})


def test_what_a_value_is_not_is_left_out_and_the_run_saved(store: BaselineStore) -> None:
    """A numerics value that is no fingerprint, a contention that is none and memory that
    is not the allocator's figures are not stored; the run is."""
    r = make_run(numerics=[{"x": 1}], contention={"waited": -1}, memory={"available": False})
    store.save("main", [r], now=T0)
    [line] = stored_runs(store)
    assert not {"numerics", "contention", "memory"} & set(line)


def test_numbers_of_other_types_are_saved_as_plain_numbers(store: BaselineStore) -> None:
    """``flops=np.prod(shape)`` is a NumPy integer; the file holds plain JSON numbers."""

    class Scalar:  # a NumPy or torch scalar
        def __init__(self, v: float) -> None:
            self.v = v

        def item(self) -> float:
            return self.v

    r = make_run(flops=Scalar(2000), bytes=Scalar(512.5), peak_memory_bytes=Scalar(4096))
    store.save("main", [r], now=T0)
    [line] = stored_runs(store)
    assert (line["flops"], line["bytes"], line["peak_memory_bytes"]) == (2000, 512.5, 4096)


def test_a_run_kept_in_process_saves_what_a_workers_dict_saves(store: BaselineStore) -> None:
    """An xdist worker sends ``to_dict()``; the run it reads back is the one measured, the
    output fingerprint included, whose standard deviation overflowed to inf."""
    fp = [
        {"path": "out", "shape": (2,), "dtype": "torch.float64", "numel": 2, "nan": 0,
         "inf": 0, "samples": [1e200, -1e200],
         "stats": {"mean": 0.0, "abs_mean": 1e200, "min": -1e200, "max": 1e200,
                   "std": math.inf}},
    ]  # fmt: skip
    kept = make_run(numerics=fp, telemetry={"clocks": (1980, 1755), "power_w": math.nan})
    sent = Run.from_dict(json.loads(json.dumps(kept.to_dict())))
    assert sent == kept and kept.telemetry == {"clocks": (1980, 1755), "power_w": None}
    assert codec.run_line(kept) == codec.run_line(sent)
    assert codec.run_line(kept)["numerics"][0]["stats"]["std"] is None


def test_results_that_cannot_be_runs_are_skipped_with_a_reason(store: BaselineStore) -> None:
    good = make_run()
    empty = make_run("tests/t.py::test_empty", n=0)
    no_env = make_run("tests/t.py::test_noenv", environment=None)
    summary = store.save("main", [good, empty, no_env], now=T0)
    assert summary.added == 1
    assert dict(summary.skipped) == {
        "tests/t.py::test_empty@cuda-events": "tests/t.py::test_empty@cuda-events.rounds: "
        "expected a non-empty list of times, got an empty list",
        "tests/t.py::test_noenv@cuda-events": "no environment recorded, so no fingerprint",
    }
    assert "skipped 2 result(s)" in summary.describe()


def test_saving_the_same_run_again_adds_nothing(store: BaselineStore) -> None:
    store.save("main", [make_run()], now=T0)
    before = store_files(store)
    again = store.save("main", [make_run()], now=T0 + dt.timedelta(hours=1))
    assert again.added == 0 and again.skipped == ((KEY, "run run-1 is already saved"),)
    assert store_files(store) == before
    # Another run that happens to share the run id (a subprocess of one session) is kept.
    store.save("main", [make_run(level=6e-4)], now=T0)
    assert len(store.load("main").benchmarks[KEY].runs) == 2


def test_nothing_to_save_writes_nothing(store: BaselineStore) -> None:
    summary = store.save("main", [], now=T0)
    assert summary.added == 0 and not store.exists("main")


# --- names ---------------------------------------------------------------------


def test_names_lists_baselines_and_ignores_everything_else(store: BaselineStore) -> None:
    assert store.names() == []  # the directory does not exist yet
    store.save("main", [make_run()], now=T0)
    store.save("nightly-h200", [make_run()], now=T0)
    (store.root / ".main.json.abc.tmp").write_text("{")  # left by a killed save
    (store.root / "notes.txt").write_text("hi")
    (store.root / "bad name.json").write_text("{}")
    assert store.names() == ["main", "nightly-h200"]


@pytest.mark.parametrize("name", ["", "../x", "a/b", ".hidden", "..", "a b", "x" * 101, "é"])
def test_invalid_names_are_refused(store: BaselineStore, name: str) -> None:
    with pytest.raises(InvalidBaselineName, match="invalid baseline name"):
        store.path(name)
    with pytest.raises(InvalidBaselineName):
        store.save(name, [make_run()], now=T0)
    assert not store.root.exists()


def test_a_name_ending_in_json_is_refused_with_the_name_to_use(store: BaselineStore) -> None:
    """--gpuperf-save=main.json made main.json.json, listed as main.json, which show could not
    open."""
    with pytest.raises(InvalidBaselineName, match=r"'main\.json'.* without \.json: use 'main'"):
        store.save("main.json", [make_run()], now=T0)
    assert not store.root.exists()
    store.root.mkdir()
    (store.root / "main.json.json").write_text("{}")  # left by an older version
    assert store.names() == []


def test_unknown_name_lists_the_existing_ones(store: BaselineStore) -> None:
    store.save("main", [make_run()], now=T0)
    store.save("nightly", [make_run()], now=T0)
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


def _edit(fn: Callable[[dict[str, Any]], Any]) -> Callable[[str], str]:
    def apply(text: str) -> str:
        doc = json.loads(text)
        fn(doc)
        return fileio.dumps(doc)

    return apply


def _refs(doc: dict[str, Any]) -> list[list[str]]:
    refs: list[list[str]] = doc["benchmarks"][KEY]["runs"]
    return refs


def _one_file(doc: dict[str, Any]) -> None:
    """The index as the pre-release one-file format had it: no segments, runs inline."""
    del doc["segments"]
    doc["benchmarks"][KEY]["runs"] = [{"run_id": "a"}]


#: What is done to a baseline's index, and what the error says.
CORRUPTIONS: dict[str, tuple[Callable[[str], str], str]] = {
    "empty": (lambda t: "", "the file is empty"),
    "truncated": (lambda t: t[: len(t) // 2], r"truncated: the JSON ends before it is complete"),
    "truncated-then-nul-filled": (
        lambda t: t[: len(t) // 2] + "\x00" * 64,
        r"truncated: the JSON ends before it is complete",
    ),
    "truncated-in-a-word": (
        lambda t: t[: t.index("{", 1)] + '{"x": tr',
        r"truncated: the JSON ends before it is complete",
    ),
    "truncated-at-a-line": (
        lambda t: "\n".join(t.splitlines()[:20]) + "\n",
        r"truncated: .*the parser stopped at line 21, column 1",
    ),
    "hand-broken": (
        lambda t: t.replace('"mode": "cuda-events",', '"mode": "cuda-events"', 1),
        r"invalid JSON at line 5, column 7: Expecting ',' delimiter",
    ),
    "not-utf8": (lambda t: t.replace('"main"', '"\udcff"', 1), r"not UTF-8 text \(invalid byte at"),
    "merge-conflict": (
        lambda t: "<<<<<<< HEAD\n" + t + "=======\n" + t + ">>>>>>> main\n",
        "git merge-conflict markers",
    ),
    "top-level-list": (lambda t: "[" + t + "]", "top level: expected an object, got a list of 1"),
    "not-a-baseline": (
        _edit(lambda d: d.update(schema="pytest-gpuperf/results")),
        "not a pytest-gpuperf baseline file",
    ),
    "no-schema": (_edit(lambda d: d.pop("schema")), "schema: expected 'pytest-gpuperf/baseline'"),
    "version-not-int": (
        _edit(lambda d: d.update(schema_version="1")),
        "schema_version: expected a whole number >= 1, got the string '1'",
    ),
    "missing-field": (
        _edit(lambda d: d["benchmarks"][KEY].pop("runs")),
        re.escape(f"benchmarks['{KEY}']: missing field 'runs'"),
    ),
    "unknown-field": (
        _edit(lambda d: d["benchmarks"][KEY].update(medain=1.0)),
        r"unknown field 'medain'",
    ),
    "naive-timestamp": (
        _edit(lambda d: d.update(updated="2025-11-29T19:38:00")),
        r"updated: expected an ISO 8601 timestamp with a time zone, got the string",
    ),
    "duplicate-key": (
        lambda t: t.replace('"mode": ', '"mode": "x",\n      "mode": ', 1),
        r"the key 'mode' appears twice in one object",
    ),
    "dangling-fingerprint": (
        _edit(lambda d: _refs(d)[0].__setitem__(2, "0123456789ab")),
        r"runs\[0\]: the string '0123456789ab' is not in the fingerprints table",
    ),
    "dangling-policy": (
        _edit(lambda d: _refs(d)[1].__setitem__(3, "0123456789ab")),
        r"runs\[1\]: the string '0123456789ab' is not in the policies table",
    ),
    "bad-fingerprint-value": (
        _edit(lambda d: next(iter(d["fingerprints"].values())).update(driver=[580])),
        r"\['driver'\]: expected a string, number, boolean or null, got a list of 1",
    ),
    "future-version": (
        _edit(lambda d: d.update(schema_version=4)),
        r"schema_version 4 was written by a newer pytest-gpuperf; this one reads version 1",
    ),
    "pre-release": (
        _edit(lambda d: d.update(schema_version=3)),
        r"it is in a pre-release format \(schema_version 3\)",
    ),
    "pre-release-one-file": (
        _edit(_one_file),
        r"it is in a pre-release format \(schema_version 1, one file\)",
    ),
}


@pytest.mark.parametrize("kind", list(CORRUPTIONS))
def test_a_bad_index_is_a_clear_error_and_is_left_untouched(
    store: BaselineStore, kind: str
) -> None:
    corrupt, problem = CORRUPTIONS[kind]
    store.save("main", [make_run(run_id="a")], meta={"git_sha": "abc"}, now=T0)
    store.save("main", [make_run(run_id="b")], now=T0 + dt.timedelta(days=1))
    path = store.path("main")
    path.write_bytes(corrupt(path.read_text()).encode("utf-8", "surrogateescape"))
    before = store_files(store)

    with pytest.raises(CorruptBaseline) as exc:
        store.load("main")
    msg = str(exc.value)
    assert msg.startswith(f"baseline file {path} cannot be used: ")
    assert re.search(problem, msg), msg
    assert "The file was left untouched." in msg
    assert exc.value.path == str(path)
    if kind == "future-version":
        assert "Upgrade pytest-gpuperf" in msg
    elif kind.startswith("pre-release"):
        assert "Save the baseline again: move this file (and its main.runs folder)" in msg
        assert "--gpuperf-save=main" in msg
    elif kind == "merge-conflict":
        assert "keeping one side" in msg
    else:
        assert f"Restore it from version control (git checkout -- {path})" in msg

    # A save into the broken file refuses too, and so does a prune; nothing changes.
    with pytest.raises(CorruptBaseline):
        store.save("main", [make_run(run_id="c")], now=T0)
    with pytest.raises(CorruptBaseline):
        store.prune("main", keep_runs=1)
    assert store_files(store) == before


def _segments(store: BaselineStore, name: str = "main") -> list[Path]:
    return sorted((store.root / f"{name}.runs").glob("*.json"))


def _edit_json(path: Path, fn: Callable[[dict[str, Any]], Any]) -> None:
    doc = json.loads(path.read_text())
    fn(doc)
    path.write_text(fileio.dumps(doc, compact_depth=3 if "runs" in path.parent.name else None))


def _first_ref(doc: dict[str, Any]) -> list[str]:
    ref: list[str] = doc["benchmarks"][KEY]["runs"][0]
    return ref


def _first_run(doc: dict[str, Any]) -> dict[str, Any]:
    run: dict[str, Any] = next(iter(doc["runs"][KEY].values()))
    return run


def _first_line(path: Path, fn: Callable[[dict[str, Any]], Any]) -> None:
    _edit_json(path, lambda d: fn(_first_run(d)))


#: What is done to a baseline's index or first segment, and what the error says.
SEGMENT_CORRUPTIONS: dict[str, tuple[str, Callable[[Path], Any], str]] = {
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
    "missing-run-field": (
        "segment",
        lambda p: _first_line(p, lambda r: r.pop("calls_per_round")),
        r"runs\['.*'\]\['[0-9a-f]{12}'\]: missing field 'calls_per_round'",
    ),
    "unknown-run-field": (
        "segment",
        lambda p: _first_line(p, lambda r: r.update(median=1.0)),
        r"unknown field 'median'",
    ),
    "wrong-type": (
        "segment",
        lambda p: _first_line(p, lambda r: r.update(rounds="fast")),
        r"rounds: expected a list, each a time in seconds",
    ),
    "negative-time": (
        "segment",
        lambda p: _first_line(p, lambda r: r.update(first_call_s=-1)),
        r"first_call_s: expected a time in seconds \(0, or 1e-12 to 86400\), got int -1",
    ),
    "bool-count": (
        "segment",
        lambda p: _first_line(p, lambda r: r.update(calls_per_round=True)),
        r"calls_per_round: expected a whole number >= 0, got the boolean true",
    ),
    "zero-count": (
        "segment",
        lambda p: _first_line(p, lambda r: r.update(calls_per_round=0)),
        r"calls_per_round: expected a whole number >= 1, got int 0",
    ),
    "nan": (
        "segment",
        lambda p: p.write_text(re.sub(r'"host_s": [^,]+', '"host_s": NaN', p.read_text(), count=1)),
        r"host_s: expected a time in seconds .*, got float nan",
    ),
    "huge-number": (
        "segment",
        lambda p: p.write_text(
            re.sub(r'"flops": [^,]+', '"flops": 1' + "0" * 400, p.read_text(), count=1)
        ),
        r"flops: expected a number >= 0, got int 1" + "0" * 36 + r"\.\.\.",
    ),
    "bad-timestamp": (
        "segment",
        lambda p: _first_line(p, lambda r: r.update(timestamp="yesterday")),
        r"timestamp: expected an ISO 8601 timestamp with a time zone",
    ),
    "null-optional-field": (
        "segment",
        lambda p: _first_line(p, lambda r: r.update(flops=None)),
        r"flops: expected a number >= 0, got null",
    ),
    "denormal-time": (  # R14: "nanx faster"
        "segment",
        lambda p: _first_line(p, lambda r: r.update(rounds=[5e-324] * 20)),
        r"rounds: expected a list, each a time in seconds \(0, or 1e-12 to 86400\)",
    ),
    "implausible-time": (  # R14: 1e308 passed everything
        "segment",
        lambda p: _first_line(p, lambda r: r.update(rounds=[1e308] * 20)),
        r"rounds: expected a list, each a time in seconds",
    ),
    "zero-median": (
        "segment",
        lambda p: _first_line(p, lambda r: r.update(rounds=[0.0] * 20)),
        r"rounds: their median is not a time > 0",
    ),
    "newer-segment": (  # R15: it said "expected 3" and "Restore"
        "segment",
        lambda p: _edit_json(p, lambda d: d.update(schema_version=4)),
        r"schema_version 4 was written by a newer pytest-gpuperf; this one reads version 1",
    ),
}


@pytest.mark.parametrize("kind", list(SEGMENT_CORRUPTIONS))
def test_a_bad_index_or_segment_is_a_clear_error_naming_it(store: BaselineStore, kind: str) -> None:
    which, corrupt, problem = SEGMENT_CORRUPTIONS[kind]
    store.save("main", [make_run(run_id="a", host_s=1e-4)], meta={"git_sha": "abc"}, now=T0)
    store.save("main", [make_run(run_id="b")], now=T0 + dt.timedelta(days=1))
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
    if kind == "newer-segment":
        assert "Upgrade pytest-gpuperf" in msg and "Restore" not in msg
    elif which == "segment":
        assert "Restore main.runs/ together with main.json" in msg
        # T6: the repair that keeps the later runs, not "delete both"
        assert f"prune main --dir {store.root} --before 2025-11-29T19:38:01+00:00" in msg
        assert "delete both" not in msg
    assert store_files(store) == before


def test_a_segment_edited_by_hand_is_validated_and_used(store: BaselineStore) -> None:
    store.save("main", [make_run(run_id="a")], now=T0)
    [seg] = _segments(store)
    _edit_json(seg, lambda d: _first_run(d).update(stability="shift"))  # its SHA-256 changes
    [run] = store.load("main").benchmarks[KEY].runs
    assert run.stability == "shift"


def test_a_save_reads_the_index_only(store: BaselineStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cost of a save does not grow with the runs already stored."""

    for i in range(3):
        store.save("main", [make_run(run_id=f"r{i}")], now=T0 + dt.timedelta(days=i))

    def no(*args: Any) -> Any:
        raise AssertionError("a save read a segment")

    monkeypatch.setattr(codec, "segment_lines", no)
    summary = store.save("main", [make_run(run_id="r3")], keep_runs=2, now=T0 + dt.timedelta(3))
    assert (summary.added, summary.dropped) == (1, 2)
    monkeypatch.undo()
    assert [r.run_id for r in store.load("main").benchmarks[KEY].runs] == ["r2", "r3"]


def test_segments_go_one_save_after_their_last_run(store: BaselineStore) -> None:
    """A segment no run refers to is deleted by the save after the one that dropped it, so a
    reader that read the index before a save still finds every segment it names."""
    from pytest_gpuperf.baseline import files

    where = store.files("main")
    store.save("main", [make_run(run_id="r0")], keep_runs=1, now=T0)
    old_index = files.parse_index(where, store.path("main").read_bytes())
    store.save("main", [make_run(run_id="r1")], keep_runs=1, now=T0 + dt.timedelta(1))
    assert len(_segments(store)) == 2  # r0's segment stays for a reader of the old index
    lines, _ = files._lines(where, old_index, None)
    assert [json.loads(line)["run_id"] for line in lines.values()] == ["r0"]
    store.save("main", [make_run(run_id="r2")], keep_runs=1, now=T0 + dt.timedelta(2))
    assert len(_segments(store)) == 2
    assert [r.run_id for r in store.load("main").benchmarks[KEY].runs] == ["r2"]


def test_a_reader_whose_segment_vanished_reads_the_index_again(
    store: BaselineStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two saves between a reader's read of the index and of a segment: it starts again."""
    from pytest_gpuperf.baseline import files

    store.save("main", [make_run(run_id="r0")], keep_runs=1, now=T0)
    real = files.read_regular
    armed = [True]

    def read_bytes(path: Path) -> bytes:
        data = real(path)
        if path.name == "main.json" and armed[0]:  # two saves right after the reader's read
            armed[0] = False
            for i in (1, 2):
                when = T0 + dt.timedelta(days=i)
                store.save("main", [make_run(run_id=f"r{i}")], keep_runs=1, now=when)
        return data

    monkeypatch.setattr(files, "read_regular", read_bytes)
    assert [r.run_id for r in store.load("main").benchmarks[KEY].runs] == ["r2"]


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("depth", [100_000, 200])
@pytest.mark.parametrize("where", ["index", "segment"])
def test_deeply_nested_json_is_a_clear_error_not_a_recursion_error(
    store: BaselineStore, depth: int, where: str
) -> None:
    """A ``meta`` nested 100,000 levels deep raised RecursionError."""
    store.save("main", [make_run(run_id="a")], meta={"git_sha": "abc"}, now=T0)
    if where == "index":
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
    with pytest.raises(BaselineError, match=r"main\.json is a folder, not a file"):
        store.load("main")


# --- keeping the last K runs ---------------------------------------------------------


def test_keep_runs_trims_per_benchmark_and_fingerprint(store: BaselineStore) -> None:
    other_key = "tests/test_ops.py::test_add@cuda-events"
    for i in range(5):
        results = [make_run(run_id=f"gpu-{i}")]
        if i == 0:  # a benchmark saved only once must survive later saves
            results.append(make_run("tests/test_ops.py::test_add", run_id="gpu-0"))
        summary = store.save("main", results, keep_runs=3, now=T0 + dt.timedelta(hours=i))
        assert summary.dropped == (1 if i >= 3 else 0)
    for i in range(2):
        store.save("main", [make_run(env=dict(GPU_ENV, driver="575.57.08"), run_id=f"old-{i}")])

    b = store.load("main")
    assert [r.run_id for r in b.runs(KEY, fp_id(GPU_ENV))] == ["gpu-2", "gpu-3", "gpu-4"]
    old_fp = fp_id(dict(GPU_ENV, driver="575.57.08"))
    assert [r.run_id for r in b.runs(KEY, old_fp)] == ["old-0", "old-1"]
    assert [r.run_id for r in b.runs(other_key, fp_id(GPU_ENV))] == ["gpu-0"]
    assert b.created == "2025-11-29T19:38:00+00:00"


def test_keep_runs_must_be_positive(store: BaselineStore) -> None:
    with pytest.raises(ValueError, match="keep_runs must be >= 1"):
        store.save("main", [make_run()], keep_runs=0)


# --- finding comparable runs ------------------------------------------------------------


def test_match_finds_runs_or_says_why_not(store: BaselineStore) -> None:
    store.save("main", [make_run(run_id="a")], now=T0)
    store.save("main", [make_run(run_id="b", env=dict(GPU_ENV, driver="575.57.08"))])
    store.save("main", [make_run(run_id="c")], now=T0)
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

    assert b.benchmarks[KEY].fingerprint_ids() == [
        fp_id(GPU_ENV),
        fp_id(dict(GPU_ENV, driver="575.57.08")),
    ]
    assert b.runs("tests/x.py::nope@cpu", fp_id(GPU_ENV)) == []


def test_policy_match_treats_equal_numbers_and_sequences_alike(store: BaselineStore) -> None:
    policy = {"round_ms": 5.0, "rounds": 20, "shape": (4096, 4096)}
    store.save("main", [make_run(policy=policy)], now=T0)
    b = store.load("main")
    assert b.runs(KEY, fp_id(GPU_ENV), {"round_ms": 5, "rounds": 20.0, "shape": (4096, 4096)})
    assert b.match(KEY, fingerprint(GPU_ENV), policy).status == MATCH


def test_a_hand_edited_fingerprint_is_found_under_its_new_content(store: BaselineStore) -> None:
    """Editing a fingerprint (declaring a new driver equivalent) re-keys its runs on load."""
    store.save("main", [make_run()], now=T0)
    path = store.path("main")
    path.write_text(path.read_text().replace("580.159.04", "580.200.01"))
    b = store.load("main")
    new_env = dict(GPU_ENV, driver="580.200.01")
    assert list(b.fingerprints) == [fp_id(new_env)]
    assert len(b.runs(KEY, fp_id(new_env))) == 1


# --- stable text ------------------------------------------------------------------


def test_saving_the_same_data_twice_gives_identical_files(tmp_path: Path) -> None:
    results = [
        make_run(),
        make_run("tests/test_ops.py::test_add", mode="cpu", env=CPU_ENV, flops=None),
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

    store.save("main", [make_run(run_id="a")], now=T0)
    before = store_files(store)
    store.save("main", [make_run(run_id="b")], now=T0 + dt.timedelta(days=1))
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
        results = [make_run(f"tests/t.py::test_{j}", run_id=f"r{i}") for j in range(30)]
        store.save("main", results, meta={"git_sha": "a" * 40}, now=T0)
    per_run = sum(len(data) for data in store_files(store).values()) / 300
    assert per_run < 1000, per_run


# --- concurrency and interrupted saves ----------------------------------------------------

_HELPERS = f"""
import datetime as dt, sys, time
from pathlib import Path
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_baseline import make_run, T0
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
                make_run("tests/t.py::test_shared", run_id=f"w{worker}-{i}"),
                make_run(f"tests/t.py::test_only_{worker}", run_id=f"w{worker}-{i}"),
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
    store.save("main", [make_run(run_id="old")], now=T0)
    before = store.path("main").read_bytes()
    code = """
        import os
        def hang(fd):
            print("writing", flush=True)
            time.sleep(120)
        os.fsync = hang  # atomic_write_text has written the temporary file, not renamed it
        BaselineStore(sys.argv[1]).save("main", [make_run(run_id="killed")], keep_runs=1)
    """
    proc = _python(code, str(store.root), stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "writing\n"
        # While it hangs inside the save, it holds the lock: another save waits, then says so.
        with pytest.raises(BaselineLocked, match=r"stayed locked by pid \d+ on "):
            BaselineStore(store.root, lock_timeout=0.2).save("main", [make_run()], now=T0)
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
    BaselineStore(store.root, lock_timeout=5).save("main", [make_run(run_id="next")], now=T0)
    assert [r.run_id for r in store.load("main").benchmarks[KEY].runs] == ["old", "next"]
    assert not list(store.root.rglob("*.tmp"))


@pytest.mark.parametrize("which", ["segment", "index"])
def test_a_failed_rename_leaves_the_old_file_and_no_litter(
    store: BaselineStore, monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    store.save("main", [make_run(run_id="old")], now=T0)
    before = store_files(store)
    real = os.replace

    def fail(src: Any, dst: Any) -> None:
        if (Path(dst).name == "main.json") == (which == "index"):
            raise OSError(28, "No space left on device")
        real(src, dst)

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(BaselineError) as exc:
        store.save("main", [make_run(run_id="new")], now=T0)
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
        store.save("main", [make_run()], now=T0)
    assert victim.read_text() == "precious"
    assert not store.exists("main")


@pytest.mark.parametrize(
    "setup, problem",
    [
        ("folder-is-a-file", r"baselines is a file, not a folder; point --gpuperf-baseline-dir"),
        ("parent-is-a-file", r"parent is a file, not a folder"),
        ("index-is-a-folder", r"main\.json is a folder, not a file"),
        ("runs-is-a-file", r"main\.runs is a file, not a folder"),
        ("index-is-a-symlink", r"main\.json is a symbolic link \(to .*elsewhere\.json\)"),
        ("runs-is-a-symlink", r"main\.runs is a symbolic link"),
        ("lock-is-a-symlink", r"lock file .*\.main\.json\.lock is a symbolic link \(to .*victim"),
        ("lock-is-a-hard-link", r"lock file .*\.main\.json\.lock has other names \(hard links\)"),
        # R15: a link loop or a dangling link as the folder was called "a file"
        (
            "folder-is-a-link-loop",
            r"baselines is a symbolic link to baselines, which leads nowhere",
        ),
        (
            "folder-is-a-dangling-link",
            r"baselines is a symbolic link to .*gone, which leads nowhere",
        ),
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
    elif setup == "folder-is-a-link-loop":
        root.symlink_to("baselines")
    elif setup == "folder-is-a-dangling-link":
        root.symlink_to(tmp_path / "gone")
    elif setup == "parent-is-a-file":
        (tmp_path / "parent").write_text("")
        root = tmp_path / "parent" / "baselines"
    else:
        BaselineStore(root).save("main", [make_run()], now=T0)
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
        store.save("main", [make_run(run_id="new")], now=T0)
    assert sorted((str(p), p.is_symlink()) for p in tmp_path.rglob("*")) == before
    if setup.startswith("lock-"):
        assert (tmp_path / "victim").read_text() == "precious"


def test_a_held_lock_times_out_with_a_clear_error(store: BaselineStore) -> None:
    store.save("main", [make_run()], now=T0)
    slow = BaselineStore(store.root, lock_timeout=0.1)
    with locked(store.root / ".main.json.lock"):
        with pytest.raises(BaselineLocked, match=r"\.main\.json\.lock stayed locked"):
            slow.save("main", [make_run(run_id="x")], now=T0)
        with pytest.raises(BaselineLocked):
            slow.prune("main", keep_runs=1)


# --- prune ---------------------------------------------------------------------------------


def _three_fingerprints(store: BaselineStore) -> tuple[str, str, str]:
    envs = [GPU_ENV, dict(GPU_ENV, driver="575.57.08"), CPU_ENV]
    for day in range(4):
        for j, env in enumerate(envs):
            mode = "cpu" if env is CPU_ENV else "cuda-events"
            store.save(
                "main",
                [make_run(mode=mode, env=env, run_id=f"d{day}-e{j}")],
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


def test_a_dry_run_prune_of_a_read_only_store_says_what_it_would_remove(
    store: BaselineStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R15: ``prune --dry-run`` on a read-only store was refused ("cannot save into baseline
    folder"), though it writes nothing; the prune itself is refused before anything."""
    from pytest_gpuperf.cli import main as cli

    for day in range(3):
        store.save("main", [make_run(run_id=f"r{day}")], now=T0 + dt.timedelta(days=day))
    before = store_files(store)
    real_access = os.access

    def read_only(path: Any, mode: int) -> bool:  # as a read-only file system, root's too
        return False if mode & os.W_OK else real_access(path, mode)

    monkeypatch.setattr(os, "access", read_only)
    dry = store.prune("main", keep_runs=1, dry_run=True)
    assert dry.removed_runs == 2 and "would remove 2 run(s)" in dry.describe()
    out = io.StringIO()
    args = ["prune", "main", "--dir", str(store.root), "--keep-runs", "1", "--dry-run"]
    assert cli.main(args, out=out) == 0 and "would remove 2 run(s)" in out.getvalue()
    with pytest.raises(BaselineError, match="is not writable"):
        store.prune("main", keep_runs=1)
    assert store_files(store) == before


def test_a_prune_of_a_missing_baseline_leaves_no_trace(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path / "nowhere")
    with pytest.raises(UnknownBaseline):
        store.prune("main", keep_runs=1)
    assert not store.root.exists()


# --- versions ------------------------------------------------------------------------------


#: What the golden file's H100 run keeps of the allocator, its telemetry and its output.
GOLDEN_MEMORY = {"available": True, "allocations_per_call": 0.0, "reserved_growth_bytes": 2**20}
GOLDEN_TELEMETRY = {
    "sm_clock_mhz": {"median": 1980.0},
    "activity": {"sm_util_pct": 71.0, "tensor_pct": 68.9},
}
GOLDEN_NUMERICS = [
    {"path": "out", "shape": [4], "dtype": "float32", "numel": 4, "nan": 0, "inf": 0,
     "stats": {"mean": 1.5, "abs_mean": 1.5, "min": 1.0, "max": 2.0, "std": 0.5},
     "samples": [1.0, 2.0]},
]  # fmt: skip


def golden_results() -> list[tuple[list[Run], dict[str, Any], dt.datetime]]:
    """The saves that produce the golden file of the format."""
    h100 = dict(GPU_ENV, gpu_name="NVIDIA H100 80GB HBM3", gpu_memory_bytes=85_520_809_984)
    saves = []
    for i in range(3):
        runs = [
            make_run(run_id=f"run-{i}", level=5.9312345e-4 * (1 + 0.003 * i)),
            make_run(
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
        saves.append((runs, {"git_sha": f"{i}" * 40}, T0 + dt.timedelta(days=i)))
    inventory = {
        "kernels": [
            {"name": "vectorized_elementwise_kernel", "launches": 1, "gpu_s": 1.1e-6},
        ]
    }
    cpu = make_run(
        "tests/test_ops.py::test_add", mode="cpu", env=CPU_ENV, run_id="cpu-0", n=5, bytes=None,
        extra=inventory, warmup=[2e-5, 1.5e-5], trimmed=1, wall_s=0.25, warmup_s=0.05,
        contention={"waited": 0.02, "threads": 1.0, "clock": "thread"},
    )  # fmt: skip
    h100_run = make_run(
        env=h100, run_id="h100-0", memory=GOLDEN_MEMORY, telemetry=GOLDEN_TELEMETRY,
        e2e_rounds=[7.1e-4] * 20, host_hidden=True, host_s=2.5e-4, tracer="coverage",
        numerics=GOLDEN_NUMERICS,
    )  # fmt: skip
    saves.append(([cpu, h100_run], {}, T0 + dt.timedelta(days=3)))
    return saves


def write_golden(store: BaselineStore) -> Path:
    for runs, meta, when in golden_results():
        store.save("golden", runs, keep_runs=20, meta=meta, now=when)
    return store.path("golden")


#: The golden baseline of the format: its index, and its runs beside it.
GOLDEN = DATA / "baseline-v1"


def test_the_golden_file_is_what_save_writes(store: BaselineStore) -> None:
    """Catches any unintended format change; set GPUPERF_REGEN_GOLDEN=1 to rewrite it."""
    write_golden(store)
    assert_golden(store, GOLDEN)


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


def test_the_golden_file_loads(tmp_path: Path) -> None:
    import shutil

    shutil.copytree(GOLDEN, tmp_path, dirs_exist_ok=True)
    store = BaselineStore(tmp_path)
    before = store_files(store, "golden")
    b = store.load("golden")
    assert store_files(store, "golden") == before  # loading never rewrites
    assert len(b.fingerprints) == 3 and len(b.policies) == 2
    runs = b.runs(KEY, fp_id(GPU_ENV), POLICY)
    assert [r.run_id for r in runs] == ["run-0", "run-1", "run-2"]
    assert [r.meta.get("git_sha") for r in runs] == ["0" * 40, "1" * 40, "2" * 40]
    assert runs[0].median == pytest.approx(5.9312345e-4, rel=1e-3)
    graph = b.benchmarks["tests/test_ops.py::test_softmax::fwd@cuda-graph"]
    assert graph.ident.name == "fwd" and len(graph.runs) == 3
    assert graph.runs[0].telemetry == {"sm_clock_mhz": {"median": 1980, "min": 1965}}
    assert graph.runs[0].flops is None and graph.runs[0].peak_memory_bytes is None
    assert graph.runs[0].policy == {"round_ms": 5.0, "rounds": 10, "warmup_ms": 500.0}
    [cpu] = b.runs("tests/test_ops.py::test_add@cpu", fp_id(CPU_ENV))
    assert len(cpu.rounds) == 5 and cpu.warmup == (2e-5, 1.5e-5) and cpu.trimmed == 1
    assert thawed(cpu.extra) == {
        "kernels": [{"name": "vectorized_elementwise_kernel", "launches": 1, "gpu_s": 1.1e-6}]
    }
    assert cpu.contention == {"waited": 0.02, "threads": 1.0, "clock": "thread"}
    assert (runs[0].plugin_version, runs[0].trimmed) == ("0.1.0", 0)
    [h100] = [r for r in b.benchmarks[KEY].runs if r.run_id == "h100-0"]
    assert thawed(h100.memory) == GOLDEN_MEMORY and thawed(h100.telemetry) == GOLDEN_TELEMETRY
    assert thawed(h100.numerics) == GOLDEN_NUMERICS and h100.tracer == "coverage"
    assert (h100.e2e_rounds[0], h100.host_hidden, h100.host_s) == (7.1e-4, True, 2.5e-4)
    m = b.match(KEY, fingerprint(dict(GPU_ENV, torch="2.14.0")), POLICY)
    assert m.status == OTHER_ENVIRONMENT and m.differences == ["torch 2.13.0+cu130 -> 2.14.0"]


def test_a_pre_release_baseline_is_refused_with_how_to_save_it_again(tmp_path: Path) -> None:
    """The formats before the first release are not read: saved again, not migrated. A save
    into one refuses as a load does, and leaves it as it is."""
    import shutil

    shutil.copytree(GOLDEN, tmp_path, dirs_exist_ok=True)
    index = tmp_path / "golden.json"
    index.write_text(index.read_text().replace('"schema_version": 1', '"schema_version": 3'))
    store = BaselineStore(tmp_path)
    before = store_files(store, "golden")
    for act in (
        lambda: store.load("golden"),
        lambda: store.save("golden", [make_run(run_id="new")], now=T0),
        lambda: store.check("golden"),
    ):
        with pytest.raises(CorruptBaseline) as exc:
            act()
        msg = str(exc.value)
        assert "pre-release format (schema_version 3)" in msg and "--gpuperf-save=golden" in msg
    assert store_files(store, "golden") == before


def test_stable_dumps_is_valid_json_and_refuses_nan() -> None:
    doc = {"b": [1, 2.5, None, "x"], "a": {"z": [], "y": {}, "x": [{"k": True}]}}
    assert json.loads(fileio.dumps(doc)) == doc
    with pytest.raises(ValueError):
        fileio.dumps({"x": float("nan")})


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
    store.save("main", [make_run(run_id="r0")], keep_runs=1, now=T0)
    runs = store.files("main").runs_dir
    [own] = _segments(store)
    nested = BaselineStore(runs)
    nested.save("nested", [make_run(run_id="n0")], now=T0)
    (runs / "notes.json").write_text("{}\n")
    foreign = runs / "20250101T000000Z-0123abcd.json"
    foreign.write_text(own.read_text().replace('"baseline": "main"', '"baseline": "other"'))
    strays = {p: p.read_bytes() for p in (runs / "nested.json", runs / "notes.json", foreign)}
    for i in (1, 2):  # the second save collects r0's segment, dropped by the first
        store.save("main", [make_run(run_id=f"r{i}")], keep_runs=1, now=T0 + dt.timedelta(i))
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
    [
        ("fast", "first_call_s: expected a time in seconds"),
        (math.nan, "first_call_s"),
        (-1e300, "first_call_s"),
        (5e-324, "first_call_s"),
    ],
)
def test_a_segment_whose_sha256_matches_is_still_validated(
    store: BaselineStore, value: Any, problem: str
) -> None:
    """T16: a segment forged with its SHA-256 updated in the index was trusted: "fast" gave
    a bare "could not convert string to float", NaN and -1e300 were accepted."""
    store.save("main", [make_run(run_id="a")], now=T0)
    seg = _forge(store, lambda d: _first_run(d).update(first_call_s=value))
    with pytest.raises(CorruptBaseline) as exc:
        store.load("main")
    msg = str(exc.value)
    assert f"baseline file {seg} (a segment of main.json) cannot be used" in msg
    assert problem in msg and "prune main" in msg


def test_the_remedy_for_a_deeply_nested_segment_is_not_garbled(store: BaselineStore) -> None:
    """T16: "(a segment of m.json)" was put inside the suggested git command."""
    store.save("main", [make_run(run_id="a")], now=T0)
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

    store.save("main", [make_run(run_id="r0")], now=T0)
    [broken] = _segments(store)
    store.save("main", [make_run(run_id="r1")], now=T0 + dt.timedelta(days=1))
    if damage == "missing":
        broken.unlink()
    else:
        broken.write_bytes(broken.read_bytes()[: 40 if damage == "truncated" else 0])
    before = store_files(store)
    with pytest.raises(CorruptBaseline) as pre:
        store.check("main")  # the session's check before measuring
    with pytest.raises(CorruptBaseline) as exc:
        store.save("main", [make_run(run_id="r2")], now=T0 + dt.timedelta(days=2))
    assert str(exc.value) == str(pre.value) and str(broken) in str(exc.value)
    assert store_files(store) == before
    repair = re.search(r"pytest-gpuperf (prune .*?) \(", str(exc.value))
    assert repair is not None
    assert cli.main(repair.group(1).split(), out=io.StringIO()) == 0
    assert [r.run_id for r in store.load("main").benchmarks[KEY].runs] == ["r1"]
    store.save("main", [make_run(run_id="r2")], now=T0 + dt.timedelta(days=2))
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
    BaselineStore(root).save("m", [make_run(run_id="a")], now=T0)  # root's files, 0644/0755
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
    BaselineStore(root).save("m", [make_run(run_id="a")], now=T0)
    root.chmod(0o755)
    said = _as_nobody(_prune_as_nobody, str(root))
    assert said.startswith("2: ") and "is not writable" in said, said
    assert "the CLI's --dir" in said
