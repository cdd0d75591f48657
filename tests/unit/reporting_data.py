"""Results with synthetic verdicts for the renderer tests (no measurement, no verdict maths)."""

from __future__ import annotations

import datetime as dt
import math
import random
from typing import Any

from pytest_gpuperf.model import BenchId, Result, Run
from pytest_gpuperf.outcome import Comparison, FigureVerdict, Terms, said

GPU_ENV: dict[str, Any] = {
    "device": "cuda",
    "gpu_name": "NVIDIA H200",
    "sm_count": 132,
    "gpu_memory_bytes": 150_121_086_976,
    "compute_capability": "9.0",
    "driver": "580.159.04",
    "cuda_runtime": "13.0",
    "torch": "2.13.0+cu130",
    "triton": "3.6.0",
    "python": "3.12.3",
    "hostname": "runner-1",
}
CPU_ENV: dict[str, Any] = {
    "device": "cpu",
    "cpu_model": "AMD EPYC 9654 96-Core Processor",
    "machine": "x86_64",
    "torch_threads": 8,
    "python": "3.11.7",
    "torch": "2.13.0+cpu",
}
POLICY: dict[str, Any] = {"round_ms": 5.0, "rounds": 30, "warmup_ms": 500.0, "l2_flush": True}
#: A test id built to break Markdown tables, HTML and workflow commands.
HOSTILE = "test_x[<script>alert(1)</script>|a,b:c%0A\n*bold* `code` [link](http://evil)]"
T0 = dt.datetime(2025, 11, 29, 19, 38, tzinfo=dt.timezone.utc)


def rounds(level: float, n: int = 30, noise: float = 0.01, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [level * math.exp(rng.gauss(0, noise)) for _ in range(n)]


def comparison(
    kind: str,
    ratio: float | None = 1.0,
    *,
    baseline_s: float = 5.0e-4,
    k: int = 20,
    r: int = 3,
    final: bool = True,
    reasons: tuple[str, ...] = (),
    environment: tuple[str, ...] = (),
) -> Comparison:
    """A verdict with plausible numbers (not from the verdict maths)."""
    current_s = baseline_s * (ratio or 1.0)
    runs = tuple(current_s * f for f in (0.998, 1.0, 1.003))[:r]
    terms = Terms(looks=3, threshold=0.03, alpha=0.00125, ci_level=0.9)
    common: dict[str, Any] = {"kind": kind, "final": final, "look": 3 if final else 1}
    if kind == "no-baseline" or ratio is None:
        return Comparison(**common, terms=terms, runs=runs, reasons=tuple(map(said, reasons)))
    lead = FigureVerdict(
        figure="time", klass="device", k=k, r=r, baseline_s=baseline_s, current_s=current_s,
        ratio=ratio, ratio_low=ratio * 0.985, ratio_high=ratio * 1.015, slower=ratio - 1,
        cutoff=0.03, cutoff_reason="threshold", decisive=math.inf, one_run=math.inf,
        noise=0.008, noise_prior=0.008, noise_own=None, se=0.006, z=(ratio - 1) / 0.006,
        resolution=0.041, runs_needed=3, current_runs=runs, kind=kind, final=final,
    )  # fmt: skip
    why = tuple(map(said, environment if kind == "different-environment" else reasons))
    return Comparison(**common, terms=terms, lead=lead, figures=(lead,), reasons=why)


def result(
    test: str = "test_mm[4096-bf16]",
    *,
    kind: str | None = "no-change",
    ratio: float | None = 1.0,
    name: str | None = None,
    mode: str = "cuda-events",
    level: float = 5.0e-4,
    line: int | None = 12,
    seed: int = 0,
    measured: dict[str, Any] | None = None,
    **kw: Any,
) -> Result:
    """A result of ``test``; ``measured`` overrides its run's fields (``rounds``, ``id``, ...),
    ``kw`` goes to its comparison."""
    nodeid = f"tests/test_ops.py::{test}"
    cur = level * (ratio or 1.0)
    fields: dict[str, Any] = dict(
        id=BenchId(nodeid, name, mode, (("shape", "4096x4096"), ("dtype", "bfloat16"))),
        device="cuda",
        rounds=rounds(cur, seed=seed),
        calls_per_round=16,
        first_call_s=0.012,
        device_name="NVIDIA H200",
        flops=2 * 4096**3,
        peak_memory_bytes=3 * 2**25,
        policy=dict(POLICY),
        environment=dict(GPU_ENV),
    )
    fields.update(measured or {})
    fields.setdefault("run_id", "20251129T193800Z-abc123")
    res = Result(Run(**fields), location=["tests/test_ops.py", line] if line else None)
    if kind is not None:
        res.comparison = comparison(kind, ratio, baseline_s=level, **kw)
    return res


def session() -> list[Result]:
    """A session of every verdict kind, in an order that is not the report's."""
    return [
        result("test_add[1M]", kind="no-change", ratio=1.004, line=30, seed=1),
        result("test_mm[4096-bf16]", kind="regression", ratio=1.062, line=12, seed=2),
        result("test_softmax[8k]", kind="improvement", ratio=0.91, line=44, seed=3),
        result(
            "test_ln[4k]",
            kind="inconclusive",
            ratio=1.03,
            line=51,
            seed=4,
            reasons=(
                "too noisy: it neither shows a slowdown above the threshold nor rules out one of 5 %",
            ),
        ),
        result("test_mm[8192-bf16]", kind="regression", ratio=1.21, line=12, seed=5),
        result("test_new[1]", kind="no-baseline", ratio=None, line=60, seed=6),
        result(
            "test_conv[64]",
            kind="different-environment",
            ratio=1.5,
            line=70,
            seed=7,
            environment=("driver 575.57.08 -> 580.159.04",),
        ),
    ]


def save_history(root: Any, results: list[Result], runs: int = 6, name: str = "main") -> Any:
    """Save ``runs`` earlier runs of each result's benchmark into baseline ``name`` under ``root``."""
    from dataclasses import replace

    from pytest_gpuperf.baseline.store import BaselineStore

    store = BaselineStore(root)
    for i in range(runs):
        batch = []
        for res in results:
            ratio = res.comparison.ratio if res.comparison is not None else None
            level = res.run.median / (ratio or 1.0)
            old_rounds = rounds(level * (1 + 0.004 * (i % 3 - 1)), seed=100 + i)
            batch.append(replace(res.run, rounds=old_rounds, run_id=f"run-{i}"))
        store.save(name, batch, now=T0 + dt.timedelta(hours=i))
    return store.load(name)
