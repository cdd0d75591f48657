"""Hooks a user's plugin or conftest.py can implement (examples: docs/telemetry.md,
docs/artifacts.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_gpuperf.artifacts.analysis.diagnose import Evidence
    from pytest_gpuperf.artifacts.collectors.base import Collector
    from pytest_gpuperf.model import BenchId, Result


@pytest.hookspec
def pytest_gpuperf_session_finish(config: pytest.Config, results: list[Result]) -> None:
    """Called on the controller at the end of the session with every result of the run.

    Use it to upload or export results. What was measured, ``r.run`` (a
    :class:`pytest_gpuperf.model.Run`), is frozen, its tuples and mappings too:
    ``dataclasses.replace`` makes a changed copy, and ``r.to_dict()`` is plain JSON values.
    """


@pytest.hookspec
def pytest_gpuperf_update_fingerprint(config: pytest.Config, fingerprint: dict[str, Any]) -> None:
    """Add keys to the environment fingerprint: only runs with equal fingerprints are compared.

    ``fingerprint`` is the dict of extra keys (empty at first): change it in place. Add what
    makes two runs incomparable in your setup, nothing that changes from run to run. Values
    must be JSON scalars; a built-in key
    (:data:`pytest_gpuperf.baseline.fingerprint.BUILTIN_KEYS`) cannot be set.
    """


@pytest.hookspec
def pytest_gpuperf_telemetry(
    config: pytest.Config, bench_id: BenchId, telemetry: dict[str, Any]
) -> None:
    """Add fields to the telemetry of one measurement, right after it, where it ran.

    ``telemetry`` is the result's telemetry dict (NVML summaries, or ``{"available": False,
    "reason": ...}``): change it in place; values must be JSON-safe. ``telemetry["window"]``
    (when NVML ran) holds the measurement's start and end as Unix times. Called for every
    result, also when telemetry is off.
    """


@pytest.hookspec
def pytest_gpuperf_collectors(config: pytest.Config) -> list[Collector]:
    """Return collectors to run, after the built-in ones, when a benchmark's evidence is captured.

    A collector (:class:`pytest_gpuperf.artifacts.Collector`) has a ``name``,
    ``available()`` (``None``, or why it cannot run here) and ``collect(ctx) ->
    CollectorResult``; it writes into ``ctx.folder(name)``. An exception it raises becomes its
    failure reason, never a test error.
    """
    return []


@pytest.hookspec
def pytest_gpuperf_diagnose(
    config: pytest.Config, result: Result | None, analysis: Evidence
) -> list[str]:
    """Return sentences to add to the diagnosis of a regressed benchmark.

    ``analysis`` is the :class:`~pytest_gpuperf.artifacts.analysis.diagnose.Evidence`:
    ``slowdown_s``, ``analysis`` (the profile), ``kernel_diff``, ``ncu``, ``compile``.
    """
    return []
