"""The collectives of a few profiled calls, per rank and across a group. Pure Python.

:func:`rank_comms` reads one rank's trace; :func:`combine` takes the ranks together: a
collective's time beyond its fastest rank's is *wait* for the last rank (the straggler);
:func:`findings` compares a group's summary with its baseline's.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_gpuperf.artifacts.analysis.attribution import Finding
from pytest_gpuperf.artifacts.analysis.timeline import Activity, Trace, parse_trace, union
from pytest_gpuperf.measure.collectives import normalize

RANK_IMBALANCE = "rank-imbalance"
MORE_COLLECTIVES = "more-collectives"
MESSAGE_SIZE = "message-size"
LOST_OVERLAP = "lost-overlap"
TRANSPORT = "transport-fallback"
ALGORITHM = "algorithm-change"
CAUSES = (TRANSPORT, RANK_IMBALANCE, LOST_OVERLAP, MORE_COLLECTIVES, MESSAGE_SIZE, ALGORITHM)
#: host-side ranges of a collective (not compute), by prefix
_COMM_OPS = ("c10d::", "nccl:", "gloo:", "record_param_comms", "ProcessGroup")
_DTYPE_BYTES = {
    "float": 4, "double": 8, "c10::half": 2, "c10::bfloat16": 2, "int": 4, "long int": 8,
    "long": 8, "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1,
    "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1, "c10::complex<float>": 8,
}  # fmt: skip


@dataclass
class Collective:
    """One collective of one call on one rank (times in µs)."""

    op: str
    start: float
    dur: float
    nbytes: int | None = None
    compute_before: float = 0.0
    overlap: float = 0.0
    algo: str | None = None

    @property
    def end(self) -> float:
        return self.start + self.dur


@dataclass
class RankComms:
    """What one rank's trace says: its calls' collectives, and the calls' lengths (µs)."""

    rank: int
    device: str
    calls: list[list[Collective]] = field(default_factory=list)
    call_us: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain data, gathered from every rank (times rounded to the ns)."""
        d = dataclasses.asdict(self)
        for c in (c for call in d["calls"] for c in call):
            c.update({k: round(c[k], 3) for k in ("start", "dur", "compute_before", "overlap")})
        return {**d, "call_us": [round(x, 3) for x in self.call_us]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RankComms:
        calls = [[Collective(**c) for c in call] for call in d.get("calls") or []]
        return cls(int(d.get("rank", 0)), str(d.get("device", "cpu")), calls,
                   [float(x) for x in d.get("call_us") or []])  # fmt: skip


def _call_index(ts: float, calls: Sequence[tuple[float, float]]) -> int | None:
    return next((i for i, (s, e) in enumerate(calls) if s <= ts <= e), None)


def _message_bytes(args: Mapping[str, Any]) -> int | None:
    """Bytes of the largest tensor among a host op's inputs (a list of tensors: their sum)."""
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not isinstance(dims, list):
        return None
    types = types if isinstance(types, list) else []
    best = 0
    for i, d in enumerate(dims):
        size = _DTYPE_BYTES.get(str(types[i]).lower(), 0) if i < len(types) else 0
        best = max(best, _elements(d) * size)  # an input of unknown dtype counts for nothing
    return best or None


def _elements(d: Any) -> int:
    if not isinstance(d, list) or not d:
        return 0
    if all(isinstance(x, list) for x in d):
        return sum(_elements(x) for x in d)  # a list of tensors
    return math.prod(int(x) if isinstance(x, (int, float)) else 1 for x in d)


def _algo(kernel: str) -> str | None:
    """``ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)`` -> ``RING_LL``."""
    parts = kernel.split("(", 1)[0].split("_")
    algos = ("RING", "TREE", "COLLNET", "NVLS", "PAT", "NVLSTREE", "COLLNETDIRECT", "COLLNETCHAIN")
    i = next((i for i, p in enumerate(parts) if p.upper() in algos), None)
    return None if i is None else "_".join(parts[i : i + 2]).upper()


def _union_len(intervals: Iterable[tuple[float, float]], lo: float, hi: float) -> float:
    """Length of the union of ``intervals`` clipped to ``[lo, hi]``."""
    clipped = [(max(s, lo), min(e, hi)) for s, e in intervals]
    return sum(e - s for s, e in union((s, e) for s, e in clipped if e > s))


