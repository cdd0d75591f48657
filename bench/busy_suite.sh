#!/usr/bin/env bash
# The suite under a busy machine: the README's test command (`pytest tests -n 2`) N times in
# a row while two busy-loop processes keep both cores busy (one pinned to each of the first
# two CPUs this process may use). Stops at the first red run. Prints, per run, its exit
# status, its wall time, the load average and pytest's last line; then how many were green
# in a row. Run from the repository root, with the environment the tests use active:
#
#   bash bench/busy_suite.sh 5
set -u
n=${1:-5}
cpus=($(python3 -c 'import os; print(*sorted(os.sched_getaffinity(0))[:2])'))
busy=()
for c in "${cpus[@]}"; do
  taskset -c "$c" python3 -c 'while True: pass' & busy+=($!)
done
trap 'kill "${busy[@]}" 2>/dev/null' EXIT
echo "busy loops on CPUs ${cpus[*]} (pids ${busy[*]}); $(nproc) CPUs; at $(git rev-parse --short HEAD)"
green=0
for i in $(seq 1 "$n"); do
  t0=$SECONDS
  python3 -m pytest tests -n 2 -q -p no:cacheprovider > "/tmp/busy-suite-$i.txt" 2>&1
  rc=$?
  echo "run $i: rc $rc in $((SECONDS - t0)) s, load $(cut -d' ' -f1-3 /proc/loadavg): $(tail -1 "/tmp/busy-suite-$i.txt")"
  if [ $rc -ne 0 ]; then
    grep -E "^(FAILED|ERROR)" "/tmp/busy-suite-$i.txt" | head -20
    break
  fi
  green=$((green + 1))
done
echo "$green of $n runs green in a row (logs: /tmp/busy-suite-N.txt)"
[ "$green" -eq "$n" ]
