"""bench/capture_cost.py says when a first diagnosis failed: the median it prints is over the
ones that were made, and a failure must not hide behind it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def capture_cost(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setattr(sys, "path", list(sys.path))
    spec = importlib.util.spec_from_file_location(
        "capture_cost", ROOT / "bench" / "capture_cost.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _test(name: str, status: str, first: float | None) -> dict[str, Any]:
    return {
        "nodeid": f"bench/zoo/test_zoo.py::test_zoo[{name}]",
        "first_diagnosis_s": first,
        "tools": {"torch_profiler": {"status": status, "wall_s": 0.4 if first is None else first}},
    }


def _doc(tests: list[dict[str, Any]]) -> dict[str, Any]:
    return {"session": {"duration_s": 100.0, "capture": {"spent_s": 20.0, "budget_s": 60.0,
                                                         "tests": tests, "passes": []}}}  # fmt: skip


def test_failed_first_diagnoses_are_named_beside_the_median(capture_cost: ModuleType) -> None:
    doc = _doc([_test("a", "ok", 10.6), _test("b", "failed", None), _test("c", "failed", None)])
    lines = capture_cost.session_figures(doc, None)
    assert any("median 10.6 s" in line and "over 1 regressed" in line for line in lines)
    failed = [line for line in lines if line.startswith("FIRST DIAGNOSIS FAILED")]
    assert failed == [
        "FIRST DIAGNOSIS FAILED for 2 of 3 regressed test(s): test_zoo[b], test_zoo[c] "
        "(each one's torch_profiler/child.log says why)"
    ]


def test_no_failure_line_when_every_first_diagnosis_was_made(capture_cost: ModuleType) -> None:
    lines = capture_cost.session_figures(_doc([_test("a", "ok", 5.0), _test("b", "ok", 6.0)]), None)
    assert not any("FAILED" in line for line in lines)
