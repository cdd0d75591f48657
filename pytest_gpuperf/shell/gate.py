"""The gate: compare a test's results with the baseline, confirm suspects, fail regressions.

Runs in the process that ran the test (xdist workers too), right after the test returns,
so that a regression fails *its own* test item. The rule is :mod:`pytest_gpuperf.verdict`'s;
this module adds fresh-process re-measurements (:mod:`.rerun`) while a verdict is not final.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.baseline.store import BaselineStore
from pytest_gpuperf.model import Result, printable
from pytest_gpuperf.reporting.explain import explain, failure_words, summary_line
from pytest_gpuperf.shell.progress import silent
from pytest_gpuperf.shell.rerun import matching, run_child
from pytest_gpuperf.shell.settings import fingerprint_extra
from pytest_gpuperf.verdict.decide import FAIL, WARN
from pytest_gpuperf.verdict.judge import Judge

if TYPE_CHECKING:
    from pytest_gpuperf.artifacts.collectors.base import ChildRun
    from pytest_gpuperf.baseline.records import Baseline
    from pytest_gpuperf.shell.progress import Progress
    from pytest_gpuperf.shell.settings import RunContext
    from pytest_gpuperf.verdict import Comparison, DecisionPolicy, VerdictSettings
    from pytest_gpuperf.verdict.judge import Verdict


@dataclass
class Judgement:
    """The verdicts of one test's results, after confirmation."""

    comparisons: dict[str, Comparison] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass
class _Runs:
    """One test's runs so far per benchmark (this process's first), and the verdict on them."""

    current: dict[str, list[Result]]
    verdicts: dict[str, Verdict] = field(default_factory=dict)


@dataclass
class ConfirmBudget:
    """How much fresh-process re-measurement a session may spend on suspects: up to
    ``factor`` times its plain time (without re-runs, extrapolated to the benchmarks
    collected), never less than ``min_s``."""

    factor: float = 1.0
    min_s: float = 60.0
    started: float = field(default_factory=time.perf_counter)
    #: seconds from the gate's opening to the end of collection: what starting a fresh
    #: process costs (its imports, the test modules'), measured on this one
    start_s: float = 0.0
    expected: int = 1
    done: int = 0
    spent_s: float = 0.0
    #: seconds a child process took per benchmark it ran (the last one's)
    per_test_s: float = 0.0

    def _plain_s(self) -> float:
        return max(0.0, time.perf_counter() - self.started - self.spent_s)

    def allowed_s(self) -> float:
        total = self._plain_s() * max(self.expected, self.done) / max(self.done, 1)
        return max(self.min_s, self.factor * total)

    def ahead(self) -> int:
        """How many later benchmarks a child also measures: as many as fit in a process
        start, the one it saves when a later benchmark is a suspect too."""
        per = max(0.0, self._plain_s() - self.start_s) / max(self.done, 1)
        return int(self.start_s / per) if per > 0 else 0

    def tests_that_fit(self, wanted: int) -> int:
        """How many benchmarks the next child may run (0: none; the first one decides)."""
        per = self.per_test_s or self._plain_s() / max(self.done, 1)
        if (left := self.allowed_s() - self.spent_s) < per:
            return 0
        return max(1, min(wanted, int(left / max(per, 1e-3))))

    def spend(self, seconds: float, tests: int) -> None:
        self.spent_s += seconds
        self.per_test_s = seconds / max(tests, 1)