def rank_comms(
    doc: Trace | Mapping[str, Any] | Sequence[Mapping[str, Any]], rank: int
) -> RankComms:
    t = doc if isinstance(doc, Trace) else parse_trace(doc)
    calls = t.calls
    kernels = [a for a in t.activities if a.kind == "kernel"]
    colls, compute = _gpu_parts(t, kernels) if kernels else _cpu_parts(t)
    device = "cuda" if kernels else "cpu"
    out = RankComms(rank, device, [[] for _ in calls], [e - s for s, e in calls])
    for call, c in colls:
        out.calls[call].append(c)
    for i, call_colls in enumerate(out.calls):
        call_colls.sort(key=lambda c: c.start)
        anchor = calls[i][0]
        for c in call_colls:
            c.compute_before = _union_len(compute[i], anchor, c.start)
            c.overlap = _union_len(compute[i], c.start, c.end)
            anchor = c.start
    return out


def _host_comm_ops(t: Trace) -> dict[int, list[tuple[float, float, str, Mapping[str, Any]]]]:
    """The host-side range of each collective per call (``nccl:all_reduce``), in order."""
    out: dict[int, list[tuple[float, float, str, Mapping[str, Any]]]] = {}
    for op in t.comm_ops:
        i = _call_index(op[0], t.calls)
        if i is not None and normalize(op[2]) is not None:
            out.setdefault(i, []).append(op)
    return out


def _gpu_parts(
    t: Trace, kernels: Sequence[Activity]
) -> tuple[list[tuple[int, Collective]], dict[int, list[tuple[float, float]]]]:
    """NCCL kernels as collectives, the other kernels as compute, each tied to its call."""
    launch_ts = {a.correlation: a.ts for a in t.apis}
    colls: list[tuple[int, Collective]] = []
    compute: dict[int, list[tuple[float, float]]] = {i: [] for i in range(len(t.calls))}
    for k in kernels:
        i = _call_index(launch_ts.get(k.correlation, k.ts), t.calls)
        if i is None:
            continue
        if not k.name.lower().startswith("nccl"):
            compute[i].append((k.ts, k.end))
            continue
        op = normalize(k.name) or "collective"
        colls.append((i, Collective(op, k.ts, k.dur, algo=_algo(k.name))))
    for i, ops in _host_comm_ops(t).items():
        cs = [c for j, c in colls if j == i]
        if len(ops) == len(cs):  # the k-th host range launched the k-th kernel
            for c, (_, _, name, args) in zip(cs, ops, strict=True):
                c.nbytes = _message_bytes(args)
                if c.op == "collective":
                    c.op = normalize(name) or c.op
    return colls, compute


def _cpu_parts(
    t: Trace,
) -> tuple[list[tuple[int, Collective]], dict[int, list[tuple[float, float]]]]:
    """gloo's work ranges as collectives, the calling thread's top-level operators as compute."""
    colls: list[tuple[int, Collective]] = []
    compute: dict[int, list[tuple[float, float]]] = {i: [] for i in range(len(t.calls))}
    covered = -1.0
    for ts, end, name, tid in t.ops:
        if tid != t.call_tid or ts < covered:
            continue  # another thread's, or nested inside an operator already counted
        covered = end
        if name.startswith(_COMM_OPS):
            continue
        i = _call_index(ts, t.calls)
        if i is not None:
            compute[i].append((ts, end))
    for i, host in _host_comm_ops(t).items():
        for ts, dur, name, args in host:
            if name.startswith("gloo:"):
                nbytes = _message_bytes(args)
                colls.append((i, Collective(normalize(name) or name, ts, dur, nbytes)))
    return colls, compute


def _steady_calls(rc: RankComms) -> list[list[Collective]]:
    """The calls that ran the most common number of collectives (others misalign)."""
    top = Counter(len(c) for c in rc.calls).most_common(1)
    return [c for c in rc.calls if len(c) == top[0][0]] if top else []


def _median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs)) if xs else 0.0


def _medians(steady: Sequence[list[list[Collective]]], k: int, what: str) -> list[list[float]]:
    """Per rank and position in a call: the median of ``what`` over the steady calls."""
    return [[_median([getattr(c[j], what) for c in s]) for j in range(k)] for s in steady if s]


