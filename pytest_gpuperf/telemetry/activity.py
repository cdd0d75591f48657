"""What the GPU's units were doing (NVML GPM activity): figures, what bounds the work, what moved.

The figures (``Result.telemetry["activity"]``) come from :mod:`.gpm`, read over plain calls
after the measurement (the L2 flush and the spin would count as the benchmark's activity).
:func:`moved` lists the figures that changed against the baseline, so that a diagnosis
cites a figure that moved rather than one a rule assumed would.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

#: (key in the activity dict, pynvml constant, label, unit: "%" or "MiB/s").
METRICS: tuple[tuple[str, str, str, str], ...] = (
    ("sm_util_pct", "NVML_GPM_METRIC_SM_UTIL", "SM util", "%"),
    ("sm_occupancy_pct", "NVML_GPM_METRIC_SM_OCCUPANCY", "SM occupancy", "%"),
    ("tensor_pct", "NVML_GPM_METRIC_ANY_TENSOR_UTIL", "tensor activity", "%"),
    ("tensor_hmma_pct", "NVML_GPM_METRIC_HMMA_TENSOR_UTIL", "HMMA tensor activity", "%"),
    ("tensor_imma_pct", "NVML_GPM_METRIC_IMMA_TENSOR_UTIL", "IMMA tensor activity", "%"),
    ("tensor_dfma_pct", "NVML_GPM_METRIC_DFMA_TENSOR_UTIL", "DFMA tensor activity", "%"),
    ("fp32_util_pct", "NVML_GPM_METRIC_FP32_UTIL", "FP32 activity", "%"),
    ("fp16_util_pct", "NVML_GPM_METRIC_FP16_UTIL", "FP16 activity", "%"),
    ("fp64_util_pct", "NVML_GPM_METRIC_FP64_UTIL", "FP64 activity", "%"),
    ("integer_util_pct", "NVML_GPM_METRIC_INTEGER_UTIL", "integer activity", "%"),
    ("dram_bw_util_pct", "NVML_GPM_METRIC_DRAM_BW_UTIL", "DRAM bandwidth", "%"),
    ("pcie_tx_mib_s", "NVML_GPM_METRIC_PCIE_TX_PER_SEC", "PCIe TX", "MiB/s"),
    ("pcie_rx_mib_s", "NVML_GPM_METRIC_PCIE_RX_PER_SEC", "PCIe RX", "MiB/s"),
    ("nvlink_tx_mib_s", "NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC", "NVLink TX", "MiB/s"),
    ("nvlink_rx_mib_s", "NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC", "NVLink RX", "MiB/s"),
)
KEYS = tuple(m[0] for m in METRICS)
LABELS = {m[0]: m[2] for m in METRICS}
UNITS = {m[0]: m[3] for m in METRICS}

#: DRAM bandwidth above this share of the peak: the work is memory-bound.
MEMORY_BOUND_PCT = 60.0
#: Tensor activity above this: the work runs on the tensor cores, near their limit.
TENSOR_BOUND_PCT = 50.0
#: Non-tensor FP32/FP64 activity above this: compute-bound on the CUDA cores.
CUDA_CORE_BOUND_PCT = 50.0
#: SM util below this (with DRAM low too): the GPU is not kept busy.
UNDERUSED_SM_PCT = 40.0
#: A percentage moved when it changed by this many points, beyond the baseline's range...
MOVE_POINTS = 10.0
#: ... widened by this many points (run-to-run spread of GPM figures)
RANGE_SLACK_POINTS = 3.0
#: A rate (MiB/s) moved when it changed by this factor and at least MOVE_RATE_MIB_S.
MOVE_RATE_FACTOR = 1.5
MOVE_RATE_MIB_S = 500.0
#: Tensor activity fell below this from above TENSOR_WAS_PCT: the work left the tensor cores.
TENSOR_LEFT_PCT = 15.0
TENSOR_WAS_PCT = 40.0
#: What a baseline keeps of each run's activity.
SUMMARY_KEYS = ("available", "window_s", "calls", *KEYS)


def unavailable(reason: str, **extra: Any) -> dict[str, Any]:
    return {"available": False, "reason": reason, **extra}


def num(a: Mapping[str, Any] | None, key: str) -> float | None:
    v = (a or {}).get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def usable(a: Mapping[str, Any] | None) -> TypeGuard[Mapping[str, Any]]:
    return bool(a and a.get("available") and any(num(a, k) is not None for k in KEYS))


def summary(a: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What a baseline keeps of one run's activity (``None`` without figures)."""
    return {k: a[k] for k in SUMMARY_KEYS if k in a} if usable(a) else None


