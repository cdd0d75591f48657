"""Shared test set-up: pytester, and capability marks for tests that need a GPU or a tool."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping

import pytest

# pytester's in-process runs remove, when they end, the modules a run imported. torch
# registers its operator libraries once per process: a module such as
# torch.distributed._functional_collectives, imported by one run (torch.testing.assert_close
# imports it lazily) and dropped, fails the next run that imports it ("Only a single
# TORCH_LIBRARY can be used to register the namespace c10d_functional"). So torch's modules
# are kept across runs, as pytester keeps zope's and readline's for the same reason; and
# torch is imported here, before any run, so that what it imports itself (numpy, sympy...)
# is in every snapshot too and never dropped under it.
with contextlib.suppress(ImportError):  # without torch, the tests that need it skip
    import torch  # noqa: F401


def _keep_torch_modules() -> None:
    from _pytest import pytester

    snapshot = pytester.SysModulesSnapshot
    if getattr(snapshot, "_gpuperf_keeps_torch", False):
        return
    original = snapshot.__init__

    def init(self: object, preserve: Callable[[str], bool] | None = None) -> None:
        def keep(name: str) -> bool:
            return name == "torch" or name.startswith("torch.") or bool(preserve and preserve(name))

        original(self, preserve=keep)  # type: ignore[arg-type]

    snapshot.__init__ = init  # type: ignore[method-assign]
    snapshot._gpuperf_keeps_torch = True  # type: ignore[attr-defined]


_keep_torch_modules()

# The suite's own lock folder, shared by its xdist workers (they inherit the controller's
# environment) but by no other session on the machine: another user's benchmark must not
# make this suite wait, nor print its "waited ... for the machine's CPU" lines here.
os.environ.setdefault("GPUPERF_LOCK_DIR", tempfile.mkdtemp(prefix="gpuperf-test-locks-"))

pytest_plugins = ["pytester"]


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


requires_cuda = pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU (runs on the GPU machine)")
requires_nsys = pytest.mark.skipif(
    shutil.which("nsys") is None, reason="needs Nsight Systems (nsys)"
)
requires_ncu = pytest.mark.skipif(shutil.which("ncu") is None, reason="needs Nsight Compute (ncu)")

#: Small budgets so that end-to-end runs stay fast on a 2-core CPU machine.
FAST = [
    "--gpuperf-warmup-ms=30",
    "--gpuperf-min-warmup-ms=5",
    "--gpuperf-round-ms=1",
    "--gpuperf-rounds=10",
]


@pytest.fixture
def fast_args() -> list[str]:
    return list(FAST)


def run_with_env(pytester: pytest.Pytester, env: Mapping[str, str], *args: str) -> pytest.RunResult:
    """A fresh pytest process (``runpytest_subprocess(*args)``) with ``env`` added to the
    environment it inherits; this process's own environment is as before afterwards."""
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
        return pytester.runpytest_subprocess(*args)


#: A conftest for pytester projects: a ``clock`` fixture whose time moves only when the
#: benchmarked function advances it (``clock.ns += ...``). The CPU timer and the measurement
#: loop read it instead of the wall clock, so what a test measures does not depend on how
#: busy the machine is. The fresh processes of confirmations and
#: captures load the same conftest.
VIRTUAL_TIME_CONFTEST = """
import importlib
import time

import pytest


class VirtualTime:
    \"\"\"``time`` for the measurement: it moves only when the benchmarked function runs.\"\"\"

    def __init__(self):
        self.ns = 0

    def perf_counter(self):
        return self.ns / 1e9

    def perf_counter_ns(self):
        return self.ns

    # the virtual work is the measuring thread's own CPU work
    thread_time_ns = process_time_ns = perf_counter_ns

    def __getattr__(self, name):
        return getattr(time, name)


@pytest.fixture
def clock(monkeypatch, gpu_bench):
    virtual = VirtualTime()
    # The globals of the code that runs: in-process pytester restores sys.modules after
    # each run, so a module imported by name may be another object than the one in use.
    monkeypatch.setitem(type(gpu_bench)._measure_modes.__globals__, "time", virtual)
    cpu = importlib.import_module("pytest_gpuperf.measure.cpu")  # what make_timer imports
    monkeypatch.setattr(cpu, "time", virtual)
    # what a run records of its contention, in the same time: its work is the measuring
    # thread's alone and never waits for a CPU, so the machine's load makes no run bad evidence
    contention = importlib.import_module("pytest_gpuperf.measure.contention")
    monkeypatch.setattr(contention, "time", virtual)
    monkeypatch.setattr(contention, "process_wait_ns", lambda: 0)
    return virtual
"""


def slowed_bench(test: str, ns_per_call: int) -> str:
    """A test module of one benchmark, ``test``, on :data:`VIRTUAL_TIME_CONFTEST`'s clock: each
    call costs ``ns_per_call`` times the environment's ``SLOWDOWN`` (1 when unset)."""
    return f"""
import os


def {test}(clock, gpu_bench):
    factor = float(os.environ.get("SLOWDOWN", "1"))

    def call():
        clock.ns += int({ns_per_call} * factor)

    gpu_bench(call)
"""
