"""A result is a frozen measurement plus what later stages add; its dicts do not change."""

from __future__ import annotations

import copy
import json
import math
import pickle
from dataclasses import FrozenInstanceError, replace
from typing import Any

import pytest

from pytest_gpuperf.model import MEASURED, BenchId, FrozenDict, FrozenList, Measurement, Result
from pytest_gpuperf.outcome import Diagnosis
from tests.unit.reporting_data import result

#: the keys of ``Result.to_dict()``, in the order the single dataclass wrote them: the
#: results JSON, the baseline records and xdist's dicts depend on them
KEYS = [
    "id", "device", "rounds", "calls_per_round", "first_call_s", "warmup", "trimmed",
    "stability", "warmup_s", "wall_s", "l2_flush", "peak_memory_bytes", "flops", "bytes",
    "device_name", "telemetry", "comparison", "artifacts", "notes", "policy", "gate",
    "environment", "run_id", "location", "extra", "e2e_rounds", "host_hidden", "host_s",
    "numerics", "memory", "contention", "tracer", "summary", "tflops", "gbps", "of_peak",
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
    "contention": {},
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
            "contention": {"waited": 0.01, "threads": 1.0, "clock": "thread"},
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


def nested_result() -> Result:
    """:func:`full_result` with a list and dicts nested in the policy and the environment."""
    r = full_result()
    policy = {**r.policy, "secondary": {"tflops": [0.05, {"abs": 1.0}]}}
    environment = {**r.environment, "gpus": [{"name": "H200", "clocks": [1980, 1755]}]}
    return Result(
        measurement=replace(r.measurement, policy=policy, environment=environment),
        comparison=r.comparison,
        diagnosis=r.diagnosis,
    )


#: every way to change a measured list or dict in place: (name, change); each takes the
#: object the fields are read from, a Result or its Measurement
CHANGES: list[tuple[str, Any]] = [
    ("rounds.append", lambda o: o.rounds.append(1.0)),
    ("rounds.extend", lambda o: o.rounds.extend([1.0])),
    ("rounds.insert", lambda o: o.rounds.insert(0, 1.0)),
    ("rounds.pop", lambda o: o.rounds.pop()),
    ("rounds.remove", lambda o: o.rounds.remove(o.rounds[0])),
    ("rounds.clear", lambda o: o.rounds.clear()),
    ("rounds.sort", lambda o: o.rounds.sort()),
    ("rounds.reverse", lambda o: o.rounds.reverse()),
    ("rounds[0] =", lambda o: o.rounds.__setitem__(0, 1.0)),
    ("rounds[:1] =", lambda o: o.rounds.__setitem__(slice(0, 1), [])),
    ("del rounds[0]", lambda o: o.rounds.__delitem__(0)),
    ("rounds +=", lambda o: _iadd(o.rounds, [1.0])),
    ("rounds *=", lambda o: _imul(o.rounds, 2)),
    ("warmup.append", lambda o: o.warmup.append(1.0)),
    ("e2e_rounds.append", lambda o: o.e2e_rounds.append(1.0)),
    ("numerics.append", lambda o: o.numerics.append({})),
    ("numerics[0][k] =", lambda o: o.numerics[0].__setitem__("path", "x")),
    ("numerics[0][stats].update", lambda o: o.numerics[0]["stats"].update(std=1.0)),
    ("numerics[0][shape].append", lambda o: o.numerics[0]["shape"].append(3)),
    ("policy[k] =", lambda o: o.policy.__setitem__("x", 1)),
    ("del policy[k]", lambda o: o.policy.__delitem__("rounds")),
    ("policy.update", lambda o: o.policy.update(x=1)),
    ("policy.setdefault", lambda o: o.policy.setdefault("x", 1)),
    ("policy.pop", lambda o: o.policy.pop("rounds")),
    ("policy.popitem", lambda o: o.policy.popitem()),
    ("policy.clear", lambda o: o.policy.clear()),
    ("policy |=", lambda o: _ior(o.policy, {"x": 1})),
    ("policy[k][k] =", lambda o: o.policy["secondary"].__setitem__("x", 1)),
    ("policy[k][k].append", lambda o: o.policy["secondary"]["tflops"].append(1)),
    ("policy[k][k][1][k] =", lambda o: o.policy["secondary"]["tflops"][1].__setitem__("a", 2)),
    ("environment[k] =", lambda o: o.environment.__setitem__("torch", "2.99")),
    ("environment.update", lambda o: o.environment.update(torch="2.99")),
    ("environment[k][0][k] =", lambda o: o.environment["gpus"][0].__setitem__("name", "x")),
    ("environment[k][0][k].pop", lambda o: o.environment["gpus"][0]["clocks"].pop()),
    ("memory[k] =", lambda o: o.memory.__setitem__("available", False)),
    ("memory.setdefault", lambda o: o.memory.setdefault("reason", "x")),
    ("contention[k] =", lambda o: o.contention.__setitem__("waited", 0.5)),
    ("contention.clear", lambda o: o.contention.clear()),
]


def _iadd(x: Any, y: Any) -> None:
    x += y


def _imul(x: Any, y: Any) -> None:
    x *= y


def _ior(x: Any, y: Any) -> None:
    x |= y


@pytest.mark.parametrize("through", ["result", "measurement"])
@pytest.mark.parametrize(("what", "change"), CHANGES, ids=[c[0] for c in CHANGES])
def test_a_measured_list_or_dict_cannot_change_in_place(
    through: str, what: str, change: Any
) -> None:
    r = nested_result()
    before = json.dumps(r.to_dict())
    field = what.removeprefix("del ").split(".")[0].split("[")[0].split(" ")[0]
    target = r if through == "result" else r.measurement
    with pytest.raises(
        FrozenInstanceError, match=rf"replace\(result.measurement, {field}=\.\.\.\)"
    ):
        change(target)
    with pytest.raises(TypeError):  # as a tuple's change is
        change(target)
    assert json.dumps(r.to_dict()) == before


def test_the_frozen_lists_and_dicts_read_as_plain_ones() -> None:
    r = nested_result()
    m = r.measurement
    plain = json.loads(json.dumps(r.to_dict()))
    for name in ("rounds", "warmup", "e2e_rounds", "numerics"):
        assert isinstance(getattr(m, name), list) and getattr(m, name) == plain[name]
    for name in ("policy", "environment", "memory", "contention"):
        assert isinstance(getattr(m, name), dict) and getattr(m, name) == plain[name]
        assert json.dumps(getattr(m, name)) == json.dumps(plain[name])
        assert repr(getattr(m, name)) == repr(plain[name])
    # copies are plain and can change, the measurement does not
    for copied in (list(m.rounds), m.rounds[:], m.rounds * 1, m.rounds.copy(), sorted(m.rounds)):
        assert type(copied) is list
        copied.append(1.0)
    for d in (dict(m.policy), m.policy.copy(), m.policy | {}, {**m.policy}):
        assert type(d) is dict
        d["x"] = 1
    assert "x" not in m.policy and m.rounds == plain["rounds"]


def test_the_dict_is_plain_json_values() -> None:
    """``to_dict`` gives no frozen list or dict: what reads it may change it."""
    d = nested_result().to_dict()

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            assert type(x) is dict
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            assert type(x) is list
            for v in x:
                walk(v)

    walk(d)
    d["policy"]["secondary"]["tflops"].append(1)
    d["rounds"].append(1.0)


def test_a_measurement_pickles_and_deep_copies_frozen() -> None:
    r = nested_result()
    for m in (pickle.loads(pickle.dumps(r.measurement)), copy.deepcopy(r.measurement)):
        assert m == r.measurement and m is not r.measurement
        assert json.dumps(Result(measurement=m).to_dict()["policy"]) == json.dumps(
            r.to_dict()["policy"]
        )
        with pytest.raises(FrozenInstanceError):
            m.policy["secondary"]["tflops"].append(1)
        with pytest.raises(FrozenInstanceError):
            m.rounds.append(1.0)
    back = pickle.loads(pickle.dumps(r))
    assert back == r and json.dumps(back.to_dict()) == json.dumps(r.to_dict())
    c = copy.deepcopy(r)
    assert c.environment["gpus"] is not r.environment["gpus"]
    assert copy.copy(r.rounds) is r.rounds  # frozen: a shallow copy is itself


def test_replace_makes_a_new_frozen_measurement() -> None:
    r = nested_result()
    m = r.measurement
    rounds = [1.0, 2.0]
    numerics = [{"path": "out", "stats": {"std": 1.0}}]
    m2 = replace(m, rounds=rounds, numerics=numerics, policy={**m.policy, "rounds": 2})
    rounds.append(3.0)  # the list given is copied, not kept
    numerics[0]["stats"]["std"] = 2.0
    assert m2.rounds == [1.0, 2.0] and m2.numerics == [{"path": "out", "stats": {"std": 1.0}}]
    assert m2.policy["rounds"] == 2 and m.policy["rounds"] != 2
    assert m2.environment is m.environment  # what did not change is shared, not copied
    for change in (lambda: m2.rounds.append(1.0), lambda: m2.numerics[0]["stats"].clear()):
        with pytest.raises(FrozenInstanceError):
            change()
    r2 = Result(measurement=m2)
    with pytest.raises(FrozenInstanceError):
        r2.policy["x"] = 1


def test_the_outcome_stays_free_to_change() -> None:
    """Only the measurement is frozen: the outcome's lists and dicts are the caller's."""
    r = nested_result()
    r.notes.append("n")
    r.artifacts.append({"tool": "x"})
    r.gate["threshold"] = 0.1
    r.extra["kernels"] = []
    assert type(r.notes) is list and type(r.gate) is dict
    assert r.notes == ["n"] and r.gate == {"threshold": 0.1}


def test_the_flat_constructor_takes_the_outcome_fields_and_their_defaults() -> None:
    r = Result(BenchId("t.py::x"), "cpu", [1.0], 1, 0.1, notes=["n"], run_id="run")
    assert r.notes == ["n"] and r.run_id == "run" and r.rounds == [1.0]
    assert r.artifacts == [] and r.gate == {} and r.extra == {} and r.telemetry is None
    r2 = Result(BenchId("t.py::y"), "cpu", [1.0], 1, 0.1)
    assert r2.notes is not r.notes and r2.artifacts is not r.artifacts  # each its own
    r3 = Result(measurement=r.measurement, notes=None, gate=None)
    assert r3.notes == [] and r3.gate == {}
    with pytest.raises(TypeError, match="unexpected keyword argument 'nope'"):
        Result(BenchId("t.py::x"), "cpu", [1.0], 1, 0.1, nope=1)


def test_a_frozen_list_or_dict_made_by_hand_names_no_field() -> None:
    for empty in (FrozenList.__new__(FrozenList), FrozenDict.__new__(FrozenDict)):
        with pytest.raises(
            FrozenInstanceError, match=r"replace\(result.measurement, field=\.\.\.\)"
        ):
            empty.clear()
    assert FrozenList([[1], {"a": [2]}]) == [[1], {"a": [2]}]
    with pytest.raises(TypeError):
        FrozenList([[1], {"a": [2]}])[1]["a"].append(3)
