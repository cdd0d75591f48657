"""Overhead of reading the GPU's activity (NVML GPM) and the allocator after each measurement.

Run on the GPU machine from the repository root (about 30 s on an H200):

    python3 bench/activity_overhead.py --json $OUT/activity-overhead.json

The plugin reads GPM over a window of plain calls *after* the measured rounds (two GPM
samples, ~0.12 s apart, and the allocator's counters), so the measured figure cannot
include it; what it can change is the next measurement (the GPU stays warm and busy a
little longer) and the wall time of each benchmark. Measured like the telemetry overhead
(bench/telemetry_overhead.py): the plugin's own timers and loop, repetitions with the
window off and on in ABBA order, overhead = median of the paired ratios on/off - 1 with
a bootstrap 95 % interval, for
- x.add_(1) on 1M fp32 timed by CUDA-graph replay (~2 µs per call),
- a 4096^3 bf16 matmul timed by CUDA events (~200 µs per call),
- x.add_(1) by CUDA events without L2 flush (launch-bound: the host is the limit);
and the wall time each arm took. Also the cost of one GPM sample and of computing the
metrics. Without CUDA the same flow runs on the CPU with a fake window (no figures).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from telemetry_overhead import measure_pair, pct

from pytest_gpuperf.measure import engine
from pytest_gpuperf.measure.backend import Invocation, get
from pytest_gpuperf.measure.memory import allocator_counters
from pytest_gpuperf.measure.names import MODE_CPU, MODE_EVENTS, MODE_GRAPH
from pytest_gpuperf.measure.policy import MeasurePolicy
from pytest_gpuperf.shell.config import GpuPerfConfig
from pytest_gpuperf.shell.fixture import BenchContext, GpuBench


class _Plain:
    """The CPU's stand-in for a CUDA timer's plain_calls (smoke runs only)."""

    def __init__(self, timer: Any, fn: Any, args: tuple[Any, ...]) -> None:
        self.timer, self.fn, self.args = timer, fn, args

    def __getattr__(self, name: str) -> Any:
        return getattr(self.timer, name)

    def plain_calls(self, n: int) -> int:
        for _ in range(n):
            self.fn(*self.args)
        return n


class _FakeWindow:
    wanted = True

    def start(self) -> None:
        pass

    def stop(self, **facts: Any) -> dict[str, Any]:
        return {"available": False, "reason": "smoke run", **facts}


def sample_cost(tel: Any, n: int = 200) -> dict[str, Any]:
    """Wall and CPU time of one GPM sample, and of one metrics computation (two samples)."""
    w = tel.activity_window()
    if not w.wanted:
        return {"reason": w.reason}
    w.start()
    w.stop()
    t, c = time.perf_counter(), time.thread_time()
    for _ in range(n):
        w._take(0)
    sample = (1e6 * (time.perf_counter() - t) / n, 1e6 * (time.thread_time() - c) / n)
    t = time.perf_counter()
    for _ in range(20):
        w.start()
        w.stop()
    both = 1e6 * (time.perf_counter() - t) / 20
    return {"sample_wall_us": sample[0], "sample_cpu_us": sample[1], "window_us": both}


def print_row(r: dict[str, Any]) -> None:
    lo, hi = r["ci"]
    print(
        f"{r['name']}: off {r['off_us']:.2f} µs, on {r['on_us']:.2f} µs per call; "
        f"overhead {pct(r['overhead'])} (95 % CI {pct(lo)} to {pct(hi)}); wall per "
        f"measurement {r['wall_off_s']:.3f} s -> {r['wall_on_s']:.3f} s "
        f"(+{r['wall_on_s'] - r['wall_off_s']:.3f} s)",
        flush=True,
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from pytest_gpuperf.telemetry.probe import NvmlTelemetry

    smoke = not torch.cuda.is_available()
    dev = "cpu" if smoke else "cuda"
    tel = None if smoke else NvmlTelemetry()
    out: dict[str, Any] = {"gpu": "cpu (smoke run)" if smoke else torch.cuda.get_device_name()}
    out["gpm"] = {"reason": "smoke run"} if tel is None else sample_cost(tel)
    g = out["gpm"]
    print(f"GPU: {out['gpu']}")
    if "sample_wall_us" in g:
        print(
            f"one GPM sample: {g['sample_wall_us']:.1f} µs wall, {g['sample_cpu_us']:.1f} µs CPU; "
            f"two samples and the metrics: {g['window_us']:.1f} µs",
            flush=True,
        )
    else:
        print(f"GPM: {g.get('reason')}", flush=True)
    bench = GpuBench(
        BenchContext(
            "bench/activity_overhead.py::x", GpuPerfConfig.from_values({}, {}), "cuda",
            record=lambda r: None, after_measure=[],
            activity=(lambda: _FakeWindow()) if tel is None else tel.activity_window,
        )
    )  # fmt: skip
    n = 256 if smoke else 4096
    x = torch.zeros(1 << 20, device=dev)
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    flushed = MeasurePolicy(warmup_ms=200, min_warmup_ms=50, round_ms=5, rounds=30)
    hot = MeasurePolicy(warmup_ms=200, min_warmup_ms=50, round_ms=5, rounds=30, l2_flush=False)
    work = {
        "add_ 1M fp32, CUDA graph": (MODE_GRAPH, x.add_, (1,), flushed),
        "matmul 4096^3 bf16, CUDA events": (MODE_EVENTS, torch.matmul, (a, a), flushed),
        "add_ 1M fp32, events, launch-bound": (MODE_EVENTS, x.add_, (1,), hot),
    }
    rows = []
    for name, (mode, fn, fargs, pol) in work.items():
        timer = get(MODE_CPU if smoke else mode).make_timer(Invocation(fn, fargs), pol)
        timer.first_call()
        timer.prepare()
        if smoke:
            timer = _Plain(timer, fn, fargs)
        walls: dict[str, list[float]] = {"off": [], "on": []}
        seen: list[Any] = []

        def arm_on(
            go: Any, timer: Any = timer, walls: Any = walls, seen: Any = seen
        ) -> list[float]:
            t = time.perf_counter()
            before = allocator_counters()
            raw = go()
            after = allocator_counters()
            seen.append(bench._window(timer, raw, before, after))
            walls["on"].append(time.perf_counter() - t)
            return list(raw.rounds)

        def timed_off(timer: Any = timer, pol: Any = pol, walls: Any = walls) -> None:
            t = time.perf_counter()
            engine.run(timer, pol)
            walls["off"].append(time.perf_counter() - t)

        row = measure_pair(name, timer, pol, arm_on, args.reps)
        for _ in range(max(2, args.reps // 2)):
            timed_off()
        row["wall_off_s"] = statistics.median(walls["off"])
        row["wall_on_s"] = statistics.median(walls["on"])
        row["last_activity"], row["last_memory"] = seen[-1] if seen else (None, None)
        rows.append(row)
        print_row(row)  # as it comes: a run cut short keeps the rows done
        timer.close()
    if tel is not None:
        tel.close()
    out["rows"] = rows
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--reps", type=int, default=8, help="repetitions per arm (default 8)")
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_args()
    print("command: python3 bench/activity_overhead.py " + " ".join(sys.argv[1:]))
    t0 = time.perf_counter()
    doc = run(args)
    print(f"({time.perf_counter() - t0:.1f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