class Gate:
    """What the session needs to judge results against one baseline: the
    :class:`~pytest_gpuperf.verdict.judge.Judge`, and what needs pytest: fresh-process re-runs
    of suspects within the :class:`ConfirmBudget`, and failing the test item."""

    def __init__(self, run: RunContext, baseline: Baseline):
        config = run.config
        self.run = run
        self.config = config
        self.baseline = baseline
        #: the session's verdict settings (the judge applies a benchmark's own over them)
        self.verdict: VerdictSettings = run.settings.verdict
        self.policy: DecisionPolicy = self.verdict.decision_policy()
        self.rule = Judge(
            baseline, self.policy, fingerprint_extra(config) or None, self.verdict,
            modes=run.registry.modes,
        )  # fmt: skip
        self.budget = ConfirmBudget(factor=self.verdict.confirm_budget)
        self.rerun_count = 0
        #: the session's benchmarks in order; a confirmation child also runs those after its
        #: test, and keeps their results as the next run of each (one more fresh process)
        self.order: list[str] = []
        self.ahead: dict[str, list[Result]] = {}
        # an xdist worker does not know which tests it will run next
        self.look_ahead = not run.is_worker
        #: makes the fresh processes of a confirmation (default shell.rerun.run_child); a
        #: torchrun rank 0 sets its own, which starts a fresh process on every rank
        self.child_runner: Callable[..., ChildRun] | None = None
        #: the fresh processes that failed (each also fails its test): the terminal lists them
        self.child_errors: list[str] = []
        #: whether the runs of the collected tests are still to be read (:meth:`read_runs`)
        self.runs_to_read = False

    @classmethod
    def load(cls, run: RunContext) -> Gate:
        """Open ``--gpuperf-baseline``'s index (a BaselineError if missing or broken); the
        runs of the collected tests come later (:meth:`read_runs`)."""
        name = run.settings.session.baseline
        assert name is not None, "a gate is loaded when --gpuperf-baseline is set"
        gate = cls(run, BaselineStore(run.baseline_dir).load(name, nodeids=()))
        gate.runs_to_read = True
        return gate

    def read_runs(self, nodeids: Sequence[str]) -> None:
        """Read the baseline's runs of the collected tests ``nodeids``, once (an A/B gate has
        none to read)."""
        if not self.runs_to_read:
            return
        self.runs_to_read = False
        ids = {printable(n) for n in nodeids}  # as results, and so the store, write them
        self.baseline = BaselineStore(self.run.baseline_dir).load(self.baseline.name, nodeids=ids)
        self.rule.baseline = self.baseline

    def set_collected(self, nodeids: Sequence[str]) -> None:
        """The benchmarks of the session, in order (the budget's estimate, the look-ahead)."""
        self.budget.start_s = time.perf_counter() - self.budget.started
        self.budget.expected = max(1, len(nodeids))
        self.order = list(nodeids)

    def session_info(self) -> dict[str, Any] | None:
        """What the session's JSON says about the gate beyond the baseline's name."""
        return None

    def _later(self, nodeid: str) -> list[str]:
        """The session's benchmarks after this test, where this process knows the order."""
        if self.look_ahead and nodeid in self.order:
            return self.order[self.order.index(nodeid) + 1 :]
        return []

    # --- per test -------------------------------------------------------------

    def judge(
        self,
        item: pytest.Item,
        results: list[Result],
        *,
        device: str,
        progress: Progress | None = None,
    ) -> Judgement:
        """Verdicts for one test's results, re-measuring suspects in fresh processes (a
        confirmation child has no gate)."""
        out = Judgement()
        self.budget.done += 1
        runs = _Runs(current={r.id.key: [r] for r in results})
        last = self.policy.max_runs <= 1
        runs.verdicts = {r.id.key: self.rule.verdict(r, [r], last=last) for r in results}
        # one progress line for every fresh process of this test, not one each
        with (progress or silent()).shared(f"re-measuring {item.nodeid} in fresh processes"):
            note = self._confirm(item.nodeid, results, runs, out, device=device, progress=progress)
        for r in results:
            v = runs.verdicts[r.id.key]
            if not v.comparison.final:  # no more runs: a suspect is settled on what there is
                v = self.rule.verdict(r, runs.current[r.id.key], last=True, note=note)
            self._record(r, v, out)
        self.rule.forget([r.id.key for r in results])
        return out

    def _confirm(
        self,
        nodeid: str,
        results: list[Result],
        runs: _Runs,
        out: Judgement,
        *,
        device: str,
        progress: Progress | None,
    ) -> str:
        """Re-measure the suspects in fresh processes until each verdict is final; returns
        why confirmation stopped early ("" when none did)."""
        while True:
            pending = [r for r in results if not runs.verdicts[r.id.key].comparison.final]
            if not pending:
                return ""
            ahead = [r for r in pending if self.ahead.get(r.id.key)]
            for r in ahead:  # the runs an earlier child measured ahead
                self._add_run(r, self.ahead[r.id.key].pop(0), runs)
            if ahead:
                continue
            # this test, and as many later benchmarks as the budget allows (kept as their
            # next run: a later suspect needs no process for it)
            later = self._later(nodeid)[: self.budget.ahead()]
            targets = [nodeid, *later][: self.budget.tests_that_fit(1 + len(later))]
            if not targets:
                return (
                    f"confirmation budget spent ({self.budget.spent_s:.0f} s of re-runs in this "
                    f"session, at most {self.budget.allowed_s():.0f} s); raise "
                    "--gpuperf-confirm-budget to confirm more"
                )
            look = len(runs.current[pending[0].id.key]) + 1
            child = self._rerun(targets, look, device=device, progress=progress)
            mine = {r.id.key for r in results}
            for res in child.results:
                if res.id.key not in mine:
                    self.ahead.setdefault(res.id.key, []).append(res)
            missing = [r.id.key for r in pending if matching(child.results, r.id.key) is None]
            failed = child_failure(child, missing, len(pending))
            if failed:
                self.child_errors.append(f"{nodeid}: {failed.splitlines()[0]}")
                out.failures.append(f"gpuperf: ERROR: {failed}")
            for r in pending:
                again = matching(child.results, r.id.key)
                if again is None:
                    why = f"the confirmation process failed (exit {child.returncode})"
                    runs.verdicts[r.id.key] = self.rule.verdict(
                        r, runs.current[r.id.key], last=True, note=why
                    )
                    continue
                self._add_run(r, again, runs)

    def _add_run(self, r: Result, again: Result, runs: _Runs) -> None:
        """One more run of ``r``'s benchmark, from a fresh process: decide again."""
        mine = runs.current[r.id.key]
        mine.append(again)
        runs.verdicts[r.id.key] = self.rule.verdict(r, mine, last=len(mine) >= self.policy.max_runs)

    def _rerun(
        self, targets: list[str], look: int, *, device: str, progress: Progress | None
    ) -> ChildRun:
        """Run ``targets`` in one fresh process, and count its time against the budget."""
        ahead = len(targets) - 1
        also = f", {ahead} later benchmark{'s' if ahead > 1 else ''} with it" if ahead else ""
        label = f"run {look} of at most {self.policy.max_runs}{also}"
        with (progress or silent()).task(label):
            child = (self.child_runner or run_child)(self.run, targets, device=device)
        self.rerun_count += 1
        self.budget.spend(child.wall_s, len(targets))
        return child

    def _record(self, r: Result, v: Verdict, out: Judgement, against: str = "") -> None:
        """Keep ``r``'s settled verdict ``v`` and record the outcome (``against``: what the
        failure's first line adds)."""
        c = v.comparison
        r.comparison = c
        out.comparisons[r.id.key] = c
        who = f"{r.id.display} [{r.id.mode}]"
        out.failures += [failure_words(who, x) for x in v.failures]
        if v.outcome == FAIL:
            out.failures.append(f"{who}{against}\n{explain(c, r.id.mode)}")
        elif v.outcome == WARN:
            out.warnings.append(f"[{r.id.mode}] {summary_line(c, r.id.mode)}")


