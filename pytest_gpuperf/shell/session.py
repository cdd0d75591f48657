"""The plugin object of one pytest session: selection, the fixture's context, results, output.

Registered by :mod:`pytest_gpuperf.plugin` in ``pytest_configure``. In one
process, results stay the objects the fixture and the gate made, from the test
to the session's end. From an xdist worker they travel to the controller as
plain dicts on the test report (``report.gpuperf``), which pytest-xdist
serialises as it is; only the controller (a process without ``workerinput``)
writes files.
"""

from __future__ import annotations

import datetime as _dt
import functools
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.errors import DeviceUnavailable
from pytest_gpuperf.measure.ranks import RankEnvError, rank_env
from pytest_gpuperf.model import Result
from pytest_gpuperf.shell.fixture import BenchContext, GpuBench, inventory_settings
from pytest_gpuperf.shell.markers import FIXTURE, MARKER, format_param, marker_kwargs
from pytest_gpuperf.shell.rerun import is_child, remove_stale_folders
from pytest_gpuperf.shell.settings import RunContext

if TYPE_CHECKING:
    from collections.abc import Generator, Sequence

    from pytest_gpuperf.measure.nvtx_ranges import NvtxRanges
    from pytest_gpuperf.shell.fixture import PhaseRange, Probe
    from pytest_gpuperf.shell.group import GroupItem, GroupLauncher
    from pytest_gpuperf.shell.locks import DeviceLock
    from pytest_gpuperf.shell.progress import Progress
    from pytest_gpuperf.shell.ranks import RankSession
    from pytest_gpuperf.telemetry.probe import NvmlTelemetry

SESSION_KEY = pytest.StashKey["GpuPerfSession"]()
RESULTS_KEY = pytest.StashKey[list[Result]]()
#: Set when the test function itself did not pass (it raised, failed, skipped).
DID_NOT_PASS_KEY = pytest.StashKey[bool]()
REPORT_ATTR = "gpuperf"
#: On a call report whose test did not pass: its results are never saved into a baseline.
NOT_SAVED_ATTR = "gpuperf_not_saved"


def is_benchmark(item: pytest.Item) -> bool:
    return item.get_closest_marker(MARKER) is not None or FIXTURE in getattr(
        item, "fixturenames", ()
    )


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


