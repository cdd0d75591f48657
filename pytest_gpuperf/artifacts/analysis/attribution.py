"""The slowdown split between what the profiles measure, and the one ranking. Pure Python.

A slowdown (µs per call) is made of *terms* the profiles measure: each kernel, copy or CPU
operator whose time per call changed (:class:`~.inventory.KernelDiff`), and the growth of the
device's waiting. A term goes to the first story (causes first) that claims it, so a cause's
consequences (the eager kernels of a lost compile) are not told again as causes. A finding's
*share* is the µs of its terms over the slowdown; :func:`rank` orders by it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_gpuperf.artifacts.analysis.inventory import (
    KernelChange,
    KernelDiff,
    diff_inventories,
    short_name,
)
from pytest_gpuperf.artifacts.analysis.timeline import ProfileAnalysis

#: A finding leads only when it explains at least this share of the slowdown.
MIN_LEAD = 0.25
#: ... and is told at all (after the lead) from this share on.
MIN_TOLD = 0.05
#: Claims every free term (a cause that makes everything else run differently).
EVERYTHING = frozenset({"*"})


@dataclass
class Evidence:
    """Everything known about one regressed benchmark (all parts optional); JSON and back
    (``evidence.json``) with :meth:`to_record` and :meth:`from_record`."""

    key: str
    display: str = ""
    baseline_s: float | None = None
    current_s: float | None = None
    #: the gate's change as every output writes it ("2.96x time"); "" when not known
    change: str = ""
    #: the verdict's kind ("regression", "no-change", ...): no causes without a slowdown
    verdict: str = ""
    analysis: ProfileAnalysis | None = None
    baseline_inventory: Mapping[str, Any] | None = None
    kernel_diff: KernelDiff | None = None
    ncu: Sequence[Mapping[str, Any]] = ()
    compile: Mapping[str, Any] | None = None
    nsys: Sequence[str] = ()
    child_median_s: float | None = None
    #: rounds behind ``child_median_s`` (a capture child re-measures briefly)
    child_rounds: int | None = None
    #: where the profile was taken ("a fresh process of the current code")
    profiled_in: str | None = None
    current_inventory: Mapping[str, Any] | None = None
    #: Triton kernel -> the config its autotuner chose in the current run
    triton_configs: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    #: the library's choices in the profiler's process (collectors/algorithms.py; the
    #: baseline's is its inventory's ``probe``)
    current_probe: Mapping[str, Any] | None = None
    #: the GPU's activity (NVML GPM) and the allocator's figures, now and of the baseline runs
    current_activity: Mapping[str, Any] | None = None
    baseline_activity: Sequence[Mapping[str, Any] | None] = ()
    current_memory: Mapping[str, Any] | None = None
    baseline_memory: Sequence[Mapping[str, Any] | None] = ()
    #: a distributed benchmark's group (``Result.extra["group"]``: ``comms``, ``nccl``)
    group: Mapping[str, Any] | None = None
    baseline_group: Mapping[str, Any] | None = None
    #: measured against a base tree (``--gpuperf-ab``), not a saved baseline
    ab: bool = False

    def __post_init__(self) -> None:
        if self.kernel_diff is None and self.baseline_inventory and self.current_inventory:
            self.kernel_diff = diff_inventories(
                self.baseline_inventory, self.current_inventory, self.slowdown_s
            )

    @property
    def ratio(self) -> float | None:
        return self.current_s / self.baseline_s if self.baseline_s and self.current_s else None

    @property
    def slowdown_s(self) -> float | None:
        if self.baseline_s is None or self.current_s is None:
            return None
        return self.current_s - self.baseline_s

    @property
    def slower(self) -> bool:
        """Whether there is a slowdown to explain (not for a no-change or an improvement)."""
        no = self.verdict in ("no-change", "improvement")
        return not no and (self.slowdown_s is None or self.slowdown_s > 0)

    def to_record(self) -> dict[str, Any]:
        """A JSON-safe dict of everything above (the kernel diff as it reads, for people)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["analysis"] = self.analysis.to_dict() if self.analysis is not None else None
        out["kernel_diff"] = self.kernel_diff.to_dict() if self.kernel_diff is not None else None
        return out

    @classmethod
    def from_record(cls, d: Mapping[str, Any]) -> Evidence:
        """Back from :meth:`to_record`; the kernel diff is made again from the inventories."""
        known = {f.name for f in dataclasses.fields(cls)} - {"analysis", "kernel_diff"}
        kw = {k: v for k, v in d.items() if k in known}
        a = d.get("analysis")
        return cls(**kw, analysis=ProfileAnalysis.from_dict(a) if a else None)


