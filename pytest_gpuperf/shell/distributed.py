"""Tests marked ``world_size=N`` where this process is no rank: :class:`GroupPlugin` starts
their ranks (in a rank: :class:`.ranks.RankSession`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import pytest

from pytest_gpuperf.artifacts.collectors.base import ChildRun
from pytest_gpuperf.measure.ranks import RankEnv, RankEnvError, rank_env
from pytest_gpuperf.shell.group import (
    GroupError,
    GroupItem,
    GroupLauncher,
    as_group_items,
)
from pytest_gpuperf.shell.rerun import run_child
from pytest_gpuperf.shell.session import (
    GpuPerfSession,
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
