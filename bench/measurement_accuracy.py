"""How precise and how honest is gpu_bench? Compared with do_bench, Timer and the kernels' own time.

Runs every method in fresh processes (interleaved), on the works in works.py:
  - gpu_bench, CUDA events with L2 flush and CUDA-graph replay (pytest + --gpuperf-json);
  - triton.testing.do_bench (median), torch.utils.benchmark.Timer.blocked_autorange (median);
  - ground truth, once: kernel-only time per call from torch.profiler (sum of the kernels of one
    call, median over calls) and from the replay of a 20-call CUDA graph.
Prints, per work and method: the median of the per-process medians, their spread
((max - min) / median), the ratio to the kernel-only time, and the wall time per measurement.

    python3 bench/measurement_accuracy.py --processes 5 --out /tmp/acc
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def worker_others(out: Path) -> None:
    import torch
    import torch.utils.benchmark as tb
    import triton.testing
    from works import WORKS

    res = {}
    for name, make in WORKS.items():
        fn, _, _ = make()
        fn()
        torch.cuda.synchronize()
        t = time.perf_counter()
        db = triton.testing.do_bench(fn, return_mode="median") / 1e3
        db_wall = time.perf_counter() - t
        t = time.perf_counter()
        m = tb.Timer(stmt="fn()", globals={"fn": fn}).blocked_autorange(min_run_time=0.2)
        tm_wall = time.perf_counter() - t
        res[name] = {
            "do_bench": db,
            "do_bench_wall": db_wall,
            "timer": m.median,
            "timer_wall": tm_wall,
        }
    out.write_text(json.dumps(res))


def worker_truth(out: Path) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile
    from works import WORKS

    res = {}
    for name, make in WORKS.items():
        fn, _, _ = make()
        fn()
        # The same clock regime as the measurements: half a second of the work first.
        t = time.perf_counter()
        while time.perf_counter() - t < 0.5:
            fn()
        torch.cuda.synchronize()
        n = 50
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(n):
                fn()
            torch.cuda.synchronize()
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        total = sum(e.device_time for e in kernels) / 1e6  # us -> s
        per_call_kernel = total / n
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(20):
                fn()
        times = []
        for _ in range(30):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3 / 20)
        res[name] = {
            "kernel": per_call_kernel,
            "kernels_per_call": len(kernels) / n,
            "graph20": statistics.median(times),
        }
    out.write_text(json.dumps(res))


def spread(xs: list[float]) -> float:
    return (max(xs) - min(xs)) / statistics.median(xs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--processes", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("/tmp/gpuperf-accuracy"))
    ap.add_argument("--worker", choices=["others", "truth"])
    ap.add_argument("--file", type=Path)
    args = ap.parse_args()
    if args.worker == "others":
        return worker_others(args.file)
    if args.worker == "truth":
        return worker_truth(args.file)

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    me = [sys.executable, str(Path(__file__).resolve())]
    subprocess.run(
        [*me, "--worker", "truth", "--file", str(out / "truth.json")], check=True, env=env
    )
    for i in range(args.processes):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                str(HERE / "bench_gpu_bench.py"),
                "-q",
                "-p",
                "no:cacheprovider",
                "--gpuperf-device=cuda",
                f"--gpuperf-json={out}/gb-{i}.json",
                "-o",
                "python_files=bench_*.py",
                "--rootdir",
                str(HERE),
            ],
            check=True,
            env=env,
            cwd=HERE,
            stdout=(out / f"gb-{i}.log").open("w"),
            stderr=subprocess.STDOUT,
        )
        subprocess.run(
            [*me, "--worker", "others", "--file", str(out / f"other-{i}.json")], check=True, env=env
        )
        print(f"process pair {i + 1}/{args.processes} done", flush=True)
    report(out, args.processes)


def report(out: Path, n: int) -> None:
    truth = json.loads((out / "truth.json").read_text())
    per: dict[tuple[str, str], dict[str, list[float]]] = {}

    def add(work: str, method: str, value: float, wall: float) -> None:
        d = per.setdefault((work, method), {"med": [], "wall": []})
        d["med"].append(value)
        d["wall"].append(wall)

    for i in range(n):
        doc = json.loads((out / f"gb-{i}.json").read_text())
        for r in doc["results"]:
            work = r["id"]["nodeid"].split("[")[1].rstrip("]")
            method = "gpu_bench events" if r["id"]["mode"] == "cuda-events" else "gpu_bench graph"
            first = r["first_call_s"] if r["id"]["mode"] == "cuda-events" else 0.0
            add(work, method, r["summary"]["median"], r["wall_s"] - first)
        other = json.loads((out / f"other-{i}.json").read_text())
        for work, d in other.items():
            add(work, "do_bench", d["do_bench"], d["do_bench_wall"])
            add(work, "Timer", d["timer"], d["timer_wall"])
    rows = []
    for (work, method), d in sorted(per.items()):
        med = statistics.median(d["med"])
        k = truth[work]["kernel"]
        rows.append(
            f"| {work} | {method} | {med * 1e6:.2f} | {' / '.join(f'{x * 1e6:.2f}' for x in d['med'])} "
            f"| {100 * spread(d['med']):.2f} % | {med / k:.3f} | {statistics.mean(d['wall']):.2f} s |"
        )
    print(
        "\nkernel-only time per call (profiler; graph of 20 calls): "
        + ", ".join(
            f"{w} {t['kernel'] * 1e6:.2f} us ({t['graph20'] * 1e6:.2f} us, {t['kernels_per_call']:.0f} kernels)"
            for w, t in truth.items()
        )
    )
    print(
        "\n| work | method | median of process medians (us) | per process (us) | spread | / kernel time | wall per measurement |"
    )
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
