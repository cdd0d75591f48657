"""The measuring process's side: which hooks run, what a capture child writes, errors kept."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from pytest_gpuperf.artifacts.analysis.timeline import analyze, load_trace, parse_trace
from pytest_gpuperf.artifacts.collectors.child import (
    CAPTURE_ENV,
    ChildCapture,
    InventoryHook,
    measure_hooks,
    read_status,
    window_calls,
)
from pytest_gpuperf.model import BenchId, thawed
from pytest_gpuperf.shell.config import GpuPerfConfig
from pytest_gpuperf.shell.fixture import BenchContext, GpuBench
from pytest_gpuperf.shell.settings import Settings


def _settings(**cli: object) -> Settings:
    return Settings.from_config(GpuPerfConfig.from_values(cli, {}))


def _hooks(settings: Settings) -> Sequence[object]:
    """This process's hooks, as the fixture asks for them."""
    return measure_hooks(settings.capture, "cpu", saving=bool(settings.session.save))


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CAPTURE_ENV, raising=False)
    monkeypatch.delenv("GPUPERF_CHILD", raising=False)


def test_which_hooks_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert _hooks(_settings()) == []
    assert _hooks(_settings(inventory="never", save="main")) == []
    (hook,) = _hooks(_settings(save="main"))
    assert isinstance(hook, InventoryHook)
    (hook,) = _hooks(_settings(inventory="always"))
    assert isinstance(hook, InventoryHook)
    monkeypatch.setenv("GPUPERF_CHILD", "1")
    assert _hooks(_settings(inventory="always")) == []  # a confirmation child
    monkeypatch.setenv(CAPTURE_ENV, json.dumps({"tool": "torch_profiler", "dir": str(tmp_path)}))
    (hook,) = _hooks(_settings())
    assert isinstance(hook, ChildCapture) and hook.tool == "torch_profiler"
    monkeypatch.setenv(CAPTURE_ENV, "{not json")
    assert _hooks(_settings()) == []


def test_window_calls() -> None:
    assert window_calls(10, 1e-3) == 10
    assert window_calls(10, 0.5) == 4  # 2 s at most
    assert window_calls(10, 5.0) == 2  # never fewer than 2
    assert window_calls(10, float("nan")) == 10


def test_a_profiler_child_writes_a_trace_and_its_status(tmp_path: Path) -> None:
    import torch

    x = torch.randn(10_000)
    hook = ChildCapture(
        {"tool": "torch_profiler", "dir": str(tmp_path), "keys": ["t.py::t@cpu"], "calls": 4}, "cpu"
    )
    assert hook(BenchId("t.py::other", None, "cpu"), lambda: x * 2, 1e-5) is None  # not regressed
    hook(BenchId("t.py::t", None, "cpu"), lambda: torch.sort(x * 2), 1e-5)
    hook(BenchId("t.py::t", None, "cpu"), lambda: x, 1e-5)  # once per benchmark
    (entry,) = read_status(tmp_path)["benchmarks"]
    assert entry["key"] == "t.py::t@cpu" and entry["calls"] == 4 and "error" not in entry
    a = analyze(parse_trace(load_trace(tmp_path / entry["trace"])))
    assert a.calls == 4 and a.device == "cpu"


def test_a_failing_call_is_recorded_not_raised(tmp_path: Path) -> None:
    hook = ChildCapture({"tool": "torch_profiler", "dir": str(tmp_path)}, "cpu")

    def boom() -> None:
        raise RuntimeError("CUDA error: an illegal memory access")

    assert hook(BenchId("t.py::t", None, "cpu"), boom, 1e-3) is None
    (entry,) = read_status(tmp_path)["benchmarks"]
    assert entry["error"] == "RuntimeError: CUDA error: an illegal memory access"


def _bench(after: list) -> GpuBench:  # type: ignore[type-arg]
    cfg = GpuPerfConfig.from_values(
        {"warmup_ms": 10, "min_warmup_ms": 1, "round_ms": 0.5, "rounds": 5}, {}
    )
    return GpuBench(BenchContext("t.py::t", cfg, "cpu", record=lambda r: None, after_measure=after))