@dataclass
class Finding:
    """One cause, the sentence that tells it, and what of the slowdown it explains."""

    cause: str
    sentence: str
    #: the kernel changes it explains, or their names (:data:`EVERYTHING`: all still free)
    kernels: Collection[str | KernelChange] = frozenset()
    #: whether it explains the growth of the device's waiting (idle) time
    idle: bool = False
    #: µs per call it explains that no profile term holds (a collective's wait, cudaMalloc);
    #: with ``idle``, its own measure of the waiting it claims
    extra_us: float | None = None
    #: a symptom (more allocations, GPM figures): never leads, told with the lead
    symptom: bool = False
    #: filled by :meth:`Ledger.claim`: µs per call of the terms it got, None when unmeasured
    us: float | None = None
    share: float | None = None
    #: the changes it got, largest first (for the sentences that name them)
    got: list[KernelChange] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.kernels = frozenset(getattr(k, "name", k) for k in self.kernels)


class Ledger:
    """The slowdown's terms and who claimed them."""

    def __init__(self, kd: KernelDiff | None, idle_us: float | None, slowdown_us: float | None):
        self.kd = kd
        self.slowdown_us = slowdown_us if slowdown_us and slowdown_us > 0 else None
        self.changes = {c.name: c for c in (kd.notable if kd is not None else [])}
        self.idle_us = idle_us
        self.taken: set[str] = set()
        self.idle_taken = False
        #: the findings that got terms, in the order they claimed them
        self.claimed: list[Finding] = []

    def free(self, *statuses: str) -> list[KernelChange]:
        """The changes no finding claimed yet (of these statuses), largest change first."""
        out = [c for n, c in self.changes.items() if n not in self.taken]
        return [c for c in out if not statuses or c.status in statuses]

    @property
    def idle_free(self) -> float:
        """The idle time's growth (µs per call) while no finding claimed it, else 0."""
        return 0.0 if self.idle_taken or self.idle_us is None else self.idle_us

    def claim(self, f: Finding) -> Finding | None:
        """Give ``f`` the free terms it claims and their µs; None: its kernels add nothing."""
        names = set(self.changes) if f.kernels == EVERYTHING else f.kernels
        got = [c for n, c in self.changes.items() if n in names and n not in self.taken]
        parts = [c.delta_us for c in got]
        if f.kernels and f.kernels != EVERYTHING and not f.idle and sum(parts) <= 0:
            return None
        self.taken |= {c.name for c in got}
        f.got = sorted(got, key=lambda c: -abs(c.delta_us))
        left = None if self.idle_taken else self.idle_us
        waited = max(left, 0.0) if f.idle and left is not None else None
        self.idle_taken |= f.idle
        own = f.extra_us if f.extra_us is not None else waited  # its measure of the waiting first
        parts += [own] if own is not None else []
        unknown = f.idle and self.idle_us is None and not f.kernels
        f.us = sum(parts) if parts or (self.kd is not None and not unknown) else None
        self.claimed.append(f)
        return f

    @property
    def seen(self) -> float | None:
        """The share of the slowdown the profiles measure: kernel time and waiting that grew."""
        if self.kd is None or not self.slowdown_us:
            return None
        return (self.kd.gpu_delta_us + max(self.idle_us or 0.0, 0.0)) / self.slowdown_us

    @property
    def unseen(self) -> bool:
        """Whether the profiles measure too little of the slowdown for a share to lead."""
        return self.seen is not None and self.seen < MIN_LEAD

    def wait_for_added_work(self) -> Finding | None:
        """Gives the unclaimed waiting that grew (the host's time to issue the work) to the
        cause that added launches of the kernels holding most of the kernel time that grew."""
        waited = self.idle_free
        if waited <= 0:
            return None
        grown = sum(max(c.delta_us, 0.0) for c in self.changes.values())
        base_n = sum(c.base_launches for c in self.kd.changes) if self.kd is not None else 0.0
        for f in self.claimed:
            added = sum(c.cur_launches - c.base_launches for c in f.got)
            own = sum(max(c.delta_us, 0.0) for c in f.got)
            if not f.symptom and added >= max(0.1 * base_n, 2.0) and own >= 0.5 * grown > 0:
                f.us = (f.us or 0.0) + waited
                self.idle_taken = True
                return f
        return None


