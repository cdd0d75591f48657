"""``--gpuperf-ab=REF``: base and current tree measured in alternation, judged like a baseline.

REF is checked out into a temporary worktree (:mod:`.ab_tree`) and collected once in a
fresh process. :class:`ABGate` then runs fresh processes of the two trees in pairs, ABBA...,
and judges after each pair, the base runs as the baseline, until every verdict is final or
``--gpuperf-reruns`` + 1 pairs ran. Without xdist one pair measures the later benchmarks
too (docs/ab.md).
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.baseline.records import Baseline
from pytest_gpuperf.interrupt import how
from pytest_gpuperf.model import Result
from pytest_gpuperf.shell.ab_tree import (
    CHECK_ENV,
    ABError,
    BaseTree,
    collection_error,
    read_check,
    remove_stale,
    shadow_error,
)
from pytest_gpuperf.shell.gate import CHILD_RAN, Gate, Judgement, child_failure
from pytest_gpuperf.shell.progress import silent
from pytest_gpuperf.shell.rerun import run_child, temp_prefix
from pytest_gpuperf.shell.settings import fingerprint_extra
from pytest_gpuperf.verdict.decide import with_note
from pytest_gpuperf.verdict.judge import Judge
from pytest_gpuperf.verdict.paired import BASE, PairedRuns, pair_order, sides

if TYPE_CHECKING:
    from pytest_gpuperf.artifacts.collectors.base import ChildRun
    from pytest_gpuperf.shell.progress import Progress
    from pytest_gpuperf.shell.settings import RunContext
    from pytest_gpuperf.verdict import Comparison

WORKERINPUT_KEY = "gpuperf_ab"


class ABGate(Gate):
    """The gate of an A/B session: its baseline is the base tree's runs of this session."""

    def __init__(self, run: RunContext, tree: BaseTree, base_ids: Sequence[str]):
        self.tree = tree
        self.extra = fingerprint_extra(run.config) or None
        super().__init__(run, Baseline.from_runs(tree.label, []))
        self.base_ids = list(base_ids)
        self.paired = PairedRuns()
        self.measured: set[str] = set()  # node ids whose pairs are done
        self.pairs_of: dict[str, int] = {}
        self.failed_side: dict[str, str] = {}
        self.processes = 0
        self.process_s = 0.0
        self.current_ids: list[str] = []
        #: the current side checked out too (a commit of --gpuperf-bisect); None: this tree
        self.current_tree: BaseTree | None = None

    @classmethod
    def open(cls, run: RunContext) -> ABGate:
        """The gate, its worktree made and the base collected (a worker's: handed to it)."""
        config, session = run.config, run.settings.session
        ref = str(session.ab)
        for name, given, does in (
            ("baseline", session.baseline, "compares with a stored baseline"),
            ("disable", session.disable, "turns measuring off"),
        ):
            if given:
                raise pytest.UsageError(
                    f"{run.resolved.where('ab')} compares with the base tree, and "
                    f"{run.resolved.where(name)} {does}; drop one of them"
                )
        handed = getattr(config, "workerinput", {}).get(WORKERINPUT_KEY)
        if handed is not None:
            return cls(run, BaseTree.from_dict(handed["tree"]), handed["base_ids"])
        try:
            tree = BaseTree.create(ref, config.invocation_params.dir)
        except ABError as e:
            raise pytest.UsageError(str(e)) from None
        config.add_cleanup(tree.remove)
        remove_stale(tree.toplevel)
        try:
            base_ids = collect_base(run, tree)
        except ABError as e:
            tree.remove()
            raise pytest.UsageError(str(e)) from None
        except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (interrupt.py)
            tree.remove()
            print(
                f"gpuperf: interrupted ({how(e)}) while collecting the base tree of "
                f"--gpuperf-ab={ref}; nothing was measured, and its worktree was removed",
                file=sys.stderr,
                flush=True,
            )
            raise
        gate = cls(run, tree, base_ids)
        config.pluginmanager.register(gate, "gpuperf-ab")
        return gate

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """xdist: each worker pairs its own tests in the same worktree, on its own GPU."""
        node.workerinput[WORKERINPUT_KEY] = {"tree": self.tree.to_dict(), "base_ids": self.base_ids}

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: Sequence[str]) -> None:
        self.current_ids = list(dict.fromkeys([*self.current_ids, *ids]))

    def set_collected(self, nodeids: Sequence[str]) -> None:
        super().set_collected(nodeids)
        self.current_ids = list(nodeids)

    def session_info(self) -> dict[str, Any] | None:
        s = sides(self.base_ids, self.current_ids)
        return {
            "ref": self.tree.ref,
            "sha": self.tree.sha,
            "pairs": max(self.pairs_of.values(), default=0),
            "processes": self.processes,
            "processes_s": round(self.process_s, 3),
            "new": list(s.new),
            "removed": list(s.removed),
        }

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        info = self.session_info() or {}
        tr = terminalreporter
        line = f"gpuperf A/B against {self.tree.label}"
        if self.processes:
            line += (
                f": {self.processes} fresh process(es) in {info['pairs']} pair(s) at most, "
                f"{self.process_s:.1f} s"
            )
        tr.write_line(line)
        if info.get("new"):
            tr.write_line(f"  new (not in {self.tree.ref}): " + ", ".join(info["new"]))
        if info.get("removed"):
            tr.write_line(
                f"  removed (in {self.tree.ref}, not in the current tree): "
                + ", ".join(info["removed"])
            )

    def _run(self, side: str, nodeids: Sequence[str], device: str) -> ChildRun:
        tree = self.tree if side == "base" else self.current_tree
        env = self.tree.env(side) if tree is None else None
        child = run_child(self.run, list(nodeids), device=device, env=env, tree=tree)
        self.processes += 1
        self.process_s += child.wall_s
        return child

    def _check(self, child: ChildRun, side: str, pending: Sequence[str]) -> None:
        """Keep ``child``'s runs; a test it did not measure is an error of that test."""
        got = {r.id.nodeid for r in child.results}
        self.paired.add(side, child.results)
        missing = [n for n in pending if n not in got]
        what = f"A/B ({'base' if side == 'base' else 'current'} tree)"
        error = child_failure(child, missing, len(pending), what)
        if not error:
            return
        for n in missing if child.returncode in CHILD_RAN else pending:
            if n not in self.failed_side:
                self.failed_side[n] = error
                self.child_errors.append(f"{n}: {error.splitlines()[0]}")

    def pairs(self, nodeids: Sequence[str], device: str, progress: Progress | None) -> None:
        """Pairs of fresh processes for ``nodeids`` until each one's verdicts are final."""
        pending = list(nodeids)
        most = self.policy.max_runs
        for i in range(most):
            if not pending:
                break
            for side in pair_order(i):
                label = (
                    f"A/B against {self.tree.label}: pair {i + 1} of at most {most}, "
                    f"{'base' if side == BASE else 'current'} tree, {len(pending)} test(s)"
                )
                with (progress or silent()).task(label):
                    child = self._run(side, pending, device)
                self._check(child, side, pending)
            for n in pending:
                self.pairs_of[n] = i + 1
            base = (r.run for results in self.paired.base.values() for r in results)
            self.baseline = Baseline.from_runs(self.tree.label, base, fingerprint_extra=self.extra)
            self.rule = Judge(
                self.baseline, self.policy, self.extra, self.verdict, modes=self.rule.modes
            )
            last, live = i + 1 >= most, set(pending) - set(self.failed_side)
            undecided = {
                rs[0].id.nodeid
                for rs in self.paired.current.values()
                if rs[0].id.nodeid in live
                and not self.rule.decide(rs[0], [r.run for r in rs], last=last).final
            }
            pending = [n for n in pending if n in undecided]
        self.measured.update(nodeids)

    def verdicts(self) -> dict[str, Comparison]:
        """Each measured benchmark's verdict on the pairs so far, by key (not failed_side's)."""
        return {
            k: self.rule.decide(runs[0], [r.run for r in runs], last=True)
            for k, runs in self.paired.current.items()
            if runs[0].id.nodeid not in self.failed_side
        }

    def judge(
        self,
        item: pytest.Item,
        results: list[Result],
        *,
        device: str,
        progress: Progress | None = None,
    ) -> Judgement:
        out = Judgement()
        have = set(self.base_ids)
        new = item.nodeid not in have
        if not new and item.nodeid not in self.measured:  # with every later one in both trees
            later = [item.nodeid, *self._later(item.nodeid)]
            self.pairs([n for n in later if n in have and n not in self.measured], device, progress)
        for r in results:
            runs = self.paired.current.get(r.id.key, [])
            judged = [x.run for x in runs or [r]]
            c: Comparison = self.rule.decide(r, judged, last=True)
            if new:
                c = with_note(c, f"new: not in {self.tree.label}")
            elif item.nodeid in self.failed_side:
                c = with_note(c, "a fresh process of the A/B pairs failed: see the error")
                out.failures.append(f"gpuperf: ERROR: {self.failed_side[item.nodeid]}")
            else:
                pairs = self.pairs_of.get(item.nodeid, 0)
                c = with_note(
                    c,
                    f"A/B against {self.tree.label}: {pairs} pair(s) of fresh processes, "
                    f"at most {self.policy.max_runs} (--gpuperf-reruns + 1)",
                )
            c = replace(c, name=c.name or r.id.display)
            outputs = [x.numerics for x in judged]
            v = self.rule.conclude(r, c, outputs)
            self._record(r, v, out, against=f" against {self.tree.ref} {self.tree.sha}")
        return out


