#!/usr/bin/env bash
# What a red run costs on the H200: one session with 7 regressions of the zoo (a host sync, a
# graph break in compiled code, a dtype change, a precision change, an SDPA kernel change, a
# pageable H2D copy, a Python loop of launches), at the plugin's defaults, against a 1-run
# baseline saved here. bench/capture_cost.py runs it and prints, per regressed benchmark, the seconds
# from its verdict to its first diagnosis (and where they went: the child's start-up, its
# brief re-measurement, the profiled window, reading the trace), what nsys and ncu added,
# and the diagnosis' first sentences; for the session, its wall, the capture's seconds, its
# plain time (wall minus capture) and whether it ended within 2x plain + the capture budget.
#
# Budget (180 s): the save ~25 s (7 cases, one compiled from a cold cache), the session's
# measuring and confirmations ~45 s, the rest its capture budget: the script cuts
# --gpuperf-capture-session-budget from its default 180 s to what ends the part in time
# (every other setting is the default) and says so. One save, not three, to leave the
# capture time: the cases picked slow down 1.5x to 126x by the larger of their two figures
# (bench/results/h200-2026-12-01/truth.txt); a verdict that a 1-run baseline leaves
# inconclusive is not captured, and the verdicts line says how many there were.
# Replay here afterwards: python3 bench/capture_cost.py --report <WORK>/capcost/session.json
set -u
T0=$(date +%s)
out=$WORK/capcost
summary=$WORK/summary.txt
say() { echo "$*" | tee -a "$summary"; }
# 1. sanity, seconds: the plugin imports, CUDA is there; the tools that will be used
if ! python3 -c 'import torch, pytest_gpuperf.plugin; assert torch.cuda.is_available()' > "$WORK/sanity.log" 2>&1; then
  say "capture: STOPPED at the sanity step (no CUDA, or the plugin does not import): $(tail -2 "$WORK/sanity.log" | tr '\n' ' ')"
  exit 1
fi
say "capture: tools: nsys $(command -v nsys >/dev/null && echo yes || echo NO), ncu $(command -v ncu >/dev/null && echo yes || echo NO), tlparse $(command -v tlparse >/dev/null && echo yes || echo NO)"
# 2. the save, the session, the figures (and one leftover's command, if time is left)
deadline=$(( T0 + BUDGET_S - 10 ))
timeout --kill-after=5 $(( BUDGET_S - 5 - ($(date +%s) - T0) )) \
  python3 bench/capture_cost.py --out "$out" --saves 1 --deadline "$deadline" \
    --verdicts-s 55 --margin-s 15 > "$WORK/capture-cost.txt" 2>&1
rc=$?
if grep -q "^session:" "$WORK/capture-cost.txt"; then
  sed -n '/^benchmark /,$p' "$WORK/capture-cost.txt" >> "$summary"
else
  say "capture: the session did not finish (exit $rc); the last lines:"
  tail -15 "$WORK/capture-cost.txt" >> "$summary"
fi
say "capture: part wall $(( $(date +%s) - T0 )) s of $BUDGET_S s (script exit $rc)"
exit $rc