def fmt(key: str, value: float | None) -> str:
    if value is None:
        return "?"
    if UNITS.get(key) == "%":
        return f"{value:.0f} %" if value >= 10 or value == 0 else f"{value:.1f} %"
    if value >= 1024:
        return f"{value / 1024:.1f} GiB/s"
    return f"{value:.0f} MiB/s"


@dataclass(frozen=True)
class Bound:
    """What limits the work, from GPM alone: a short label and the sentence that says why."""

    label: str  # memory-bound, tensor-bound, cuda-core-bound, under-used, no clear limit
    sentence: str


def bound(a: Mapping[str, Any] | None) -> Bound | None:
    """What the activity figures say limits the work (``None`` without figures)."""
    if not usable(a):
        return None
    dram = num(a, "dram_bw_util_pct")
    tensor = num(a, "tensor_pct")
    sm = num(a, "sm_util_pct")
    fp = max((v for v in (num(a, "fp32_util_pct"), num(a, "fp64_util_pct")) if v), default=None)
    if dram is not None and dram >= MEMORY_BOUND_PCT:
        return Bound(
            "memory-bound",
            f"DRAM bandwidth at {fmt('dram_bw_util_pct', dram)} of peak: memory-bound",
        )
    if tensor is not None and tensor >= TENSOR_BOUND_PCT:
        return Bound(
            "tensor-bound", f"tensor activity {fmt('tensor_pct', tensor)}: on the tensor cores"
        )
    if fp is not None and fp >= CUDA_CORE_BOUND_PCT:
        return Bound(
            "cuda-core-bound",
            f"FP32/FP64 activity {fp:.0f} % with tensor activity {fmt('tensor_pct', tensor)}: "
            "compute-bound on the CUDA cores, not the tensor cores",
        )
    if sm is not None and sm < UNDERUSED_SM_PCT and (dram is None or dram < 30):
        return Bound(
            "under-used",
            f"SMs busy {fmt('sm_util_pct', sm)} of the time: the GPU is not kept busy "
            "(launch-bound, waiting on the host, or too little parallel work per kernel)",
        )
    parts = [
        f"{LABELS[k]} {fmt(k, num(a, k))}"
        for k in ("sm_util_pct", "dram_bw_util_pct", "tensor_pct")
        if num(a, k) is not None
    ]
    return Bound("no clear limit", "no unit near its limit (" + ", ".join(parts) + ")")


@dataclass(frozen=True)
class Move:
    """One activity figure that changed against the baseline."""

    key: str
    baseline: float  # median over the baseline runs
    current: float

    @property
    def size(self) -> float:
        """How far it moved: points for percentages, the log ratio (x100) for rates."""
        if UNITS[self.key] == "%":
            return abs(self.current - self.baseline)
        lo, hi = sorted((max(self.baseline, 1.0), max(self.current, 1.0)))
        return 100.0 * (hi / lo - 1)

    def text(self) -> str:
        verb = "rose" if self.current > self.baseline else "fell"
        return (
            f"{LABELS[self.key]} {verb} {fmt(self.key, self.baseline)} -> "
            f"{fmt(self.key, self.current)}"
        )


def moved(
    baseline: Sequence[Mapping[str, Any] | None], current: Mapping[str, Any] | None
) -> list[Move]:
    """The activity figures of ``current`` that left the baseline runs' range, largest first."""
    base = [b for b in baseline if usable(b)]
    if not base or not usable(current):
        return []
    out = []
    for key in KEYS:
        cur = num(current, key)
        vals = [v for v in (num(b, key) for b in base) if v is not None]
        if cur is None or not vals:
            continue
        med = statistics.median(vals)
        if UNITS[key] == "%":
            lo, hi = min(vals) - RANGE_SLACK_POINTS, max(vals) + RANGE_SLACK_POINTS
            if abs(cur - med) >= MOVE_POINTS and not lo <= cur <= hi:
                out.append(Move(key, med, cur))
        else:
            big, small = max(cur, med), min(cur, med)
            if big - small >= MOVE_RATE_MIB_S and big >= MOVE_RATE_FACTOR * max(small, 1.0):
                out.append(Move(key, med, cur))
    return sorted(out, key=lambda m: -m.size)


def left_tensor_cores(moves: Sequence[Move]) -> bool:
    """Tensor activity fell from tensor-core work to almost none."""
    return any(
        m.key == "tensor_pct" and m.baseline >= TENSOR_WAS_PCT and m.current < TENSOR_LEFT_PCT
        for m in moves
    )
