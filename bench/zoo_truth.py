"""Ground truth of the regression zoo: each case's bad/good ratio, measured without the plugin.

For every case both variants are built in one process and measured in alternation
(good, bad, good, bad, ... ``--blocks`` times), so that slow drifts of the machine fall on
both alike. Two figures per block, each written here by hand with CUDA events:

* end-to-end: one event pair around ``--calls`` back-to-back calls (what a loop pays);
* device: a ``torch.cuda._sleep`` spin holds the stream while the host enqueues the same
  calls, then one event pair around them (the GPU alone, host hidden; nvbench's method).

The ratio is the median over blocks of bad / good. Prints a table; ``--json`` writes it.

    python3 bench/zoo_truth.py --json truth.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "zoo"))
from cases import CASES


def per_call(fn, calls: int, spin_s: float) -> float:
    import torch

    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if spin_s:
        torch.cuda._sleep(int(spin_s * 2.0e9))  # cycles at <= 2 GHz: at least spin_s
    a.record()
    for _ in range(calls):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / 1e3 / calls


def measure(case, blocks: int, target_s: float) -> dict:
    import torch

    fns = {v: case.make("cuda", v == "bad") for v in ("good", "bad")}
    calls = {}
    for v, fn in fns.items():
        for _ in range(20):  # compile, autotune, recompile to the limit
            fn()
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        one = max(time.perf_counter() - t, 1e-6)
        calls[v] = max(1, min(200, int(target_s / one)))
    n = min(calls.values())
    out: dict[str, list[float]] = {f"{v}_{f}": [] for v in fns for f in ("e2e", "device")}
    for _ in range(blocks):
        for v, fn in fns.items():
            e2e = per_call(fn, n, 0.0)
            out[f"{v}_e2e"].append(e2e)
            # The spin covers the host's enqueue of n calls (at most their e2e time) twice over.
            out[f"{v}_device"].append(per_call(fn, n, min(0.5, 2 * n * e2e + 1e-4)))
    med = {k: statistics.median(xs) for k, xs in out.items()}
    return {
        "case": case.name,
        "kind": case.kind,
        "calls": n,
        **{k: v for k, v in med.items()},
        "ratio_e2e": statistics.median(
            b / g for g, b in zip(out["good_e2e"], out["bad_e2e"], strict=True)
        ),
        "ratio_device": statistics.median(
            b / g for g, b in zip(out["good_device"], out["bad_device"], strict=True)
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--blocks", type=int, default=7)
    ap.add_argument("--target-ms", type=float, default=20.0, help="time of one block of calls")
    ap.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        sys.exit("zoo_truth.py needs a GPU")
    wanted = {c for c in args.cases.split(",") if c}
    rows = []
    print(f"{'case':28} {'kind':9} {'good e2e':>10} {'bad e2e':>10} {'ratio':>7} "
          f"{'good dev':>10} {'bad dev':>10} {'ratio':>7}")  # fmt: skip
    for case in CASES:
        if wanted and case.name not in wanted:
            continue
        try:
            row = measure(case, args.blocks, args.target_ms / 1e3)
        except Exception as e:  # one broken case must not lose the others
            print(f"{case.name:28} ERROR {type(e).__name__}: {str(e).splitlines()[0][:100]}")
            continue
        rows.append(row)
        print(
            f"{case.name:28} {case.kind:9} {row['good_e2e'] * 1e6:9.1f}u {row['bad_e2e'] * 1e6:9.1f}u "
            f"{row['ratio_e2e']:7.3f} {row['good_device'] * 1e6:9.1f}u "
            f"{row['bad_device'] * 1e6:9.1f}u {row['ratio_device']:7.3f}",
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
