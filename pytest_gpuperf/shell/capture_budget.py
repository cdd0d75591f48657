"""``--gpuperf-capture``'s plugin: a first diagnosis at each verdict, the rest after the last.

A session's captures share one budget (``--gpuperf-capture-session-budget``), so that a red run
costs seconds per regression: at the verdict, in the process that judged the test, the first
diagnosis (:data:`FIRST_TOOLS`, one child) within :data:`FIRST_SHARE` of it; after the last
verdict (no measurement runs beside it), the rest, the largest slowdowns first. What none reached
is listed with the command that captures it. Processes share one :class:`Ledger`.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.artifacts.analysis.layout import Layout
from pytest_gpuperf.artifacts.collectors.base import DEFERRED, SKIPPED
from pytest_gpuperf.model import short_test_id
from pytest_gpuperf.outcome import REGRESSION
from pytest_gpuperf.reporting.explain import change_text
from pytest_gpuperf.reporting.terminal import fold
from pytest_gpuperf.shell.capture import (
    NO_TIME,
    CaptureReport,
    PassPlan,
    SparePool,
    artifacts_root,
    capture,
    collector_name,
    collectors_for,
    could_run,
    should_capture,
    skipped,
)
from pytest_gpuperf.shell.rerun import capture_command
from pytest_gpuperf.shell.session import is_benchmark

if TYPE_CHECKING:
    from pytest_gpuperf.artifacts.collectors.base import ChildRunner, Collector
    from pytest_gpuperf.model import Result
    from pytest_gpuperf.outcome import Comparison
    from pytest_gpuperf.shell.gate import Judgement
    from pytest_gpuperf.shell.session import GpuPerfSession

#: The tools of the first diagnosis (one child serves both).
FIRST_TOOLS = ("torch_profiler", "torch_trace")
#: The share of the budget that the first diagnoses at the verdicts may spend; the rest goes
#: to the largest slowdowns, after the last verdict.
FIRST_SHARE = 0.5
#: What one tool's pass is expected to take before this session has timed one (seconds;
#: about what they take on an H200 for a small benchmark).
EXPECTED_S = {"torch_profiler": 8.0, "torch_trace": 1.0, "nsys": 15.0, "ncu": 15.0}
OTHER_EXPECTED_S = 5.0
LEDGER = "capture-ledger.jsonl"
LATER = (
    "runs after the session's last verdict, the largest slowdowns first, while the session's "
    "capture budget lasts (--gpuperf-capture-session-budget)"
)
NO_FIRST = (
    "no diagnosis yet: the first diagnoses at the verdicts have spent their share of the "
    "session's capture budget (--gpuperf-capture-session-budget); this test's comes after "
    "the last verdict if the budget allows (the largest slowdowns first), else the terminal "
    "summary gives the command that captures it"
)


class Ledger:
    """The seconds the session's captures spent, by all its processes: one JSON line per
    pass, one ``write`` under the GPU's lock; without the file, this process's."""

    def __init__(self, path: Path | None):
        self.path = path
        self._mine: list[dict[str, Any]] = []

    def add(self, nodeid: str, phase: int, wall_s: float, tools: Mapping[str, float]) -> None:
        entry = {"nodeid": nodeid, "phase": phase, "wall_s": round(wall_s, 3), "tools": dict(tools)}
        self._mine.append(entry)
        if self.path is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as f:  # one short line: one write, flushed at close
                f.write(json.dumps(entry) + "\n")
        except OSError:
            self.path = None  # this process's entries still count

    def entries(self) -> list[dict[str, Any]]:
        if self.path is None:
            return list(self._mine)
        try:
            text = self.path.read_text()
        except OSError:
            return list(self._mine)
        out = []
        for line in text.splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out

    def spent(self, phase: int | None = None, entries: list[dict[str, Any]] | None = None) -> float:
        return sum(
            float(e.get("wall_s") or 0.0)
            for e in (self.entries() if entries is None else entries)
            if phase is None or e.get("phase") == phase
        )

    def expected(self, tools: Iterable[str], entries: list[dict[str, Any]] | None = None) -> float:
        """What a pass of ``tools`` takes: each tool's mean so far, else :data:`EXPECTED_S`."""
        seen: dict[str, list[float]] = {}
        for e in self.entries() if entries is None else entries:
            for name, s in (e.get("tools") or {}).items():
                seen.setdefault(name, []).append(float(s))
        return sum(
            statistics.fmean(seen[t]) if seen.get(t) else EXPECTED_S.get(t, OTHER_EXPECTED_S)
            for t in tools
        )


