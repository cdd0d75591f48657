"""bench/cpu_modes.py takes the host out with the plugin's ``HostSpeed.shifts``.

The reference is the script's former inline copy of that logic: on runs that all carry a
canary the figures are the same, to the last digit; a benchmark with a run without one is
judged as measured by the plugin, and the script says ``n/a`` for it instead of taking the
host out of only some of its runs (or failing where none has one).
"""

from __future__ import annotations

import importlib.util
import json
import math
import random
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from pytest_gpuperf.verdict.host_speed import SAME_HOST_BY_KIND, factor

ROOT = Path(__file__).resolve().parents[2]
SAVED = ROOT / "bench" / "results" / "cpu-2026-12-05"


@pytest.fixture
def cpu_modes(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script adds bench/ to it
    spec = importlib.util.spec_from_file_location("cpu_modes", ROOT / "bench" / "cpu_modes.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Run:
    def __init__(self, canary: dict[str, Any] | None) -> None:
        c = canary or {}
        self.canary_op_s = c.get("op_s")
        self.canary_share = c.get("share")
        self.canary_others = c.get("others")


def _old(rows: list[dict[str, Any]]) -> dict[str, tuple[list[float], float]]:
    """The script's former inline logic: per benchmark, the levels (log) with the host out
    and the factors' max/min."""
    levels: dict[str, list[float]] = {}
    factors: dict[str, list[float]] = {}
    for r in rows:
        levels.setdefault(r["name"], []).append(r["median"])
        f = factor(_Run(r.get("canary")))  # type: ignore[arg-type]
        factors.setdefault(r["name"], []).append(f if f is not None else math.nan)
    band = math.log(SAME_HOST_BY_KIND["torch-cpu"])
    out = {}
    for name, ys in levels.items():
        logs = [math.log(y) for y in ys]
        fs = factors[name]
        ref = min(f for f in fs if not math.isnan(f))
        shifted = [
            y - ((f - ref) if not math.isnan(f) and f - ref > band else 0.0)
            for y, f in zip(logs, fs, strict=True)
        ]
        fr = math.exp(max(fs) - ref) if not any(math.isnan(f) for f in fs) else math.nan
        out[name] = (shifted, fr)
    return out


def _new(cpu_modes: ModuleType, rows: list[dict[str, Any]]) -> dict[str, Any]:
    names = list(dict.fromkeys(r["name"] for r in rows))
    return {
        name: cpu_modes.host_out(
            [math.log(r["median"]) for r in rows if r["name"] == name],
            [cpu_modes.run_of(r) for r in rows if r["name"] == name],
        )
        for name in names
    }


def _canary(rng: random.Random, host: float) -> dict[str, Any]:
    op = 2e-6 * host * rng.uniform(1.0, 1.1)
    return {
        "kind": "torch-cpu",
        "op_s": op,
        "bursts": [op, op * 1.05],
        "share": rng.choice([1.0, rng.uniform(0.5, 1.0)]),
        "others": rng.uniform(0.0, 1.0),
    }


def _synthetic(
    rng: random.Random, processes: int, hosts: tuple[float, ...]
) -> list[dict[str, Any]]:
    return [
        {
            "process": i,
            "name": f"test_x:test_{b}",
            "median": 1e-4 * rng.uniform(1.0, 1.3),
            "canary": _canary(rng, rng.choice(hosts)),
        }
        for i in range(processes)
        for b in range(3)
    ]


@pytest.mark.parametrize("saved", ["rows-sbs.json", "rows-examples.json"])
def test_saved_rows_give_the_factors_of_the_former_inline_logic(
    cpu_modes: ModuleType, saved: str
) -> None:
    rows = json.loads((SAVED / saved).read_text())
    assert _new(cpu_modes, rows) == _old(rows)


def test_synthetic_runs_with_canaries_give_the_factors_of_the_former_inline_logic(
    cpu_modes: ModuleType,
) -> None:
    rng = random.Random(5)
    for processes in (1, 2, 3, 10):
        for hosts in ((1.0,), (1.0, 1.2), (1.0, 1.5, 3.0)):
            rows = _synthetic(rng, processes, hosts)
            assert _new(cpu_modes, rows) == _old(rows)


def test_a_benchmark_with_a_run_without_a_canary_is_as_measured_and_said_so(
    cpu_modes: ModuleType,
) -> None:
    rng = random.Random(6)
    rows = _synthetic(rng, 4, (1.0, 2.0))
    rows[0]["canary"] = None  # test_x:test_0, process 0: a run without a canary
    for r in rows:
        if r["name"] == "test_x:test_2":
            r["canary"] = None  # no run of it has one: the former logic failed on it
    with pytest.raises(ValueError):
        _old(rows)
    new = _new(cpu_modes, rows)
    assert new["test_x:test_0"] is None and new["test_x:test_2"] is None
    assert (
        new["test_x:test_1"]
        == _old([r for r in rows if r["name"] == "test_x:test_1"])["test_x:test_1"]
    )
    lines = cpu_modes.table(rows)
    assert [line.split()[0] for line in lines[1:]] == [
        "test_x:test_0",
        "test_x:test_1",
        "test_x:test_2",
    ]
    assert lines[1].count("n/a") == 3 and lines[3].count("n/a") == 3 and "n/a" not in lines[2]
    assert lines[3].endswith("| 0/4")  # a run without a canary is not on a quiet host


@pytest.mark.parametrize(("saved", "printed"), [
    ("rows-sbs.json", "cpu-modes-quiet.txt"),
    ("rows-examples.json", "cpu-modes-examples-quiet.txt"),
])  # fmt: skip
def test_the_replay_of_saved_rows_prints_the_saved_table(
    cpu_modes: ModuleType, saved: str, printed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cpu_modes.main(["--replay", str(SAVED / saved)]) == 0
    got = capsys.readouterr().out.splitlines()
    assert got[0] == f"10 processes replayed from {SAVED / saved}"
    assert got[1:] == (SAVED / printed).read_text().splitlines()[2:]
