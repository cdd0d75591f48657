"""The run's registry (pytest_gpuperf/registry.py): built from the hooks, the built-in
entries first, by pytest's plugin manager and by the CLI's own alike."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pytest_gpuperf.measure import backend
from pytest_gpuperf.measure.names import MODE_CPU
from pytest_gpuperf.registry import Registry, build, plugin_manager
from pytest_gpuperf.reporting.outputs import OUTPUTS, Output


class AddsOne:
    """A plugin as a conftest.py or an entry-point module writes it: plain functions."""

    def pytest_gpuperf_timing_modes(self) -> list[backend.Mode]:
        return [replace(backend.get(MODE_CPU), name="cpu-process", replaces=MODE_CPU)]

    def pytest_gpuperf_output_formats(self) -> list[Output]:
        return [Output("tsv", "TSV", lambda ctx, target: "")]


def test_the_cli_manager_builds_the_built_in_registry() -> None:
    registry = build(plugin_manager(entry_points=False).hook)
    assert registry.modes.names == backend.BUILTIN.names
    assert registry.outputs == OUTPUTS and registry.added_outputs == ()


def test_a_plugin_without_markers_adds_after_the_built_in_entries() -> None:
    pm = plugin_manager(entry_points=False)
    pm.register(AddsOne())
    registry = build(pm.hook)
    assert registry.modes.names == tuple(
        "cpu-process" if n == MODE_CPU else n for n in backend.BUILTIN.names
    )
    assert [o.option for o in registry.outputs] == [*(o.option for o in OUTPUTS), "tsv"]
    assert [o.option for o in registry.added_outputs] == ["tsv"]


def test_two_builds_share_nothing() -> None:
    pm = plugin_manager(entry_points=False)
    pm.register(AddsOne())
    build(pm.hook)
    assert "cpu-process" not in build(plugin_manager(entry_points=False).hook).modes


def test_an_output_option_taken_twice_fails() -> None:
    with pytest.raises(ValueError, match=r"two output formats are named 'csv'"):
        Registry(backend.BUILTIN, (*OUTPUTS, Output("csv", "my CSV", lambda ctx, t: "")))
