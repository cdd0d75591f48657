"""The journeys that bench/journey.py follows keep the shape docs/architecture.md describes:
no module called back by one it called, on any route, and no climb back up to a higher ring;
and its callback count sees a callback when there is one. Stops and returns are not bounded:
a return is a coordinator carrying on with its next step. The shapes of the run from the loop
to the rule are counted."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def journey(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    spec = importlib.util.spec_from_file_location("journey", ROOT / "bench" / "journey.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "journey", module)  # its dataclasses look it up there
    spec.loader.exec_module(module)
    return module


def test_no_route_has_a_callback_or_climbs_back_up() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "journey.py")],
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    ).stdout
    routes = re.findall(r"route of the value: .*?, (\d+) climbs back up, (\d+) callbacks", out)
    assert routes == [("0", "0")] * 3, out
    # one run, one shape: the loop's measurement, the Run, the rule's per-run
    # statistic and its Comparison; a stored record or a document of the run was a fifth
    assert "shapes of the run: 4 (RawMeasurement, Run, RunStat, Comparison)" in out, out


def _frames_of(*modules: str) -> Any:
    """A chain of fake frames, the innermost first, each in a module of the package."""

    class Frame:
        def __init__(self, module: str, back: Any) -> None:
            self.f_back = back
            self.f_globals = {"__name__": f"pytest_gpuperf.{module}"}

    frame = None
    for m in reversed(modules):
        frame = Frame(m, frame)
    return frame


def test_a_module_called_back_by_one_it_called_is_a_callback(journey: ModuleType) -> None:
    # a helper, called by the rule, calls the rule back
    frame = _frames_of("verdict.decide", "verdict.robust", "verdict.decide", "shell.gate")
    assert journey._calls_back(journey._below(frame), "verdict.decide")
    # the rule calling its own function, or a module not waiting on the caller: not one
    frame = _frames_of("verdict.decide", "verdict.decide")
    assert not journey._calls_back(journey._below(frame), "verdict.decide")
    frame = _frames_of("measure.cpu", "measure.engine", "shell.fixture")
    assert not journey._calls_back(journey._below(frame), "measure.cpu")
