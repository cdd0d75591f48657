"""How one benchmark is measured: budgets in milliseconds, round sizes, tolerances."""

from __future__ import annotations

from dataclasses import dataclass

from pytest_gpuperf.settings_fields import option


@dataclass(frozen=True)
class MeasurePolicy:
    """How one benchmark is measured; the fields made with ``option(...)`` are the
    per-test measurement options (session-wide, or per test from a marker or call)."""

    #: False (CUDA events), True (CUDA-graph replay) or "both"
    cuda_graph: bool | str = option("cuda_graph", False)
    #: flush L2 before each timed call (CUDA events only)
    l2_flush: bool = option("l2_flush", True)
    #: longest warm-up; it ends earlier once round times settle
    warmup_ms: float = option("warmup_ms", 500.0)
    #: shortest warm-up before settling is checked: on an H200 the power cap engages
    #: ~0.25 s into sustained heavy work, so a shorter warm-up can "settle" before it
    min_warmup_ms: float = option("min_warmup_ms", 300.0)
    #: wall time of one round of calls
    round_ms: float = option("round_ms", 5.0)
    #: rounds measured after warm-up
    rounds: int = option("rounds", 30)
    #: relative IQR above which a result is flagged noisy
    noise_threshold: float = option("noise_threshold", 0.05)
    #: calls in one round are capped here (and CUDA graphs hold at most graph_calls calls)
    max_calls_per_round: int = 10_000
    graph_calls: int = 1_000
    #: warm-up settles when two windows of this many rounds agree within settle_tol
    settle_window: int = 6
    settle_tol: float = 0.01
    #: a level change inside the measurement larger than this (relative) is material:
    #: one is trimmed as leftover transient, two make the run unstable. Clock steps of
    #: ~1 % under a GPU's power management are noise between runs, not a shift.
    shift_tol: float = 0.02
