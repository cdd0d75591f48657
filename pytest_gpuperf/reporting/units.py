"""Numbers for people, as the reports write them: the formats of :mod:`pytest_gpuperf.units`
and a result's throughput."""

from __future__ import annotations

from typing import Any

from pytest_gpuperf.units import (
    RATIO_FROM,
    fmt_bytes,
    fmt_change,
    fmt_pct,
    fmt_rate,
    fmt_time,
)

__all__ = [
    "RATIO_FROM",
    "fmt_bytes",
    "fmt_change",
    "fmt_pct",
    "fmt_rate",
    "fmt_result_rate",
    "fmt_time",
]


def fmt_result_rate(result: Any) -> str:
    """A result's throughput: a collective's algbw and busbw (nccl-tests' definitions,
    :mod:`pytest_gpuperf.measure.collectives`), else its FLOP/s and bytes/s."""
    from pytest_gpuperf.measure.collectives import rate_text

    run = result.run
    return rate_text(run) or fmt_rate(run.tflops, run.gbps)