def collect_base(run: RunContext, tree: BaseTree) -> list[str]:
    """The base tree's benchmarks among the session's selection, from one collecting process;
    ABError when it cannot be collected or imports the current tree's code."""
    config = run.config
    targets = []  # absolute: run_child leaves them as they are
    for a in config.args:
        path, sep, rest = a.partition("::")
        base = tree.base_of(run.invocation_dir / path)
        if base.exists():
            targets.append(str(base) + sep + rest)
    if not targets:
        return []
    args = ["--collect-only"]
    for flag, value in (("-k", config.option.keyword), ("-m", config.option.markexpr)):
        if value:
            args += [flag, str(value)]
    with tempfile.TemporaryDirectory(prefix=temp_prefix("gpuperf-ab-check")) as tmp:
        out = Path(tmp) / "check.json"
        child = run_child(
            run, targets, device=run.settings.session.device, env={CHECK_ENV: str(out)},
            extra_args=args, tree=tree,
        )  # fmt: skip
        found = read_check(out)
    if found.get("errors"):
        raise ABError(collection_error(tree, found["errors"]))
    if found.get("shadowed"):
        raise ABError(shadow_error(tree, found["shadowed"]))
    if "benchmarks" not in found:
        raise ABError(
            f"{tree.flag}={tree.ref}: collecting the base tree {tree.label} failed "
            f"(exit {child.returncode}):\n{child.log_tail}"
        )
    return [str(b) for b in found["benchmarks"]]
