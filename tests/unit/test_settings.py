"""Typed settings (shell/settings.py): every option is one typed field, built once."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Any

import pytest

from pytest_gpuperf.settings_fields import option_fields
from pytest_gpuperf.shell.config import GpuPerfConfig
from pytest_gpuperf.shell.options import (
    OPTIONS,
    OPTIONS_BY_NAME,
    PER_TEST_OPTIONS,
    SETTINGS_CLASSES,
)
from pytest_gpuperf.shell.settings import PerTest, Settings
from pytest_gpuperf.verdict.policy import PER_TEST_VERDICT, VerdictSettings

#: A value of each option other than its default, as the command line or a marker gives it.
SAMPLES: dict[str, Any] = {
    "device": "cpu",
    "json": "out.json",
    "disable": "true",
    "only": "true",
    "skip": "true",
    "lock_timeout": "12.5",
    "dist_timeout": "45",
    "cuda_graph": "both",
    "l2_flush": "false",
    "warmup_ms": "40",
    "min_warmup_ms": "20",
    "round_ms": "2.5",
    "rounds": "7",
    "noise_threshold": "0.1",
    "flops": 1e9,
    "bytes": lambda shape: 4.0,
    "collective": "AllReduce",
    "save": "main",
    "baseline": "nightly",
    "ab": "HEAD~1",
    "bisect": "v1.0",
    "bisect_bad": "HEAD~2",
    "bisect_budget": "600",
    "baseline_dir": "perf/baselines",
    "keep_runs": "3",
    "threshold": "0.1",
    "alpha": "0.01",
    "fail_on": "inconclusive",
    "reruns": "2",
    "confirm_budget": "0.5",
    "gate_secondary": "memory",
    "memory_tolerance": "0.2",
    "first_call_tolerance": "1.5",
    "numerics": "gate",
    "numerics_tolerance": "0.01",
    "telemetry": "false",
    "telemetry_interval_ms": "20",
    "telemetry_raw": "true",
    "nvtx": "false",
    "activity": "false",
    "markdown": "r.md",
    "html": "r.html",
    "csv": "r.csv",
    "github": "on",
    "sort": "name",
    "columns": "median,verdict",
    "group_by": "func,mode",
    "progress": "off",
    "capture": "always",
    "artifacts_dir": "art",
    "capture_timeout": "30",
    "capture_budget": "90",
    "capture_skip": "nsys,ncu",
    "capture_session_budget": "60",
    "capture_calls": "4",
    "ncu_kernels": "0",
    "inventory": "always",
}


def _owners() -> dict[str, list[str]]:
    owners: dict[str, list[str]] = {}
    for cls in SETTINGS_CLASSES:
        for field_name, opt in option_fields(cls).items():
            owners.setdefault(opt, []).append(f"{cls.__name__}.{field_name}")
    return owners


def test_every_option_is_one_settings_field() -> None:
    owners = _owners()
    assert set(owners) == {o.name for o in OPTIONS}, "an option without a field, or a stray field"
    twice = {opt: where for opt, where in owners.items() if len(where) > 1}
    assert not twice, f"options in more than one settings field: {twice}"
    assert set(SAMPLES) == {o.name for o in OPTIONS}, "give the new option a sample value"


def _field(name: str) -> tuple[type[Any], dataclasses.Field[Any]]:
    for cls in SETTINGS_CLASSES:
        for f in dataclasses.fields(cls):
            if f.metadata.get("option") == name:
                return cls, f
    raise AssertionError(name)


def _conforms(value: Any, hint: Any) -> bool:
    """``value`` is of the annotated type (the kinds the settings use)."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is tuple:
        (item, _) = typing.get_args(hint)
        return isinstance(value, tuple) and all(_conforms(v, item) for v in value)
    if origin is Callable or hint is Callable:
        return callable(value)
    if hint is float:
        return isinstance(value, float)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def _hint(cls: type[Any], name: str) -> Any:
    import pytest_gpuperf.shell.options as options_module

    return typing.get_type_hints(cls, vars(options_module))[name]


@pytest.mark.parametrize("name", [o.name for o in OPTIONS])
def test_defaults_and_values_keep_their_type(name: str) -> None:
    cls, f = _field(name)
    hint = _hint(cls, f.name)
    opt = OPTIONS_BY_NAME[name]
    assert f.default == opt.default, f"{cls.__name__}.{f.name}: default differs from the option's"
    assert _conforms(opt.default, hint), (name, opt.default, hint)
    parsed = opt.parse(SAMPLES[name])
    assert parsed != opt.default, f"the sample of {name} is its default"
    assert _conforms(parsed, hint), (name, parsed, hint)


def _typed_value(settings: Settings, name: str) -> Any:
    for part in dataclasses.fields(settings):
        sub = getattr(settings, part.name)
        for field_name, opt in option_fields(type(sub)).items():
            if opt == name:
                return getattr(sub, field_name)
    raise KeyError(name)


def test_values_round_trip_from_the_command_line_and_the_ini_file() -> None:
    session_options = {o.name for o in OPTIONS if o.cli} - {"disable", "only", "skip"}
    cli = {n: SAMPLES[n] for n in session_options if n not in ("save", "baseline")}
    for source, cfg in (
        ("cli", GpuPerfConfig.from_values(cli, {})),
        ("ini", GpuPerfConfig.from_values({}, cli)),
    ):
        settings = Settings.from_config(cfg)
        for name in cli:
            assert cfg.source(name) == source
            assert _typed_value(settings, name) == cfg.settings[name].value, name


def test_defaults_build_the_default_settings() -> None:
    assert Settings.from_config(GpuPerfConfig.from_values({}, {})) == Settings()


def test_per_test_settings_override_the_sessions() -> None:
    cfg = GpuPerfConfig.from_values({"rounds": "9", "threshold": "0.2", "alpha": "0.01"}, {})
    session = Settings.from_config(cfg)
    marker = {"rounds": 12, "gate_secondary": "all"}
    call = {"threshold": 0.05, "flops": 2e9}
    mine = PerTest.resolve(cfg.resolve(marker, call), session)
    assert mine.measure.rounds == 12 and mine.measure.round_ms == session.measure.round_ms
    assert mine.verdict.threshold == 0.05 and mine.verdict.gate_secondary == "all"
    assert mine.verdict.alpha == 0.01  # a session-only option stays the session's
    assert mine.work.flops == 2e9 and mine.work.bytes is None
    assert set(PER_TEST_VERDICT) <= PER_TEST_OPTIONS


def test_the_per_test_verdict_travels_as_result_gate() -> None:
    session = VerdictSettings(alpha=0.01)
    mine = VerdictSettings(threshold=0.2, numerics="gate", alpha=0.01)
    wire = mine.gate_record()
    assert set(wire) == set(PER_TEST_VERDICT)
    assert session.for_result(wire) == mine
    assert session.for_result({}) == session  # an old result without them: the session's
