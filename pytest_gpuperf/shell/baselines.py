"""Baselines from the pytest side: where they live, what a save adds, and saving.

The store itself is :mod:`pytest_gpuperf.baseline`; this module gives it what only
the session knows: ``--gpuperf-baseline-dir`` relative to the rootdir, the fields
of ``pytest_gpuperf_update_fingerprint`` hooks, the run's git commit and CI ids,
and the telemetry summary a saved run keeps (its clock regime and its activity).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.model import Result

if TYPE_CHECKING:
    from pytest_gpuperf.shell.progress import Progress
    from pytest_gpuperf.shell.settings import RunContext


_EXTRA_KEY = pytest.StashKey[dict[str, Any]]()


def fingerprint_extra(config: pytest.Config) -> dict[str, Any]:
    """Fields users' plugins add to the fingerprint (pytest_gpuperf_update_fingerprint), once."""
    if _EXTRA_KEY not in config.stash:
        extra: dict[str, Any] = {}
        config.hook.pytest_gpuperf_update_fingerprint(config=config, fingerprint=extra)
        config.stash[_EXTRA_KEY] = extra
    return config.stash[_EXTRA_KEY]


def save(
    run: RunContext,
    results: Sequence[Result],
    *,
    meta: dict[str, Any],
    extras: dict[str, dict[str, Any]] | None = None,
    progress: Progress | None = None,
) -> str:
    """Append this session's results to ``--gpuperf-save``; returns the line for the summary.

    Waits for the baseline's lock as long as ``--gpuperf-lock-timeout`` says, with a
    progress line naming the holder.
    """
    from dataclasses import replace

    from pytest_gpuperf.baseline.store import BaselineStore
    from pytest_gpuperf.telemetry.regime import baseline_telemetry

    session = run.settings.session
    assert session.save is not None, "save() is called when --gpuperf-save is set"
    # The baseline keeps what later comparisons need of the telemetry, not its raw stream.
    compact = [replace(r, telemetry=baseline_telemetry(r.telemetry)) for r in results]
    extra = fingerprint_extra(run.config) or None
    store = BaselineStore(
        run.baseline_dir,
        lock_timeout=session.lock_timeout,
        on_wait=progress.task if progress is not None else None,
    )
    summary = store.save(
        session.save,
        compact,
        keep_runs=session.keep_runs,
        meta=meta,
        fingerprint_extra=extra,
        extras=extras,
    )
    return summary.describe()


def check_save_target(run: RunContext) -> None:
    """Before measuring anything: an existing baseline to save into must be readable."""
    from pytest_gpuperf.baseline.store import BaselineStore

    name = run.settings.session.save
    if name is not None:
        BaselineStore(run.baseline_dir).check(name)  # the store checks the name


def run_meta(config: pytest.Config) -> dict[str, Any]:
    """Where this run comes from: git commit and CI identifiers, best effort."""
    import os
    import subprocess

    meta: dict[str, Any] = {}
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=config.rootpath,
            capture_output=True,
            text=True,
            timeout=5,
        )
        if sha.returncode == 0:
            meta["git_sha"] = sha.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    for env, key in (
        ("GITHUB_SHA", "ci_sha"),
        ("GITHUB_REF", "ci_ref"),
        ("GITHUB_RUN_ID", "ci_run_id"),
        ("GITHUB_WORKFLOW", "ci_workflow"),
    ):
        if os.environ.get(env):
            meta[key] = os.environ[env]
    return meta
