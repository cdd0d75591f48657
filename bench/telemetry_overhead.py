"""Overhead of NVML telemetry sampling and NVTX ranges on pytest-gpuperf measurements.

Run on the GPU machine from the repository root (about a minute):

    python3 bench/telemetry_overhead.py                 # default sampling interval (10 ms)
    python3 bench/telemetry_overhead.py --intervals 5,10,20 --json $OUT/overhead.json

What it measures:
1. the cost of reading one sample (wall and CPU time of the thread), NVML or a fake;
2. the worst case for the host: how much a CPU-bound Python loop slows down while
   the sampler thread runs (both want the GIL);
3. on a GPU, with the plugin's own timers and measurement loop, alternating
   repetitions with the probe off and on (order ABBA), the median per-call time of
   - x.add_(1) on 1M fp32 timed by CUDA-graph replay (~2 us per call) and
   - a 4096^3 bf16 matmul timed by CUDA events (~200 us per call);
   overhead = median of the paired ratios on/off - 1, with a bootstrap 95 % interval;
4. NVTX: the cost of one range, and the graph-replayed add_ with ranges off and on.

Without CUDA only 1 and 2 run; without NVML they run on a fake reader.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pytest_gpuperf.measure.names import MODE_CPU, MODE_EVENTS, MODE_GRAPH
from pytest_gpuperf.measure.nvtx_ranges import NvtxRanges
from pytest_gpuperf.model import BenchId
from pytest_gpuperf.telemetry import nvml
from pytest_gpuperf.telemetry.probe import NvmlTelemetry
from pytest_gpuperf.telemetry.stream import Sample


def pct(x: float) -> str:
    return f"{100 * x:+.2f} %"


def bootstrap_ci(ratios: list[float], n: int = 4000, seed: int = 1) -> tuple[float, float]:
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choice(ratios) for _ in ratios) for _ in range(n))
    return meds[int(0.025 * n)] - 1, meds[int(0.975 * n) - 1] - 1


# --- 1 and 2: the sampler on the host -------------------------------------------------


def make_readers() -> tuple[dict[str, Callable[[], Sample]], str]:
    """Sample readers (all metrics / SM clock and reasons only) for torch's GPU, else fakes."""
    try:
        nv = nvml.open_nvml()
        uuid, index = None, 0
        try:
            import torch

            if torch.cuda.is_available():
                index = torch.cuda.current_device()
                uuid = str(getattr(torch.cuda.get_device_properties(index), "uuid", "")) or None
        except Exception:
            pass
        dev = nvml.select_device(
            nv, uuid=uuid, cuda_index=index, visible=os.environ.get("CUDA_VISIBLE_DEVICES")
        )
        clock = time.perf_counter
        readers = {
            "all metrics": nvml.sample_reader(dev, clock, slow_every=1),
            "SM clock + reasons": nvml.sample_reader(dev, clock, slow_every=10**9),
        }
        return readers, f"NVML, GPU {dev.index} {dev.name}, selected by {dev.selected_by}"
    except Exception as e:
        print(f"(NVML unavailable: {e}; using a fake reader)")

        def fake() -> Sample:
            a = time.perf_counter()
            b = time.perf_counter()
            return Sample((a + b) / 2, 1980, 3201, 250.0, 40, 99, 50, 0)

        return {"all metrics": fake}, "fake (pure Python, no NVML)"


def sample_cost(read: Callable[[], Sample], n: int = 2000) -> dict[str, float]:
    read()
    w, c = time.perf_counter(), time.thread_time()
    for _ in range(n):
        read()
    return {
        "wall_us": 1e6 * (time.perf_counter() - w) / n,
        "cpu_us": 1e6 * (time.thread_time() - c) / n,
    }


def spin(seconds: float) -> float:
    """Iterations per second of a pure-Python loop (holds the GIL all the time)."""
    n = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        n += 1
    return n / seconds


def gil_slowdown(
    read: Callable[[], Sample] | None, interval_ms: float, reps: int = 20
) -> dict[str, Any]:
    """Slowdown of a CPU-bound loop with the sampler running (``read=None``: A/A control)."""
    ratios, rates = [], []
    for i in range(reps):
        s = nvml.Sampler(read, interval_s=interval_ms / 1000) if read else None

        def start(s: nvml.Sampler | None = s) -> None:
            if s:
                s.start()

        def stop(s: nvml.Sampler | None = s) -> None:
            if s:
                s.stop()

        if i % 2:
            start()
            on = spin(0.1)
            stop()
            off = spin(0.1)
        else:
            off = spin(0.1)
            start()
            on = spin(0.1)
            stop()
        ratios.append(off / on)
        rates.append(len(s.samples) / 0.1 if s else 0.0)
    lo, hi = bootstrap_ci(ratios)
    return {
        "slowdown": statistics.median(ratios) - 1,
        "ci": (lo, hi),
        "samples_per_s": statistics.median(rates),
    }


# --- 3 and 4: measurements on the GPU ----------------------------------------------------