def _overlap_share(dur: list[list[float]], over: list[list[float]], cols: Sequence[int]) -> float:
    """The share of the collective time at positions ``cols`` that overlaps compute."""
    d = sum(row[c] for row in dur for c in cols)
    return sum(row[c] for row in over for c in cols) / d if d > 0 else 0.0


def combine(ranks: Sequence[RankComms]) -> dict[str, Any]:
    """The group's summary of its ranks' profiled calls (JSON-safe; µs)."""
    ranks = sorted(ranks, key=lambda r: r.rank)
    steady = [_steady_calls(r) for r in ranks]
    if not ranks or not all(steady) or not steady[0][0]:
        return {"ranks": len(ranks), "collectives_per_call": 0, "notes": ["no collective seen"]}
    k = len(steady[0][0])
    notes = []
    if any(len(s[0]) != k for s in steady):
        notes.append("the ranks ran different numbers of collectives per call")
        steady = [[c[:k] for c in s if len(c) >= k] for s in steady]
    dur, over = _medians(steady, k, "dur"), _medians(steady, k, "overlap")
    n = len(dur)
    fastest = [min(row[j] for row in dur) for j in range(k)]  # beyond it: waiting
    total_wait = [sum(row[j] - fastest[j] for j in range(k)) for row in dur]
    total_comp = [sum(c) for c in _medians(steady, k, "compute_before")]
    straggler = max(range(n), key=lambda r: (total_comp[r], -total_wait[r]))
    others = [r for r in range(n) if r != straggler] or [straggler]
    on_gpu = ranks[0].device == "cuda"
    return {
        "device": ranks[0].device,
        "ranks": n,
        "calls": min(len(s) for s in steady),
        "collectives_per_call": k,
        "ops": _ops(steady[0][0]),
        "algos": dict(Counter(c.algo for c in steady[0][0] if c.algo)),
        "per_rank": [
            {
                "rank": ranks[r].rank,
                "compute_us": round(total_comp[r], 3),
                "comm_us": round(sum(dur[r]), 3),
                "wait_us": round(total_wait[r], 3),
            }
            for r in range(n)
        ],
        "straggler": {
            "rank": ranks[straggler].rank,
            "caused_wait_us": round(statistics.fmean(total_wait[r] for r in others), 3),
            "compute_us": round(total_comp[straggler], 3),
            "others_compute_us": round(statistics.fmean(total_comp[r] for r in others), 3),
        },
        "overlap": round(_overlap_share(dur, over, range(k)), 4) if on_gpu else None,
        "overlap_by_collective": (
            [round(_overlap_share(dur, over, [j]), 4) for j in range(min(k, 16))] if on_gpu else []
        ),
        "call_us": round(_median([_median(r.call_us) for r in ranks]), 3),
        "notes": notes,
    }


def _ops(first_call: Sequence[Collective]) -> dict[str, dict[str, Any]]:
    """Per op: collectives per call, bytes per call, bytes each (None when unknown)."""
    sizes: dict[str, list[int | None]] = {}
    for c in first_call:
        sizes.setdefault(c.op, []).append(c.nbytes)
    out = {}
    for op, b in sizes.items():
        total = None if None in b else sum(x or 0 for x in b)
        mean = None if total is None else total / len(b)
        out[op] = {"count": len(b), "bytes": total, "mean_bytes": mean}
    return out


def fmt_us(us: float) -> str:
    if abs(us) >= 1000:
        return f"{us / 1000:.3g} ms"
    return f"{us:.3g} µs"