#: A child pytest's exit statuses that still mean it ran its tests (0: all passed; 1: some
#: failed, each on its own; a benchmark it measured is still read back).
CHILD_RAN = (0, 1)


def child_failure(
    child: ChildRun, missing: Sequence[str], wanted: int, what: str = "confirmation"
) -> str:
    """Why a fresh process did not do its job (an exit status other than 0 or 1, or
    ``missing`` benchmarks of the ``wanted``), or "" when it did."""
    if child.returncode in CHILD_RAN and not missing:
        return ""
    why = f"exit {child.returncode}"
    if child.returncode in CHILD_RAN:
        why += f", {len(missing)} of {wanted} benchmark(s) not measured"
    # the child's command without the temporary JSON file it wrote (gone by now)
    command = [a for a in child.command if not a.startswith("--gpuperf-json=")]
    tail = "\n".join("    " + ln for ln in child.log_tail.strip().splitlines()[-8:])
    return (
        f"the fresh {what} process failed ({why}); the verdict stands unconfirmed\n"
        f"  its output ends:\n{tail}\n"
        f"  run it alone to see all of it: {shlex.join(command)}\n"
        "  fix what it reports (an option it cannot take, a test that fails in a fresh process), "
        "or pass --gpuperf-reruns=0 to judge without fresh processes"
    )
