"""The plugin's configuration, resolved once, with where each value came from.

Precedence, in one place: a ``gpu_bench(...)`` keyword > the ``gpuperf`` marker > the command
line > the ini file > the default. An error names the source and what was expected.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.shell.options import OPTIONS, OPTIONS_BY_NAME
from pytest_gpuperf.values import OptionValueError

if TYPE_CHECKING:
    import pytest


class ConfigError(ValueError):
    """A bad option value; the message names where it came from and what is expected."""


@dataclass(frozen=True)
class Setting:
    value: Any
    source: str  # "call", "marker", "cli", "ini", "default"
    #: the value as the user wrote it (command line or ini), before parsing: what a child
    #: pytest is handed, so that it parses exactly what this session parsed
    given: Any = None


@dataclass(frozen=True)
class GpuPerfConfig:
    """Every option resolved from command line > ini > default, with where it came from (for
    error messages and a child's arguments; code reads :class:`.settings.Settings`)."""

    settings: Mapping[str, Setting] = field(default_factory=dict)

    def _value(self, name: str) -> Any:
        return self.settings[name].value

    def source(self, name: str) -> str:
        return self.settings[name].source

    @classmethod
    def from_values(cls, cli: Mapping[str, Any], ini: Mapping[str, Any]) -> GpuPerfConfig:
        """Resolve from raw command-line and ini values (``None`` or ``""`` = not given)."""
        out: dict[str, Setting] = {}
        for opt in OPTIONS:
            raw_cli = cli.get(opt.name)
            raw_ini = ini.get(opt.name)
            if opt.cli and raw_cli is not None:
                out[opt.name] = Setting(_parse(opt.name, raw_cli, opt.flag_name), "cli", raw_cli)
            elif opt.cli and raw_ini not in (None, ""):
                where = f"{opt.ini_name} in the ini file"
                out[opt.name] = Setting(_parse(opt.name, raw_ini, where), "ini", raw_ini)
            else:
                out[opt.name] = Setting(opt.default, "default")
        return cls(settings=out)

    @classmethod
    def from_pytest_config(cls, config: pytest.Config) -> GpuPerfConfig:
        cli = {o.name: config.getoption("gpuperf_" + o.name, None) for o in OPTIONS if o.cli}
        ini = {o.name: config.getini(o.ini_name) for o in OPTIONS if o.cli}
        cfg = cls.from_values(cli, ini)
        cfg.check_combinations()
        return cfg

    def where(self, name: str) -> str:
        """``--gpuperf-save (from the command line)``: an option and where its value came from."""
        opt = OPTIONS_BY_NAME[name]
        source = self.source(name)
        origin = {"cli": "from the command line", "ini": f"{opt.ini_name} in the ini file"}
        return f"{opt.flag_name} ({origin.get(source, 'by default')})"

    def check_combinations(self) -> None:
        """Options that contradict each other, or make another one do nothing, are errors."""
        if self._value("disable"):
            for name, does in (("save", "saves"), ("baseline", "compares")):
                if self._value(name):
                    raise ConfigError(
                        f"{self.where(name)} {does} measurements, and {self.where('disable')} "
                        f"turns measuring off: nothing would be "
                        f"{'saved' if name == 'save' else 'compared'}; drop one of them"
                    )
        if self._value("bisect_bad") and not self._value("bisect"):
            raise ConfigError(
                f"{self.where('bisect_bad')} is the other end of --gpuperf-bisect=GOOD: give GOOD "
                "too, or drop it"
            )
        for name in ("ab", "baseline", "save", "disable") if self._value("bisect") else ():
            if self._value(name):
                raise ConfigError(
                    f"{self.where('bisect')} runs no test of this session (it measures each "
                    f"commit in processes of its own), and {self.where(name)} acts on them; drop "
                    "one of them"
                )
        if self._value("only") and self._value("skip"):
            raise ConfigError(
                f"{self.where('only')} and {self.where('skip')} together deselect every test; "
                "drop one of them"
            )

    def resolve(
        self,
        marker: Mapping[str, Any] | None = None,
        call: Mapping[str, Any] | None = None,
        *,
        marker_where: str = "the gpuperf marker",
        call_where: str = "the gpu_bench(...) call",
    ) -> dict[str, Setting]:
        """Per-benchmark settings: call > marker > this session's settings."""
        out: dict[str, Setting] = {}
        for opt in (o for o in OPTIONS if o.per_test):
            for given, source, where in (
                (call, "call", call_where),
                (marker, "marker", marker_where),
            ):
                if given and opt.name in given:
                    value = _parse(opt.name, given[opt.name], f"{where}, {opt.name}=")
                    out[opt.name] = Setting(value, source)
                    break
            else:
                out[opt.name] = self.settings[opt.name]
        return out


def _parse(name: str, raw: Any, where: str) -> Any:
    try:
        return OPTIONS_BY_NAME[name].parse(raw)
    except OptionValueError as e:
        raise ConfigError(f"{where}: {e}") from None
