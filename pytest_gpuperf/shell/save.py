"""``--gpuperf-save``: the save's plugin, where the session's baselines are written.

It gives the store (:mod:`pytest_gpuperf.baseline`) what only the session knows: the
fingerprint hooks' fields, the git commit and CI ids. A run is saved whole or not at all.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from dataclasses import replace
from typing import Any

import pytest

from pytest_gpuperf.baseline.store import BaselineStore
from pytest_gpuperf.errors import BaselineError
from pytest_gpuperf.interrupt import how as interrupted_by
from pytest_gpuperf.model import Result, short_test_id
from pytest_gpuperf.shell.session import GpuPerfSession
from pytest_gpuperf.shell.settings import RunContext, fingerprint_extra
from pytest_gpuperf.telemetry.regime import baseline_telemetry


class SavePlugin:
    def __init__(self, session: GpuPerfSession):
        self.session = session
        self.run = session.run
        name = session.settings.session.save
        assert name is not None, "registered when --gpuperf-save is set"
        self.name = name
        #: the summary's line once saved, or why the save did not happen
        self.saved: str | None = None
        self.error: str | None = None
        self.saved_to: str | None = None
        try:  # before measuring anything: an existing baseline must be readable
            BaselineStore(self.run.baseline_dir).check(self.name)  # the store checks the name
        except BaselineError as e:
            raise pytest.UsageError(str(e)) from None

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """After the captures and the session_finish hooks, before the reports."""
        results = self.session.results
        if not results:
            return
        if exitstatus in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR):
            how = "interrupted" if exitstatus == pytest.ExitCode.INTERRUPTED else "stopped"
            self.error = (
                f"the session was {how} ({len(results)} benchmark result(s) "
                "measured); run it again to save a whole run"
            )
            return
        self._save(session)

    def _save(self, session: pytest.Session) -> None:
        not_saved = self.session.not_saved
        failed = {id(r) for r in not_saved}
        results = [r for r in self.session.results if id(r) not in failed]
        note = ""
        if not_saved:
            tests = sorted({short_test_id(r.id.nodeid) for r in not_saved})
            note = (
                f"; not saved: {len(not_saved)} result(s) of tests that did not pass "
                f"({', '.join(tests)})"
            )
        if not results:
            self.saved = f"baseline {self.name!r}: nothing saved{note}"
            return
        runs = [replace(r.run, telemetry=baseline_telemetry(r.run.telemetry)) for r in results]
        settings = self.run.settings.session
        try:
            meta, extra = run_meta(self.run), fingerprint_extra(self.run.config) or None
            store = BaselineStore(  # waits for the baseline's lock, a line naming its holder
                self.run.baseline_dir,
                lock_timeout=settings.lock_timeout,
                on_wait=self.session.progress().task,
            )
            summary = store.save(
                self.name, runs, keep_runs=settings.keep_runs, meta=meta, fingerprint_extra=extra
            )
            self.saved = summary.describe() + note
            self.saved_to = self.name
        except BaselineError as e:
            self.error = str(e)
            if session.exitstatus == 0:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        except KeyboardInterrupt as e:  # Ctrl-C (or SIGTERM) while saving or waiting to
            self._interrupted(session, interrupted_by(e))

    def _interrupted(self, session: pytest.Session, by: str) -> None:
        """A Ctrl-C (or SIGTERM) during the save: a line saying whether the index took the runs
        (a save commits in one step), exit code 2, no traceback."""
        try:
            sessions = BaselineStore(self.run.baseline_dir).overview(self.name).sessions
            committed = any(self.session.run_id in s.run_ids for s in sessions)
        except Exception:  # no baseline yet, or unreadable: this run is not in it
            committed = False
        if committed:
            self.saved = (
                f"baseline {self.name!r}: saved (the {by} came after the save was complete)"
            )
        else:
            self.error = (
                f"the save was interrupted ({by}); the baseline is as it was before. Run the "
                "session again to save"
            )
        session.exitstatus = pytest.ExitCode.INTERRUPTED

    def summarize(self, tr: Any, results: list[Result]) -> None:
        if self.saved:  # its first line names the baseline's file: a long path stays whole
            tr.write_line(self.saved)
        if self.error:
            tr.write_line(f"gpuperf: the baseline was NOT saved: {self.error}", red=True)


def run_meta(run: RunContext) -> dict[str, Any]:
    """Where this run comes from: git commit and CI identifiers, best effort."""
    meta: dict[str, Any] = {}
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        git = ["git", "rev-parse", "HEAD"]
        sha = subprocess.run(git, cwd=run.rootpath, capture_output=True, text=True, timeout=5)
        if sha.returncode == 0:
            meta["git_sha"] = sha.stdout.strip()
    ci = ("GITHUB_SHA", "GITHUB_REF", "GITHUB_RUN_ID", "GITHUB_WORKFLOW")  # as ci_sha, ...
    return meta | {
        "ci_" + e.removeprefix("GITHUB_").lower(): os.environ[e] for e in ci if os.environ.get(e)
    }
