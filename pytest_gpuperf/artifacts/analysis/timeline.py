"""What a torch.profiler (Kineto) trace says about a few steady-state calls. Pure Python.

Everything is read relative to the ``gpuperf/call#<i>`` ranges of the profiler pass, so set-up
work is left out; GPU activities are tied to their call by the ``correlation`` id of their
launch.
"""

from __future__ import annotations

import bisect
import contextlib
import gzip
import itertools
import json
import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

CALL_PREFIX = "gpuperf/call#"
GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
API_CATS = ("cuda_runtime", "cuda_driver")
#: Host-side calls that wait for the device.
SYNC_APIS = frozenset(
    {
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "cudaMemcpy2D",
        "cudaMemset",
        "cuStreamSynchronize",
        "cuCtxSynchronize",
        "cuEventSynchronize",
        "cuMemcpyDtoH",
        "cuMemcpyDtoH_v2",
        "cuMemcpyHtoD",
        "cuMemcpyHtoD_v2",
    }
)
REGION_MARK = "Torch-Compiled Region"
COMPILED_MARKS = ("Torch-Compiled Region", "CompiledFunction", "## Call CompiledFxGraph")
#: A kernel this short is dominated by its launch (µs).
TINY_KERNEL_US = 10.0


@dataclass
class Activity:
    kind: str  # kernel, memcpy, memset
    name: str
    ts: float  # µs
    dur: float  # µs
    correlation: int | None = None
    call: int | None = None
    args: Mapping[str, Any] = field(default_factory=dict)

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass
class ApiCall:
    name: str
    ts: float
    dur: float
    tid: Any
    correlation: int | None
    call: int | None = None
    op: str | None = None  # the innermost cpu_op around it


@dataclass
class Gap:
    """GPU idle time between two activities inside the profiled calls (µs)."""

    start_us: float  # from the window's start
    dur_us: float
    after: str
    before: str
    cause: str


@dataclass
class CopyStat:
    direction: str  # HtoD, DtoH, DtoD, ...
    count: int
    bytes: int
    dur_us: float
    pageable: int  # how many were from/to pageable host memory


@dataclass
class SyncStat:
    name: str
    count: int
    dur_us: float
    ops: list[str]


@dataclass
class ProfileAnalysis:
    """The profiled calls, summarised (times in µs; ``*_per_call`` divide by ``calls``)."""

    calls: int
    device: str  # "cuda" when GPU activities were seen, else "cpu" (the GPU's figures 0)
    window_us: float
    cpu_per_call_us: float
    compiled: bool
    syncs: list[SyncStat]
    gpu_time_us: float = 0.0  # sum of activity durations
    busy_us: float = 0.0  # union of activity intervals within the window
    busy_fraction: float | None = None
    kernels: int = 0
    median_kernel_us: float | None = None
    gaps: list[Gap] = field(default_factory=list)
    idle_us: float = 0.0
    copies: list[CopyStat] = field(default_factory=list)
    launch_bound: bool = False
    launch_notes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: torch.compile'd regions entered per call (a new graph break adds one)
    compiled_regions: float = 0.0

    @property
    def per_call_us(self) -> float:
        return self.window_us / self.calls if self.calls else math.nan

    @property
    def syncs_per_call(self) -> float:
        return sum(s.count for s in self.syncs) / self.calls if self.calls else 0.0

    def copies_per_call(self, direction: str) -> tuple[float, float]:
        """(copies, bytes) per call in one direction (``"HtoD"``, ``"DtoH"``)."""
        mine = [c for c in self.copies if c.direction == direction]
        n, b = sum(c.count for c in mine), sum(c.bytes for c in mine)
        return (n / self.calls, b / self.calls) if self.calls else (0.0, 0.0)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["per_call_us"] = self.per_call_us
        d["syncs_per_call"] = self.syncs_per_call
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ProfileAnalysis:
        known = {f for f in cls.__dataclass_fields__} - {"gaps", "syncs", "copies"}
        return cls(
            **{k: v for k, v in d.items() if k in known},
            gaps=[Gap(**g) for g in d.get("gaps") or ()],
            syncs=[SyncStat(**x) for x in d.get("syncs") or ()],
            copies=[CopyStat(**c) for c in d.get("copies") or ()],
        )


