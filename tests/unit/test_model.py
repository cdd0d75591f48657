"""A run is one frozen value from the fixture to the rule; a result is a run and what the
session adds to it."""

from __future__ import annotations

import copy
import json
import math
import pickle
from dataclasses import FrozenInstanceError, fields, replace
from types import MappingProxyType

import pytest

from pytest_gpuperf.model import RUN_FIELDS, Result, Run
from pytest_gpuperf.outcome import Diagnosis
from tests.unit.reporting_data import result

#: the keys of ``Result.to_dict()``: the results JSON and xdist's dicts
KEYS = [
    *RUN_FIELDS, "comparison", "artifacts", "notes", "gate", "location", "summary", "tflops",
    "gbps", "of_peak",
]  # fmt: skip


def full_result() -> Result:
    """A result with every field of its run and of the session's side set."""
    r = result(
        "test_mm[4096-bf16]",
        kind="regression",
        ratio=1.2,
        measured={
            "warmup": [1e-3, 6e-4],
            "trimmed": 2,
            "e2e_rounds": [6e-4] * 30,
            "host_hidden": True,
            "host_s": 2e-4,
            "numerics": [{"path": "out", "shape": [2], "stats": {"std": 0.5}}],
            "memory": {"available": True, "allocated_per_call_bytes": 0},
            "contention": {"waited": 0.01, "threads": 1.0, "clock": "thread"},
            "tracer": "sys.settrace",
            "telemetry": {"clocks": [1980, 1755], "power_w": 300.0},
            "extra": {"kernels": [{"name": "gemm"}]},
            "policy": {"rounds": 30, "secondary": {"tflops": [0.05, {"abs": 1.0}]}},
            "environment": {"device": "cuda", "gpus": [{"name": "H200", "clocks": [1980]}]},
            "timestamp": "2025-11-29T19:38:00+00:00",
            "meta": {"git_sha": "abc"},
            "plugin_version": "0.1.0",
            "fingerprint_id": "0123456789ab",
        },
    )
    r.artifacts = [{"tool": "nsys", "files": ["a.nsys-rep"]}]
    r.notes = ["a note"]
    r.gate = {"threshold": 0.05}
    r.diagnosis = Diagnosis(r.id.key, "mm is 20 % slower.", ["kernel-slower"], ["gemm +20 %"])
    return r


def test_every_field_of_a_run_is_frozen() -> None:
    run = full_result().run
    for f in fields(Run):
        with pytest.raises(FrozenInstanceError):
            setattr(run, f.name, getattr(run, f.name))


def test_a_run_s_lists_are_tuples_and_its_dicts_read_only_at_every_depth() -> None:
    run = full_result().run
    assert run.rounds == tuple(run.rounds) and isinstance(run.warmup, tuple)
    assert isinstance(run.policy["secondary"]["tflops"][1], MappingProxyType)
    changes = [
        lambda: run.policy.__setitem__("x", 1),  # type: ignore[index]
        lambda: run.policy["secondary"]["tflops"][1].__setitem__("a", 2),
        lambda: run.environment["gpus"][0].__setitem__("name", "x"),  # type: ignore[index]
        lambda: run.numerics[0]["stats"].__setitem__("std", 1.0),  # type: ignore[index]
        lambda: run.rounds.append(1.0),  # type: ignore[attr-defined]
        lambda: run.telemetry["clocks"].append(1),  # type: ignore[index]
    ]
    before = json.dumps(full_result().to_dict())
    for change in changes:
        with pytest.raises((TypeError, AttributeError)):
            change()
    assert json.dumps(full_result().to_dict()) == before


def test_a_run_is_plain_json_values_when_made() -> None:
    """What the user's code gives (a NumPy scalar, a tuple, NaN) is made plain at once."""

    class Scalar:  # a NumPy or torch scalar
        def item(self) -> float:
            return 2.0

    run = replace(
        full_result().run,
        flops=Scalar(),  # type: ignore[arg-type]
        telemetry={"clocks": (1, 2), "power_w": math.nan, 3: "three"},
    )
    assert run.flops == 2.0 and type(run.flops) is float
    assert run.telemetry == {"clocks": (1, 2), "power_w": None, "3": "three"}


def test_a_changed_run_is_a_new_one_and_the_old_stays() -> None:
    r = full_result()
    old = r.run
    rounds = [1.0, 2.0]
    new = replace(old, rounds=rounds)
    rounds.append(3.0)  # the list given is copied, not kept
    assert new.rounds == (1.0, 2.0) and old.rounds != new.rounds
    assert new.environment is old.environment  # what did not change is shared
    assert r.with_run(run_id="other") is r and r.run.run_id == "other" and old.run_id != "other"


def test_the_dict_is_plain_json_and_gives_back_the_same_result() -> None:
    for r in (full_result(), result(kind=None), result(kind=None, line=None)):
        d = r.to_dict()
        assert list(d) == KEYS
        text = json.dumps(d, allow_nan=False)
        back = Result.from_dict(json.loads(text))
        assert back == r and json.dumps(back.to_dict()) == text
    d = full_result().to_dict()
    assert d["comparison"]["diagnosis"]["paragraph"] == "mm is 20 % slower."
    assert d["tracer"] == "sys.settrace" and d["host_s"] == 2e-4 and d["trimmed"] == 2
    d["policy"]["secondary"]["tflops"].append(1)  # the dict is the caller's to change
    d["rounds"].append(1.0)


def test_an_older_results_file_s_result_reads_as_a_run() -> None:
    """A result written before a run kept its saving metadata: the fields it lacks get their
    defaults, the keys a run has not are left."""
    d = full_result().to_dict()
    for name in ("timestamp", "meta", "plugin_version", "fingerprint_id", "first_call_s"):
        del d[name]
    d["median_s"] = 1.0
    run = Result.from_dict(d).run
    assert run.timestamp is None and run.meta == {} and run.first_call_s is None


def test_a_run_copies_as_itself_and_pickles_by_value() -> None:
    r = full_result()
    assert copy.copy(r.run) is r.run and copy.deepcopy(r.run) is r.run
    back = pickle.loads(pickle.dumps(r))
    assert back == r and back.run is not r.run
    assert isinstance(back.run.policy, MappingProxyType)


def test_the_session_s_side_stays_free_to_change() -> None:
    r = full_result()
    r.notes.append("n")
    r.artifacts.append({"tool": "x"})
    r.gate["threshold"] = 0.1
    assert type(r.notes) is list and type(r.gate) is dict and r.gate == {"threshold": 0.1}
