"""A zoo case's bad/good ratios read from a pool of fresh-process runs, for cases with no
``zoo_truth.py`` measurement (their truth file could not be made on the GPU in time).

Not independent of the plugin: the figures are the plugin's own per-process medians (device
time and end-to-end), and the ratio is the median over the bad runs over the median over the
good runs. ``zoo_truth.py`` (the cases' variants alternated in one process, timed by hand) is
the better truth; this one says what the plugin's processes saw, and which band (< 1.2x,
1.2-1.5x, >= 1.5x) a case falls in. Writes the same JSON as ``zoo_truth.py --json``:

    python3 bench/zoo_pool_truth.py --json truth-pool.json POOL[,POOL...] [...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from zoo_replay import BY_NAME, load_all


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("pools", nargs="+", help="pool folders; a,b: one GPU's runs from both")
    ap.add_argument("--json", type=Path, help="write the truth here")
    args = ap.parse_args()
    runs: dict[str, list] = {}
    for arg in args.pools:
        for case, rs in load_all(arg).items():
            runs.setdefault(case, []).extend(rs)
    out = []
    print(f"{'case':26} {'kind':10} {'good':>4} {'bad':>4} {'e2e':>7} {'device':>7}")
    for case in sorted(runs):
        kind = BY_NAME[case].kind if case in BY_NAME else "?"
        good = [r.stat for r in runs[case] if r.good]
        bad = [r.stat for r in runs[case] if not r.good]
        if kind == "unchanged" or not good or not bad:
            continue

        def med(stats: list, attr: str) -> float | None:
            xs = [getattr(s, attr) for s in stats if getattr(s, attr)]
            return statistics.median(xs) if xs else None

        g_e, b_e = med(good, "e2e_s"), med(bad, "e2e_s")
        g_d, b_d = med(good, "level_s"), med(bad, "level_s")
        row = {
            "case": case, "kind": kind, "source": "pool", "good_runs": len(good), "bad_runs": len(bad),
            "good_e2e": g_e, "good_device": g_d, "bad_e2e": b_e, "bad_device": b_d,
            "ratio_e2e": b_e / g_e if g_e and b_e else float("nan"),
            "ratio_device": b_d / g_d if g_d and b_d else float("nan"),
        }  # fmt: skip
        out.append(row)
        print(
            f"{case:26} {kind:10} {len(good):4} {len(bad):4} {row['ratio_e2e']:7.3f} {row['ratio_device']:7.3f}"
        )
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
