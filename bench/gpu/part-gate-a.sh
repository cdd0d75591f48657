#!/usr/bin/env bash
# gate-a (issue 22): the zoo in fresh processes, each run with its contention record (how long
# its threads waited for a CPU); one set of processes serves every figure:
#   - the new cases' ground truth (zoo_truth.py: 1.2-1.5x slowdowns, benign refactors, tiny A/A);
#   - 3 saves of the good variants (the baseline, and good runs of the pool);
#   - A/A sessions against it (the zoo's A/A in fresh sessions, and good runs of the pool);
#   - A/B sessions (every case's bad variant: detection in each session, and bad runs);
#   - plain pool processes alternating good and bad (for the --gpuperf-ab replay's pairs);
#   - every confirmation child's results, kept beside its session (bench/zoo/conftest.py).
# With two GPUs the two streams run side by side, the second comparing with the first one's
# baseline; with one, the first stream runs alone. A run starts only when the part's deadline
# leaves room for it; what was skipped is said. Everything is replayed here at the end
# (zoo_replay.py, zoo_report.py) and, from the tarball, again on the CPU machine:
#   python3 bench/zoo_replay.py --truth truth.json --truth truth-new.json g0/sessions g1/sessions,g1/pool
#   python3 bench/zoo_replay.py --ab ...
#
# A dry run of the script's logic on the CPU machine (minutes, a few cases, tiny budgets):
#   ZOO_DEVICE=cpu GATE_NGPU=2 ZOO_ARGS="-k 'tiny_softmax or python_loop_adds' --gpuperf-rounds=6" \
#   ROOT=$PWD WORK=/tmp/ga BUDGET_S=400 bash bench/gpu/part-gate-a.sh
set -u
T0=$(date +%s)
ZOO_DEVICE=${ZOO_DEVICE:-cuda}
ZOO_ARGS=${ZOO_ARGS:-}
DEADLINE=$((T0 + BUDGET_S - 25))   # room to replay, report and pack
S=$WORK/summary.txt
left() { echo $((DEADLINE - $(date +%s))); }
say() { echo "$*" | tee -a "$S"; }
NGPU=${GATE_NGPU:-$(nvidia-smi -L 2>/dev/null | wc -l)}
say "gate-a: $NGPU GPU(s); budget ${BUDGET_S} s"
PY=python3
# GATE_A_CASES: the cases to run (comma-separated; empty: the whole zoo)
GATE_A_K=$(echo "${GATE_A_CASES:-}" | sed 's/,/ or /g')
campaign() { eval "$PY bench/zoo_campaign.py \"\$@\" --device $ZOO_DEVICE $ZOO_ARGS ${GATE_A_K:+-k \"\$GATE_A_K\"}"; }
# GATE_A_ORDER: the sessions after the 3 saves; GATE_A_RUN_S: the longest run expected (a run
# starts only while that much of the budget is left); GATE_A_TRUTH=0 skips zoo_truth.py.
GATE_A_ORDER=${GATE_A_ORDER:-aa,ab,aa,aa}
GATE_A_RUN_S=${GATE_A_RUN_S:-150}
GATE_A_TRUTH=${GATE_A_TRUTH:-1}
TRUTH_CASES=tiny_layer_norm,tiny_softmax,tiny_elementwise_chain,tiny_rmsnorm,benign_attention_unbind,benign_more_python,benign_op_sequence,benign_extra_view,linear_bias_unfused,autocast_fp32_weights,dropout_left_on,key_transpose_contiguous,sdpa_efficient_backend

# 1. sanity: one tiny benchmark end to end in a fresh process, its contention recorded (seconds)
t=$(date +%s)
CUDA_VISIBLE_DEVICES=0 timeout 90 $PY -m pytest bench/zoo -q -p no:cacheprovider --rootdir bench/zoo \
  -k tiny_layer_norm --gpuperf-capture=never --gpuperf-device="$ZOO_DEVICE" \
  --gpuperf-json="$WORK/sanity.json" > "$WORK/sanity.log" 2>&1
if ! $PY - "$WORK/sanity.json" "$ZOO_DEVICE" >> "$S" 2>&1 <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))["results"][0]
c = r.get("contention") or {}
assert "waited" in c and "threads" in c, f"no contention record: {c}"
print(f"sanity: tiny_layer_norm {r['summary']['median'] * 1e6:.2f} us; waited {c['waited']}, "
      f"threads {c['threads']}, a {r['wall_s']:.2f} s measurement")