def measure_pair(
    name: str,
    timer: Any,
    policy: Any,
    arm_on: Callable[[Callable[[], Any]], Any],
    reps: int,
    sm_clock: Callable[[], float | None] | None = None,
) -> dict[str, Any]:
    """ABBA repetitions of the off and on arms; ``sm_clock`` (read before and after each
    arm, in both arms alike) also gives the overhead in cycles: time x mean SM clock, which
    takes out the clock moving between repetitions under the power cap."""
    from pytest_gpuperf.measure import engine

    def clocked(arm: Callable[[], float]) -> tuple[float, float | None]:
        c0 = sm_clock() if sm_clock else None
        t = arm()
        c1 = sm_clock() if sm_clock else None
        return t, (c0 + c1) / 2 if c0 and c1 else None

    def off() -> tuple[float, float | None]:
        return clocked(lambda: statistics.median(engine.run(timer, policy).rounds))

    def on() -> tuple[float, float | None]:
        return clocked(lambda: statistics.median(arm_on(lambda: engine.run(timer, policy))))

    offs, ons, ratios, cycle_ratios = [], [], [], []
    for i in range(reps):
        if i % 2 == 0:
            a, b = off(), on()
        else:
            b, a = on(), off()
        offs.append(a[0])
        ons.append(b[0])
        ratios.append(b[0] / a[0])
        if a[1] and b[1]:
            cycle_ratios.append(b[0] * b[1] / (a[0] * a[1]))
    lo, hi = bootstrap_ci(ratios)
    row = {
        "name": name,
        "off_us": 1e6 * statistics.median(offs),
        "on_us": 1e6 * statistics.median(ons),
        "overhead": statistics.median(ratios) - 1,
        "ci": (lo, hi),
        "rep_spread": (max(offs) - min(offs)) / statistics.median(offs),
        "reps": reps,
    }
    if len(cycle_ratios) == reps:
        row["overhead_cycles"] = statistics.median(cycle_ratios) - 1
        row["ci_cycles"] = bootstrap_ci(cycle_ratios)
    return row


def gpu_sections(
    interval_ms: float,
    reps: int,
    results: dict[str, Any],
    smoke: bool = False,
    sm_clock: Callable[[], float | None] | None = None,
) -> None:
    """The GPU measurements; ``smoke``: the same flow on the CPU with tiny work (no figures)."""
    import torch

    from pytest_gpuperf.measure.backend import Invocation, get
    from pytest_gpuperf.measure.policy import MeasurePolicy

    dev = "cpu" if smoke else "cuda"
    n = 256 if smoke else 4096
    policy = MeasurePolicy(warmup_ms=200, min_warmup_ms=50, round_ms=5, rounds=30)
    x = torch.zeros(1 << 20, device=dev)
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    # an fp32 matmul of about the same time (no TF32): draws less power than the bf16 one
    n32 = 128 if smoke else 2048
    a32 = torch.randn(n32, n32, device=dev)
    b32 = torch.randn(n32, n32, device=dev)
    hot = MeasurePolicy(warmup_ms=200, min_warmup_ms=50, round_ms=5, rounds=30, l2_flush=False)
    work = {
        "add_ 1M fp32, CUDA graph": (MODE_GRAPH, x.add_, (1,), policy),
        "matmul 4096^3 bf16, CUDA events": (MODE_EVENTS, torch.matmul, (a, b), policy),
        "matmul 2048^3 fp32, CUDA events": (MODE_EVENTS, torch.matmul, (a32, b32), policy),
        # host-bound: the measuring thread is busy in Python, the worst case for the GIL
        "add_ 1M fp32, events, launch-bound": (MODE_EVENTS, x.add_, (1,), hot),
    }
    timers = {}
    for name, (mode, fn, args, pol) in work.items():
        t = get(MODE_CPU if smoke else mode).make_timer(Invocation(fn, args), pol)
        t.first_call()
        t.prepare()
        timers[name] = (pol, t)

    # smoke: no CUDA device to ask torch about, so NVML's GPU 0
    tel = (
        NvmlTelemetry(interval_ms=interval_ms, identity=lambda: (0, None))
        if smoke
        else NvmlTelemetry(interval_ms=interval_ms)
    )
    last: dict[str, Any] = {}

    def with_probe(key: str) -> Callable[[Callable[[], Any]], list[float]]:
        def arm(run: Callable[[], Any]) -> list[float]:
            with tel.probe(BenchId(key), time.perf_counter) as finish:
                raw = run()
                last[key] = finish(raw)
            return list(raw.rounds)

        return arm

    # sustained load first, so that both arms see the same (power-capped) clocks
    mm_end = time.perf_counter() + (0.1 if smoke else 3.0)
    while time.perf_counter() < mm_end:
        for _ in range(50):
            torch.matmul(a, b)
        if not smoke:
            torch.cuda.synchronize()

    rows = []
    for name, (pol, t) in timers.items():
        row = measure_pair(name, t, pol, with_probe(name), reps, sm_clock)
        row["what"] = f"telemetry every {interval_ms:g} ms"
        rows.append(row)
        tele = last.get(name, {})
        row["telemetry"] = {
            k: tele.get(k)
            for k in (
                "available",
                "reason",
                "sm_clock_mhz",
                "power_w",
                "clock_events",
                "throttled_share",
                "samples_total",
                "rounds_checked",
                "throttled_rounds",
                "machine_throttled_rounds",
            )
        }
    tel.close()

    ranges = NvtxRanges(enabled=True)
    add_name = "add_ 1M fp32, CUDA graph"
    bid = BenchId("bench/telemetry_overhead.py::add", None, MODE_GRAPH)

    def nvtx_arm(run: Callable[[], Any]) -> list[float]:
        from pytest_gpuperf.measure import engine

        with ranges(bid, "benchmark"):
            raw = engine.run(timers[add_name][1], policy, phase=lambda n: ranges(bid, n))
        return list(raw.rounds)

    row = measure_pair(add_name, timers[add_name][1], policy, nvtx_arm, reps, sm_clock)
    row["what"] = f"NVTX ranges ({ranges.backend})"
    rows.append(row)
    for _, t in timers.values():
        t.close()
    results["gpu"] = rows


