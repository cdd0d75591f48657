"""A capture's child runner without a pytest session, for the tests and scripts of the
collectors (tests/unit/test_artifacts_*.py, tests/gpu/planted.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from pytest_gpuperf.artifacts.collectors.base import ChildRun, ChildRunner
from pytest_gpuperf.shell.rerun import run_pytest_child


def standalone_runner(
    nodeid: str,
    *,
    rootdir: Path | str,
    device: str,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> ChildRunner:
    """Runs ``python -m pytest <nodeid> --gpuperf-child ...`` in ``rootdir`` through
    :func:`pytest_gpuperf.shell.rerun.run_pytest_child`, with ``args`` added."""
    base_env = dict(env or {})

    def run(
        *,
        env: Mapping[str, str] | None = None,
        prefix: Sequence[str] = (),
        timeout_s: float,
        log_path: Path | None = None,
        extra_args: Sequence[str] = (),
    ) -> ChildRun:
        return run_pytest_child(
            [nodeid],
            device=device,
            args=["-p", "no:cacheprovider", *args, *extra_args],
            env={**base_env, **(env or {})},
            drop_env=("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER"),
            prefix=prefix,
            timeout_s=timeout_s,
            cwd=rootdir,
            log_path=log_path,
        )

    return run
