#!/usr/bin/env bash
# The idle figures of issue 35, for a quiet window: records the idle CPU pool, replays the
# rule on it, and runs pytest-gpuperf beside pytest-benchmark (no load added), each step's
# `uptime` before and after. Run from the repository root, the test environment active, with
# pytest-benchmark installed (`pip install pytest-benchmark`; not a dependency):
#
#   bash bench/idle_figures.sh [OUT]        # OUT: bench/results/cpu-idle-$(date +%F)
#
# About 10-12 minutes on the idle 2-core CPU machine (a fresh process 5-8 s); the same steps
# took 45 minutes at load 6-13. Writes to OUT: record-idle.txt, pool-idle.jsonl.gz,
# replay-idle.txt, side-by-side-idle.txt; tests/data/cpu-pools/ is left as it is (copy
# pool-idle.jsonl.gz there, then run tests/unit/test_cpu_pools.py, to make it the test data).
set -euo pipefail
out=${1:-bench/results/cpu-idle-$(date -u +%F)}
mkdir -p "$out"
t0=$SECONDS
step() { echo "== $* ($((SECONDS - t0)) s in; $(uptime))"; }
step "pool: python3 bench/cpu_pools.py record --load idle --rounds 8 --examples 4"
python3 bench/cpu_pools.py record --load idle --rounds 8 --examples 4 --out "$out" \
  | tee "$out/record-idle.txt"
step "replay: python3 bench/cpu_pools.py replay $out/pool-idle.jsonl.gz --sessions 60"
python3 bench/cpu_pools.py replay "$out/pool-idle.jsonl.gz" --sessions 60 | tee "$out/replay-idle.txt"
step "live: python3 bench/side_by_side.py --sessions 3 --load idle --no-capture"
python3 bench/side_by_side.py --sessions 3 --load idle --no-capture | tee "$out/side-by-side-idle.txt"
step "done: $out"