EOF
then
  say "gate-a: STOPPED at the sanity step ($(($(date +%s) - t)) s): see sanity.log"; tail -5 "$WORK/sanity.log" >> "$S"; exit 1
fi

# Each zoo_campaign call starts no run later than its --budget-s: the longest run (an A/B
# session with its confirmations) must still end before the deadline.
budget() { echo $(( $(left) - ${1:-150} )); }

stream0() {
  export CUDA_VISIBLE_DEVICES=0
  campaign sessions --out "$WORK/g0" --saves 3 --order "$GATE_A_ORDER" --budget-s "$(budget "$GATE_A_RUN_S")"
}

stream1() {
  export CUDA_VISIBLE_DEVICES=1
  timeout $(( $(left) - 200 )) $PY bench/zoo_truth.py --cases "$TRUTH_CASES" --json "$WORK/truth-new.json" \
    > "$WORK/truth-new.txt" 2>&1
  campaign pool --out "$WORK/g1" --good 1 --bad 1 --budget-s "$(budget 150)"
  campaign sessions --out "$WORK/g1" --saves 0 --baseline-dir "$WORK/g0/baselines" \
    --wait-for "$WORK/g0/sessions/save-3.meta" --order aa,ab,aa --budget-s "$(budget 150)"
  campaign pool --out "$WORK/g1" --good 4 --bad 4 --budget-s "$(budget 60)"
}

if [ "$NGPU" -ge 2 ]; then
  stream0 > "$WORK/stream0.log" 2>&1 &
  p0=$!
  stream1 > "$WORK/stream1.log" 2>&1 &
  p1=$!
  wait $p0 $p1
else
  # one GPU: the new cases' truth first (short), then the sessions
  [ "$GATE_A_TRUTH" = 1 ] && CUDA_VISIBLE_DEVICES=0 timeout 120 $PY bench/zoo_truth.py --cases "$TRUTH_CASES" \
    --json "$WORK/truth-new.json" > "$WORK/truth-new.txt" 2>&1
  stream0 > "$WORK/stream0.log" 2>&1
fi
say "gate-a: measured in $(($(date +%s) - T0)) s"
cat "$WORK"/stream*.log >> "$WORK/streams.txt" 2>/dev/null
for d in g0/sessions g1/sessions g1/pool; do
  [ -d "$WORK/$d" ] && say "  $d: $(ls "$WORK/$d"/*.meta 2>/dev/null | grep -vc child) processes, $(ls "$WORK/$d"/*.child-*.json 2>/dev/null | wc -l) kept children"
done
[ -f "$WORK/truth-new.txt" ] && { say "new cases' ground truth (zoo_truth.py):"; sed 's/^/  /' "$WORK/truth-new.txt" >> "$S"; }

# 2. the figures, from what came back (the same commands replay it on the CPU machine)
TRUTH="--truth bench/results/h200-2026-12-01/truth.json"
[ -f "$WORK/truth-new.json" ] && TRUTH="$TRUTH --truth $WORK/truth-new.json"
POOLS=""
[ -d "$WORK/g0/sessions" ] && POOLS="$WORK/g0/sessions"
G1=$(ls -d "$WORK/g1/sessions" "$WORK/g1/pool" 2>/dev/null | paste -sd, -)
[ -n "$G1" ] && POOLS="$POOLS $G1"
if [ -n "$POOLS" ] && [ "${GATE_A_REPLAY:-1}" = 1 ]; then
  timeout 60 $PY bench/zoo_replay.py $TRUTH $POOLS > "$WORK/replay-stored.txt" 2>&1
  timeout 60 $PY bench/zoo_replay.py --ab $TRUTH $POOLS > "$WORK/replay-ab.txt" 2>&1
  REPORT=$(ls -d "$WORK"/g*/sessions 2>/dev/null)
  timeout 30 $PY bench/zoo_report.py $TRUTH $REPORT > "$WORK/report.txt" 2>&1
  say "zoo_report.py (the sessions as a user ran them):"; grep -E "^(realistic|synthetic|benign refactors|unchanged tiny|A/A|wall)" "$WORK/report.txt" | sed 's/^/  /' >> "$S"
  say "zoo_replay.py (stored baseline, 3 runs):"; grep -E "^stored baseline" "$WORK/replay-stored.txt" | sed 's/^/  /' >> "$S"
  say "zoo_replay.py --ab (time-adjacent pairs):"; grep -E "^A/B pairs" "$WORK/replay-ab.txt" | sed 's/^/  /' >> "$S"
fi
say "gate-a: done in $(($(date +%s) - T0)) s"
