"""A result is a frozen measurement plus what later stages add; its dicts do not change."""

from __future__ import annotations

import copy
import json
import math
from dataclasses import FrozenInstanceError, replace
from typing import Any

import pytest

from pytest_gpuperf.model import MEASURED, BenchId, Measurement, Result
from pytest_gpuperf.outcome import Diagnosis
from tests.unit.reporting_data import result

#: the keys of ``Result.to_dict()``, in the order the single dataclass wrote them: the
#: results JSON, the baseline records and xdist's dicts depend on them
KEYS = [
    "id", "device", "rounds", "calls_per_round", "first_call_s", "warmup", "trimmed",
    "stability", "warmup_s", "wall_s", "l2_flush", "peak_memory_bytes", "flops", "bytes",
    "device_name", "telemetry", "comparison", "artifacts", "notes", "policy", "gate",
    "environment", "run_id", "location", "extra", "e2e_rounds", "host_hidden", "host_s",
    "numerics", "memory", "host_canary", "tracer", "summary", "tflops", "gbps", "of_peak",
]  # fmt: skip

#: a value of the right kind for every measured field, to try to assign
NEW: dict[str, Any] = {
    "id": BenchId("t.py::other"),
    "device": "cpu",
    "rounds": [9.0],
    "calls_per_round": 99,
    "first_call_s": 9.0,
    "warmup": [9.0],
    "trimmed": 9,
    "stability": "shift",
    "warmup_s": 9.0,
    "wall_s": 9.0,
    "l2_flush": False,
    "peak_memory_bytes": 9,
    "flops": 9.0,
    "bytes": 9.0,
    "device_name": "other",
    "policy": {"rounds": 9},
    "environment": {"device": "cpu"},
    "e2e_rounds": [9.0],
    "host_hidden": False,
    "host_s": 9.0,
    "numerics": [],
    "memory": {},
    "host_canary": {},
    "tracer": "other",
}


def full_result() -> Result:
    """A result with every outcome field set, a verdict and a diagnosis among them."""
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
            "host_canary": {"kind": "cpu", "op_s": 1e-6, "share": 0.01},
            "tracer": "sys.settrace",
        },
    )
    r.telemetry = {"clocks": [1980, 1755], "power_w": 300.0}
    r.artifacts = [{"tool": "nsys", "files": ["a.nsys-rep"]}]
    r.notes = ["a note"]
    r.gate = {"threshold": 0.05}
    r.extra = {"kernels": [{"name": "gemm"}]}
    r.diagnosis = Diagnosis(r.id.key, "mm is 20 % slower.", ["kernel-slower"], ["gemm +20 %"])
    return r


def test_every_field_of_a_measurement_is_frozen() -> None:
    r = full_result()
    m = r.measurement
    before = copy.deepcopy(m)
    assert set(NEW) == set(MEASURED)
    for name, value in NEW.items():
        with pytest.raises(FrozenInstanceError):
            setattr(m, name, value)
    assert m == before


def test_a_measured_field_cannot_be_assigned_through_the_result() -> None:
    r = full_result()
    before = copy.deepcopy(r.measurement)
    for name, value in NEW.items():
        with pytest.raises(FrozenInstanceError, match=f"cannot assign Result.{name}: it is part"):
            setattr(r, name, value)
        assert getattr(r, name) == getattr(before, name)  # reads go to the measurement
    assert r.measurement == before
    with pytest.raises(FrozenInstanceError, match=r"dataclasses.replace\(result.measurement"):
        r.rounds = []


def test_what_later_stages_add_is_assigned_on_the_result() -> None:
    r = result(kind=None)
    m = r.measurement
    r.telemetry = {"power_w": 1.0}
    r.run_id, r.location, r.gate = "run-1", ["t.py", 3], {"threshold": 0.1}
    r.notes.append("note")
    r.comparison = full_result().comparison
    assert r.measurement is m  # the measurement is the one made, untouched


def test_a_changed_measurement_is_a_new_one() -> None:
    r = full_result()
    m = r.measurement
    r2 = replace(r, measurement=replace(m, rounds=[1.0] * 6))
    assert r2.rounds == [1.0] * 6 and r.rounds == m.rounds != [1.0] * 6
    assert r2.comparison is r.comparison and r2.notes == r.notes
    with pytest.raises(TypeError, match="measurement= given with measured fields"):
        Result(measurement=m, rounds=[1.0])


def test_the_dict_keeps_its_keys_their_order_and_its_values() -> None:
    for r in (full_result(), result(kind=None), result(kind=None, line=None)):
        d = r.to_dict()
        assert list(d) == KEYS
        back = Result.from_dict(json.loads(json.dumps(d)))
        assert json.dumps(back.to_dict()) == json.dumps(d)
    d = full_result().to_dict()
    assert d["comparison"]["diagnosis"]["paragraph"] == "mm is 20 % slower."
    assert d["tracer"] == "sys.settrace" and d["host_s"] == 2e-4 and d["trimmed"] == 2


def test_from_dict_gives_back_the_same_result() -> None:
    r = full_result()
    back = Result.from_dict(json.loads(json.dumps(r.to_dict())))
    r.make_plain()
    assert back == r
    assert back.measurement == r.measurement and back.diagnosis == r.diagnosis


def test_make_plain_makes_a_new_measurement_and_leaves_the_old_one() -> None:
    r = result(kind=None, measured={"numerics": [{"shape": (2,), "std": math.inf}]})
    old = r.measurement
    r.telemetry = {"clocks": (1, 2)}
    r.make_plain()
    assert r.numerics == [{"shape": [2], "std": None}] and r.telemetry == {"clocks": [1, 2]}
    assert old.numerics == [{"shape": (2,), "std": math.inf}]  # the one made is as it was
    assert r.measurement is not old and r.id is old.id


def test_a_result_deep_copies_and_compares_by_value() -> None:
    r = full_result()
    c = copy.deepcopy(r)
    assert c == r and c.measurement is not r.measurement
    assert isinstance(c.measurement, Measurement)
