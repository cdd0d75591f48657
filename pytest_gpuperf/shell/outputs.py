"""The report files (checked before anything is measured, written once after the save) and
the terminal summary's gpuperf section."""

from __future__ import annotations

import datetime as _dt
import os
import time
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.baseline.fileio import output_target
from pytest_gpuperf.errors import OutputError
from pytest_gpuperf.reporting.ci import write_ci_outputs
from pytest_gpuperf.reporting.outputs import FILE_OUTPUTS, Output, Written
from pytest_gpuperf.reporting.terminal import TableSpec, render
from pytest_gpuperf.shell.header import HeaderPlugin
from pytest_gpuperf.shell.session import GpuPerfSession
from pytest_gpuperf.shell.settings import fingerprint_extra

if TYPE_CHECKING:
    from pytest_gpuperf.shell.capture_budget import CapturePlugin
    from pytest_gpuperf.shell.gating import GatePlugin
    from pytest_gpuperf.shell.save import SavePlugin


class OutputsPlugin:
    def __init__(
        self,
        session: GpuPerfSession,
        header: HeaderPlugin,
        *,
        gate: GatePlugin | None,
        capture: CapturePlugin | None,
        save: SavePlugin | None,
    ):
        self.session = session
        self.config = session.config
        self.settings = session.settings
        self.header = header
        self.gate = gate
        self.capture = capture
        self.save = save
        #: the features' lines in the terminal summary, in this order
        self.parts: list[Any] = [p for p in (gate, capture, session, save) if p is not None]
        self.baseline_dirs = [session.run.baseline_dir]
        #: the outputs plugins added (registry.py) whose option is given, with its value
        registry = session.run.registry.added_outputs
        getoption = self.config.getoption
        added = {o: getoption(f"gpuperf_{o.option.replace('-', '_')}", None) for o in registry}
        self.added: dict[Output, Any] = {o: v for o, v in added.items() if v}
        self.ci: Written | None = None
        if not session.child:  # fail fast on a file that cannot or must not be written
            try:
                for option, path in self._files():
                    output_target(path, what=option, baseline_dirs=self.baseline_dirs)
            except OutputError as e:
                raise pytest.UsageError(str(e)) from None

    def _files(self) -> list[tuple[str, str]]:
        """(option, path) of every output file this session writes."""
        values = self.settings.report.output_values()
        files = [(o.option, str(values[o.option])) for o in FILE_OUTPUTS if values[o.option]]
        files += [(o.option, str(v)) for o, v in self.added.items() if o.render]
        return [(f"--gpuperf-{option}", path) for option, path in files]

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """The report files, the GitHub step summary and annotations, after the save."""
        core = self.session
        extra = fingerprint_extra(self.config)
        gate = self.gate.gate if self.gate is not None else None
        self.ci = write_ci_outputs(
            self.settings.report,
            core.results,
            baseline=gate.baseline if gate is not None else None,
            env=os.environ,
            rootdir=self.config.rootpath,
            fingerprint_extra=extra or None,
            session={
                "run_id": core.run_id,
                "started": _dt.datetime.fromtimestamp(core.started, _dt.timezone.utc).isoformat(
                    timespec="seconds"
                ),
                "duration_s": round(time.time() - core.started, 3),
                "args": list(self.config.invocation_params.args),
                "device": self.settings.session.device,
                "baseline": self.settings.session.baseline,
                "ab": gate.session_info() if gate is not None else None,
                "saved_to": self.save.saved_to if self.save is not None else None,
                "fingerprint_extra": extra,
                "gpu_state": self.header.gpu_state,
                "capture": self.capture.to_dict(core.results) if self.capture else None,
                **core.session_info,
            },
            only=("json",) if core.child else None,
            baseline_dirs=self.baseline_dirs,
            added=self.added,
        )
        if self.ci.errors and session.exitstatus == 0:  # a report asked for and not written
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.session.child:
            return
        tr, results = terminalreporter, self.session.results
        if results:
            tr.section("gpuperf")
            report, verbosity = self.settings.report, self.config.get_verbosity()
            spec = TableSpec(
                columns=report.columns,
                sort=report.sort,
                group_by=tuple(report.group_by or ()),
                verbose=verbosity > 0,
                quiet=verbosity < 0,
                fail_on=self.settings.verdict.fail_on,
                modes=self.session.run.registry.modes,
            )
            tr.write_line(render(results, spec))
        for part in self.parts:
            part.summarize(tr, results)
        if self.ci is not None:
            for line in self.ci.messages:
                tr.write_line(line)
            for line in self.ci.errors:
                tr.write_line(line, red=True)
            for line in self.ci.annotations:  # GitHub reads these at the start of a line
                tr.write_line(line)
