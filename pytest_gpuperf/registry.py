"""What plugins add (timing modes, output formats), asked of pluggy hooks once per run and
kept in a :class:`Registry`, never a module global. The CLI builds the same one from the
``pytest_gpuperf`` entry points (:func:`plugin_manager`), so the gate and ``compare`` judge a
mode alike. Imports pluggy, never pytest."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, cast

import pluggy

from pytest_gpuperf.measure.backend import BUILTIN_MODES, Mode, Modes
from pytest_gpuperf.reporting.outputs import OUTPUT_OPTIONS, OUTPUTS, Output

#: The CLI's plugin manager's project name, and the entry-point group it loads.
PROJECT = "pytest_gpuperf"
#: A function so named is a hook implementation without a marker.
PREFIX = "pytest_gpuperf_"

# Specs and built-in implementations carry the markers of both managers: pytest's and the CLI's.
_specs = (pluggy.HookspecMarker("pytest"), pluggy.HookspecMarker(PROJECT))
_impls = (pluggy.HookimplMarker("pytest"), pluggy.HookimplMarker(PROJECT))


def _spec(fn: Any) -> Any:
    for mark in _specs:
        fn = mark(fn)
    return fn


def _builtin(fn: Any) -> Any:
    for mark in _impls:
        fn = mark(tryfirst=True)(fn)  # the built-in ones first
    return fn


class Specs:
    """The hooks every run calls once to build its :class:`Registry`. No argument: pytest
    and the CLI build the same registry, whatever the options."""

    @_spec
    def pytest_gpuperf_timing_modes(self) -> list[Mode]:  # type: ignore[empty-body]
        """Return timing modes (:class:`pytest_gpuperf.measure.backend.Mode`) to add.

        The built-in ones come first; a mode takes the place of one returned before it
        with ``replaces=`` its name (a name taken twice otherwise fails). Every mode of a
        benchmark's device whose ``selected(policy)`` is true measures it: make the
        modes of one device exclude each other by selecting on one setting, each on its
        own values (``cuda_graph``: False for CUDA events, True for CUDA graphs).
        """

    @_spec
    def pytest_gpuperf_output_formats(self) -> list[Output]:  # type: ignore[empty-body]
        """Return outputs (:class:`pytest_gpuperf.reporting.outputs.Output`) that the session
        writes at its end, after the built-in ones, each when its option (the plugin's own,
        added in its ``pytest_addoption``) has a value; an example in docs/reference.md."""


class BuiltIns:
    @_builtin
    def pytest_gpuperf_timing_modes(self) -> list[Mode]:
        return list(BUILTIN_MODES)

    @_builtin
    def pytest_gpuperf_output_formats(self) -> list[Output]:
        return list(OUTPUTS)


@dataclass(frozen=True)
class Registry:
    """What the hooks returned, built once per run (:func:`build`); the built-in outputs
    first."""

    modes: Modes
    outputs: tuple[Output, ...] = OUTPUTS

    def __post_init__(self) -> None:
        twice = [k for k, n in Counter(o.option for o in self.outputs).items() if n > 1]
        if twice:
            raise ValueError(
                f"two output formats are named {twice[0]!r} (--gpuperf-{twice[0]}); "
                "pick another name for the plugin's"
            )

    @classmethod
    def builtin(cls) -> Registry:
        return cls(Modes(BUILTIN_MODES))

    @property
    def added_outputs(self) -> tuple[Output, ...]:
        return tuple(o for o in self.outputs if o.option not in OUTPUT_OPTIONS)


def build(hook: Any) -> Registry:
    """The registry from a hook relay (``config.hook``, or :func:`plugin_manager`'s)."""
    modes = hook.pytest_gpuperf_timing_modes()
    outputs = hook.pytest_gpuperf_output_formats()
    return Registry(
        Modes([m for got in modes if got for m in got]),
        tuple(o for got in outputs if got for o in got),
    )


class _Manager(pluggy.PluginManager):
    """pluggy's manager, taking ``pytest_gpuperf_*`` functions without a marker (as pytest
    does), so that one plugin module serves pytest and the CLI."""

    def parse_hookimpl_opts(self, plugin: Any, name: str) -> pluggy.HookimplOpts | None:
        opts = super().parse_hookimpl_opts(plugin, name)
        if opts is None and name.startswith(PREFIX) and callable(getattr(plugin, name, None)):
            return cast(pluggy.HookimplOpts, {})
        return opts


def plugin_manager(*, entry_points: bool = True) -> pluggy.PluginManager:
    """The CLI's plugin manager: the specs, the built-ins and (``entry_points``) the modules
    of the ``pytest_gpuperf`` entry-point group."""
    pm = _Manager(PROJECT)
    pm.add_hookspecs(Specs)
    pm.register(BuiltIns(), "gpuperf-builtins")
    if entry_points:
        pm.load_setuptools_entrypoints(PROJECT)
    return pm