def nvtx_range_cost(n: int = 20000) -> dict[str, Any]:
    ranges = NvtxRanges(enabled=True)
    bid = BenchId("bench::x", None, MODE_GRAPH)
    with ranges(bid, "benchmark"):
        pass
    t = time.perf_counter()
    for _ in range(n):
        with ranges(bid, "measure"):
            pass
    return {"backend": ranges.backend, "us_per_range": 1e6 * (time.perf_counter() - t) / n}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--intervals", default="10", help="sampling intervals in ms, comma-separated")
    p.add_argument("--reps", type=int, default=10, help="repetitions per arm (default 10)")
    p.add_argument("--json", help="also write the figures to this file")
    p.add_argument(
        "--cpu-smoke",
        action="store_true",
        help="run the GPU section's flow on the CPU (checks the script, measures nothing)",
    )
    args = p.parse_args()
    intervals = [float(v) for v in args.intervals.split(",")]
    results: dict[str, Any] = {"intervals_ms": intervals, "reps": args.reps}
    t_start = time.perf_counter()

    readers, source = make_readers()
    print(f"sampling {source}")
    results["sample_cost"] = {"source": source}
    for what, reader in readers.items():
        cost = sample_cost(reader)
        results["sample_cost"][what] = cost
        print(f"one sample, {what}: {cost['wall_us']:.1f} us wall, {cost['cpu_us']:.1f} us CPU")
    read = next(iter(readers.values()))

    def sm_clock() -> float | None:
        return read().sm_clock_mhz

    results["gil"] = {}
    aa = gil_slowdown(None, 10)
    results["gil"]["A/A"] = aa
    print(
        f"CPU-bound Python loop, A/A control (no sampler): {pct(aa['slowdown'])} "
        f"[{pct(aa['ci'][0])}, {pct(aa['ci'][1])}]"
    )
    for iv in intervals:
        g = gil_slowdown(read, iv)
        results["gil"][str(iv)] = g
        print(
            f"CPU-bound Python loop with the sampler every {iv:g} ms: {pct(g['slowdown'])} "
            f"[{pct(g['ci'][0])}, {pct(g['ci'][1])}] ({g['samples_per_s']:.0f} samples/s)"
        )
    nv = nvtx_range_cost()
    results["nvtx_range"] = nv
    print(f"one NVTX range ({nv['backend']}): {nv['us_per_range']:.2f} us")

    try:
        import torch

        cuda = torch.cuda.is_available()
    except ImportError:
        cuda = False
    if args.cpu_smoke:
        cuda = True
    if not cuda:
        print("no CUDA here: the GPU measurements are skipped")
    else:
        for iv in intervals:
            try:
                gpu_sections(iv, args.reps, results, smoke=args.cpu_smoke, sm_clock=sm_clock)
            except Exception:
                traceback.print_exc()
                results.setdefault("errors", []).append(traceback.format_exc())
                continue
            print()
            print(
                f"{'workload':34} {'what':28} {'off (us)':>10} {'on (us)':>10} {'overhead':>10} "
                f"{'95% CI':>22} {'rep spread':>10}"
            )
            for r in results["gpu"]:
                ci = f"[{pct(r['ci'][0])}, {pct(r['ci'][1])}]"
                print(
                    f"{r['name']:34} {r['what']:28} {r['off_us']:10.3f} {r['on_us']:10.3f} "
                    f"{pct(r['overhead']):>10} {ci:>22} {100 * r['rep_spread']:9.2f}%"
                )
            for r in results["gpu"]:
                if "overhead_cycles" in r:
                    lo, hi = r["ci_cycles"]
                    print(
                        f"  in cycles (time x SM clock read around each arm), {r['name']}, "
                        f"{r['what']}: {pct(r['overhead_cycles'])} [{pct(lo)}, {pct(hi)}]"
                    )
            for r in results["gpu"]:
                if r.get("telemetry"):
                    print(f"  telemetry of {r['name']}: {json.dumps(r['telemetry'])}")
            results.setdefault("gpu_by_interval", {})[str(iv)] = results.pop("gpu")
    results["wall_s"] = time.perf_counter() - t_start
    print(f"\ntotal {results['wall_s']:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
