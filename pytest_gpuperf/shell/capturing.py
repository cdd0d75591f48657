"""``--gpuperf-capture``: the capture's plugin, in a process that judges its tests.

The first diagnosis at a test's verdict; where the reports are written, the captures the
verdicts left, the largest slowdowns first, within the session's budget
(:class:`~pytest_gpuperf.shell.capture_budget.SessionCapture`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from pytest_gpuperf.model import Result
from pytest_gpuperf.outcome import REGRESSION
from pytest_gpuperf.reporting.terminal import fold
from pytest_gpuperf.shell.capture import should_capture
from pytest_gpuperf.shell.capture_budget import SessionCapture
from pytest_gpuperf.shell.gate import Judgement
from pytest_gpuperf.shell.session import GpuPerfSession


class CapturePlugin:
    def __init__(
        self,
        session: GpuPerfSession,
        *,
        baselines_of: Callable[[Sequence[Result]], dict[str, Any]] | None,
        runner_for: Callable[[str, str], Any],
    ):
        self.session = session
        self.settings = session.settings.capture
        self._make = functools.partial(
            SessionCapture, session.run, session.run_id, baselines_of or (lambda rs: {}), runner_for
        )
        #: made on the first capture
        self.captures: SessionCapture | None = None

    def _captures(self) -> SessionCapture:
        if self.captures is None:
            self.captures = self._make()
        return self.captures

    def at_verdict(self, item: pytest.Item, results: list[Result], judgement: Judgement) -> None:
        """The first diagnosis, joined to the test's failure, or a note that it waits."""
        failed = bool(judgement.failures)
        if not should_capture(self.settings.mode, failed):
            return
        session = self.session
        report = self._captures().at_verdict(
            item.nodeid,
            results,
            judgement.comparisons,
            device=session.ensure_device(),
            progress=session.progress(),
        )
        slower = any(c.kind == REGRESSION for c in judgement.comparisons.values())
        if report is not None and failed and slower:
            judgement.failures = [report.diagnosis, *judgement.failures, report.details()]
        elif report is not None and failed:
            # failed on its output or memory, not its time: no slowdown to open the failure
            judgement.failures = [*judgement.failures, report.details()]
        elif failed:
            judgement.failures.append(f"gpuperf: {self._captures().waiting_note()}")

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Before the reports (registered after the core session): the captures the verdicts
        left, none after a Ctrl-C."""
        results = self.session.results
        if not self.session.lead or not results:
            if self.captures is not None:
                self.captures.close()
            return
        captures = self._captures()
        if exitstatus in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR):
            captures.close()
            captures.note_leftovers(results)
            return
        try:
            captures.after_verdicts(results, progress=self.session.progress())
        finally:
            captures.close()

    def summarize(self, tr: Any, results: list[Result]) -> None:
        if self.captures is not None:
            for line in self.captures.summary_lines(results):
                tr.write_line(fold(line))  # a command to copy stays on one line

    def to_dict(self, results: list[Result]) -> dict[str, Any] | None:
        return self.captures.to_dict(results) if self.captures is not None else None
