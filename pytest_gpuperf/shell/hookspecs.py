"""Hooks a user's plugin or conftest.py can implement (all prefixed ``pytest_gpuperf_``).

Registered through ``pytest_addhooks``; pluggy checks implementations against
these signatures. Each spec says when it is called and what it may return.
"""

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

    Use it to upload or export results::

        def pytest_gpuperf_session_finish(config, results):
            for r in results:
                print(r.id.key, r.run.median)

    What was measured, ``r.run`` (a :class:`pytest_gpuperf.model.Run`: ``r.run.rounds``,
    ``r.run.policy``, ...), is frozen, its tuples and mappings too: ``dataclasses.replace``
    makes a changed copy, and ``r.to_dict()`` is plain JSON values.
    """


@pytest.hookspec
def pytest_gpuperf_update_fingerprint(config: pytest.Config, fingerprint: dict[str, Any]) -> None:
    """Add keys to the environment fingerprint: only runs with equal fingerprints are compared.

    The plugin calls every implementation with ``fingerprint``, the dict of
    extra keys (empty at first), and passes it as ``extra`` to
    :func:`pytest_gpuperf.baseline.fingerprint.fingerprint`, which adds it to the
    built-in keys (GPU model, driver, CUDA, torch, ...). Change it in place.
    Add what makes two runs incomparable in your setup, nothing that changes
    from run to run::

        # conftest.py
        import os

        def pytest_gpuperf_update_fingerprint(config, fingerprint):
            fingerprint["cluster"] = os.environ.get("SLURM_CLUSTER_NAME", "local")
            fingerprint["clocks_locked"] = os.environ.get("GPU_CLOCKS_LOCKED") == "1"

    Values must be JSON scalars (str, int, float, bool, None); a built-in key
    (:data:`pytest_gpuperf.baseline.fingerprint.BUILTIN_KEYS`) cannot be set, so a
    hook never loosens the built-in comparison rules.
    """


@pytest.hookspec
def pytest_gpuperf_telemetry(
    config: pytest.Config, bench_id: BenchId, telemetry: dict[str, Any]
) -> None:
    """Add fields to the telemetry of one measurement, right after it, where it ran.

    ``telemetry`` is the result's ``Result.telemetry`` dict (NVML summaries,
    or ``{"available": False, "reason": ...}`` without NVML); change it in
    place: the fields are kept with the result and written to the
    ``--gpuperf-json`` file. ``telemetry["window"]`` (when NVML ran) holds
    the measurement's start and end as Unix times, to match with samples
    from your own monitoring::

        # conftest.py
        import platform

        def pytest_gpuperf_telemetry(config, bench_id, telemetry):
            telemetry["host"] = platform.node()
            with open("/sys/class/thermal/thermal_zone0/temp") as f:
                telemetry["cpu_temp_c"] = int(f.read()) / 1000

    Called in the process that measured (an xdist worker, say), for every
    result, also when telemetry is off or unavailable. Values must be JSON-safe.
    """


@pytest.hookspec
def pytest_gpuperf_collectors(config: pytest.Config) -> list[Collector]:
    """Return collectors to run, after the built-in ones, when a benchmark's evidence is captured.

    A collector has a ``name``, ``available()`` (``None``, or why it cannot
    run here) and ``collect(ctx) -> CollectorResult``
    (the protocol is :class:`pytest_gpuperf.artifacts.Collector`, defined in
    :mod:`pytest_gpuperf.artifacts.collectors.base`). It writes into
    ``ctx.folder(name)``, may re-run the test with ``ctx.run_child(env=...,
    prefix=[...], timeout_s=ctx.budget(), log_path=...)`` and reads what
    earlier collectors found in ``ctx.state`` (``"profiles"``, ``"hotspots"``).
    An exception it raises becomes its failure reason, never a test error::

        # conftest.py
        import shutil
        from pytest_gpuperf.artifacts import CollectorResult

        class NvidiaSmi:
            name = "nvidia_smi"

            def available(self):
                return None if shutil.which("nvidia-smi") else "nvidia-smi not found on PATH"

            def collect(self, ctx):
                import subprocess
                out = ctx.folder(self.name) / "nvidia-smi.txt"
                out.write_text(subprocess.run(["nvidia-smi", "-q"], capture_output=True,
                                              text=True, timeout=ctx.budget()).stdout)
                return CollectorResult(self.name, files=[out])

        def pytest_gpuperf_collectors(config):
            return [NvidiaSmi()]
    """
    return []


@pytest.hookspec
def pytest_gpuperf_diagnose(
    config: pytest.Config, result: Result | None, analysis: Evidence
) -> list[str]:
    """Return sentences to add to the diagnosis of a regressed benchmark.

    ``analysis`` is the :class:`~pytest_gpuperf.artifacts.analysis.diagnose.Evidence`:
    ``slowdown_s``, ``analysis`` (the profile: ``busy_fraction``, ``gaps``,
    ``syncs``, ``copies``), ``kernel_diff``, ``ncu``, ``compile``::

        # conftest.py
        def pytest_gpuperf_diagnose(config, result, analysis):
            prof = analysis.analysis
            if prof is not None and prof.copies_per_call("DtoH")[0] > 0:
                return ["our kernels never copy to the host: look for a debug print"]
            return []
    """
    return []
