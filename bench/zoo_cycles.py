"""Would clock-normalised time steady the power-capped benchmarks? Checked on a measured pool.

A GEMM under the H200's power cap runs at a clock that moves from process to process,
and its time with it: the zoo's 4096³ GEMM spreads by up to 27 % between fresh processes,
so a +5 % slowdown of it cannot be told from a slow process. If each round's time were
multiplied by the SM clock NVML saw during that round (cycles instead of seconds), the
clock's share of that spread would cancel. This script measures whether it does: for every
case of a pool made by ``zoo_campaign.py pool``, the between-process spread of each run's
median time and of its median cycles, as ratios to the fastest run.

    python3 bench/zoo_cycles.py z0/pool z1/pool [--cases gemm_4096_plus5,benign_matmul_operator]

Prints, per pool folder, case and variant, the sorted ratios and the largest; a figure
worth judging on would show a smaller largest ratio for cycles than for time.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path


def runs(folder: Path) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """(case, variant) -> [(median time, median cycles)] per run, from each round's clock."""
    out: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for js in sorted(folder.glob("*.json")):
        variant = "bad" if js.name.startswith("bad") else "good"
        for r in json.loads(js.read_text())["results"]:
            case = r["id"]["nodeid"].split("[", 1)[1].rstrip("]")
            rounds = r.get("rounds") or []
            clocks = (r.get("telemetry") or {}).get("round_sm_clock_mhz") or []
            n = min(len(rounds), len(clocks))
            if n < 3:
                continue  # no per-round clock (CPU, telemetry off): nothing to normalise
            pairs = list(zip(rounds[-n:], clocks[-n:], strict=True))
            out[case, variant].append(
                (statistics.median(rounds), statistics.median(t * c for t, c in pairs))
            )
    return out


def spread(xs: list[float]) -> list[float]:
    lo = min(xs)
    return sorted(x / lo for x in xs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("pools", nargs="+", type=Path)
    ap.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    args = ap.parse_args(argv)
    wanted = {c for c in args.cases.split(",") if c}
    print(
        f"{'pool':<10} {'case':<26} {'variant':<7} {'figure':<7} {'max':>6}  ratios to the fastest"
    )
    for folder in args.pools:
        for (case, variant), rs in sorted(runs(folder).items()):
            if wanted and case not in wanted:
                continue
            for name, xs in (("time", [t for t, _ in rs]), ("cycles", [c for _, c in rs])):
                s = spread(xs)
                row = " ".join(f"{x:.3f}" for x in s)
                print(
                    f"{folder.parent.name:<10} {case:<26} {variant:<7} {name:<7} {s[-1]:>6.3f}  {row}"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
