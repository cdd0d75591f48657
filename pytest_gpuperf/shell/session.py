"""The core plugin object of a session: the device, the run id, the fixture's context, results.
Each feature that is on adds its own plugin (:mod:`pytest_gpuperf.plugin`); they meet on the
item's stash."""

from __future__ import annotations

import datetime as _dt
import functools
import os
import time
import uuid
from collections.abc import Generator, Sequence
from typing import Any

import pytest

from pytest_gpuperf.artifacts.collectors.child import CAPTURE_ENV
from pytest_gpuperf.errors import DeviceUnavailable
from pytest_gpuperf.measure.device import resolve_device
from pytest_gpuperf.measure.nvtx_ranges import NvtxRanges
from pytest_gpuperf.model import Result
from pytest_gpuperf.reporting.junit import junit_properties
from pytest_gpuperf.reporting.terminal import fold
from pytest_gpuperf.shell.fixture import BenchContext, GpuBench
from pytest_gpuperf.shell.locks import DeviceLock, settle_lock_dir
from pytest_gpuperf.shell.markers import FIXTURE, MARKER, marker_kwargs
from pytest_gpuperf.shell.progress import Progress
from pytest_gpuperf.shell.rerun import is_child
from pytest_gpuperf.shell.settings import RunContext
from pytest_gpuperf.telemetry.probe import NvmlTelemetry
from pytest_gpuperf.telemetry.stream import notes as telemetry_notes

SESSION_KEY = pytest.StashKey["GpuPerfSession"]()
RESULTS_KEY = pytest.StashKey[list[Result]]()
#: Set when the test function itself did not pass (it raised, failed, skipped).
DID_NOT_PASS_KEY = pytest.StashKey[bool]()
#: Fields of the fixture's :class:`BenchContext` a feature sets for one test (a rank's group).
CONTEXT_KEY = pytest.StashKey[dict[str, Any]]()
REPORT_ATTR = "gpuperf"
#: On a call report whose test did not pass: its results are never saved into a baseline.
NOT_SAVED_ATTR = "gpuperf_not_saved"


def is_benchmark(item: pytest.Item) -> bool:
    return item.get_closest_marker(MARKER) is not None or FIXTURE in getattr(
        item, "fixturenames", ()
    )


