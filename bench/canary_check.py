"""Does the host-speed canary track a slow host, and what does it cost? (CPU machine)

``premise``: fresh pytest processes of three CPU benchmarks, each measured with the
plugin's defaults (``--gpuperf-device=cpu``, so each result carries its canary), under four
conditions of the host:

* ``quiet``: nothing else on the core;
* ``neighbour``: a busy loop pinned to the same core as the benchmark's process (both under
  ``taskset``), the slow host the CPU checks use;
* ``other-core``: the busy loop on another core (it shares caches, and a core's sibling);
* ``tracer``: ``sys.settrace`` from a conftest, as coverage.py does.

For each benchmark and condition it prints the median per-call time over the quiet one
(the slowdown the host caused), the canary's host factor (time per op over the share of a
CPU) over the quiet one, and the residual (the first over the second: 1.00 means the canary
saw exactly the host's slowdown). The benchmarks: ``work`` (a fixed pure-Python loop),
``ops`` (20 tiny torch ops from a Python loop, the shape of host-bound GPU code) and
``matmul`` (a 128x128 torch matmul, one thread).

``cost``: what the canary adds: its own cost per benchmark as the results record it
(``host_canary.cost_s``), against the benchmark's measurement (``wall_s``), and a direct
timing of the canary's samples in this process.

    python3 bench/canary_check.py premise --processes 3
    python3 bench/canary_check.py cost

CPU timings on a shared machine are only as quiet as the machine: the lead re-runs it on an
idle one.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SUITE = """
import torch

torch.set_num_threads(1)
X = torch.ones(1)
A = torch.randn(128, 128)


def work():
    s = 0
    for i in range(3000):
        s += i * i
    return s


def ops():
    for _ in range(20):
        X.mul_(1.0)
    return X


def test_work(gpu_bench):
    gpu_bench(work)


def test_ops(gpu_bench):
    gpu_bench(ops)


def test_matmul(gpu_bench):
    gpu_bench(torch.mm, A, A)
"""

TRACER = """
import os
import sys


def _trace(frame, event, arg):
    return _trace


if os.environ.get("TRACE") == "1":
    sys.settrace(_trace)
"""

CONDITIONS = ("quiet", "neighbour", "other-core", "tracer")


def _cores() -> tuple[int, int]:
    cores = sorted(os.sched_getaffinity(0))
    return cores[-1], cores[0] if len(cores) > 1 else cores[-1]


def one_process(root: Path, condition: str, tag: str) -> list[dict]:
    """One fresh pytest process of the suite under ``condition``; its results."""
    mine, other = _cores()
    out = root / f"{tag}.json"
    env = dict(os.environ, TRACE="1" if condition == "tracer" else "0")
    env.pop("PYTEST_ADDOPTS", None)
    cmd = [sys.executable, "-m", "pytest", "test_suite.py", "-q", "-p", "no:cacheprovider",
           "-p", "no:randomly", "--gpuperf-device=cpu", "--gpuperf-capture=never",
           f"--gpuperf-json={out}"]  # fmt: skip
    busy = None
    if condition in ("neighbour", "other-core"):
        cmd = ["taskset", "-c", str(mine), *cmd]
        where = mine if condition == "neighbour" else other
        busy = subprocess.Popen(
            ["taskset", "-c", str(where), sys.executable, "-c", "while True: pass"]
        )
        time.sleep(0.2)
    elif condition == "quiet":
        cmd = ["taskset", "-c", str(mine), *cmd]
    try:
        subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, check=False)
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    return json.loads(out.read_text())["results"] if out.exists() else []


def _factor(canary: dict | None) -> float | None:
    if not canary or not canary.get("op_s"):
        return None
    return float(canary["op_s"]) / float(canary.get("share") or 1.0)


def premise(processes: int) -> None:
    rows: dict[tuple[str, str], list[tuple[float, float | None]]] = {}
    with tempfile.TemporaryDirectory(prefix="gpuperf-canary-") as tmp:
        root = Path(tmp)
        (root / "test_suite.py").write_text(SUITE)
        (root / "conftest.py").write_text(TRACER)
        for i in range(processes):
            for condition in CONDITIONS:  # interleaved: drifts of the machine fall on all
                for r in one_process(root, condition, f"{condition}-{i}"):
                    test = r["id"]["nodeid"].rsplit("::", 1)[-1].removeprefix("test_")
                    rows.setdefault((test, condition), []).append(
                        (float(r["summary"]["median"]), _factor(r.get("host_canary")))
                    )
    print(f"{'benchmark':8} {'condition':11} {'slowdown':>9} {'canary':>7} {'residual':>9}  "
          "per process: slowdown / canary")  # fmt: skip
    for test in ("work", "ops", "matmul"):
        quiet = rows.get((test, "quiet")) or []
        if not quiet:
            continue
        t0 = statistics.median(t for t, _ in quiet)
        f0 = statistics.median(f for _, f in quiet if f) if any(f for _, f in quiet) else None
        for condition in CONDITIONS:
            got = rows.get((test, condition)) or []
            if not got or f0 is None:
                continue
            slow = [t / t0 for t, _ in got]
            canary = [f / f0 for _, f in got if f]
            s, c = statistics.median(slow), statistics.median(canary) if canary else math.nan
            each = " ".join(f"{a:.2f}/{b:.2f}" for a, b in zip(slow, canary, strict=False))
            print(f"{test:8} {condition:11} {s:8.2f}x {c:6.2f}x {s / c:8.2f}x  {each}")


def cost() -> None:
    from pytest_gpuperf.measure.canary import CanaryWindow, canary_for

    with tempfile.TemporaryDirectory(prefix="gpuperf-canary-") as tmp:
        root = Path(tmp)
        (root / "test_suite.py").write_text(SUITE)
        (root / "conftest.py").write_text(TRACER)
        results = one_process(root, "quiet", "cost")
    for r in results:
        c = r.get("host_canary") or {}
        share = 100 * c.get("cost_s", math.nan) / r["wall_s"]
        print(
            f"{r['id']['nodeid'].rsplit('::', 1)[-1]:12} canary {1e3 * c.get('cost_s', 0):.2f} ms "
            f"of a {1e3 * r['wall_s']:.0f} ms measurement ({share:.2f} %), {c.get('kind')}"
        )
    canary = canary_for("cpu")
    costs = []
    for _ in range(200):
        w = CanaryWindow(canary)
        w._sample()
        w._sample()
        costs.append(w.cost_s)
    print(
        f"in this process: {1e3 * statistics.median(costs):.3f} ms per benchmark (median of 200; "
        f"max {1e3 * max(costs):.3f} ms), kind {canary.kind if canary else None}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("what", choices=("premise", "cost"))
    ap.add_argument("--processes", type=int, default=3)
    args = ap.parse_args()
    print(f"$ python3 bench/canary_check.py {' '.join(sys.argv[1:])}")
    if args.what == "premise":
        premise(args.processes)
    else:
        cost()


if __name__ == "__main__":
    main()
