"""A pytest process that is one rank of a process group: torchrun's worker, or the plugin's.

The plugin's ranks (:mod:`.group`) report to the group's folder; their launcher judges. Under
torchrun a test whose ``world_size=`` is the group's runs on every rank, other benchmarks on
rank 0, which alone judges, saves and reports, and sends each verdict to every rank, so that
all end alike (docs/distributed.md).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.measure.distributed import join_group
from pytest_gpuperf.measure.memory import first_line
from pytest_gpuperf.measure.ranks import GROUP_DIR_ENV, RANK_VARS, RankEnv, RankEnvError, rank_env
from pytest_gpuperf.model import short_test_id
from pytest_gpuperf.shell.group import (
    RESULTS_FILE,
    profiles,
    status_path,
    tcp_store,
    write_json_atomic,
)
from pytest_gpuperf.shell.locks import device_key, devices_locked
from pytest_gpuperf.shell.markers import world_size
from pytest_gpuperf.shell.progress import silent
from pytest_gpuperf.shell.rerun import run_child, temp_prefix
from pytest_gpuperf.shell.session import CONTEXT_KEY, RESULTS_KEY, GpuPerfSession, is_benchmark

if TYPE_CHECKING:
    from pytest_gpuperf.artifacts.collectors.base import ChildRun
    from pytest_gpuperf.measure.distributed import Group
    from pytest_gpuperf.shell.settings import RunContext

#: messages rank 0 sends its peers while it judges a distributed test
CHILD, VERDICT = "child", "verdict"
#: the key, in the group's store, under which each of torchrun's ranks says where it is
STORE_KEY = "gpuperf/where"


def _short(report: pytest.TestReport) -> str:
    """One test report's failure or skip, in a few lines."""
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2])
    text = str(getattr(report, "longreprtext", "") or report.longrepr or "")
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("E ")]
    return "\n".join((errors or lines)[-8:])[:2000]


@contextlib.contextmanager
def peer_env(port: int, env: Mapping[str, str] | None) -> Iterator[dict[str, str]]:
    """A fresh rank's variables: its place, rank 0's new store, a folder to report to."""
    out = dict(env or {})
    out.update({k: os.environ[k] for k in RANK_VARS if k in os.environ and k != GROUP_DIR_ENV})
    out.update(MASTER_PORT=str(port), TORCHELASTIC_USE_AGENT_STORE="True", GPUPERF_NO_LOCK="1")
    out[GROUP_DIR_ENV] = tempfile.mkdtemp(prefix=temp_prefix("gpuperf-peer"))
    try:
        yield out
    finally:
        shutil.rmtree(out[GROUP_DIR_ENV], ignore_errors=True)


def this_rank() -> RankEnv | None:
    """The rank this process is, from torchrun's variables (None: no rank)."""
    try:
        return rank_env(os.environ)
    except RankEnvError as e:
        raise pytest.UsageError(
            f"gpuperf: the torchrun variables describe no rank: {e}; start the session "
            "with torchrun, or unset RANK and WORLD_SIZE"
        ) from None


def _store() -> Any:
    """The default process group's store (torchrun's agent, or rank 0's), or None."""
    try:
        from torch.distributed import distributed_c10d

        return distributed_c10d._get_default_store()
    except Exception:
        return None