class GpuPerfSession:
    def __init__(self, run: RunContext):
        config = run.config
        self.run = run
        self.config = config
        self.settings = run.settings
        self.device: str | None = None
        self.results: list[Result] = []
        #: this process's results of a test between its report and the report's logging,
        #: by node id (a worker's go on the report instead)
        self._reported: dict[str, tuple[list[Result], bool]] = {}
        #: results of tests that did not pass: reported, never saved
        self.not_saved: list[Result] = []
        workerinput = getattr(config, "workerinput", {})
        self.run_id = workerinput.get("gpuperf_run_id") or _new_run_id()
        self._lock: DeviceLock | None = None
        self.started = time.time()
        self.child = is_child(config)
        self._progress: Progress | None = None
        # telemetry and NVTX: made on first use, see _probes / _phase_range
        self._telemetry: NvmlTelemetry | None = None
        self._nvtx: NvtxRanges | None = None
        #: this process as one rank of a process group (torchrun's, or the plugin's), or None
        self.ranks: RankSession | None = self._rank_session()
        #: starts the ranks of world_size= tests where this process is no rank
        self.groups: GroupLauncher | None = None
        self._check_lock_dir()
        if not self.child and self.lead:
            remove_stale_folders()  # the children's temp folders of a session killed outright

    def _rank_session(self) -> RankSession | None:
        import os

        try:
            env = rank_env(os.environ)
        except RankEnvError as e:
            raise pytest.UsageError(
                f"gpuperf: the torchrun variables describe no rank: {e}; start the session "
                "with torchrun, or unset RANK and WORLD_SIZE"
            ) from None
        if env is None:
            return None
        from pytest_gpuperf.shell.ranks import RankSession

        return RankSession(
            env,
            self.run,
            is_benchmark,
            device=self.ensure_device,
            results=lambda item: item.stash.get(RESULTS_KEY, None) or [],
        )

    @property
    def lead(self) -> bool:
        """Whether this process writes what the session leaves (baselines, reports): not an
        xdist worker (the controller does), not a rank other than 0."""
        return not is_worker(self.config) and (self.ranks is None or self.ranks.lead)

    def _check_lock_dir(self) -> None:
        """The per-device lock folder, once for the session: a relative GPUPERF_LOCK_DIR
        made absolute for every process of it, and one where no lock can be taken is a
        usage error here, not a traceback in every test."""
        from pytest_gpuperf.shell.locks import settle_lock_dir

        problem = settle_lock_dir(self.config.invocation_params.dir)
        if problem and not self.settings.session.disable and not is_worker(self.config):
            raise pytest.UsageError(problem)

    # --- collection --------------------------------------------------------

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        only, skip = self.settings.session.only, self.settings.session.skip
        if only or skip:
            keep: list[pytest.Item] = []
            drop: list[pytest.Item] = []
            for item in items:
                (drop if is_benchmark(item) == skip else keep).append(item)
            if drop:
                config.hook.pytest_deselected(items=drop)
                items[:] = keep
        if self.ranks is None:
            self._group_items(items)
        benchmarks = [i for i in items if is_benchmark(i)]
        if not self.child:  # a confirmation child runs a few of them: their params are fewer
            check_group_by(self.settings.report.group_by or (), benchmarks)
        if benchmarks:
            self.ensure_device()

    def _group_items(self, items: list[pytest.Item]) -> None:
        """Tests marked world_size= run on ranks this process starts (shell/group.py)."""
        from pytest_gpuperf.shell.group import GroupLauncher, as_group_items

        if as_group_items(items, self.run_group_item):
            if self.groups is None:
                self.groups = GroupLauncher(self.run, look_ahead=not is_worker(self.config))
            self.groups.set_collected(items)

    def run_group_item(self, item: GroupItem) -> None:
        """Run a world_size= test on its ranks; its results become this process's results."""
        from pytest_gpuperf.shell.group import GroupError, GroupLauncher

        if self.groups is None:
            self.groups = GroupLauncher(self.run, look_ahead=False)
        got = self.groups.outcome(item, device=self.ensure_device(), progress=self.progress())
        if got.kind == "skipped":
            pytest.skip(got.text)
        if got.kind == "failed":
            pytest.fail(got.text, pytrace=False)
        if got.kind == "error":
            raise GroupError(got.text)
        path, lineno, _ = item.location
        results = item.stash.setdefault(RESULTS_KEY, [])
        for r in got.results:
            r.run_id = self.run_id
            r.location = [path, lineno + 1 if lineno is not None else None]
            results.append(r)

    def ensure_device(self) -> str:
        if self.device is None:
            from pytest_gpuperf.measure.device import resolve_device

            try:
                self.device = resolve_device(self.settings.session.device)
            except DeviceUnavailable as e:
                raise pytest.UsageError(str(e)) from None
        return self.device

    # --- the fixture -------------------------------------------------------

    def make_bench(self, request: pytest.FixtureRequest) -> GpuBench:
        from pytest_gpuperf.artifacts.collectors.child import child_policy, measure_hooks
        from pytest_gpuperf.measure.environment import collect_environment

        item = request.node
        params = dict(getattr(getattr(item, "callspec", None), "params", {}))
        results = item.stash.setdefault(RESULTS_KEY, [])

        path, lineno, _ = item.location

        def record(result: Result) -> None:
            result.run_id = self.run_id
            result.location = [path, lineno + 1 if lineno is not None else None]
            self._after_measurement(result)
            results.append(result)

        device = self.ensure_device()
        disabled = self.settings.session.disable
        # Run after each measurement: the kernel inventory, a capture child's profile.
        hooks = [] if disabled else measure_hooks(inventory_settings(self.settings), device)
        group = None
        lock = functools.partial(self._device_lock().hold, item.nodeid)
        progress = self.progress().task
        if self.ranks is not None and self.ranks.in_step(item):
            group, lock, hooks, progress = self._rank_context(item, device, disabled)
        ctx = BenchContext(
            nodeid=item.nodeid,
            test_name=item.name,
            config=self.run.resolved,
            settings=self.settings,
            device=device,
            record=record,
            marker=marker_kwargs(item),
            params=params,
            display_params=tuple((k, format_param(v)) for k, v in params.items()),
            disabled=disabled,
            environment=functools.partial(collect_environment, device),
            lock=lock,
            probes=self._probes(device),
            phase_range=self._phase_range(device),
            progress=progress,
            after_measure=hooks,
            activity=self._activity(device),
            adjust_policy=child_policy() if self.child else None,
            modes=self.run.registry.modes,
            group=group,
        )
        return GpuBench(ctx)

    def _rank_context(self, item: pytest.Item, device: str, disabled: bool) -> tuple[Any, ...]:
        """A distributed test's group, its lock, its after-measure hooks and its progress
        line (rank 0's only)."""
        from pytest_gpuperf.artifacts.collectors.group import group_hooks

        assert self.ranks is not None
        group = self.ranks.join(device)
        profile = bool(inventory_settings(self.settings) and self._saves_inventory())
        hooks = (
            []
            if disabled
            else group_hooks(group, device, profile=profile, calls=self.settings.capture.calls)
        )
        progress = self.progress().task
        if not self.ranks.lead:
            from pytest_gpuperf.shell.progress import silent

            progress = silent().task
        return group, functools.partial(self.ranks.lock, item.nodeid), hooks, progress

    def _saves_inventory(self) -> bool:
        mode = self.settings.capture.inventory
        return mode == "always" or (mode == "auto" and bool(self.settings.session.save))

    def progress(self) -> Progress:
        """The session's progress line (made on first use: the terminal comes after us)."""
        if self._progress is None:
            from pytest_gpuperf.shell.progress import Progress

            self._progress = Progress.from_config(self.config, self.settings.report.progress)
        return self._progress

    def _device_lock(self) -> DeviceLock:
        """The device's lock; a progress line while another process holds it."""
        if self._lock is None:
            from pytest_gpuperf.shell.locks import DeviceLock

            self._lock = DeviceLock(
                self.ensure_device(),
                timeout_s=self.settings.session.lock_timeout,
                on_wait=self.progress().task,
            )
        return self._lock

    # --- the test's body and its fresh processes ---------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        try:
            return (yield)
        except BaseException as e:
            # The test's own failure (an assertion, a misused fixture, a skip): what it
            # measured is reported, never saved as a baseline run.
            item.stash[DID_NOT_PASS_KEY] = True
            if self.ranks is not None and self.ranks.in_step(item):
                self.ranks.out_of_step(item, e)
            raise

    def _confirmation_runner(
        self, run: RunContext, nodeid: str | list[str], *, device: str, **kw: Any
    ) -> Any:
        """The fresh processes of a confirmation: on every rank (a torchrun rank 0), a new
        start of a world_size= test's ranks, or a child pytest."""
        from pytest_gpuperf.shell.rerun import run_child

        if self.ranks is not None:
            return self.ranks.run_child(run, nodeid, device=device, **kw)
        targets = [nodeid] if isinstance(nodeid, str) else list(nodeid)
        if self.groups is not None and self.groups.item(targets[0]) is not None and not kw:
            return self.groups.fresh(targets, device)
        return run_child(run, nodeid, device=device, **kw)

    def _capture_runner(self, nodeid: str, device: str) -> Any:
        """How a capture starts its fresh process for ``nodeid``: on every rank (a fresh group),
        where this process is a rank; None: a child pytest (shell/capture.py's own)."""
        if self.ranks is None:
            return None
        ranks = self.ranks

        def runner(**kw: Any) -> Any:
            return ranks.run_child(self.run, nodeid, device=device, **kw)

        return runner

    # --- telemetry and NVTX -----------------------------------------

    def _probes(self, device: str) -> list[Probe]:
        if self._telemetry is None:
            from pytest_gpuperf.telemetry.probe import NvmlTelemetry

            telemetry = self.settings.telemetry
            off = None
            if not telemetry.enabled:
                off = "turned off (--gpuperf-telemetry=false)"
            elif device != "cuda":
                off = "the benchmark ran on the CPU: NVML telemetry covers CUDA benchmarks"
            self._telemetry = NvmlTelemetry(
                interval_ms=telemetry.interval_ms,
                raw=telemetry.raw,
                off_reason=off,
            )
        return [self._telemetry.probe]

    def _activity(self, device: str) -> Callable[[], Any] | None:
        """The GPM window maker of the session's telemetry (CUDA, --gpuperf-activity on); none
        in a capture child, whose own measurement only checks that the slowdown reproduces."""
        import os

        from pytest_gpuperf.artifacts.collectors.child import CAPTURE_ENV

        if device != "cuda" or not self.settings.telemetry.activity:
            return None
        if is_child(self.config) and os.environ.get(CAPTURE_ENV):
            return None
        self._probes(device)
        assert self._telemetry is not None
        return self._telemetry.activity_window

    def _phase_range(self, device: str) -> PhaseRange:
        if self._nvtx is None:
            from pytest_gpuperf.measure.nvtx_ranges import NvtxRanges

            self._nvtx = NvtxRanges(enabled=self.settings.telemetry.nvtx and device == "cuda")
        return self._nvtx

    def _after_measurement(self, result: Result) -> None:
        """Let plugins add telemetry fields, then turn what the telemetry shows into notes."""
        from pytest_gpuperf.telemetry.stream import notes as telemetry_notes

        telemetry = result.telemetry if result.telemetry is not None else {}
        self.config.hook.pytest_gpuperf_telemetry(
            config=self.config, bench_id=result.id, telemetry=telemetry
        )
        result.telemetry = telemetry or None
        result.notes.extend(telemetry_notes(result.telemetry))

    # --- results -------------------------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        results = item.stash.get(RESULTS_KEY, None) if call.when == "call" else None
        if results:
            # On the item, not the report: junitxml writes the properties the teardown
            # report copies from the item.
            from pytest_gpuperf.reporting.junit import junit_properties

            item.user_properties.extend(junit_properties(results))
        report = yield
        if results:
            not_saved = item.stash.get(DID_NOT_PASS_KEY, False)
            if is_worker(self.config):  # the controller reads them from the report
                setattr(report, REPORT_ATTR, [r.to_dict() for r in results])
                if not_saved:
                    setattr(report, NOT_SAVED_ATTR, True)
            else:
                for r in results:
                    r.make_plain()  # the values a worker's dict would bring
                self._reported[report.nodeid] = (list(results), not_saved)
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call":
            return
        mine = self._reported.pop(report.nodeid, None)
        if mine is not None:
            results, not_saved = mine
        elif data := getattr(report, REPORT_ATTR, None):  # from an xdist worker
            results = [Result.from_dict(d) for d in data]
            not_saved = bool(getattr(report, NOT_SAVED_ATTR, False))
        else:
            return
        self.results.extend(results)
        if not_saved:
            self.not_saved.extend(results)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Before the save and the reports (after the captures of the last verdicts, whose
        plugin is registered later): plugins see the session's results."""
        if self._telemetry is not None:
            self._telemetry.close()
        if self.lead and not self.child:
            self.config.hook.pytest_gpuperf_session_finish(config=self.config, results=self.results)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.ranks is not None and not self.ranks.lead and not self.child and self.results:
            terminalreporter.write_line(self.ranks.summary_line())

    def summarize(self, tr: Any, results: list[Result]) -> None:
        """The terminal summary's line when this session waited for its device's lock."""
        from pytest_gpuperf.reporting.terminal import fold

        if self._lock is not None and self._lock.waited():
            tr.write_line(fold(self._lock.waited()))


def check_group_by(keys: Sequence[str], benchmarks: Sequence[pytest.Item]) -> None:
    """``--gpuperf-group-by=param:NAME`` names a parameter of a collected benchmark: a typo
    would put every benchmark in one group, ``param:NAME=-``, and say nothing."""
    wanted = [k.split(":", 1)[1] for k in keys if k.startswith("param:")]
    if not wanted or not benchmarks:
        return
    known: set[str] = set()
    for item in benchmarks:
        known.update(getattr(getattr(item, "callspec", None), "params", {}))
    for name in wanted:
        if name not in known:
            have = (
                f"their parameters are {', '.join(sorted(known))}"
                if known
                else "they have no parameters"
            )
            raise pytest.UsageError(
                f"--gpuperf-group-by=param:{name}: no collected benchmark has a parameter "
                f"{name!r} ({have}); fix the name, or use param to group by all of them"
            )


def _new_run_id() -> str:
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{uuid.uuid4().hex[:6]}"