class GpuPerfSession:
    def __init__(self, run: RunContext, *, lead: bool):
        self.run = run
        self.config = run.config
        self.settings = run.settings
        #: whether this process writes baselines and reports (no worker, no rank but 0)
        self.lead = lead
        #: a process the plugin started (a confirmation, a capture, a rank of its group)
        self.child = is_child(self.config)
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        handed = getattr(self.config, "workerinput", {}).get("gpuperf_run_id")
        self.run_id: str = handed or f"{stamp}-{uuid.uuid4().hex[:6]}"
        self.started = time.time()
        self.device: str | None = None
        self.results: list[Result] = []
        #: what feature plugins add to the JSON's session block (``--gpuperf-bisect``'s search)
        self.session_info: dict[str, Any] = {}
        #: results of tests that did not pass: reported, never saved
        self.not_saved: list[Result] = []
        #: this process's results of a test between its report and its logging, by node id
        self._reported: dict[str, tuple[list[Result], bool]] = {}
        self._progress: Progress | None = None
        self._lock: DeviceLock | None = None
        self._telemetry: NvmlTelemetry | None = None
        self._nvtx: NvtxRanges | None = None
        # a lock folder where no lock can be taken: a usage error, not one in every test
        problem = settle_lock_dir(self.config.invocation_params.dir, [run.baseline_dir])
        if problem and not self.settings.session.disable and not run.is_worker:
            raise pytest.UsageError(problem)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """xdist's controller: its workers' results carry this session's run id."""
        node.workerinput["gpuperf_run_id"] = self.run_id

    def ensure_device(self) -> str:
        if self.device is None:
            try:
                self.device = resolve_device(self.settings.session.device)
            except DeviceUnavailable as e:
                raise pytest.UsageError(str(e)) from None
        return self.device

    def progress(self) -> Progress:
        """The session's progress line (made on first use: the terminal comes after us)."""
        if self._progress is None:
            self._progress = Progress.from_config(self.config, self.settings.report.progress)
        return self._progress

    def device_lock(self) -> DeviceLock:
        """The device's lock; a progress line while another process holds it."""
        if self._lock is None:
            self._lock = DeviceLock(
                self.ensure_device(),
                timeout_s=self.settings.session.lock_timeout,
                on_wait=self.progress().task,
            )
        return self._lock

    def make_bench(self, request: pytest.FixtureRequest) -> GpuBench:
        item = request.node
        params = dict(getattr(getattr(item, "callspec", None), "params", {}))
        device = self.ensure_device()
        if self._nvtx is None:
            self._nvtx = NvtxRanges(enabled=self.settings.telemetry.nvtx and device == "cuda")
        fields: dict[str, Any] = {
            "lock": functools.partial(self.device_lock().hold, item.nodeid),
            "progress": self.progress().task,
            **item.stash.get(CONTEXT_KEY, {}),
        }
        ctx = BenchContext(
            nodeid=item.nodeid,
            test_name=item.name,
            config=self.run.resolved,
            settings=self.settings,
            device=device,
            record=functools.partial(self._measured, item),
            marker=marker_kwargs(item),
            params=params,
            disabled=self.settings.session.disable,
            probes=[self._nvml(device).probe],
            phase_range=self._nvtx,
            activity=self._activity(device),
            modes=self.run.registry.modes,
            run_id=self.run_id,
            **fields,
        )
        return GpuBench(ctx)

    def _measured(self, item: pytest.Item, result: Result) -> None:
        """Each measurement from the fixture: plugins' telemetry fields, telemetry notes."""
        telemetry = dict(result.run.telemetry or {})
        self.config.hook.pytest_gpuperf_telemetry(
            config=self.config, bench_id=result.id, telemetry=telemetry
        )
        result.with_run(telemetry=telemetry or None)
        result.notes.extend(telemetry_notes(result.run.telemetry))
        self.keep(item, result)

    def keep(self, item: pytest.Item, result: Result) -> None:
        """A result of ``item``'s (the fixture's, or its ranks'): this session's from now on."""
        path, lineno, _ = item.location
        if result.run.run_id != self.run_id:  # a rank's (the fixture's run has it)
            result.with_run(run_id=self.run_id)
        result.location = [path, lineno + 1 if lineno is not None else None]
        item.stash.setdefault(RESULTS_KEY, []).append(result)

    def _nvml(self, device: str) -> NvmlTelemetry:
        if self._telemetry is None:
            telemetry = self.settings.telemetry
            off = None
            if not telemetry.enabled:
                off = "turned off (--gpuperf-telemetry=false)"
            elif device != "cuda":
                off = "the benchmark ran on the CPU: NVML telemetry covers CUDA benchmarks"
            self._telemetry = NvmlTelemetry(
                interval_ms=telemetry.interval_ms, raw=telemetry.raw, off_reason=off
            )
        return self._telemetry

    def _activity(self, device: str) -> Any:
        """The GPM window maker of the session's telemetry (none in a capture child, whose
        measurement only checks that the slowdown reproduces)."""
        capture_child = self.child and bool(os.environ.get(CAPTURE_ENV))
        if device != "cuda" or not self.settings.telemetry.activity or capture_child:
            return None
        return self._nvml(device).activity_window

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
        benchmarks = [i for i in items if is_benchmark(i)]
        if not self.child:  # a confirmation child runs a few of them: their params are fewer
            check_group_by(self.settings.report.group_by or (), benchmarks)
        if benchmarks:
            self.ensure_device()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        try:
            return (yield)
        except BaseException:  # what a test that did not pass measured is never saved
            item.stash[DID_NOT_PASS_KEY] = True
            raise

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        results = item.stash.get(RESULTS_KEY, None) if call.when == "call" else None
        if results:  # junitxml writes what the teardown report copies from the item
            item.user_properties.extend(junit_properties(results))
        report = yield
        if results:
            not_saved = item.stash.get(DID_NOT_PASS_KEY, False)
            if self.run.is_worker:  # the controller reads them from the report
                setattr(report, REPORT_ATTR, [r.to_dict() for r in results])
                if not_saved:
                    setattr(report, NOT_SAVED_ATTR, True)
            else:
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
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Before the save and the reports: plugins see the session's results."""
        if self._telemetry is not None:
            self._telemetry.close()
        if self.lead and not self.child:
            self.config.hook.pytest_gpuperf_session_finish(config=self.config, results=self.results)

    def summarize(self, tr: Any, results: list[Result]) -> None:
        """The terminal summary's lines of the device's lock."""
        for line in self._lock.summary_lines() if self._lock is not None else []:
            tr.write_line(fold(line))


def check_group_by(keys: Sequence[str], benchmarks: Sequence[pytest.Item]) -> None:
    """``--gpuperf-group-by=param:NAME`` names a parameter of a collected benchmark."""
    wanted = [k.split(":", 1)[1] for k in keys if k.startswith("param:")]
    if not wanted or not benchmarks:
        return
    known: set[str] = set()
    for item in benchmarks:
        known.update(getattr(getattr(item, "callspec", None), "params", {}))
    for name in wanted:
        if name not in known:
            have = f"their parameters are {', '.join(sorted(known))}" if known else ""
            raise pytest.UsageError(
                f"--gpuperf-group-by=param:{name}: no collected benchmark has a parameter "
                f"{name!r} ({have or 'they have no parameters'}); fix the name, or use param to "
                "group by all of them"
            )
