"""``--gpuperf-bisect=GOOD``: the first commit of GOOD..BAD where each selected benchmark is
slower than at GOOD, by the gate's rule.

It takes over the test loop (xdist's ``DSession`` pattern). Every step is an A/B
(:class:`.ab.ABGate`) of one commit against GOOD, each in a worktree of its own (never the
user's tree); :mod:`~pytest_gpuperf.verdict.bisection` picks the commits. The commit found is
measured against its parent and diagnosed, as the gate captures a regression.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.baseline.fileio import write_output
from pytest_gpuperf.errors import OutputError
from pytest_gpuperf.outcome import REGRESSION
from pytest_gpuperf.reporting import github
from pytest_gpuperf.reporting.bisect import github_line, step_line, summary_lines
from pytest_gpuperf.reporting.explain import words
from pytest_gpuperf.shell.ab import ABGate, collect_base
from pytest_gpuperf.shell.ab_tree import ABError, BaseTree, git, remove_stale
from pytest_gpuperf.shell.capture import capture, should_capture
from pytest_gpuperf.shell.progress import Progress
from pytest_gpuperf.shell.rerun import run_child
from pytest_gpuperf.shell.session import is_benchmark
from pytest_gpuperf.verdict import bisection as b

if TYPE_CHECKING:
    from pytest_gpuperf.outcome import Comparison
    from pytest_gpuperf.shell.options import SessionSettings
    from pytest_gpuperf.shell.session import GpuPerfSession
    from pytest_gpuperf.shell.settings import RunContext

FLAG = "--gpuperf-bisect"


def history(s: SessionSettings, here: Path) -> list[b.Commit]:
    """GOOD, then each commit of GOOD..BAD on BAD's first-parent line, oldest first."""
    bad_ref = s.bisect_bad or "HEAD"
    try:
        good, top = BaseTree.resolve(str(s.bisect), here, FLAG)
        bad, _ = BaseTree.resolve(bad_ref, here, FLAG + "-bad")
    except ABError as e:
        raise pytest.UsageError(str(e)) from None
    log = git(["log", "--first-parent", "--reverse", "--format=%H%x1f%s", f"{good}..{bad}"], top)
    rows = [line.split("\x1f", 1) for line in log.stdout.splitlines()]
    first_parent = git(["rev-parse", f"{rows[0][0]}^1"], top).stdout.strip() if rows else ""
    if first_parent != good:  # none, or GOOD off BAD's first-parent line
        raise pytest.UsageError(
            f"{FLAG}={s.bisect}: {good[:12]} is not an older commit of {bad_ref}'s first-parent "
            f"line ({bad[:12]}), so there is nothing between them to search: give GOOD from "
            f"`git log --first-parent {bad_ref}` (for a merged branch, the merge's first parent)"
        )
    subject = git(["log", "-1", "--format=%s", good], top).stdout.strip()
    commits = [b.Commit(0, good, subject, str(s.bisect))]
    commits += [b.Commit(i, sha, text) for i, (sha, text) in enumerate(rows, 1)]
    last = commits[-1]
    if s.bisect_bad:
        commits[-1] = b.Commit(last.index, last.sha, last.subject, bad_ref)
    else:  # measured as the working tree is, as A/B's current side
        dirty = git(["status", "--porcelain", "--untracked-files=no"], top).stdout.strip()
        subject = last.subject + (" (with uncommitted changes)" if dirty else "")
        commits[-1] = b.Commit(last.index, last.sha, subject, "HEAD", here=True)
    return commits


