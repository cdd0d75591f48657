"""pytest entry point (``pytest11: gpuperf``): hook implementations that delegate; nothing
heavy is imported here (tests/plugin/test_no_heavy_imports.py)."""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest

from pytest_gpuperf import registry
from pytest_gpuperf.artifacts.collectors.process import watch_parent
from pytest_gpuperf.errors import GpuPerfWarning
from pytest_gpuperf.interrupt import sigterm_as_ctrl_c
from pytest_gpuperf.measure.ranks import RankEnv
from pytest_gpuperf.shell import hookspecs, markers, options
from pytest_gpuperf.shell.config import ConfigError, GpuPerfConfig
from pytest_gpuperf.shell.fixture import GpuBench
from pytest_gpuperf.shell.group import GroupLauncher
from pytest_gpuperf.shell.header import HeaderPlugin
from pytest_gpuperf.shell.options import check_capture_skip
from pytest_gpuperf.shell.outputs import OutputsPlugin
from pytest_gpuperf.shell.ranks import RankSession, this_rank
from pytest_gpuperf.shell.rerun import leaked_child_marker, remove_stale_folders
from pytest_gpuperf.shell.session import SESSION_KEY, GpuPerfSession, is_benchmark
from pytest_gpuperf.shell.settings import RunContext
from pytest_gpuperf.shell.xdist import pin_this_worker


def pytest_addoption(parser: pytest.Parser) -> None:
    options.register(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)
    pluginmanager.add_hookspecs(registry.Specs)
    pluginmanager.register(registry.BuiltIns(), "gpuperf-builtins")
    # the modules that declare modes for pytest and the CLI alike (registry.py)
    pluginmanager.load_setuptools_entrypoints(registry.PROJECT)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    # In an xdist worker: pin the GPU before any conftest can start CUDA.
    pin_this_worker()
    if getattr(early_config.known_args_namespace, "gpuperf_child", False):
        # before any conftest runs (one may hang): end with the session that started us
        watch_parent()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", markers.MARKER_HELP)
    config.add_cleanup(sigterm_as_ctrl_c())  # a CI cancellation ends the run as Ctrl-C does
    try:
        cfg = GpuPerfConfig.from_pytest_config(config)
    except ConfigError as e:
        raise pytest.UsageError(str(e)) from None
    leaked = leaked_child_marker(config)  # GPUPERF_CHILD leaked into a user's session
    if leaked is not None:
        config.issue_config_time_warning(GpuPerfWarning(leaked), stacklevel=2)
    if os.environ.get("GPUPERF_AB_CHECK"):  # a base-tree process of --gpuperf-ab
        from pytest_gpuperf.shell.ab_tree import register_check

        register_check(config, is_benchmark)
    register_features(config, RunContext.build(config, cfg))


def register_features(config: pytest.Config, run: RunContext) -> None:
    """The core session, then a plugin object for each feature that is on, its module
    imported only then; each after the objects it is given (their hooks' order)."""
    rank = this_rank()  # one rank of a process group (torchrun's, or the plugin's)
    session = GpuPerfSession(run, lead=not run.is_worker and (rank is None or rank.is_lead))
    config.stash[SESSION_KEY] = session
    register = config.pluginmanager.register
    if run.settings.session.bisect:  # a search of the git history instead of the tests
        from pytest_gpuperf.shell import bisect

        register(bisect.BisectSession(run, session), "gpuperf-bisect")
    register(session, "gpuperf-session")
    dist, ranks = _distributed(session, rank)
    if session.lead and not session.child:  # the process that leaves baselines and reports
        remove_stale_folders()  # the children's temp folders of a session killed outright
        check_capture_skip(config, run.settings.capture.skip)
    # a process that judges its tests: not a child, not a rank other than 0 (a worker does)
    judges = not session.child and (ranks is None or ranks.lead)
    gate, capture = _verdicts(session, dist) if judges else (None, None)
    follows = ranks is not None and not session.child  # a torchrun rank agrees with rank 0
    if gate is not None or capture is not None or follows:
        from pytest_gpuperf.shell.gating import VerdictStep

        register(VerdictStep(gate, capture, ranks), "gpuperf-verdict")
    if session.lead:
        _reports(session, gate, capture)


def _distributed(
    session: GpuPerfSession, rank: RankEnv | None
) -> tuple[RankSession | GroupLauncher, RankSession | None]:
    """A rank's plugin, or the plugin that starts ranks."""
    dist = RankSession(session, rank) if rank is not None else GroupLauncher(session)
    session.config.pluginmanager.register(dist, "gpuperf-distributed")
    return dist, dist if isinstance(dist, RankSession) else None


def _verdicts(session: GpuPerfSession, dist: RankSession | GroupLauncher) -> Any:
    """The gate's plugin (a baseline or A/B), the capture's (on failure, or always)."""
    settings, register = session.settings, session.config.pluginmanager.register
    gate = capture = None
    if settings.session.ab or settings.session.baseline:
        from pytest_gpuperf.shell.gating import GatePlugin

        gate = GatePlugin(session, child_runner=dist.confirmation_runner)
        register(gate, "gpuperf-gate")
    mode = settings.capture.mode
    if mode == "always" or (mode == "on-failure" and gate is not None):
        from pytest_gpuperf.shell.capture_budget import CapturePlugin

        baselines_of = gate.baselines_of if gate is not None else None
        capture = CapturePlugin(session, baselines_of=baselines_of, runner_for=dist.capture_runner)
        register(capture, "gpuperf-capture")
    return gate, capture


def _reports(session: GpuPerfSession, gate: Any, capture: Any) -> None:
    """The save's plugin, the header's, the outputs' (after the ranks': both trylast, the
    outputs' end comes first)."""
    register = session.config.pluginmanager.register
    save = None
    if not session.child and session.settings.session.save:
        from pytest_gpuperf.shell.save import SavePlugin

        save = SavePlugin(session)
        register(save, "gpuperf-save")
    header = HeaderPlugin(session)
    register(header, "gpuperf-header")
    outputs = OutputsPlugin(session, header, gate=gate, capture=capture, save=save)
    register(outputs, "gpuperf-outputs")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marks = list(metafunc.definition.iter_markers(markers.MARKER))
    if not marks:
        return
    session = metafunc.config.stash.get(SESSION_KEY, None)
    test = metafunc.definition.nodeid
    try:
        kwargs = markers.validate(test, marks, session.run.resolved if session else None)
        markers.parametrize(metafunc, kwargs, test)
    except markers.MarkerError as e:
        raise pytest.Collector.CollectError(str(e)) from None


@pytest.fixture
def gpu_bench(request: pytest.FixtureRequest) -> Generator[GpuBench, None, None]:
    """Measure the steady state of a callable: ``out = gpu_bench(fn, *args, **kwargs)``.

    Returns ``fn``'s result. See the docs (docs/reference.md) for options.
    """
    bench = request.config.stash[SESSION_KEY].make_bench(request)
    yield bench
    bench.teardown()
