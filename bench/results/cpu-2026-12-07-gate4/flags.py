"""Do the pools' flags mark the slow processes? Per pool: runs 1.25x or more above their
benchmark's fast level (the median of its faster half) against the rest, by stability flag,
waited share and load1; then the processes with a slow run, each benchmark's ratio.

    python bench/results/cpu-2026-12-07-gate4/flags.py tests/data/cpu-pools/pool-*.jsonl.gz
"""

import statistics
import sys
from collections import Counter, defaultdict

sys.path[:0] = ["bench", "."]

from cpu_pools import read_pools  # noqa: E402

from pytest_gpuperf.verdict.decide import run_level  # noqa: E402

for pool in sys.argv[1:]:
    rows = [r for r in read_pools([pool])
            if r["tool"] == "gp" and r["suite"] == "cpu" and "mm_thr" not in r["bench"]]  # fmt: skip
    by = defaultdict(list)
    for r in rows:
        by[(r["bench"], r["variant"])].append(r)
    tab: Counter = Counter()
    seen = defaultdict(list)
    per_proc = defaultdict(list)
    for rs in by.values():
        lv = sorted(run_level(r["rounds"]) for r in rs)
        fast = statistics.median(lv[: max(2, len(lv) // 2)])
        for r in rs:
            x = run_level(r["rounds"]) / fast
            slow = x > 1.25
            tab[(slow, r.get("stability"))] += 1
            seen[slow].append(((r.get("contention") or {}).get("waited") or 0, r["load1"]))
            per_proc[r["proc"]].append(x)
    print(pool)
    for key in sorted(tab):
        print("  ", key, tab[key])
    for slow in (False, True):
        waited = [w for w, _ in seen[slow]]
        load = [x for _, x in seen[slow]]
        q90 = sorted(waited)[int(0.9 * len(waited))]
        print("  slow" if slow else "  fast", len(waited),
              f"waited med {statistics.median(waited):.2f} q90 {q90:.2f}",
              f"load1 med {statistics.median(load):.1f}")  # fmt: skip
    procs = " ".join(f"{p}:" + ",".join(f"{x:.2f}" for x in xs)
                     for p, xs in sorted(per_proc.items()) if max(xs) > 1.25)  # fmt: skip
    print("  procs: ", procs[:1500])
