"""Numbers for people: times, bytes, rates and percentages with units.

It imports nothing of the package: the verdict, the analysis and every report write a
number the same way (a result's throughput: ``reporting.columns.fmt_result_rate``).
"""

from __future__ import annotations

import math


def fmt_time(seconds: float | None) -> str:
    """``1.234e-05`` -> ``12.34 µs``: four significant figures, unit chosen to fit."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    units = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6))
    unit, scale = next((u for u in units if abs(seconds) >= u[1]), ("ns", 1e-9))
    return f"{_sig(seconds / scale)} {unit}"


def _sig(x: float, digits: int = 4) -> str:
    if x == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    return f"{x:.{decimals}f}"


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def fmt_pct(fraction: float | None, digits: int = 1, sign: bool = False) -> str:
    if fraction is None or not math.isfinite(fraction):
        return "-"
    return f"{100 * fraction:+.{digits}f} %" if sign else f"{100 * fraction:.{digits}f} %"


def fmt_rate(tflops: float | None, gbps: float | None) -> str:
    parts = []
    if tflops is not None and math.isfinite(tflops):
        parts.append(f"{tflops:.3g} TFLOP/s" if tflops >= 0.1 else f"{tflops * 1e3:.3g} GFLOP/s")
    if gbps is not None and math.isfinite(gbps):
        parts.append(f"{gbps / 1e3:.3g} TB/s" if gbps >= 1000 else f"{gbps:.3g} GB/s")
    return ", ".join(parts) if parts else "-"


#: From twice as slow on, a change reads as a ratio ("2.96x"), below as a percentage.
RATIO_FROM = 2.0


def fmt_change(ratio: float | None) -> str:
    """One change, one format, in every output: ``+6.1 %`` and ``-30.0 %`` below twice as
    slow (two decimals below 1 %: noise levels of 0.25 % matter), ``2.96x`` from there on
    (``86.1x``, ``1234x``); ``-`` when unknown, ``inf`` when infinite."""
    if ratio is None or math.isnan(ratio):
        return "-"
    if not math.isfinite(ratio):
        return "inf"
    if ratio >= RATIO_FROM:
        return f"{ratio:.3g}x" if ratio < 100 else f"{ratio:.0f}x"
    x = ratio - 1.0
    return fmt_pct(x, digits=2 if abs(x) < 0.01 else 1, sign=True)