def rank(findings: Sequence[Finding], ledger: Ledger) -> list[Finding]:
    """The one ranking: measured findings that lead, largest first; then the unmeasured in
    story order; then those that explain little; symptoms last. Shares are of the slowdown,
    or of what the findings explain together when that is more."""
    total = max(ledger.slowdown_us or 0.0, sum(max(f.us or 0.0, 0.0) for f in findings))
    for f in findings:
        # a cause that changes how the whole function runs (its compiled code) is not measured
        # by profiles that see little of the slowdown: its share is unknown, not small
        whole = ledger.unseen and f.kernels == EVERYTHING
        f.share = f.us / total if f.us is not None and total > 0 and not whole else None

    def tier(f: Finding) -> int:  # 0 leads, 1 unmeasured, 2 explains little, 3 a symptom
        return 3 if f.symptom else 1 if f.share is None else 0 if f.share >= MIN_LEAD else 2

    return sorted(findings, key=lambda f: (tier(f), -(f.share or 0.0)))  # stable: story order


def leads(f: Finding) -> bool:
    """Whether a ranked finding may open the diagnosis."""
    return not f.symptom and (f.share is None or f.share >= MIN_LEAD)


def told(f: Finding) -> bool:
    """Whether a finding after the lead is worth a sentence."""
    return not f.symptom and (f.share is None or f.share >= MIN_TOLD)


# --- what a kernel (or, on the CPU, an operator) is -------------------------------------

_ELEMENTWISE = re.compile(
    r"elementwise|reduce_kernel|unrolled|vectorized|pointwise|^aten::(?:add|sub|mul|div|pow|sqrt"
    r"|rsqrt|mean|sum|exp|tanh|sigmoid|neg|var|std|abs|reciprocal|clamp|maximum|minimum|where"
    r"|lerp|addcmul|addcdiv|linalg_vector_norm|norm|relu|square)_?$",
    re.I,
)
_MULTI_TENSOR = re.compile(r"multi_tensor_apply|_foreach_|fused_adam|FusedAdam|fused_sgd", re.I)
_COPY_KERNEL = re.compile(
    r"direct_copy|copy_kernel|contiguous|^aten::(?:copy_|clone|contiguous|_to_copy)$", re.I
)
_CAST = re.compile(r"(bfloat16|float16|half)_copy_kernel|^aten::_to_copy$", re.I)


def is_elementwise(name: str) -> bool:
    return bool(_ELEMENTWISE.search(name)) and not _COPY_KERNEL.search(name)


is_multi_tensor, is_copy_kernel, is_cast = _MULTI_TENSOR.search, _COPY_KERNEL.search, _CAST.search


def names(changes: Iterable[KernelChange], most: int = 3, width: int = 48) -> str:
    """``a 2x per call, b 1x per call`` for the sentences."""
    return ", ".join(
        f"{short_name(c.name, width)} {c.cur_launches:g}x per call" for c in list(changes)[:most]
    )


def timing(changes: Sequence[KernelChange]) -> str:
    """``876.4 -> 10747.0 µs per call`` over a story's kernels."""
    base = sum(c.base_us for c in changes)
    cur = sum(c.cur_us for c in changes)
    return f"{base:.1f} -> {cur:.1f} µs per call"
