"""The GPUs' datasheet peaks, and achieved throughput as a fraction of them. Pure Python.

A benchmark that declares its work (``flops=``, ``bytes=``) gets its achieved FLOP/s and
bandwidth as fractions of the peaks of its dtype's math and of the memory. Peaks are
NVIDIA's datasheet figures at the boost clock, dense (half the quoted sparse tensor-core
figure). A GPU under its power cap runs below the boost clock, so about 80 % is as high as
sustained work gets.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Peak:
    """One GPU model's peaks: memory bandwidth (GB/s) and dense TFLOP/s per math kind."""

    name: str
    dram_gbps: float
    #: math kind (one of :data:`_KINDS`) -> dense TFLOP/s (TOP/s for int8)
    tflops: Mapping[str, float]
    source: str


#: The math kinds of :attr:`Peak.tflops`, the columns of the tables below.
_KINDS = ("fp64", "fp64_tensor", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")


def _tflops(*values: float | None) -> dict[str, float]:
    return {k: v for k, v in zip(_KINDS, values, strict=True) if v is not None}


_HOPPER_SXM = _tflops(34.0, 67.0, 67.0, 494.5, 989.5, 989.5, 1979.0, 1979.0)
_HOPPER_NVL = _tflops(30.0, 60.0, 60.0, 417.5, 835.5, 835.5, 1670.5, 1670.5)
_H100_PCIE = _tflops(26.0, 51.0, 51.0, 378.0, 756.5, 756.5, 1513.0, 1513.0)
_A100 = _tflops(9.7, 19.5, 19.5, 156.0, 312.0, 312.0, None, 624.0)
_L4 = _tflops(None, None, 30.3, 60.0, 121.0, 121.0, 242.5, 242.5)

_SHEET = "NVIDIA {} Tensor Core GPU datasheet{}"
#: (pattern on the device name, peaks), first match wins: more specific names first.
PEAKS: tuple[tuple[re.Pattern[str], Peak], ...] = tuple(
    (re.compile(pattern, re.I), Peak(name, gbps, tflops, _SHEET.format(sheet, variant)))
    for pattern, name, gbps, tflops, sheet, variant in (
        (r"H200 NVL", "H200 NVL", 4800.0, _HOPPER_NVL, "H200", ", H200 NVL"),
        (r"H200", "H200", 4800.0, _HOPPER_SXM, "H200", ", H200 SXM"),
        (r"H100 NVL", "H100 NVL", 3900.0, _HOPPER_NVL, "H100", ", H100 NVL"),
        (r"H100.*PCIe", "H100 PCIe", 2000.0, _H100_PCIE, "H100", ", H100 PCIe"),
        (r"H100", "H100 SXM", 3350.0, _HOPPER_SXM, "H100", ", H100 SXM"),
        (r"A100(?=.*80\s*GB)(?=.*PCIe)", "A100 80GB PCIe", 1935.0, _A100, "A100", ""),
        (r"A100.*80\s*GB", "A100 80GB SXM", 2039.0, _A100, "A100", ""),
        (r"A100", "A100 40GB", 1555.0, _A100, "A100", ""),
        (r"\bL4\b", "L4", 300.0, _L4, "L4", ""),
    )
)

#: dtype spellings (lower case, without ``torch.``) -> math kind of :attr:`Peak.tflops`.
_DTYPES = {
    **dict.fromkeys(("float64", "double", "fp64"), "fp64"),
    **dict.fromkeys(("float32", "float", "fp32"), "fp32"),
    "tf32": "tf32",
    **dict.fromkeys(("bfloat16", "bf16"), "bf16"),
    **dict.fromkeys(("float16", "half", "fp16"), "fp16"),
    **dict.fromkeys(("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"), "fp8"),
    "fp8": "fp8",
    "int8": "int8",
}
#: Test parameters whose value is taken as the benchmark's dtype first.
_DTYPE_PARAMS = ("dtype", "dtypes", "precision", "dt")


def peak_for(device_name: str | None) -> Peak | None:
    """The peaks of a GPU by its name (torch's or NVML's), ``None`` for one not in the table."""
    if not device_name:
        return None
    for pattern, peak in PEAKS:
        if pattern.search(device_name):
            return peak
    return None


def math_kind(dtype: Any) -> str | None:
    """``"bf16"`` for ``torch.bfloat16``, ``"bfloat16"`` or ``"bf16"``; None if not a dtype."""
    text = str(dtype).strip().lower().removeprefix("torch.")
    return _DTYPES.get(text)


def dtype_of(params: Sequence[tuple[str, str]] | Mapping[str, Any]) -> str | None:
    """The math kind a test's parameters name (``dtype=bfloat16`` first, then any value)."""
    items = list(params.items()) if isinstance(params, Mapping) else list(params)
    for key, value in items:
        if key.lower() in _DTYPE_PARAMS and math_kind(value):
            return math_kind(value)
    kinds = {math_kind(v) for _, v in items} - {None}
    return kinds.pop() if len(kinds) == 1 else None


def of_peak(
    *,
    device_name: str | None,
    seconds: float | None,
    flops: float | None,
    nbytes: float | None,
    params: Sequence[tuple[str, str]] | Mapping[str, Any] = (),
) -> dict[str, Any] | None:
    """Achieved FLOP/s and bandwidth per call as fractions of the GPU's peaks (None without
    declared work, a time or the GPU in :data:`PEAKS`). ``flops_of_peak`` needs the dtype;
    fp32 also gets ``flops_of_tf32_peak`` (a fp32 matmul runs on TF32 cores where allowed)."""
    peak = peak_for(device_name)
    if peak is None or seconds is None or not 0 < seconds < math.inf:
        return None
    if flops is None and nbytes is None:
        return None
    out: dict[str, Any] = {"gpu": peak.name, "source": peak.source}
    if nbytes is not None:
        gbps = nbytes / seconds / 1e9
        out["dram_peak_gbps"] = peak.dram_gbps
        out["bandwidth_of_peak"] = round(gbps / peak.dram_gbps, 4)
    kind = dtype_of(params)
    if flops is not None and kind is not None and kind in peak.tflops:
        tflops = flops / seconds / 1e12
        out["dtype"] = kind
        out["peak_tflops"] = peak.tflops[kind]
        out["flops_of_peak"] = round(tflops / peak.tflops[kind], 4)
        if kind == "fp32" and "tf32" in peak.tflops:
            out["flops_of_tf32_peak"] = round(tflops / peak.tflops["tf32"], 4)
    elif flops is not None:
        out["flops_peak_unknown"] = (
            "the test names no dtype (a dtype parameter or the marker's dtypes=)"
            if kind is None
            else f"no {kind} peak for the {peak.name}"
        )
    return out


def describe(p: Mapping[str, Any] | None) -> str:
    """``79 % of the H200's bf16 peak (989.5 TFLOP/s), 13 % of its memory bandwidth``."""
    if not p:
        return ""
    parts = []
    if isinstance(p.get("flops_of_peak"), (int, float)):
        part = (
            f"{100 * p['flops_of_peak']:.0f} % of the {p['gpu']}'s {p['dtype']} peak "
            f"({p['peak_tflops']:g} TFLOP/s)"
        )
        if isinstance(p.get("flops_of_tf32_peak"), (int, float)):
            part += f", {100 * p['flops_of_tf32_peak']:.0f} % of its TF32 peak"
        parts.append(part)
    if isinstance(p.get("bandwidth_of_peak"), (int, float)):
        parts.append(
            f"{100 * p['bandwidth_of_peak']:.0f} % of the {p['gpu']}'s memory bandwidth "
            f"({p['dram_peak_gbps'] / 1000:g} TB/s)"
        )
    return ", ".join(parts)
