"""The timing modes (measure/backend.py, built per run by pytest_gpuperf/registry.py): the
built-in modes as the fixture, the verdict and the reports used them before the registry,
and what a new mode may declare."""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_gpuperf.measure import backend
from pytest_gpuperf.measure.names import MODE_CPU, MODE_EVENTS, MODE_GRAPH, MODES
from pytest_gpuperf.measure.policy import MeasurePolicy
from pytest_gpuperf.registry import build, plugin_manager
from pytest_gpuperf.verdict.decide import TIME, classes_for
from pytest_gpuperf.verdict.policy import CLASSES, NoiseClass
from tests.unit.test_rings import ADAPTER, ring_of


def _names(device: str, cuda_graph: bool | str) -> list[str]:
    return [
        m.name for m in backend.BUILTIN.for_benchmark(device, MeasurePolicy(cuda_graph=cuda_graph))
    ]


def test_every_mode_of_the_results_is_registered_in_the_order_it_is_measured() -> None:
    assert backend.BUILTIN.names[: len(MODES)] == MODES
    assert build(plugin_manager(entry_points=False).hook).modes.names == MODES


@pytest.mark.parametrize(
    ("cuda_graph", "expected"),
    [(False, [MODE_EVENTS]), (True, [MODE_GRAPH]), ("both", [MODE_EVENTS, MODE_GRAPH])],
)
def test_the_cuda_graph_setting_selects_the_cuda_modes(
    cuda_graph: bool | str, expected: list[str]
) -> None:
    assert _names("cuda", cuda_graph) == expected
    assert _names("cpu", cuda_graph) == [MODE_CPU]


def test_the_policy_record_holds_what_makes_runs_of_a_mode_comparable() -> None:
    policy = MeasurePolicy(round_ms=2.0, rounds=7, warmup_ms=50.0, l2_flush=False)
    common = {"round_ms": 2.0, "rounds": 7, "warmup_ms": 50.0}
    assert backend.get(MODE_EVENTS).policy_record(policy) == {
        **common,
        "l2_flush": False,
        "figures": "device+e2e",
    }
    assert backend.get(MODE_GRAPH).policy_record(policy) == common
    assert backend.get(MODE_CPU).policy_record(policy) == common


def test_the_verdict_takes_each_modes_noise_class() -> None:
    assert classes_for([], MODE_GRAPH) == {TIME: CLASSES["graph"]}
    assert classes_for([], MODE_CPU) == {TIME: CLASSES["cpu"]}
    assert backend.get(MODE_EVENTS).noise_class is None  # derived from the runs
    own = NoiseClass("virtual", noise=0.001, mode=1.05, runs=1)
    mode = replace(backend.get(MODE_CPU), name="virtual-clock", noise_class=own)
    assert classes_for([], mode) == {TIME: own}  # judged by the description it is given


def test_only_cuda_events_flushes_l2_hides_the_host_and_has_a_remedy() -> None:
    events, graph, cpu = (backend.get(n) for n in (MODE_EVENTS, MODE_GRAPH, MODE_CPU))
    assert (events.flushes_l2, events.hides_host, events.launch_free) == (True, True, MODE_GRAPH)
    assert "cuda_graph=True" in events.noisy_remedy
    for m in (graph, cpu):
        assert (m.flushes_l2, m.hides_host, m.noisy_remedy, m.launch_free) == (
            False, False, "", None,
        )  # fmt: skip
    assert cpu.plain_name and not events.plain_name and not graph.plain_name


def test_an_unknown_mode_selects_nothing_and_says_which_exist() -> None:
    unknown = backend.get("tpu-events")
    assert not unknown.selected(MeasurePolicy())
    # results of a mode this process does not know are judged as two figures, as before
    assert unknown.noise_class is None and unknown.hides_host
    with pytest.raises(ValueError, match=r"no timing mode named 'tpu-events'.*cuda-events"):
        unknown.make_timer(backend.Invocation(print), MeasurePolicy())


def test_a_name_is_registered_once_unless_replaced() -> None:
    cpu = backend.get(MODE_CPU)
    with pytest.raises(ValueError, match=r"two timing modes are named 'cpu'.*replaces='cpu'"):
        backend.Modes([*backend.BUILTIN_MODES, cpu])
    again = replace(cpu, noise_class="graph", replaces=MODE_CPU)
    modes = backend.Modes([*backend.BUILTIN_MODES, again])
    assert modes.get(MODE_CPU) is again and modes.names == backend.BUILTIN.names


def test_a_mode_that_replaces_another_takes_its_place_and_the_other_is_gone() -> None:
    process = replace(backend.get(MODE_CPU), name="cpu-process", replaces=MODE_CPU)
    modes = backend.Modes([*backend.BUILTIN_MODES, process])
    assert modes.names.index("cpu-process") == backend.BUILTIN.names.index(MODE_CPU)
    assert MODE_CPU not in modes
    assert [m.name for m in modes.for_benchmark("cpu", MeasurePolicy())] == ["cpu-process"]
    with pytest.raises(ValueError, match=r"replaces 'tpu', which is not declared"):
        backend.Modes([replace(process, replaces="tpu")])


def test_nothing_outside_a_registry_holds_modes() -> None:
    """No module-level registry to change: a run's modes are what its hooks returned."""
    mutable = [
        name
        for name, value in vars(backend).items()
        if isinstance(value, (dict, list, set)) and not name.startswith("__")
    ]
    assert mutable == []
    assert not hasattr(backend, "register") and not hasattr(backend, "MODES")


def test_built_in_factories_live_in_adapter_modules_the_core_never_imports() -> None:
    """The registry is core (no torch); each factory is a path to an adapter's function."""
    for mode in backend.BUILTIN_MODES:
        assert isinstance(mode.factory, str), mode.name
        module, _, attr = mode.factory.partition(":")
        assert ring_of(module.removeprefix("pytest_gpuperf.")) == ADAPTER
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.origin is not None
        tree = ast.parse(Path(spec.origin).read_text())
        assert attr in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


def test_the_cpu_mode_makes_a_timer_that_times() -> None:
    calls: list[int] = []
    timer = backend.get(MODE_CPU).make_timer(
        backend.Invocation(calls.append, (1,)), MeasurePolicy()
    )
    try:
        first, out = timer.first_call()
        timer.prepare()
        timer.reset_peak_memory()
        per_call, wall, done = timer.time_round(3)[:3]
        assert out is None and first >= 0 and per_call >= 0 and wall >= 0 and done == 3
        assert calls == [1, 1, 1, 1]
        assert (timer.host_hidden(1), timer.host_time(1), timer.peak_memory()) == (None,) * 3
    finally:
        timer.close()
