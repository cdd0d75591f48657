"""The ranks' side of a distributed benchmark's evidence: its collectives and its NCCL setup.
Everything here runs on every rank, in step (a call may be a collective all ranks make)."""

from __future__ import annotations

import os
import tempfile
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.artifacts.analysis import nccl_log
from pytest_gpuperf.artifacts.analysis.comms import RankComms, combine, rank_comms
from pytest_gpuperf.artifacts.analysis.inventory import inventory_from_trace
from pytest_gpuperf.artifacts.analysis.layout import safe_name
from pytest_gpuperf.artifacts.analysis.timeline import load_trace, parse_trace
from pytest_gpuperf.artifacts.collectors.child import (
    ChildCapture,
    capture_hooks,
    profile_calls,
    release_cupti_after_profiling,
    window_calls,
)
from pytest_gpuperf.measure.distributed import read_nccl_log

if TYPE_CHECKING:
    from pytest_gpuperf.measure.distributed import Group
    from pytest_gpuperf.model import BenchId


def nccl_summary(group: Group) -> dict[str, Any]:
    """``{"nccl": the NCCL logs of every rank, summarised}`` ({} off CUDA)."""
    if group.device != "cuda":
        return {}
    mine = nccl_log.summarize([nccl_log.parse(read_nccl_log())])
    return {"nccl": nccl_log.merge(group.all_gather(mine))}


def profile_group(
    group: Group, call: Callable[[], Any], *, device: str, calls: int, trace_path: Path
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Profile ``calls`` calls on every rank, in step; (the group's collectives, combined
    from every rank's trace; this rank's kernel inventory)."""
    group.barrier()
    profile_calls(call, device=device, calls=calls, trace_path=trace_path, record_shapes=True)
    trace = parse_trace(load_trace(trace_path))
    mine = rank_comms(trace, group.rank).to_dict()
    everyone = [RankComms.from_dict(d) for d in group.all_gather(mine)]
    return combine(everyone), inventory_from_trace(trace)


class GroupHook:
    """After each distributed benchmark, on every rank: its NCCL setup, and with
    ``profile`` (a baseline is saved) its collectives from a short profile, into
    ``Result.extra["group"]`` (rank 0's kernel inventory into ``extra["kernels"]``)."""

    def __init__(self, group: Group, device: str, *, profile: bool, calls: int):
        self.group = group
        self.device = device
        self.profile = profile
        self.calls = calls
        if profile and device == "cuda":
            release_cupti_after_profiling()  # later benchmarks run as without the profile

    def __call__(
        self, bench_id: BenchId, call: Callable[[], Any], per_call_s: float
    ) -> Mapping[str, Any] | None:
        out = nccl_summary(self.group)
        extra: dict[str, Any] = {"group": out}
        if self.profile:
            n = window_calls(self.calls, per_call_s, 1.0)
            prefix = f"gpuperf-group-profile-{os.getpid()}-"  # as the inventory's (child.py)
            with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
                comms, inv = profile_group(
                    self.group, call, device=self.device, calls=n,
                    trace_path=Path(tmp) / "trace.json",
                )  # fmt: skip
            out["comms"] = comms
            extra["kernels"] = inv
        return extra


#: set on a rank whose launching session keeps its collectives' profile (a save)
PROFILE_ENV = "GPUPERF_GROUP_PROFILE"


def group_hooks(
    group: Group, device: str, *, profile: bool, calls: int
) -> list[Callable[..., Mapping[str, Any] | None]]:
    """The after-measure hooks of a distributed benchmark on this rank: a capture child's
    (:class:`GroupCapture`, when its spec is in the environment), else :class:`GroupHook`
    (``profile`` is forced on by :data:`PROFILE_ENV`)."""
    hooks = capture_hooks(lambda spec: GroupCapture(spec, device, group))
    if hooks is not None:
        return hooks
    profile = profile or os.environ.get(PROFILE_ENV) == "1"
    return [GroupHook(group, device, profile=profile, calls=calls)]


class GroupCapture(ChildCapture):
    """A capture child's hook on one rank: every rank profiles the same calls in step and
    writes its trace and NCCL log; rank 0 alone records the entry the parent reads."""

    def __init__(self, spec: Mapping[str, Any], device: str, group: Group):
        super().__init__(spec, device)
        self.group = group

    def __call__(
        self, bench_id: BenchId, call: Callable[[], Any], per_call_s: float
    ) -> Mapping[str, Any] | None:
        key = bench_id.key
        if not self.claim(key):
            return None
        rank = self.group.rank
        entry: dict[str, Any] = {"key": key, "mode": bench_id.mode, "per_call_s": per_call_s}
        try:
            self.group.barrier()
            if self.tool == "torch_profiler":
                entry.update(self._profile(key, call, per_call_s))
            elif self.tool == "nsys":
                entry.update(self._nvtx_window(call, window_calls(self.calls, per_call_s), True))
            else:
                entry["error"] = f"{self.tool} is not run on the ranks of a distributed test"
        except Exception as e:
            entry["error"] = f"rank {rank}: {type(e).__name__}: {e}"
            entry["traceback"] = traceback.format_exc(limit=8)
        text = read_nccl_log()
        if text:
            self.dir.mkdir(parents=True, exist_ok=True)
            (self.dir / f"nccl.rank{rank}.log").write_text(text)
        if rank == 0:
            self._record(entry)
        return None

    def _profile(self, key: str, call: Callable[[], Any], per_call_s: float) -> dict[str, Any]:
        rank, n = self.group.rank, window_calls(self.calls, per_call_s)
        names = [f"{safe_name(key)}.rank{r}.trace.json" for r in range(self.group.world_size)]
        comms, _ = profile_group(
            self.group, call, device=self.device, calls=n, trace_path=self.dir / names[rank]
        )
        group = {"comms": comms, **nccl_summary(self.group)}
        return {"calls": n, "trace": names[0], "traces": names, "group": group}
