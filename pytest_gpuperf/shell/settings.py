"""Typed settings, built once in ``pytest_configure`` from :mod:`.config`'s values, and the run
context that carries them: code reads ``run.settings.session.save``, never an option's name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.artifacts.collectors.base import CaptureSettings
from pytest_gpuperf.measure.policy import MeasurePolicy
from pytest_gpuperf.registry import Registry
from pytest_gpuperf.registry import build as build_registry
from pytest_gpuperf.reporting.settings import ReportSettings
from pytest_gpuperf.settings_fields import settings_from
from pytest_gpuperf.shell.options import SessionSettings, TelemetrySettings, WorkSettings
from pytest_gpuperf.verdict.policy import VerdictSettings

if TYPE_CHECKING:
    from pytest_gpuperf.shell.config import GpuPerfConfig, Setting

_EXTRA_KEY = pytest.StashKey[dict[str, Any]]()


@dataclass(frozen=True)
class Settings:
    """A session's settings, typed (built once: :meth:`from_config`)."""

    session: SessionSettings = field(default_factory=SessionSettings)
    measure: MeasurePolicy = field(default_factory=MeasurePolicy)
    verdict: VerdictSettings = field(default_factory=VerdictSettings)
    capture: CaptureSettings = field(default_factory=CaptureSettings)
    report: ReportSettings = field(default_factory=ReportSettings)
    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)

    @classmethod
    def from_config(cls, cfg: GpuPerfConfig) -> Settings:
        """Each part (a settings class) from the resolved values."""
        values = {name: s.value for name, s in cfg.settings.items()}
        parts = vars(cls()).items()  # each field's default: an instance of its class
        return cls(**{name: settings_from(type(part), values) for name, part in parts})


@dataclass(frozen=True)
class PerTest:
    """One benchmark's settings: the session's, with its marker's and call's over them."""

    measure: MeasurePolicy
    verdict: VerdictSettings
    work: WorkSettings

    @classmethod
    def resolve(cls, resolved: Mapping[str, Setting], session: Settings) -> PerTest:
        """From :meth:`GpuPerfConfig.resolve`'s per-test values."""
        values = {name: s.value for name, s in resolved.items()}
        return cls(
            measure=settings_from(MeasurePolicy, values, session.measure),
            verdict=settings_from(VerdictSettings, values, session.verdict),
            work=settings_from(WorkSettings, values),
        )


@dataclass(frozen=True)
class RunContext:
    """What the shell's modules need of the running session: the typed ``settings``, the
    resolution table behind them (``resolved``: where each value came from), the config."""

    config: pytest.Config
    settings: Settings
    resolved: GpuPerfConfig
    #: what the plugins' ``pytest_gpuperf_*`` registry hooks returned, asked once
    registry: Registry = field(default_factory=Registry.builtin)

    @classmethod
    def build(cls, config: pytest.Config, resolved: GpuPerfConfig) -> RunContext:
        return cls(config, Settings.from_config(resolved), resolved, build_registry(config.hook))

    @property
    def rootpath(self) -> Path:
        return Path(self.config.rootpath)

    @property
    def invocation_args(self) -> tuple[str, ...]:
        return tuple(self.config.invocation_params.args)

    @property
    def invocation_dir(self) -> Path:
        return Path(self.config.invocation_params.dir)

    @property
    def inipath(self) -> Path | None:
        return self.config.inipath

    @property
    def is_worker(self) -> bool:
        return hasattr(self.config, "workerinput")

    @property
    def is_controller(self) -> bool:  # xdist's, which runs no test (a worker's dist is "no")
        o = self.config.option  # xdist's own rule: -n N, or --dist with --tx
        return getattr(o, "dist", "no") != "no" and bool(getattr(o, "tx", None))

    @property
    def baseline_dir(self) -> Path:
        """``--gpuperf-baseline-dir``, relative to the rootdir (stable whatever the cwd)."""
        path = Path(self.settings.session.baseline_dir).expanduser()
        return path if path.is_absolute() else self.rootpath / path


def fingerprint_extra(config: pytest.Config) -> dict[str, Any]:
    """Fields users' plugins add to the fingerprint (pytest_gpuperf_update_fingerprint), once."""
    if _EXTRA_KEY not in config.stash:
        extra: dict[str, Any] = {}
        config.hook.pytest_gpuperf_update_fingerprint(config=config, fingerprint=extra)
        config.stash[_EXTRA_KEY] = extra
    return config.stash[_EXTRA_KEY]