@dataclass
class _Test:
    nodeid: str
    results: list[Result]
    slowdown: float
    change: str
    #: tool -> (status, reason, seconds)
    tools: dict[str, tuple[str, str, float]] = field(default_factory=dict)
    verdict_at: float | None = None
    first_diagnosis_s: float | None = None
    #: the command that captures it later, once no pass reached it (a leftover)
    command: str = ""

    def waiting(self) -> list[str]:
        """Tools still to run: deferred, or skipped for want of time."""
        return [
            t
            for t, (status, reason, _) in self.tools.items()
            if status == DEFERRED or (status == SKIPPED and reason.startswith(NO_TIME))
        ]


class CapturePlugin:
    """The captures of one session within its budget (see the module docstring)."""

    def __init__(
        self,
        session: GpuPerfSession,
        *,
        baselines_of: Callable[[Sequence[Result]], dict[str, Any]] | None,
        runner_for: Callable[[str, str], ChildRunner | None],
    ):
        self.session = session
        self.run = session.run
        self.run_id = session.run_id
        #: how a capture of (nodeid, device) starts its process (None: a child pytest)
        self.runner_for = runner_for
        self.settings = self.run.settings.capture
        self.baselines_of = baselines_of or (lambda rs: {})
        run_dir = Layout(artifacts_root(self.run, self.settings), self.run_id).run_dir
        self.ledger = Ledger(run_dir / LEDGER)
        self.spares = SparePool()
        self.budget_s = self.settings.session_budget_s
        #: lines of the pass after the verdicts, for the terminal summary
        self.later_lines: list[str] = []
        self.leftovers: list[_Test] = []

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """The spare Python of the session's first capture starts beside the collection,
        where this process runs tests and starts their captures' children (not on a torchrun
        rank, whose captures run on every rank, nor on xdist's controller)."""
        here = self.runner_for("", self.run.settings.session.device) is None
        fits = self._room(FIRST_TOOLS[:1], first=True) is not None
        if here and not (self.run.is_controller or self.session.child) and fits:
            self.spares.start_early()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if not any(is_benchmark(i) for i in session.items):
            self.spares.close()  # nothing to diagnose

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> None:
        if is_benchmark(item):  # a spare's start never runs beside a measurement
            self.spares.settle()

    def _room(self, tools: Sequence[str], *, first: bool = False) -> float | None:
        """The seconds left if a pass of ``tools`` fits (``first``: in its share too), else None."""
        seen = self.ledger.entries()
        left = self.budget_s - self.ledger.spent(entries=seen)
        share = FIRST_SHARE * self.budget_s - self.ledger.spent(1, seen) if first else left
        return left if min(left, share) >= self.ledger.expected(tools, seen) else None

    def at_verdict(self, item: pytest.Item, results: list[Result], judgement: Judgement) -> None:
        """The first diagnosis, now, joined to the test's failure; or, once the first
        diagnoses' share of the budget is spent, a note that it waits for a later pass."""
        failed = bool(judgement.failures)
        if not should_capture(self.settings.mode, failed):
            return
        nodeid, device, report = item.nodeid, self.session.ensure_device(), None
        verdict_at = time.time()
        skip = skipped(self.settings)
        cols = collectors_for(self.run.config)
        tools = [collector_name(c) for c in cols if could_run(c, device, skip)]
        left_s = self._room(FIRST_TOOLS[:1], first=True)
        if left_s is None:
            for r in results:
                r.artifacts = [*r.artifacts, *_deferred(tools, verdict_at, self.waiting_note())]
        else:
            defer = frozenset(n for n in tools if n not in FIRST_TOOLS)
            comparisons = judgement.comparisons
            report = self._pass(
                1, nodeid, results, comparisons, device, left_s, defer=defer, verdict_at=verdict_at
            )
        slower = any(c.kind == REGRESSION for c in judgement.comparisons.values())
        if report is not None and failed and slower:
            judgement.failures = [report.diagnosis, *judgement.failures, report.details()]
        elif report is not None and failed:
            # failed on its output or memory, not its time: no slowdown to open the failure
            judgement.failures = [*judgement.failures, report.details()]
        elif failed:
            judgement.failures.append(f"gpuperf: {self.waiting_note()}")

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Before the reports (tryfirst): the captures the verdicts left, none after a Ctrl-C."""
        results = self.session.results
        try:
            if not self.session.lead or not results:
                return
            if exitstatus in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR):
                self.note_leftovers(results)
                return
            self.after_verdicts(results)
        finally:
            self.spares.close()

    def after_verdicts(self, results: Sequence[Result]) -> None:
        """The captures the verdicts left, the largest slowdowns first, within the budget."""
        tests = sorted(_tests(results).values(), key=lambda t: -t.slowdown)
        for t in [t for t in tests if "torch_profiler" in t.waiting()]:
            self._later_pass(t, [n for n in t.waiting() if n in FIRST_TOOLS])
        for t in sorted(_tests(results).values(), key=lambda t: -t.slowdown):
            rest = [n for n in t.waiting() if n not in FIRST_TOOLS]
            if rest and "torch_profiler" not in t.waiting():
                self._later_pass(t, rest)
        self.note_leftovers(results)

    def _later_pass(self, t: _Test, tools: list[str]) -> None:
        cols = [c for c in collectors_for(self.run.config) if collector_name(c) in tools]
        left_s = self._room(tools)
        if not cols or left_s is None:
            return
        before = {line for r in t.results if r.diagnosis for line in r.diagnosis.details}
        device = t.results[0].run.device if t.results else "cuda"
        report = self._pass(
            2,
            t.nodeid,
            t.results,
            None,
            device,
            left_s,
            cols,
            defer=frozenset(n for n in t.waiting() if n not in tools),
            resume="torch_profiler" not in tools,
            verdict_at=t.verdict_at,
            label=" after the verdicts",
        )
        if report is not None:
            self.later_lines += _pass_lines(t, report, before, tools)

    def _pass(
        self,
        phase: int,
        nodeid: str,
        results: list[Result],
        comparisons: Mapping[str, Comparison] | None,
        device: str,
        left_s: float,
        collectors: list[Collector] | None = None,
        **plan: Any,
    ) -> CaptureReport | None:
        """A capture pass in ``left_s`` s: its seconds to the ledger, its report on the results."""
        deadline = time.monotonic() + max(left_s, 0.0)
        report = capture(
            self.run, nodeid, results, comparisons, device=device, run_id=self.run_id,
            baselines=self.baselines_of(results), collectors=collectors,
            progress=self.session.progress(), run_child=self.runner_for(nodeid, device),
            plan=PassPlan(defer_reason=LATER, deadline=deadline, spares=self.spares, **plan),
        )  # fmt: skip
        if report is not None:
            last = (report.timing.get("passes") or [{}])[-1]
            wall_s, tools = float(last.get("wall_s") or 0.0), last.get("tools") or {}
            self.ledger.add(nodeid, phase, wall_s, tools)
            report.apply(results)
        return report

    def waiting_note(self) -> str:
        if self.budget_s <= 0:
            return (
                "no diagnosis: the session's capture budget is 0 s "
                "(--gpuperf-capture-session-budget); the terminal summary gives the command "
                "that captures this test"
            )
        return NO_FIRST

    def note_leftovers(self, results: Sequence[Result]) -> None:
        tests = sorted(_tests(results).values(), key=lambda t: -t.slowdown)
        self.leftovers = [t for t in tests if t.waiting()]
        for t in self.leftovers:
            t.command = capture_command(self.run, t.nodeid)

    def summarize(self, tr: Any, results: list[Result]) -> None:
        for line in self.summary_lines(results):
            tr.write_line(fold(line))  # a command to copy stays on one line

    def summary_lines(self, results: Sequence[Result]) -> list[str]:
        """The terminal summary's capture section (none when nothing was captured)."""
        tests = _tests(results)
        if not tests:
            return []
        lines = [
            f"gpuperf capture: {len(tests)} test(s), {self.ledger.spent():.0f} s of the "
            f"session's {self.budget_s:g} s (--gpuperf-capture-session-budget)"
        ]
        firsts = [t.first_diagnosis_s for t in tests.values() if t.first_diagnosis_s is not None]
        if firsts:
            lines.append(
                f"  first diagnosis after the verdict: median {statistics.median(firsts):.1f} s, "
                f"at most {max(firsts):.1f} s ({len(firsts)} test(s); a fresh process of the "
                "current code, profiled)"
            )
        if self.later_lines:
            lines.append("  after the last verdict, the largest slowdowns first:")
            lines += self.later_lines
        if self.leftovers:
            lines.append(
                f"  left over: {len(self.leftovers)} test(s) the budget did not reach; capture "
                "each later with the command below (in this session's environment)"
            )
            for lo in self.leftovers:
                tools = lo.waiting()
                first = ["the first diagnosis"] if "torch_profiler" in tools else []
                what = ", ".join(first + [t for t in tools if t not in FIRST_TOOLS])
                lines.append(f"    {short_test_id(lo.nodeid)} ({lo.change}): {what}")
                lines.append(f"      {lo.command}")
        return lines

    def to_dict(self, results: Sequence[Result]) -> dict[str, Any] | None:
        """The session JSON's ``capture``: budget, seconds spent, each test's timing."""
        tests = _tests(results)
        if not tests:
            return None
        return {
            "budget_s": self.budget_s,
            "spent_s": round(self.ledger.spent(), 3),
            "first_share": FIRST_SHARE,
            "passes": self.ledger.entries(),
            "tests": [
                {
                    "nodeid": t.nodeid,
                    "slowdown": t.slowdown,
                    "verdict_at": t.verdict_at,
                    "first_diagnosis_s": t.first_diagnosis_s,
                    "tools": {n: {"status": s, "wall_s": w} for n, (s, _, w) in t.tools.items()},
                }
                for t in tests.values()
            ],
            "left_over": [
                {"nodeid": lo.nodeid, "tools": lo.waiting(), "command": lo.command}
                for lo in self.leftovers
            ],
        }


