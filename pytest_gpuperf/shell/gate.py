"""The gate: compare a test's results with the baseline, confirm suspects, fail regressions.

Runs in the process that ran the test (xdist workers included), right after
the test function returns, so that a regression fails *its own* test item
with its own explanation. The statistics are :mod:`pytest_gpuperf.verdict`'s;
this module feeds them: the baseline's comparable runs, the session's number
of gated benchmarks (``m``, fixed at collection), the runner's noise prior,
and fresh-process re-measurements (:mod:`pytest_gpuperf.shell.rerun`) while a
verdict is not final.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.model import Result
from pytest_gpuperf.shell.baselines import fingerprint_extra
from pytest_gpuperf.verdict.decide import with_note

if TYPE_CHECKING:
    from pytest_gpuperf.artifacts.collectors.base import ChildRun
    from pytest_gpuperf.baseline.records import Baseline
    from pytest_gpuperf.shell.progress import Progress
    from pytest_gpuperf.shell.settings import RunContext
    from pytest_gpuperf.verdict import Comparison, DecisionPolicy, VerdictSettings


@dataclass
class Judgement:
    """The verdicts of one test's results, after confirmation."""

    comparisons: dict[str, Comparison] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    reruns: int = 0
    rerun_s: float = 0.0


@dataclass
class _Runs:
    """One test's runs so far, per benchmark: their statistics, their outputs' fingerprints
    and the verdict on them."""

    current: dict[str, list[Any]]
    outputs: dict[str, list[Any]]
    comps: dict[str, Comparison] = field(default_factory=dict)


@dataclass
class ConfirmBudget:
    """How much fresh-process re-measurement a session may spend on suspects.

    Re-runs may add up to ``factor`` times the session's plain time (its own
    time without re-runs, extrapolated from the benchmarks done to those
    collected), and never less than ``min_s``: a session stays within about
    ``1 + factor`` times its plain time.
    """

    factor: float = 1.0
    min_s: float = 60.0
    started: float = field(default_factory=time.perf_counter)
    expected: int = 1
    done: int = 0
    spent_s: float = 0.0
    #: seconds a child process took per benchmark it ran (the last one's)
    per_test_s: float = 0.0

    def allowed_s(self) -> float:
        plain = max(0.0, time.perf_counter() - self.started - self.spent_s)
        total = plain * max(self.expected, self.done) / max(self.done, 1)
        return max(self.min_s, self.factor * total)

    def left_s(self) -> float:
        return self.allowed_s() - self.spent_s

    def tests_that_fit(self, wanted: int) -> int:
        """How many benchmarks the next child may run (0: none; the first one decides)."""
        per = self.per_test_s
        if per <= 0:  # no child yet: one test's share of the session so far
            plain = max(0.0, time.perf_counter() - self.started - self.spent_s)
            per = plain / max(self.done, 1)
        left = self.left_s()
        if left < per:
            return 0
        return max(1, min(wanted, int(left / max(per, 1e-3))))

    def spend(self, seconds: float, tests: int) -> None:
        self.spent_s += seconds
        self.per_test_s = seconds / max(tests, 1)