class RankSession:
    """The plugin object of a rank: a distributed test's group, lock, hooks and verdict."""

    def __init__(self, session: GpuPerfSession, env: RankEnv):
        self.session = session
        self.env = env
        self.lead = env.is_lead
        self.run = session.run
        self.group: Group | None = None
        self.device: str | None = None
        self.folder = Path(env.group_dir) if env.group_dir else None
        self._doc: dict[str, Any] = {"rank": env.rank, "pid": os.getpid(), "outcomes": {}}
        self._had_benchmarks = False
        self.broken = False  # a collective of a distributed test timed out
        #: the test whose verdict is being made (rank 0's child runs follow its kind)
        self.current: pytest.Item | None = None
        self._write()

    def in_step(self, item: pytest.Item) -> bool:
        """Whether ``item`` runs on every rank of this group."""
        return world_size(item) == self.env.world_size

    def join(self, device: str) -> Group:
        if self.group is None:
            self.device = device
            timeout = self.run.settings.session.dist_timeout
            if self.env.spawned:  # the launcher stops a hung test first, with the stacks
                timeout += 30.0
            self.group = join_group(self.env, device, timeout_s=timeout)
        return self.group

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """Skip what this rank does not run; pin its GPU before any test touches one."""
        self._had_benchmarks = any(is_benchmark(i) for i in items)
        for item in items:
            why = self._not_here(item)
            if why:
                item.add_marker(pytest.mark.skip(reason=why))
        torch = sys.modules.get("torch")
        if self._had_benchmarks and torch is not None and torch.cuda.is_available():
            torch.cuda.set_device(self.env.local_rank % torch.cuda.device_count())

    def _not_here(self, item: pytest.Item) -> str | None:
        if not is_benchmark(item):
            return None  # a plain test runs where it is run, as without the plugin
        ws = world_size(item)
        if ws is None:
            if self.lead:
                return None
            return (
                f"a benchmark without world_size= runs on rank 0 alone ({self.env.label()}; "
                "mark it @pytest.mark.gpuperf(world_size=N) to run it on every rank)"
            )
        if ws != self.env.world_size:
            return (
                f"it asks for world_size={ws}, and this process group has "
                f"{self.env.world_size} rank(s); run it under torchrun --nproc_per_node={ws} "
                "(or in a plain pytest session, which starts its ranks itself)"
            )
        return None

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        """Before the fixtures: a distributed test's group, lock, hooks and progress line."""
        if not is_benchmark(item) or not self.in_step(item):
            return
        settings, device = self.session.settings, self.session.ensure_device()
        group = self.join(device)
        self._write()  # torchrun's ranks: where this one is, now that the others can read
        from pytest_gpuperf.artifacts.collectors.group import group_hooks

        hooks = []
        if not settings.session.disable:
            profile, calls = profiles(settings), settings.capture.calls
            hooks = group_hooks(group, device, profile=profile, calls=calls)
        progress = self.session.progress() if self.lead else silent()
        lock = functools.partial(self.lock, item.nodeid)
        item.stash[CONTEXT_KEY] = dict(
            group=group, lock=lock, after_measure=hooks, progress=progress.task
        )

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        try:
            return (yield)
        except BaseException as e:
            # the others may wait in a collective this rank never reached
            if self.in_step(item) and not isinstance(e, pytest.skip.Exception):
                item.session.shouldstop = (
                    f"gpuperf: {item.nodeid} failed on {self.env.label()}, which leaves the "
                    "process group out of step: this rank runs no more tests"
                )
            raise

    @contextlib.contextmanager
    def lock(self, owner: str) -> Iterator[None]:
        """Around each measurement: each node's first rank takes its devices' locks (the
        plugin's ranks: their launcher holds them), then all ranks meet."""
        group = self.group
        assert group is not None, "a distributed test's group is joined before it runs"
        keys = []
        if self.env.local_rank == 0 and self.device != "cuda":
            keys = ["cpu"]
        elif self.env.local_rank == 0:
            import torch

            n = min(self.env.local_world_size, torch.cuda.device_count())
            keys = [device_key("cuda", i) for i in range(n)]
        with devices_locked(keys, timeout_s=self.run.settings.session.lock_timeout, owner=owner):
            group.barrier()
            try:
                yield
            finally:
                group.barrier()

    def _write(self) -> None:
        """Where this rank is and how its tests went: to the group's folder (the plugin's
        ranks), or to the group's store (torchrun's)."""
        if self.folder is not None:
            with contextlib.suppress(OSError):
                write_json_atomic(status_path(self.folder, self.env.rank), self._doc)
            return
        store = _store() if self.group is not None else None
        if store is not None:
            last = self._doc.get("last")
            doc = {k: self._doc.get(k) for k in ("test", "since")}
            doc["last"] = {"nodeid": last, **self._doc["outcomes"].get(last, {})} if last else None
            with contextlib.suppress(Exception):
                store.set(f"{STORE_KEY}/{self.env.rank}", json.dumps(doc))

    def _the_others(self) -> list[str]:
        """Where each other rank was, as it last told the store (torchrun's ranks)."""
        store = _store()
        lines = []
        for r in (r for r in range(self.env.world_size) if r != self.env.rank):
            key = f"{STORE_KEY}/{r}"
            doc: dict[str, Any] = {}
            with contextlib.suppress(Exception):
                doc = json.loads(store.get(key)) if store and store.check([key]) else {}
            last, test = doc.get("last") or {}, doc.get("test")
            if test:
                where = f"was in {short_test_id(test)} for {time.time() - doc['since']:.1f} s"
            elif last.get("outcome") in ("skipped", "failed"):
                where = f"had {last['outcome']} {short_test_id(last['nodeid'])}: {last.get('text')}"
            elif last:
                where = f"was between tests, after {short_test_id(last['nodeid'])}"
            else:
                where = "had not said where it was (not in the group yet?)"
            lines.append(f"rank {r} {where}")
        return lines

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self._doc.update(test=nodeid, since=time.time())
        self._write()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        report = yield
        outcomes = self._doc["outcomes"]
        mine = outcomes.setdefault(item.nodeid, {"outcome": "passed", "when": "setup"})
        if report.failed or (report.skipped and mine["outcome"] == "passed"):
            mine.update(outcome=report.outcome, when=report.when, text=_short(report))
        self._doc["last"] = item.nodeid
        if self.folder is None:
            if report.failed and self.group is not None and self.in_step(item):
                self._name_the_others(item, call, report)
        elif call.when == "call" and self.lead:  # rank 0's results, a line each, as they come
            results = item.stash.get(RESULTS_KEY, None) or []
            line = json.dumps({"nodeid": item.nodeid, "results": [r.to_dict() for r in results]})
            with (self.folder / RESULTS_FILE).open("a", encoding="utf-8") as f:
                f.write(line + "\n")
        self._write()
        return report

    def _name_the_others(
        self, item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport
    ) -> None:
        """A distributed test failed on this torchrun rank: say where the others were; a
        collective's timeout replaces the backend's traceback and marks the group broken."""
        others = "\n".join(f"  {line}" for line in self._the_others())
        error = call.excinfo.value if call.excinfo is not None else None
        if error is None or "timed out" not in str(error).lower():
            report.sections.append(("gpuperf: where the other ranks were", others))
            return
        self.broken = True
        timeout = self.run.settings.session.dist_timeout
        report.longrepr = (
            f"{self.env.label()}: a collective of {short_test_id(item.nodeid)} waited "
            f"{timeout:g} s (--gpuperf-dist-timeout) for the other ranks, and timed out:\n"
            f"{others}\nA rank that never reaches a collective the others wait in (an "
            "exception, a branch on the rank, a slow rank) hangs them all.\n"
            f"({type(error).__name__}: {first_line(error)})"
        )

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        self._doc["outcomes"].setdefault(nodeid, {"outcome": "passed"})["done"] = True
        self._doc.update(test=None, since=None)
        self._write()

    def agree(self, item: pytest.Item, judge: Callable[[], list[str]]) -> list[str]:
        """A distributed test's failures, alike on every rank: rank 0 judges, then tells."""
        group = self.group
        if group is None or self.env.spawned:
            return judge()
        self.current = item
        try:
            if self.lead:
                failures: list[str] = []
                try:
                    failures = judge()
                finally:
                    group.broadcast({"kind": VERDICT, "failures": failures})
                return failures
            return self._follow(item)
        finally:
            self.current = None

    def _follow(self, item: pytest.Item) -> list[str]:
        """A peer of rank 0: run the fresh processes it asks for, until its verdict comes."""
        assert self.group is not None
        while True:
            msg = self.group.broadcast(None)
            if msg.get("kind") == VERDICT:
                return list(msg.get("failures") or [])
            with peer_env(int(msg["port"]), msg.get("env")) as env:
                child = run_child(
                    self.run, list(msg.get("targets") or [item.nodeid]),
                    device=self.device or "cpu", extra_args=list(msg.get("extra_args") or ()),
                    env=env, prefix=list(msg.get("prefix") or ()),
                    timeout_s=float(msg["timeout_s"]),
                )  # fmt: skip
            self.group.all_gather(child.returncode)

    def confirmation_runner(
        self,
        run: RunContext,
        nodeid: str | Sequence[str],
        *,
        device: str,
        env: Mapping[str, str] | None = None,
        timeout_s: float = 600.0,
        **kw: Any,
    ) -> ChildRun:
        """Rank 0's fresh process: for a distributed test, one on every rank (a new group);
        else one without this rank's variables."""
        item = self.current
        if item is None or not self.in_step(item) or self.group is None:
            return run_child(run, nodeid, device=device, env=env, timeout_s=timeout_s,
                             drop_env=RANK_VARS, **kw)  # fmt: skip
        targets = [nodeid] if isinstance(nodeid, str) else list(nodeid)
        store = tcp_store(self.env.world_size)
        self.group.broadcast({
            "kind": CHILD, "port": store.port, "targets": targets[:1], "env": dict(env or {}),
            "prefix": list(kw.get("prefix") or ()), "timeout_s": timeout_s,
            "extra_args": list(kw.get("extra_args") or ()),
        })  # fmt: skip
        try:
            with peer_env(store.port, env) as peer:
                mine = run_child(run, targets[:1], device=device, timeout_s=timeout_s,
                                 env=peer, **kw)  # fmt: skip
        finally:
            self.group.all_gather(0)
        return mine

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """torchrun's ranks take the worst exit status of any; the plugin's say they finished."""
        status = int(session.exitstatus)
        if self.broken:  # a collective timed out: the others may never come to agree
            status = status or pytest.ExitCode.TESTS_FAILED
        elif not self.env.spawned and self._had_benchmarks:
            joined = self.group is not None
            try:
                group = self.group or self.join("cpu")
                status = group.agree_max(status)
            except Exception as e:  # no group, or a peer gone: this rank cannot vouch alone
                status = status or pytest.ExitCode.TESTS_FAILED
                why = (
                    "a rank left the group, or is out of step"
                    if joined
                    else "its benchmarks ran on rank 0 alone. If this process is no rank of a "
                    "group, unset RANK and WORLD_SIZE (left over from a launcher?)"
                )
                line = (
                    f"gpuperf: {self.env.label()}: the ranks could not agree on the exit status "
                    f"({type(e).__name__}: {first_line(e)}), so this session fails: {why}"
                )
                tr = session.config.pluginmanager.get_plugin("terminalreporter")
                if tr is not None:
                    tr.write_line(line, red=True)
                else:
                    print(line)
        session.exitstatus = status
        self._doc.update(finished=True, exitstatus=status)
        self._write()

    def pytest_unconfigure(self) -> None:
        # the plugin's ranks exit without a teardown (it can hang when a peer is gone)
        if self.group is not None and not self.env.spawned:
            self.group.close()
        self.group = None

    def capture_runner(self, nodeid: str, device: str) -> Callable[..., ChildRun]:
        """How a capture starts its fresh process for ``nodeid``: on every rank."""
        return functools.partial(self.confirmation_runner, self.run, nodeid, device=device)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.lead and not self.session.child and self.session.results:
            terminalreporter.write_line(
                f"gpuperf: {self.env.label()}: benchmarks without world_size= ran on rank 0, and "
                "rank 0 alone judges, saves baselines and writes reports (see its output)"
            )