def _deferred(tools: Sequence[str], verdict_at: float, why: str) -> list[dict[str, Any]]:
    return [
        {"collector": n, "status": DEFERRED, "reason": why if n in FIRST_TOOLS else LATER,
         "files": [], "verdict_at": verdict_at}
        for n in tools
    ]  # fmt: skip


def _tests(results: Iterable[Result]) -> dict[str, _Test]:
    out: dict[str, _Test] = {}
    for r in results:
        entries = [a for a in r.artifacts if isinstance(a, Mapping) and a.get("collector")]
        if not entries:
            continue
        t = out.setdefault(r.id.nodeid, _Test(r.id.nodeid, [], 0.0, ""))
        t.results.append(r)
        c = r.comparison
        if c is not None and c.ratio is not None and c.ratio > t.slowdown:
            t.slowdown, t.change = float(c.ratio), change_text(c, r.id.mode)
        for a in entries:
            if a["collector"] == "manifest":
                timing = a.get("timing") or {}
                t.first_diagnosis_s = timing.get("first_diagnosis_s", t.first_diagnosis_s)
                t.verdict_at = timing.get("verdict_at", t.verdict_at)
                continue
            status, reason = str(a.get("status")), str(a.get("reason") or "")
            t.tools[str(a["collector"])] = (status, reason, float(a.get("wall_s") or 0))
            if a.get("verdict_at") is not None and t.verdict_at is None:
                t.verdict_at = float(a["verdict_at"])
    return out


def _pass_lines(t: _Test, report: CaptureReport, before: set[str], tools: list[str]) -> list[str]:
    """A later pass's tools, the diagnosis's new lines, the folder."""
    ran = [c for c in report.collectors if c.name in tools]
    head = f"    {short_test_id(t.nodeid)} ({t.change}): " + ", ".join(
        f"{c.name} {c.status}" + (f" ({c.wall_s:.1f} s)" if c.ok else "") for c in ran
    )
    lines = [head]
    for d in report.diagnoses.values():
        if "torch_profiler" in tools:
            lines.append(f"      {d.paragraph}")
        lines += [f"      {x}" for x in d.details if x not in before]
    lines.append(f"      in {report.directory}")
    return lines