class Gate:
    """Everything the session needs to judge results against one baseline.

    The rule is :mod:`pytest_gpuperf.verdict`'s (:class:`~pytest_gpuperf.verdict.judge.Judge`);
    the gate adds what needs pytest: fresh-process re-runs of suspects, within
    the session's :class:`ConfirmBudget`, and failing the test item.
    """

    def __init__(self, run: RunContext, baseline: Baseline):
        from pytest_gpuperf.verdict.judge import Judge

        config = run.config
        self.run = run
        self.config = config
        self.baseline = baseline
        #: the session's verdict settings; a benchmark's own are :meth:`settings_for` it
        self.verdict: VerdictSettings = run.settings.verdict
        self.policy: DecisionPolicy = self.verdict.decision_policy()
        self.rule = Judge(baseline, self.policy, fingerprint_extra(config) or None)
        self.budget = ConfirmBudget(factor=self.verdict.confirm_budget)
        self.rerun_count = 0
        self.rerun_s = 0.0
        #: the session's benchmarks in order; a confirmation child also runs those after its
        #: test, and keeps their results as the next run of each (one more fresh process)
        self.order: list[str] = []
        self.ahead: dict[str, list[Result]] = {}
        # an xdist worker does not know which tests it will run next
        self.look_ahead = not hasattr(config, "workerinput")

    @classmethod
    def load(cls, run: RunContext) -> Gate:
        """Load ``--gpuperf-baseline``; a missing or broken file raises a BaselineError."""
        from pytest_gpuperf.baseline.store import BaselineStore

        name = run.settings.session.baseline
        assert name is not None, "a gate is loaded when --gpuperf-baseline is set"
        return cls(run, BaselineStore(run.baseline_dir).load(name))

    def set_collected(self, nodeids: Sequence[str]) -> None:
        """The benchmarks of the session, in order (the budget's estimate, the look-ahead)."""
        self.budget.expected = max(1, len(nodeids))
        self.order = list(nodeids)

    def session_info(self) -> dict[str, Any] | None:
        """What the session's JSON says about the gate beyond the baseline's name."""
        return None

    def _child_targets(self, nodeid: str) -> list[str]:
        """This test, and as many of the session's later benchmarks as the budget allows."""
        later: list[str] = []
        if self.look_ahead and nodeid in self.order:
            later = self.order[self.order.index(nodeid) + 1 :]
        n = self.budget.tests_that_fit(1 + len(later))
        return [nodeid, *later][: max(n, 0)]

    def settings_for(self, result: Result) -> VerdictSettings:
        """The verdict settings resolved for this benchmark (its marker's and call's over
        the session's), from what its result carries (``Result.gate``)."""
        return self.verdict.for_result(result.gate)

    # --- per test -------------------------------------------------------------

    def judge(
        self,
        item: pytest.Item,
        results: list[Result],
        *,
        device: str,
        progress: Progress | None = None,
    ) -> Judgement:
        """Verdicts for one test's results, re-measuring suspects in fresh processes."""
        from pytest_gpuperf.shell.rerun import is_child
        from pytest_gpuperf.verdict import RunStat

        out = Judgement()
        self.budget.done += 1
        child_mode = is_child(self.config)
        runs = _Runs(
            current={r.id.key: [RunStat.from_result(r)] for r in results},
            # the output's fingerprint of each run: this one's, then the fresh processes'
            outputs={r.id.key: [r.numerics] for r in results},
        )
        last = child_mode or self.policy.max_runs <= 1
        runs.comps = {r.id.key: self._decide(r, runs.current, last) for r in results}
        note = ""
        if not child_mode:
            note = self._confirm(item.nodeid, results, runs, out, device=device, progress=progress)
        for r in results:
            self._conclude(r, runs, note, out)
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
        """Re-measure the suspects in fresh processes until each verdict is final.

        Returns why confirmation stopped early ("" when every verdict became final).
        """
        from pytest_gpuperf.shell.rerun import matching

        while True:
            pending = [r for r in results if not runs.comps[r.id.key].final]
            if not pending:
                return ""
            if self._take_ahead(pending, runs):
                continue
            targets = self._child_targets(nodeid)
            if not targets:
                return (
                    f"confirmation budget spent ({self.budget.spent_s:.0f} s of re-runs in this "
                    f"session, at most {self.budget.allowed_s():.0f} s); raise "
                    "--gpuperf-confirm-budget to confirm more"
                )
            look = len(runs.current[pending[0].id.key]) + 1
            child = self._rerun(nodeid, targets, look, out, device=device, progress=progress)
            mine = {r.id.key for r in results}
            for res in child.results:
                if res.id.key not in mine:
                    self.ahead.setdefault(res.id.key, []).append(res)
            for r in pending:
                again = matching(child.results, r.id.key)
                if again is None:
                    why = (
                        f"the confirmation run failed (exit {child.returncode}): "
                        f"{child.log_tail[-300:]}"
                    )
                    runs.comps[r.id.key] = with_note(self._decide(r, runs.current, True), why)
                    continue
                self._add_run(r, again, runs)

    def _take_ahead(self, pending: list[Result], runs: _Runs) -> bool:
        """Add the runs an earlier confirmation child measured ahead, each from its own process.

        Returns whether there was any.
        """
        took = False
        for r in pending:
            if self.ahead.get(r.id.key):
                self._add_run(r, self.ahead[r.id.key].pop(0), runs)
                took = True
        return took

    def _add_run(self, r: Result, again: Result, runs: _Runs) -> None:
        """One more run of ``r``'s benchmark, from a fresh process: decide again."""
        from pytest_gpuperf.verdict import RunStat

        runs.current[r.id.key].append(RunStat.from_result(again))
        runs.outputs[r.id.key].append(again.numerics)
        full = len(runs.current[r.id.key]) >= self.policy.max_runs
        runs.comps[r.id.key] = self._decide(r, runs.current, full)

    def _rerun(
        self,
        nodeid: str,
        targets: list[str],
        look: int,
        out: Judgement,
        *,
        device: str,
        progress: Progress | None,
    ) -> ChildRun:
        """Run ``targets`` in one fresh process, and count its time against the budget."""
        from pytest_gpuperf.shell.progress import silent
        from pytest_gpuperf.shell.rerun import run_child

        also = f" and {len(targets) - 1} later benchmark(s) ahead" if len(targets) > 1 else ""
        label = (
            f"re-measuring {nodeid}{also} in a fresh process "
            f"(run {look} of at most {self.policy.max_runs})"
        )
        with (progress or silent()).task(label):
            child = run_child(self.run, targets, device=device)
        out.reruns += 1
        out.rerun_s += child.wall_s
        self.rerun_count += 1
        self.rerun_s += child.wall_s
        self.budget.spend(child.wall_s, len(targets))
        return child

    def _conclude(self, r: Result, runs: _Runs, note: str, out: Judgement) -> None:
        """Settle ``r``'s verdict, add its secondary metrics and numerics, record the outcome."""
        c = runs.comps[r.id.key]
        if not c.final:  # no more runs: a suspect is settled on what there is
            c = self._decide(r, runs.current, True)
            if note:
                c = with_note(c, note)
        self._record(r, c, runs.outputs[r.id.key], out)

    def _record(
        self, r: Result, c: Comparison, outputs: list[Any], out: Judgement, against: str = ""
    ) -> None:
        """Add ``r``'s secondary metrics and numerics to its settled verdict ``c``, keep it,
        and record the outcome (``against``: what the failure's first line adds)."""
        from pytest_gpuperf.reporting.explain import explain, summary_line
        from pytest_gpuperf.verdict import outcome

        c, secondary_failures = self._secondary(r, c)
        c, numerics_failure = self._numerics(r, c, outputs)
        r.comparison = c
        out.comparisons[r.id.key] = c
        out.failures += secondary_failures + numerics_failure
        verdict = outcome(c, self.policy.fail_on)
        if verdict == "fail":
            out.failures.append(f"{r.id.display} [{r.id.mode}]{against}\n{explain(c)}")
        elif verdict == "warn":
            out.warnings.append(f"[{r.id.mode}] {summary_line(c)}")

    def _decide(self, r: Result, current: dict[str, list[Any]], last: bool) -> Comparison:
        return self.rule.decide(r, current[r.id.key], last=last)

    def _secondary(self, r: Result, c: Comparison) -> tuple[Comparison, list[str]]:
        """Peak memory and first-call time: on the comparison, and failures where gated."""
        from dataclasses import replace

        from pytest_gpuperf.verdict.secondary import FIRST_CALL, HIGHER, PEAK_MEMORY
        from pytest_gpuperf.verdict.secondary import explain_secondary as text

        mine = self.settings_for(r)
        tolerances = {
            PEAK_MEMORY: mine.memory_tolerance,
            FIRST_CALL: mine.first_call_tolerance,
        }
        found = self.rule.secondary(r, tolerances)
        gate = mine.gate_secondary
        failures = [
            f"{r.id.display} [{r.id.mode}]: {text(s)}"
            for s in found
            if s.kind == HIGHER and _gated(gate, s.metric)
        ]
        return replace(c, secondary=tuple(found)), failures

    def _numerics(
        self, r: Result, c: Comparison, outputs: list[Any]
    ) -> tuple[Comparison, list[str]]:
        """The output's numerics: on the comparison, and a failure where gated and changed."""
        from dataclasses import replace

        from pytest_gpuperf.verdict.numerics import GATE, OFF, explain

        mine = self.settings_for(r)
        mode = mine.numerics
        if mode == OFF:
            return c, []
        tolerance = mine.numerics_tolerance
        found = self.rule.numerics(r, outputs, tolerance, gated=mode == GATE)
        if found is None:
            return c, []
        c = replace(c, numerics=found)
        return c, [f"{r.id.display} [{r.id.mode}]: {explain(found)}"] if found.fails else []


def _gated(option: str, metric: str) -> bool:
    if option == "all":
        return True
    return (option == "memory" and metric == "peak_memory") or (
        option == "first-call" and metric == "first_call"
    )
