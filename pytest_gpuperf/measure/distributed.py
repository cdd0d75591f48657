"""The process group of a distributed benchmark, and its timers: every rank in step.

torch is imported inside functions only. Beside the benchmark's group (NCCL on CUDA,
gloo on the CPU, :func:`join_group`) the plugin keeps a *control* group on gloo for its
barriers, clock and gathering, so they never queue behind the benchmark's GPU work.
Every rank must make the same loop decisions, or one would call a collective the others
never reach: so no rank reads its own clock (:meth:`Group.clock` is rank 0's, broadcast)
and each round's value is the slowest rank's (:class:`GroupTimer`), the same everywhere.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pytest_gpuperf.measure.backend import Invocation, Timer
from pytest_gpuperf.measure.collectives import message_bytes
from pytest_gpuperf.measure.cpu import calls_ns
from pytest_gpuperf.measure.cuda import timed_calls
from pytest_gpuperf.measure.engine import Round
from pytest_gpuperf.measure.policy import MeasurePolicy
from pytest_gpuperf.measure.ranks import RankEnv

#: the NCCL log each rank writes, when the user did not choose one (``%h`` host, ``%p`` pid)
NCCL_LOG_NAME = "nccl.%h.%p.log"


class Group:
    """This process's rank in the benchmark's process group, with its control plane."""

    def __init__(self, env: RankEnv, backend: str, device: str, control: Any, owned: bool):
        import torch
        import torch.distributed as dist

        self.torch, self._dist = torch, dist
        self.env = env
        self.rank = env.rank
        self.world_size = env.world_size
        self.backend = backend
        self.device = device
        self._control = control
        #: whether the plugin made the group (and so destroys it at the end)
        self.owned = owned

    def barrier(self) -> None:
        self._dist.barrier(group=self._control)

    def gather_floats(self, values: Sequence[float]) -> list[list[float]]:
        torch = self.torch
        mine = torch.tensor([float(v) for v in values], dtype=torch.float64)
        out = [torch.empty_like(mine) for _ in range(self.world_size)]
        self._dist.all_gather(out, mine, group=self._control)
        return [[float(x) for x in t.tolist()] for t in out]

    def clock(self) -> float:
        """Rank 0's ``perf_counter``, on every rank (a broadcast on the control group)."""
        t = self.torch.tensor([time.perf_counter()], dtype=self.torch.float64)
        self._dist.broadcast(t, src=0, group=self._control)
        return float(t.item())

    def broadcast(self, obj: Any) -> Any:
        box = [obj]
        self._dist.broadcast_object_list(box, src=0, group=self._control)
        return box[0]

    def all_gather(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world_size
        self._dist.all_gather_object(out, obj, group=self._control)
        return out

    def agree_max(self, value: int) -> int:
        """The largest ``value`` of any rank (an exit status every rank then shares)."""
        return int(max(v[0] for v in self.gather_floats([float(value)])))

    def close(self) -> None:
        """Leave the group (when the plugin made it); never raises."""
        with contextlib.suppress(Exception):  # a peer that already died
            if self.owned and self._dist.is_initialized():
                self._dist.destroy_process_group()


def join_group(env: RankEnv, device: str, *, timeout_s: float) -> Group:
    """Join the process group ``env`` describes (or the one the test already initialised),
    with a gloo control group beside it; ``timeout_s`` bounds every collective."""
    import torch
    import torch.distributed as dist

    owned = not dist.is_initialized()
    timeout = datetime.timedelta(seconds=timeout_s)
    if owned:
        kwargs: dict[str, Any] = {}
        if device == "cuda":
            torch.cuda.set_device(env.local_rank)
            # eager: NCCL's communicator (and its init log) is made now, not at the first call
            kwargs["device_id"] = torch.device("cuda", env.local_rank)
        dist.init_process_group(
            "nccl" if device == "cuda" else "gloo",
            init_method="env://",
            rank=env.rank,
            world_size=env.world_size,
            timeout=timeout,
            **kwargs,
        )
    backend = str(dist.get_backend())
    # a group of its own even on gloo: a rank that left a test early (it failed) meets the
    # others on it, never inside a collective of the test's that they still wait in
    control = dist.new_group(backend="gloo", timeout=timeout)
    return Group(env, backend, device, control, owned)


class GroupTimer(Timer):
    """Rounds timed on every rank in step; a round is the slowest rank's (module docstring).
    With ``setup=``, a rank's round is the mean of its calls' own times."""

    def __init__(self, call: Invocation, group: Group, *, mode: str):
        self.mode = mode
        self._call = call
        self._group = group
        self._events: tuple[list[Any], list[Any]] = ([], [])
        self._cuda = group.torch.cuda if group.device == "cuda" else None
        #: a CPU group's clock (measure/contention.py): wall time, a peer's waits included
        self.clock = "wall" if group.device == "cpu" else None

    def first_call(self) -> tuple[float, Any]:
        self._call.prepare()
        self.prepare()
        t = time.perf_counter()
        out = self._call()
        self._sync()
        mine = time.perf_counter() - t
        return max(v[0] for v in self._group.gather_floats([mine])), out

    def _sync(self) -> None:
        if self._cuda is not None:
            self._cuda.synchronize()

    def prepare(self) -> None:
        self._sync()
        self._group.barrier()

    def reset_peak_memory(self) -> None:
        if self._cuda is not None:
            self._cuda.reset_peak_memory_stats()

    def time_round(self, calls: int) -> Round:
        self.prepare()
        t = time.perf_counter()
        call = self._call
        if self._cuda is not None:
            ms, _, _ = timed_calls(self._events, call, call.prepare, calls, call.has_setup)
            per_call = sum(ms) / 1000.0 / calls
        else:
            per_call = calls_ns(call, calls, time.perf_counter_ns) / 1e9 / calls
        wall = time.perf_counter() - t
        got = self._group.gather_floats([per_call, wall])
        ranks = tuple(v[0] for v in got)
        return Round(max(ranks), max(v[1] for v in got), calls, None, ranks)

    def peak_memory(self) -> int | None:
        return None if self._cuda is None else int(self._cuda.max_memory_allocated())

    def close(self) -> None:
        self._events = ([], [])


def make_group_timer(call: Invocation, policy: MeasurePolicy) -> Timer:
    """The factory of the ``cpu-dist`` and ``cuda-dist`` modes (:class:`.backend.TimerFactory`)."""
    group = call.group
    if not isinstance(group, Group):
        raise TypeError(
            "a distributed timing mode needs the benchmark's process group; it is measured "
            "only inside a test marked @pytest.mark.gpuperf(world_size=N)"
        )
    return GroupTimer(call, group, mode=f"{group.device}-dist")


def argument_bytes(call: Invocation) -> int | None:
    """``S`` of the collective ``call`` makes, from its tensor arguments (:func:`message_bytes`)."""
    import torch

    def size(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return x.numel() * x.element_size()
        if isinstance(x, (list, tuple)) and x and all(isinstance(t, torch.Tensor) for t in x):
            return [t.numel() * t.element_size() for t in x]
        return None

    return message_bytes([size(a) for a in (*call.args, *call.kwargs.values())])


def read_nccl_log(pid: int | None = None) -> str:
    """Process ``pid``'s (this one's) NCCL log from ``NCCL_DEBUG_FILE``, as far as written."""
    pattern = os.environ.get("NCCL_DEBUG_FILE")
    if not pattern:
        return ""
    path = Path(pattern.replace("%h", socket.gethostname()).replace("%p", str(pid or os.getpid())))
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def nccl_environment(folder: Path, environ: Callable[[str], str | None]) -> dict[str, str]:
    """``NCCL_DEBUG=INFO`` and a log file per process in ``folder``, so that NCCL logs its
    init (never over what the user set)."""
    out: dict[str, str] = {}
    if environ("NCCL_DEBUG") is None:
        out["NCCL_DEBUG"] = "INFO"  # its default subsystems (INIT, BOOTSTRAP, ENV)
    if environ("NCCL_DEBUG_FILE") is None:
        out["NCCL_DEBUG_FILE"] = str(folder / NCCL_LOG_NAME)
    return out