@dataclass
class Trace:
    """The parts of a Kineto trace the analysis reads."""

    calls: list[tuple[float, float]]  # CPU-side (start, end) of each profiled call
    activities: list[Activity]
    apis: list[ApiCall]
    ops: list[tuple[float, float, str, Any]]  # cpu_op: (start, end, name, tid)
    annotations: list[str]
    device_name: str | None = None
    #: (start, name) of each ``Torch-Compiled Region: <frame>/<compile>`` entered
    regions: list[tuple[float, str]] = field(default_factory=list)
    #: the thread that made the calls
    call_tid: Any = None
    #: host-side collectives (``nccl:all_reduce``, ``gloo:...``): (start, dur, name, args)
    comm_ops: list[tuple[float, float, str, Mapping[str, Any]]] = field(default_factory=list)


def load_trace(path: Path | str) -> dict[str, Any]:
    """A Chrome/Perfetto trace file as written by ``prof.export_chrome_trace`` (``.gz`` too)."""
    p = Path(path)
    with (gzip.open if p.suffix == ".gz" else open)(p, "rt", encoding="utf-8") as f:
        doc: dict[str, Any] = json.load(f)
    return doc


def parse_trace(doc: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> Trace:
    events = doc.get("traceEvents", []) if isinstance(doc, Mapping) else doc
    calls: dict[int, tuple[float, float]] = {}
    acts: list[Activity] = []
    apis: list[ApiCall] = []
    ops: list[tuple[float, float, str, Any]] = []
    notes: list[str] = []
    regions: list[tuple[float, str]] = []
    comm_ops: list[tuple[float, float, str, Mapping[str, Any]]] = []
    call_tid = None
    for e in events:
        if e.get("ph") != "X":
            continue
        cat, name = e.get("cat"), str(e.get("name", ""))
        try:
            ts, dur = float(e.get("ts", 0.0)), float(e.get("dur", 0.0))
        except (TypeError, ValueError):
            continue
        args = e.get("args") or {}
        if name.startswith(REGION_MARK) and cat in ("cpu_op", "user_annotation"):
            regions.append((ts, name))
        if name.startswith(("nccl:", "gloo:")):
            comm_ops.append((ts, dur, name, args))
        if cat in ("user_annotation", "cpu_op") and name.startswith(CALL_PREFIX):
            with contextlib.suppress(ValueError):
                calls[int(name[len(CALL_PREFIX) :])] = (ts, ts + dur)
                call_tid = e.get("tid")
        elif cat in GPU_CATS:
            acts.append(
                Activity(GPU_CATS[cat], name, ts, dur, _int(args.get("correlation")), None, args)
            )
        elif cat in API_CATS:
            apis.append(ApiCall(name, ts, dur, e.get("tid"), _int(args.get("correlation"))))
        elif cat == "cpu_op":
            ops.append((ts, ts + dur, name, e.get("tid")))
        elif cat == "user_annotation":
            notes.append(name)
    props = (doc.get("deviceProperties") or []) if isinstance(doc, Mapping) else []
    device_name = props[0].get("name") if props and isinstance(props[0], Mapping) else None
    return Trace(
        calls=[calls[i] for i in sorted(calls)],
        activities=sorted(acts, key=lambda a: a.ts),
        apis=sorted(apis, key=lambda a: a.ts),
        ops=sorted(ops, key=lambda o: (o[0], -o[1])),
        annotations=notes,
        device_name=device_name,
        regions=sorted(set(regions)),
        call_tid=call_tid,
        comm_ops=sorted(comm_ops, key=lambda o: o[0]),
    )


def _int(v: Any) -> int | None:
    with contextlib.suppress(TypeError, ValueError):
        return None if v is None else int(v)
    return None


def _call_of(ts: float, starts: list[float], calls: list[tuple[float, float]]) -> int | None:
    i = bisect.bisect_right(starts, ts) - 1
    return i if i >= 0 and calls[i][0] <= ts <= calls[i][1] else None


def _innermost_op(ts: float, tid: Any, ops: Sequence[tuple[float, float, str, Any]]) -> str | None:
    """The operator of thread ``tid`` open at ``ts`` that started last (``ops`` by start)."""
    i = bisect.bisect_right(ops, ts, key=lambda o: o[0]) - 1
    while i >= 0:
        _, end, name, otid = ops[i]
        if otid == tid and end >= ts:
            return name
        i -= 1
    return None


def union(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The intervals merged where they overlap or touch, in order."""
    merged: list[tuple[float, float]] = []
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(e, merged[-1][1]))
        else:
            merged.append((s, e))
    return merged


def copy_direction(name: str) -> str:
    """``"Memcpy HtoD (Pageable -> Device)"`` -> ``"HtoD"``."""
    m = re.search(r"\b(HtoD|DtoH|DtoD|HtoH|PtoP|DtoA|AtoD)\b", name)
    return m.group(1) if m else "other"


def analyze(trace: Trace) -> ProfileAnalysis:
    """Summarise the profiled calls of ``trace`` (see the module docstring)."""
    calls, notes = trace.calls, []
    if not calls:  # the whole trace as one call
        notes.append(f"no '{CALL_PREFIX}N' ranges in the trace: the whole trace is analysed")
        all_ts = [a.ts for a in trace.apis] + [o[0] for o in trace.ops]
        all_end = [a.ts + a.dur for a in trace.apis] + [o[1] for o in trace.ops]
        calls = [(min(all_ts), max(all_end))] if all_ts else []
    n = len(calls)
    starts = [c[0] for c in calls]
    by_corr, acts = _assign_calls(trace, starts, calls)
    in_calls = [r for r in trace.regions if _call_of(r[0], starts, calls) is not None]
    common: dict[str, Any] = {
        "calls": n,
        "cpu_per_call_us": statistics.fmean(e - s for s, e in calls) if calls else 0.0,
        "compiled": any(a.name.startswith("triton_") for a in acts if a.kind == "kernel")
        or any(o[2].startswith(COMPILED_MARKS) for o in trace.ops)
        or any(x.startswith(COMPILED_MARKS) for x in trace.annotations),
        "notes": notes,
        "compiled_regions": len(in_calls) / n if n else 0.0,
    }
    if not acts:  # the CPU's profile: its calls' window and syncs
        window = (calls[-1][1] - calls[0][0]) if calls else 0.0
        syncs = _syncs(trace, [a for a in trace.apis if a.call is not None])
        return ProfileAnalysis(device="cpu", window_us=window, syncs=syncs, **common)
    return ProfileAnalysis(device="cuda", **common, **_gpu(trace, calls, acts, by_corr))


def _gpu(
    trace: Trace,
    calls: Sequence[tuple[float, float]],
    acts: Sequence[Activity],
    by_corr: Mapping[int, ApiCall],
) -> dict[str, Any]:
    """The GPU's figures of the profiled calls: busy time, the gaps and what the host did."""
    w0 = calls[0][0]
    w1 = max(calls[-1][1], max(a.end for a in acts))
    window = w1 - w0
    busy = union((max(a.ts, w0), min(a.end, w1)) for a in acts)
    busy_us = sum(e - s for s, e in busy)
    kernels = [a for a in acts if a.kind == "kernel"]
    sync_apis = [a for a in trace.apis if a.call is not None and a.name in SYNC_APIS]
    raw_gaps = [(s1 - e0, e0, s1) for (_, e0), (s1, _) in itertools.pairwise(busy)]
    idle_us = sum(g[0] for g in raw_gaps)
    launch_notes = []
    if busy_us < 0.7 * window and not sync_apis:  # idle, and not for a sync: launches?
        launch_notes = _launch_notes(kernels, len(calls), idle_us / max(len(raw_gaps), 1))
    kdur = [a.dur for a in kernels]
    return {
        "window_us": window,
        "gpu_time_us": sum(a.dur for a in acts),
        "busy_us": busy_us,
        "busy_fraction": busy_us / window if window > 0 else None,
        "kernels": len(kernels),
        "median_kernel_us": statistics.median(kdur) if kdur else None,
        "gaps": _gaps(trace, acts, by_corr, sync_apis, raw_gaps, w0),
        "idle_us": idle_us,
        "syncs": _syncs(trace, sync_apis),
        "copies": _copy_stats(acts),
        "launch_bound": bool(launch_notes),
        "launch_notes": launch_notes,
    }


def _assign_calls(
    trace: Trace, starts: list[float], calls: list[tuple[float, float]]
) -> tuple[dict[int, ApiCall], list[Activity]]:
    """Tag API calls and GPU activities (by their launch) with their call: the API calls by
    correlation id, and the activities inside a call."""
    by_corr: dict[int, ApiCall] = {}
    for api in trace.apis:
        api.call = _call_of(api.ts, starts, calls)
        if api.correlation is not None:
            by_corr[api.correlation] = api
    acts: list[Activity] = []
    for a in trace.activities:
        launch = by_corr.get(a.correlation) if a.correlation is not None else None
        a.call = launch.call if launch is not None else None
        if a.call is not None:
            acts.append(a)
    return by_corr, acts


def _gaps(
    trace: Trace,
    acts: Sequence[Activity],
    by_corr: Mapping[int, ApiCall],
    sync_apis: Sequence[ApiCall],
    raw_gaps: Sequence[tuple[float, float, float]],
    w0: float,
) -> list[Gap]:
    """The three longest gaps, the kernels around each and what the host did."""
    by_start = {a.ts: a for a in acts}
    ends = sorted(acts, key=lambda a: a.end)
    gaps: list[Gap] = []
    for dur, g0, g1 in sorted(raw_gaps, reverse=True)[:3]:
        nxt = by_start.get(g1)
        prev = max((a for a in ends if a.end <= g0 + 1e-6), key=lambda a: a.end, default=None)
        sync = next((s for s in sync_apis if s.ts < g1 and s.ts + s.dur > g0 - 1.0), None)
        launch = by_corr.get(nxt.correlation) if nxt is not None and nxt.correlation else None
        if sync is not None:  # what the host did meanwhile
            where = sync.op or _innermost_op(sync.ts, sync.tid, trace.ops)
            cause = f"host sync ({sync.name}" + (f" in {where})" if where else ")")
        elif launch is not None:
            op, late = (
                _innermost_op(launch.ts, launch.tid, trace.ops) or launch.name,
                launch.ts - g0,
            )
            cause = f"host late: the next launch ({op}) came {late:.1f} µs later"
            cause = cause if late > 0 else f"launch latency of {op}"
        else:
            cause = "unknown"
        gaps.append(Gap(g0 - w0, dur, prev.name if prev else "?", nxt.name if nxt else "?", cause))
    return gaps


def _copy_stats(acts: Iterable[Activity]) -> list[CopyStat]:
    """The memory copies by direction, the longest total first."""
    copies: dict[str, CopyStat] = {}
    for a in (a for a in acts if a.kind == "memcpy"):
        d = copy_direction(a.name)
        c = copies.setdefault(d, CopyStat(d, 0, 0, 0.0, 0))
        c.count += 1
        c.bytes += int(_int(a.args.get("bytes")) or 0)
        c.dur_us += a.dur
        c.pageable += "Pageable" in a.name
    return sorted(copies.values(), key=lambda c: -c.dur_us)


def _launch_notes(kernels: Sequence[Activity], n: int, mean_gap: float) -> list[str]:
    """Why an idle GPU is launch-bound (tiny kernels, longer waits); empty when it is not."""
    kdur = [a.dur for a in kernels]
    if not kdur:
        return []
    med_k = statistics.median(kdur)
    tiny = sum(1 for d in kdur if d < TINY_KERNEL_US) / len(kdur)
    if tiny < 0.5 or mean_gap < med_k:
        return []
    return [
        f"{len(kernels) / n:.0f} kernel(s) per call, {100 * tiny:.0f} % shorter than "
        f"{TINY_KERNEL_US:.0f} µs (median {med_k:.1f} µs), and the GPU waits "
        f"{mean_gap:.1f} µs on average between them: the host cannot launch fast enough"
    ]


def _syncs(trace: Trace, apis: Sequence[ApiCall]) -> list[SyncStat]:
    out: dict[str, SyncStat] = {}
    for a in (a for a in apis if a.name in SYNC_APIS):
        a.op = a.op or _innermost_op(a.ts, a.tid, trace.ops)
        s = out.setdefault(a.name, SyncStat(a.name, 0, 0.0, []))
        s.count += 1
        s.dur_us += a.dur
        if a.op and a.op not in s.ops:
            s.ops.append(a.op)
    return sorted(out.values(), key=lambda s: -s.count)


def op_self_times(trace: Trace) -> list[tuple[str, float, int]]:
    """CPU operators in the profiled calls by self time: (name, self µs, count), largest
    first; on the CPU the stand-in for kernels (work counted where it runs)."""
    starts = [c[0] for c in trace.calls]
    totals: dict[str, list[float]] = {}
    open_ops: dict[Any, list[list[Any]]] = {}  # per thread: [end, name, self µs] of open ops

    def close(stack: list[list[Any]], until: float) -> None:
        while stack and stack[-1][0] <= until:
            _, name, own = stack.pop()
            totals.setdefault(name, []).append(own)

    for start, end, name, tid in trace.ops:
        if _call_of(start, starts, trace.calls) is None:
            continue
        stack = open_ops.setdefault(tid, [])
        close(stack, start)
        if stack:
            stack[-1][2] -= end - start  # the parent's own time excludes this op
        stack.append([end, name, end - start])
    for stack in open_ops.values():
        close(stack, math.inf)
    return sorted(((k, sum(v), len(v)) for k, v in totals.items()), key=lambda t: -t[1])
