"""The verdict of each test: the gate's plugin, and the step after a test's body that asks it.

:class:`GatePlugin` (``--gpuperf-baseline``, ``--gpuperf-ab``) opens the gate before
anything is measured and reads the baseline's runs of the collected tests.
:class:`VerdictStep` runs right after a test's body in the process that ran it, so that a
regression fails *its own* test: the gate's verdict, the capture's evidence, agreed on by
every rank of a torchrun group.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.baseline.records import MATCH
from pytest_gpuperf.errors import BaselineError
from pytest_gpuperf.model import Result
from pytest_gpuperf.reporting.terminal import fold
from pytest_gpuperf.shell.ab import ABGate
from pytest_gpuperf.shell.gate import Gate, Judgement
from pytest_gpuperf.shell.session import RESULTS_KEY, GpuPerfSession, is_benchmark

if TYPE_CHECKING:
    from pytest_gpuperf.shell.capture_budget import CapturePlugin
    from pytest_gpuperf.shell.ranks import RankSession


class GatePlugin:
    """The session's gate, opened at ``pytest_configure``: a baseline that cannot be used
    stops the session before anything is measured."""

    def __init__(self, session: GpuPerfSession, *, child_runner: Callable[..., Any] | None):
        run = session.run
        self.session = session
        try:
            self.gate: Gate = ABGate.open(run) if run.settings.session.ab else Gate.load(run)
        except BaselineError as e:
            raise pytest.UsageError(str(e)) from None
        #: the fresh processes of a confirmation: a new start of a world_size= test's ranks,
        #: on every rank of a torchrun group, or a child pytest (None)
        self.gate.child_runner = child_runner

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        benchmarks = [i.nodeid for i in session.items if is_benchmark(i)]
        self.gate.set_collected(benchmarks)  # what starting a process costs: no baseline read
        self._read_runs(benchmarks)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: Sequence[str]) -> None:
        """The xdist controller collects nothing: the first worker's collection (each
        collects the session's tests) says which runs its gate reads, before any test is
        sent to a worker. Its reports and summary use them."""
        self._read_runs(ids)

    def _read_runs(self, nodeids: Sequence[str]) -> None:
        """The gate's baseline runs of the collected tests, before anything is measured: a
        broken segment stops the session as a broken index does."""
        try:
            self.gate.read_runs(nodeids)
        except BaselineError as e:
            raise pytest.UsageError(str(e)) from None

    def judge(self, item: pytest.Item, results: list[Result]) -> Judgement:
        """The verdicts of the test's results, suspects re-measured in fresh processes (an
        inconclusive one passes: the terminal summary's inconclusive block says why)."""
        s = self.session
        return self.gate.judge(item, results, device=s.ensure_device(), progress=s.progress())

    def baselines_of(self, results: Sequence[Result]) -> dict[str, Any]:
        """The baseline runs of each result's benchmark (by key), for a kernel diff."""
        baselines: dict[str, Any] = {}
        for r in results:
            try:
                match = self.gate.rule.match(r)
            except BaselineError:  # said in the test's failure (VerdictStep)
                continue
            if match.status == MATCH:
                baselines[r.id.key] = match.runs
        return baselines

    def summarize(self, tr: Any, results: list[Result]) -> None:
        gate = self.gate
        if gate.rerun_count:
            tr.write_line(
                f"confirmation: {gate.rerun_count} fresh-process re-measurement(s) added "
                f"{gate.budget.spent_s:.1f} s"
            )
        for error in gate.child_errors:
            tr.write_line(f"gpuperf: ERROR: {error} (the test's failure shows why)", red=True)


class VerdictStep:
    """After a test's body: its results judged (the gate), evidence captured, every rank of
    a torchrun group agreeing on the outcome; a failure fails the test."""

    def __init__(
        self,
        gate: GatePlugin | None,
        capture: CapturePlugin | None,
        ranks: RankSession | None,
    ):
        self.gate = gate
        self.capture = capture
        self.ranks = ranks
        if gate is not None and ranks is not None:
            gate.gate.look_ahead = False

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        yield
        results = item.stash.get(RESULTS_KEY, None)
        if not results:
            return
        if self.ranks is not None and self.ranks.in_step(item):
            # every rank fails or passes the same test: rank 0's verdict, sent to all
            failures = self.ranks.agree(item, lambda: self._verdict(item, results))
        else:
            failures = self._verdict(item, results)
        if failures:
            pytest.fail(fold("\n\n".join(failures)), pytrace=False)

    def _verdict(self, item: pytest.Item, results: list[Result]) -> list[str]:
        """Judge the test's results (re-measuring suspects), capture evidence; the failures."""
        judgement = Judgement()
        if self.gate is not None:
            try:
                judgement = self.gate.judge(item, results)
            except BaselineError as e:  # a run of this test's, read now, that cannot be used
                return [f"gpuperf: no verdict: {e}"]
        if self.capture is not None:
            self.capture.at_verdict(item, results, judgement)
        return judgement.failures