class BisectSession:
    """One session's search: the history, GOOD's tree, the steps, the report."""

    def __init__(self, run: RunContext, session: GpuPerfSession):
        if run.config.getoption("numprocesses", None):  # the options' own: check_combinations
            raise pytest.UsageError(
                f"{run.resolved.where('bisect')} measures one pair of fresh processes at a time "
                "on one device; drop -n (pytest-xdist)"
            )
        self.run, self.session = run, session
        self.progress = Progress.from_config(run.config, run.settings.report.progress)
        self.commits = history(run.settings.session, run.invocation_dir)
        self.report: b.Report | None = None
        self.good_tree: BaseTree | None = None
        self.nodeid_of: dict[str, str] = {}
        #: each benchmark's latest verdict at a commit against GOOD, by (commit, key)
        self.vs_good: dict[tuple[int, str], Comparison] = {}
        #: the latest A/B of (commit, against)
        self.gates: dict[tuple[int, int], ABGate] = {}
        self.errors: list[str] = []
        self.started = 0.0
        self.budget_s = run.settings.session.bisect_budget

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool | None:
        """The search instead of the tests."""
        if session.testsfailed or session.config.option.collectonly:
            return None
        nodeids = [i.nodeid for i in session.items if is_benchmark(i)]
        if not nodeids:
            raise pytest.UsageError(
                f"{FLAG}: no benchmark is selected (a test with the gpu_bench fixture or the "
                "gpuperf marker): name their files, or drop -k / -m"
            )
        self.report = report = b.Report(self.commits[0], self.commits[-1], self.budget_s)
        self.started = time.monotonic()
        try:
            self._bisect(nodeids)
        except KeyboardInterrupt:
            done = f"after {len(report.steps)} step(s); its worktrees are removed"
            print(f"gpuperf: {FLAG} interrupted (Ctrl-C) {done}", file=sys.stderr, flush=True)
            raise
        finally:
            if self.good_tree is not None:
                self.good_tree.remove()
        report.wall_s = time.monotonic() - self.started
        session.testsfailed = len(report.failing(self.run.settings.verdict.fail_on))
        self.session.session_info["bisect"] = report.to_dict(words)
        self._github(report)
        return True

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.report is None or not self.report.wall_s:  # none, or interrupted
            return
        tr = terminalreporter
        tr.section("gpuperf bisect")
        for line in summary_lines(self.report):
            tr.write_line(line)
        for error in self.errors:
            tr.write_line(f"gpuperf: {error}", red=True)
        for a in self.report.answers:  # the last line counts them (no test ran)
            word = "slower" if a.status in (b.FOUND, b.NOT_NARROWED) else a.status
            tr.stats.setdefault(word.replace("-", " "), []).append(a)

    def _say(self, line: str) -> None:
        tr = self.run.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            tr.write_line(line)

    def _bisect(self, nodeids: Sequence[str]) -> None:
        report = self.report
        assert report is not None
        good, bad = report.good, report.bad
        self.good_tree = tree = self._tree(good)
        assert tree is not None
        remove_stale(tree.toplevel)
        try:
            at_good = set(collect_base(self.run, tree))
        except ABError as e:
            raise pytest.UsageError(str(e)) from None
        both = [n for n in nodeids if n in at_good]
        if not both:
            raise pytest.UsageError(
                f"{FLAG}={good.ref}: none of the {len(nodeids)} selected benchmark(s) exists "
                f"at GOOD ({good.short}), so none can be slower than there: give a GOOD that has "
                "them, or select benchmarks it has"
            )
        self._say(f"gpuperf bisect: {bad.index} commit(s) after GOOD {good.ref} ({good.short})")
        told = self._probe(bad, both, None)
        errors = {k: e for step in report.steps for k, e in step.errors.items()}
        for key, o in told.items():
            if o != b.SLOWER:
                against = self.vs_good.get((bad.index, key))
                why = errors.get(key, "")
                report.answers.append(b.Answer(key, o, against_good=against, why=why))
        search = b.Search(bad.index, [k for k, o in told.items() if o == b.SLOWER])
        while (probe := search.next_probe()) is not None:
            if not self._room():
                report.stopped = f"the budget ({report.budget_s:.0f} s, {FLAG}-budget) has no room"
                report.stopped += " for another step"
                break
            index, keys = probe
            search.record(index, self._probe(self.commits[index], self._tests(keys), keys))
        self._answers(report, search)
        report.answers.sort(key=lambda a: list(told).index(a.key))

    def _tests(self, keys: Sequence[str]) -> list[str]:
        return list(dict.fromkeys(self.nodeid_of[k] for k in keys))

    def _room(self) -> bool:
        """Whether a step as long as the average one so far fits in the budget."""
        steps = self.report.steps if self.report is not None else []
        need = sum(s.wall_s for s in steps) / max(len(steps), 1)
        return time.monotonic() - self.started + need <= self.budget_s

    def _probe(self, commit: b.Commit, nodeids: Sequence[str], keys: Any) -> dict[str, str]:
        """What ``commit`` tells against GOOD (an undecided benchmark measured once more)."""
        good = self.commits[0]
        told = dict(self._measure(commit, good, nodeids, keys, "probe").outcomes)
        again = [k for k, o in told.items() if o == b.UNDECIDED and k in self.nodeid_of]
        if again and self._room():
            told |= self._measure(commit, good, self._tests(again), again, "again").outcomes
        return told

    def _measure(
        self, commit: b.Commit, against: b.Commit, nodeids: Sequence[str], keys: Any, purpose: str
    ) -> b.Step:
        """One A/B of ``commit`` against ``against`` (``keys``: what it tells; None: all)."""
        assert self.report is not None
        t0, report = time.monotonic(), self.report
        step = b.Step(len(report.steps) + 1, commit, against, purpose)
        base = self._tree(against)
        assert base is not None, "GOOD or a parent: never the working tree"
        gate = ABGate(self.run, base, nodeids)
        gate.current_tree = self._tree(commit)
        try:
            with self.progress.shared(f"gpuperf bisect step {step.number}: {commit.short}"):
                gate.pairs(nodeids, self.session.ensure_device(), self.progress)
        finally:
            self._release(gate.current_tree, base)
        step.processes, step.wall_s = gate.processes, time.monotonic() - t0
        step.verdicts = gate.verdicts()
        self.nodeid_of |= {k: rs[0].id.nodeid for k, rs in gate.paired.current.items()}
        for key in keys if keys is not None else [*step.verdicts, *gate.failed_side]:
            c = step.verdicts.get(key)
            step.outcomes[key] = b.outcome(c.kind if c is not None else None)
            failed = gate.failed_side.get(self.nodeid_of.get(key, key), "not measured")
            if c is None:
                step.errors[key] = failed
            elif against.index == 0:
                self.vs_good[(commit.index, key)] = c
        self.gates[(commit.index, against.index)] = gate
        report.steps.append(step)
        self._say(step_line(step, report.bad.index))
        return step

    def _tree(self, commit: b.Commit) -> BaseTree | None:
        """``commit`` checked out (GOOD's tree, made once); None: the working tree."""
        if commit.here:
            return None
        if commit.index == 0 and self.good_tree is not None:
            return self.good_tree
        try:
            tree = BaseTree.create(commit.ref if commit.index == 0 else commit.sha,
                                   self.run.invocation_dir, FLAG)  # fmt: skip
        except ABError as e:
            raise pytest.UsageError(str(e)) from None
        self.run.config.add_cleanup(tree.remove)  # also on Ctrl-C
        return tree

    def _release(self, *trees: BaseTree | None) -> None:
        for tree in trees:
            if tree is not None and tree is not self.good_tree:
                tree.remove()

    def _answers(self, report: b.Report, search: b.Search) -> None:
        """Each searched benchmark's answer: its range, or the commit found, measured against
        its parent and diagnosed."""
        found: dict[int, list[str]] = {}
        for key, r in search.ranges.items():
            if r.found is not None:
                found.setdefault(r.found, []).append(key)
                continue
            report.answers.append(
                b.Answer(
                    key, b.NOT_NARROWED, candidates=tuple(self.commits[r.good + 1 : r.bad + 1]),
                    untold=r.untold(), against_good=self.vs_good.get((r.bad, key)),
                    why=report.stopped,
                )
            )  # fmt: skip
        for index, keys in sorted(found.items()):
            commit, parent = self.commits[index], self.commits[index - 1]
            if (index, parent.index) not in self.gates and self._room():
                self._measure(commit, parent, self._tests(keys), keys, "confirm")
            gate = self.gates.get((index, parent.index))
            verdicts = gate.verdicts() if gate is not None else {}
            why = "" if gate else "the budget had no room to measure it against its parent"
            diagnoses = self._diagnose(commit, parent, gate, verdicts)
            for key in keys:
                d, evidence = diagnoses.get(key, (None, None))
                report.answers.append(
                    b.Answer(
                        key, b.FOUND, commit, parent, verdicts.get(key),
                        self.vs_good.get((index, key)), why=why, diagnosis=d, evidence=evidence,
                    )
                )  # fmt: skip

    def _diagnose(
        self, commit: b.Commit, parent: b.Commit, gate: ABGate | None, verdicts: dict[str, Any]
    ) -> dict[str, tuple[Any, str]]:
        """The capture of ``commit``'s slower tests against their runs at ``parent``: each
        test's benchmarks profiled at ``parent`` (their kernel inventory joins its runs, as a
        saved baseline's has it), then captured at ``commit``."""
        from pytest_gpuperf.artifacts.collectors.torch_profiler import (
            TorchProfilerCollector,
            saved_profiles,
        )

        slower = [k for k, c in verdicts.items() if c.kind == REGRESSION]
        if gate is None or not should_capture(self.run.settings.capture.mode, bool(slower)):
            return {}
        out: dict[str, tuple[Any, str]] = {}
        for nodeid in self._tests(slower):
            if not self._room():
                break
            mine = [k for k in slower if self.nodeid_of[k] == nodeid]
            base = {k: gate.paired.base[k] for k in mine if gate.paired.base.get(k)}
            tool = TorchProfilerCollector()
            firsts = [rs[0] for rs in base.values()]  # none when GOOD's processes failed
            got = firsts and self._capture(parent, "-parent", firsts, keys=mine, collectors=[tool])
            profiles = saved_profiles(got.directory / tool.name) if got else {}
            for key, runs in base.items():
                for r in runs if profiles.get(key) else ():
                    r.with_run(extra={**r.run.extra, "kernels": profiles[key]["inventory"]})
            current = [gate.paired.current[k][0] for k in mine]
            got = self._capture(
                commit, "", current, keys=mine, comparisons=verdicts, baselines=base
            )
            if got is not None:
                out |= {k: (d, str(got.directory)) for k, d in got.diagnoses.items()}
        return out

    def _capture(self, commit: b.Commit, tag: str, results: list[Any], **kw: Any) -> Any:
        """The capture of ``results``' test at ``commit`` (``<run id>-bisect-<sha><tag>``)."""
        device, nodeid = self.session.ensure_device(), results[0].id.nodeid
        tree = self._tree(commit)
        runner = partial(run_child, self.run, [nodeid], device=device, tree=tree) if tree else None
        try:
            return capture(
                self.run, nodeid, results, device=device, run_child=runner,
                run_id=f"{self.session.run_id}-bisect-{commit.short}{tag}", progress=self.progress,
                **kw,
            )  # fmt: skip
        finally:
            self._release(tree)

    def _github(self, report: b.Report) -> None:
        """The search's line in ``$GITHUB_STEP_SUMMARY`` (per ``--gpuperf-github``)."""
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if not summary or not github.enabled(self.run.settings.report.github, os.environ):
            return
        try:
            write_output(
                self.run.invocation_dir / summary, github_line(report) + "\n",
                what="$GITHUB_STEP_SUMMARY", baseline_dirs=[self.run.baseline_dir], append=True,
            )  # fmt: skip
        except (OutputError, OSError) as e:
            self.errors.append(f"cannot append to $GITHUB_STEP_SUMMARY ({summary}): {e}")
