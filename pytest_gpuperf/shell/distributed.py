"""Tests marked ``world_size=N``: :class:`RankPlugin` in a rank of a process group gives
such a test its group, lock and hooks; elsewhere :class:`GroupPlugin` starts its ranks."""

from __future__ import annotations

import functools
import os
from collections.abc import Generator, Sequence
from typing import Any

import pytest

from pytest_gpuperf.artifacts.collectors.base import ChildRun
from pytest_gpuperf.measure.ranks import RankEnv, RankEnvError, rank_env
from pytest_gpuperf.shell.group import (
    GroupError,
    GroupItem,
    GroupLauncher,
    as_group_items,
    profiles,
)
from pytest_gpuperf.shell.progress import silent
from pytest_gpuperf.shell.ranks import RankSession
from pytest_gpuperf.shell.rerun import run_child
from pytest_gpuperf.shell.session import (
    CONTEXT_KEY,
    RESULTS_KEY,
    GpuPerfSession,
    is_benchmark,
)
from pytest_gpuperf.shell.settings import RunContext


def this_rank() -> RankEnv | None:
    """The rank this process is, from torchrun's variables (None: no rank)."""
    try:
        return rank_env(os.environ)
    except RankEnvError as e:
        raise pytest.UsageError(
            f"gpuperf: the torchrun variables describe no rank: {e}; start the session "
            "with torchrun, or unset RANK and WORLD_SIZE"
        ) from None


class RankPlugin:
    """A rank's side of the tests that run on every rank of its group."""

    def __init__(self, session: GpuPerfSession, env: RankEnv):
        self.session = session
        self.ranks = RankSession(
            env,
            session.run,
            is_benchmark,
            device=session.ensure_device,
            results=lambda item: item.stash.get(RESULTS_KEY, None) or [],
        )

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        """Before the fixtures: a distributed test's group, lock, hooks and progress line."""
        if not is_benchmark(item) or not self.ranks.in_step(item):
            return
        settings = self.session.settings
        device = self.session.ensure_device()
        group = self.ranks.join(device)
        from pytest_gpuperf.artifacts.collectors.group import group_hooks

        hooks = group_hooks(group, device, profile=profiles(settings), calls=settings.capture.calls)
        progress = self.session.progress() if self.ranks.lead else silent()
        item.stash[CONTEXT_KEY] = {
            "group": group,
            "lock": functools.partial(self.ranks.lock, item.nodeid),
            "after_measure": [] if settings.session.disable else hooks,
            "progress": progress.task,
        }

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        try:
            return (yield)
        except BaseException as e:
            if self.ranks.in_step(item):
                self.ranks.out_of_step(item, e)
            raise

    def confirmation_runner(self, run: RunContext, nodeid: Any, **kw: Any) -> ChildRun:
        return self.ranks.run_child(run, nodeid, **kw)

    def capture_runner(self, nodeid: str, device: str) -> Any:
        """How a capture starts its fresh process for ``nodeid``: on every rank."""
        ranks, run = self.ranks, self.session.run

        def runner(**kw: Any) -> ChildRun:
            return ranks.run_child(run, nodeid, device=device, **kw)

        return runner

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        session = self.session
        if not self.ranks.lead and not session.child and session.results:
            terminalreporter.write_line(self.ranks.summary_line())


class GroupPlugin:
    """Where this process is no rank: a test marked ``world_size=`` runs on ranks it starts."""

    def __init__(self, session: GpuPerfSession):
        self.session = session
        #: made at collection, when there are such tests
        self.launcher: GroupLauncher | None = None

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        if as_group_items(items, self.run_item) and self.launcher is None:
            # an xdist worker does not know the tests it will run next
            self.launcher = GroupLauncher(
                self.session.run, look_ahead=not self.session.run.is_worker
            )

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if self.launcher is not None:
            self.launcher.set_collected(session.items)

    def run_item(self, item: GroupItem) -> None:
        """Run a world_size= test on its ranks; its results become this process's results."""
        if self.launcher is None:
            self.launcher = GroupLauncher(self.session.run, look_ahead=False)
        session = self.session
        got = self.launcher.outcome(
            item, device=session.ensure_device(), progress=session.progress()
        )
        if got.kind == "skipped":
            pytest.skip(got.text)
        if got.kind == "failed":
            pytest.fail(got.text, pytrace=False)
        if got.kind == "error":
            raise GroupError(got.text)
        for r in got.results:
            session.keep(item, r)

    def confirmation_runner(
        self, run: RunContext, nodeid: str | Sequence[str], *, device: str, **kw: Any
    ) -> ChildRun:
        """A confirmation's fresh processes: a new start of the ranks, or a child pytest."""
        targets = [nodeid] if isinstance(nodeid, str) else list(nodeid)
        launcher = self.launcher
        if launcher is not None and launcher.item(targets[0]) is not None and not kw:
            return launcher.fresh(targets, device)
        return run_child(run, nodeid, device=device, **kw)

    def capture_runner(self, nodeid: str, device: str) -> None:
        """A capture's fresh process: a child pytest (shell/capture.py's own)."""
        return None