def fmt_bytes(b: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= size:
            return f"{b / size:.3g} {unit}"
    return f"{b:.0f} B"


def findings(
    baseline: Mapping[str, Any] | None, current: Mapping[str, Any] | None, slowdown_us: float | None
) -> list[Finding]:
    """What changed in the group's collectives: the measured changes first, then those the
    profiles only name, a late rank last."""
    if not current:
        return []
    base = baseline or {}
    out = [f for f in (_imbalance(base, current, slowdown_us), _overlap(base, current))
           if f is not None]  # fmt: skip
    late = [f for f in out if f.extra_us is None]
    out = [f for f in out if f not in late] + _buckets(base, current) + _algorithm(base, current)
    return out + late


def _algorithm(base: Mapping[str, Any], cur: Mapping[str, Any]) -> list[Finding]:
    """NCCL's algorithm and protocol changed (``RING_LL`` -> ``TREE_SIMPLE``)."""
    was, now = set(base.get("algos") or {}), set(cur.get("algos") or {})
    if not was or not now or was == now:
        return []
    sentence = (
        f"NCCL algorithm change: the collectives ran {', '.join(sorted(now))}, the baseline's "
        f"{', '.join(sorted(was))} (a message-size or topology change, or NCCL_ALGO / "
        "NCCL_PROTO set)"
    )
    return [Finding(ALGORITHM, sentence)]


def _imbalance(
    base: Mapping[str, Any], cur: Mapping[str, Any], slowdown_us: float | None
) -> Finding | None:
    st = cur.get("straggler") or {}
    caused = float(st.get("caused_wait_us") or 0.0)
    was = float((base.get("straggler") or {}).get("caused_wait_us") or 0.0)
    call_us = float(cur.get("call_us") or 0.0)
    grew = caused - was
    if caused <= 0 or grew <= 0.1 * max(call_us, 1e-9):
        return None
    if slowdown_us and grew < 0.3 * slowdown_us:
        return None
    mine, theirs = float(st.get("compute_us") or 0.0), float(st.get("others_compute_us") or 0.0)
    before = f"; {fmt_us(was)} in the baseline" if base else ""
    waited = f"rank {st.get('rank')} made the others wait {fmt_us(caused)} per call"
    if mine - theirs < 0.3 * caused:  # unmeasured: never given a share of the slowdown
        return Finding(
            RANK_IMBALANCE,
            f"a late rank: {waited} without computing more than they did ({fmt_us(mine)} "
            f"against {fmt_us(theirs)}): something outside its compute (the host, the machine) "
            f"held it up{before}",
        )
    text = f"rank imbalance: {waited} (its compute before the collectives: {fmt_us(mine)} per "
    text += f"call, the others' {fmt_us(theirs)}){before}"
    return Finding(RANK_IMBALANCE, text, extra_us=grew)


def _overlap(base: Mapping[str, Any], cur: Mapping[str, Any]) -> Finding | None:
    was, now = base.get("overlap"), cur.get("overlap")
    if not isinstance(was, (int, float)) or not isinstance(now, (int, float)):
        return None
    if was < 0.2 or now > was - 0.2:
        return None
    comm = statistics.fmean(float(r.get("comm_us") or 0.0) for r in cur.get("per_rank") or [{}])
    exposed = comm * (was - now)
    return Finding(
        LOST_OVERLAP,
        f"lost overlap: {100 * now:.0f} % of the collectives' time overlaps compute, "
        f"{100 * was:.0f} % in the baseline ({fmt_us(exposed)} per call no longer hidden)",
        extra_us=exposed,
    )


def _buckets(base: Mapping[str, Any], cur: Mapping[str, Any]) -> list[Finding]:
    """More, smaller collectives of an op, fewer and larger ones, or larger ones."""
    out: list[Finding] = []
    for op, now in (cur.get("ops") or {}).items():
        was = (base.get("ops") or {}).get(op)
        if not was:
            continue
        n0, n1 = int(was.get("count") or 0), int(now.get("count") or 0)
        b0, b1 = was.get("mean_bytes"), now.get("mean_bytes")
        sized = isinstance(b0, (int, float)) and isinstance(b1, (int, float)) and b0 > 0
        sizes = f", {fmt_bytes(b0)} -> {fmt_bytes(b1)} each" if sized else ""
        if n0 and n1 >= 1.5 * n0:
            why = "(a smaller bucket size, or gradients no longer fused into buckets)"
            sentence = f"more, smaller collectives: {op} {n0} -> {n1} per call{sizes} {why}"
            out.append(Finding(MORE_COLLECTIVES, sentence))
        elif n0 and n1 * 1.5 <= n0 and sized:
            sentence = f"fewer, larger collectives: {op} {n0} -> {n1} per call{sizes}"
            out.append(Finding(MESSAGE_SIZE, sentence))
        elif n0 == n1 and sized and b1 >= 1.5 * b0:
            sentence = f"message-size change: {op}{sizes}, {n1} per call"
            out.append(Finding(MESSAGE_SIZE, sentence))
    return out