def test_hooks_add_to_the_result_and_never_fail_it() -> None:
    seen = []

    def good(bid: BenchId, call, per_call_s: float):  # type: ignore[no-untyped-def]
        seen.append((bid.key, call(), per_call_s > 0))
        return {"kernels": {"schema": 1}}

    def bad(bid: BenchId, call, per_call_s: float):  # type: ignore[no-untyped-def]
        raise MemoryError("out of memory\nmore")

    bench = _bench([good, bad])
    assert bench(lambda a, b: a + b, 1, 2) == 3
    (r,) = bench.results
    assert seen == [("t.py::t@cpu", 3, True)]
    assert thawed(r.run.extra) == {
        "kernels": {"schema": 1},
        "after_measure_error": "MemoryError: out of memory",
    }


def test_an_inventory_hook_on_the_cpu() -> None:
    import torch

    x = torch.randn(10_000)
    extra = InventoryHook("cpu", calls=3)(
        BenchId("t.py::t", None, "cpu"), lambda: x.mul(2).add_(1), 1e-5
    )
    assert extra is not None
    inv = extra["kernels"]
    assert inv["calls"] == 3 and {k["name"] for k in inv["kernels"]} >= {"aten::mul", "aten::add_"}


def test_a_capture_child_measures_briefly_before_it_profiles(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from pytest_gpuperf.artifacts.collectors.child import (
        BRIEF,
        MINIMAL,
        capture_policy,
        child_policy,
    )
    from pytest_gpuperf.measure.policy import MeasurePolicy

    assert capture_policy(None) is None and capture_policy("full") is None
    brief = capture_policy(BRIEF)
    assert brief is not None
    p = brief(MeasurePolicy(cuda_graph=True, l2_flush=False))
    assert (p.rounds, p.warmup_ms, p.min_warmup_ms) == (5, 50.0, 0.0)
    assert p.cuda_graph is True and p.l2_flush is False  # how it times stays
    assert brief(MeasurePolicy(rounds=3, warmup_ms=10)).rounds == 3  # never longer
    minimal = capture_policy(MINIMAL)
    assert minimal is not None and minimal(MeasurePolicy()).warmup_ms == 0.0
    assert child_policy() is None  # not a child
    monkeypatch.setenv("GPUPERF_CHILD", "1")
    assert child_policy() is None  # a confirmation child measures in full
    monkeypatch.setenv(CAPTURE_ENV, json.dumps({"tool": "nsys", "dir": str(tmp_path)}))
    assert child_policy() is None  # a spec without "measure": as before
    monkeypatch.setenv(CAPTURE_ENV, json.dumps({"tool": "nsys", "measure": MINIMAL}))
    adjust = child_policy()
    assert adjust is not None and adjust(MeasurePolicy()).rounds == 2

    monkeypatch.setenv(CAPTURE_ENV, json.dumps({"tool": "torch_profiler", "measure": BRIEF}))
    cfg = GpuPerfConfig.from_values({"round_ms": 0.5}, {})
    ctx = BenchContext("t.py::t", cfg, "cpu", record=lambda r: None, after_measure=[])
    bench = GpuBench(ctx)
    bench(lambda: sum(range(100)))
    (r,) = bench.results
    assert len(r.run.rounds) <= 5 and r.run.policy["rounds"] == 5


def test_a_capture_child_bounds_its_window_and_times_itself(tmp_path: Path) -> None:
    import time

    import torch

    x = torch.randn(1000)
    spec = {
        "tool": "torch_profiler", "dir": str(tmp_path), "calls": 10, "window_s": 0.3,
        "spawned_at": time.time() - 2.0,
    }  # fmt: skip
    hook = ChildCapture(spec, "cpu")
    hook(BenchId("t.py::t", None, "cpu"), lambda: x * 2, 0.1)  # 0.1 s per call: 3 in 0.3 s
    (entry,) = read_status(tmp_path)["benchmarks"]
    assert entry["calls"] == 3 and entry["export_s"] >= 0
    timing = entry["timing"]
    assert timing["startup_s"] >= 2.0 and timing["since_spawn_s"] >= timing["startup_s"]
    assert timing["hook_s"] >= 0 and timing["test_s"] >= 0
