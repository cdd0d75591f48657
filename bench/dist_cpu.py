"""What a world_size= test costs on the CPU (gloo): starting its ranks, and its measurement.

    PYTHONPATH=. python bench/dist_cpu.py [--repeats 3]

Runs, in fresh pytest processes on a generated project (an all_reduce of 64 KiB, 10 rounds
of 5 ms): a session of one world_size=2 test, one of four (they share one start of the
ranks), one of one world_size=4 test, and one of the same all_reduce without world_size (in
one process, as a reference for the session's own cost). Prints each session's wall time
(the median of ``--repeats``) and what a start of the ranks adds over the one-process
session; then the plugin's busbw beside bench/busbw.py's for all_reduce at 1 MiB and 4 MiB
(gloo, 2 ranks), each run in its own process.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = """
import pytest
import torch
import torch.distributed as dist

@pytest.mark.gpuperf(world_size=2, collective="all_reduce")
@pytest.mark.parametrize("i", range({n}))
def test_two(gpu_bench, i):
    gpu_bench(dist.all_reduce, torch.ones(1 << 14))

@pytest.mark.gpuperf(world_size=4, collective="all_reduce")
def test_four(gpu_bench):
    gpu_bench(dist.all_reduce, torch.ones(1 << 14))

@pytest.mark.gpuperf
def test_one_process(gpu_bench):
    x = torch.ones(1 << 14)
    gpu_bench(x.add_, 1.0)
"""
FAST = ["--gpuperf-rounds=10", "--gpuperf-round-ms=5", "--gpuperf-warmup-ms=150",
        "--gpuperf-min-warmup-ms=50", "-p", "no:cacheprovider", "-q"]  # fmt: skip


def session(folder: Path, select: str, n: int) -> float:
    (folder / "test_dist.py").write_text(PROJECT.replace("{n}", str(n)))
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest", "test_dist.py", "-k", select, *FAST],
                   cwd=folder, check=True, capture_output=True)  # fmt: skip
    return time.perf_counter() - t


def busbw(folder: Path) -> None:
    sizes = [1, 4]
    proj = "\n".join(
        f"@pytest.mark.gpuperf(world_size=2, collective='all_reduce')\n"
        f"def test_all_reduce_{s}MiB(gpu_bench):\n"
        f"    gpu_bench(dist.all_reduce, torch.ones({s} << 18))\n"
        for s in sizes
    )
    (folder / "test_bw.py").write_text(
        "import pytest\nimport torch\nimport torch.distributed as dist\n\n" + proj
    )
    subprocess.run([sys.executable, "-m", "pytest", "test_bw.py", *FAST, "--gpuperf-json=bw.json"],
                   cwd=folder, check=True, capture_output=True)  # fmt: skip
    doc = json.loads((folder / "bw.json").read_text())
    plugin = {r["id"]["nodeid"].rsplit("_", 1)[-1]: r["gbps"] for r in doc["results"]}
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         str(ROOT / "bench" / "busbw.py"), "--backend", "gloo", "--dtype", "float32",
         "--sizes", ",".join(f"{s}M" for s in sizes), "--json", str(folder / "b.json")],
        cwd=folder, capture_output=True, text=True, check=True,
    )  # fmt: skip
    del out
    bench = {x["id"]: x["busbw_gbps"] for x in json.loads((folder / "b.json").read_text())["sizes"]}
    for s in sizes:
        key = f"{s}MiB"
        # all_reduce at 2 ranks: busbw = algbw (factor 1)
        print(f"  all_reduce {key}: plugin busbw {plugin[key]:.3g} GB/s, bench/busbw.py "
              f"{bench[key]:.3g} GB/s ({100 * (plugin[key] / bench[key] - 1):+.0f} %)")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    print(f"python bench/dist_cpu.py --repeats {args.repeats}  (CPU, gloo)")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        cases = [("one process, 1 test", "one_process", 1), ("world_size=2, 1 test", "two", 1),
                 ("world_size=2, 4 tests", "two", 4), ("world_size=4, 1 test", "four", 1)]  # fmt: skip
        walls = {}
        for label, select, n in cases:
            walls[label] = statistics.median(
                session(folder, select, n) for _ in range(args.repeats)
            )
            print(f"  {label:24} {walls[label]:6.1f} s per session (median of {args.repeats})")
        base = walls["one process, 1 test"]
        print(f"  a start of 2 ranks adds {walls['world_size=2, 1 test'] - base:.1f} s; of 4 ranks "
              f"{walls['world_size=4, 1 test'] - base:.1f} s; 3 more tests in the same start "
              f"{walls['world_size=2, 4 tests'] - walls['world_size=2, 1 test']:.1f} s")  # fmt: skip
        busbw(folder)


if __name__ == "__main__":
    main()
