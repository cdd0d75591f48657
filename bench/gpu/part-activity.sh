#!/usr/bin/env bash
# The activity part: what the GPU was doing (NVML GPM), memory behaviour per call, and the
# algorithm/precision story of a changed kernel set. Budget 150 s ($BUDGET_S); every step has
# its own cap and is skipped, with a line, when the budget left cannot hold it.
#
#   1. sanity + detail: two example benchmarks (the memory-bound 256M mul and the 4096^3 bf16
#      GEMM) with -v, JSON and HTML: activity in the result detail, the JSON and the HTML, and
#      the mul called memory-bound from GPM alone (no ncu). Stops the part if it fails.
#   2. the GPM table: bf16 / fp16 / fp32 with TF32 / fp32 GEMMs and the zoo's MLP block,
#      which figures move (bench/activity_table.py).
#   3. the zoo: a one-run baseline of the good variants of sdpa_mask_fallback,
#      autocast_dropped, autocast_dropped_tf32 and kv_cache_cat, then their bad variants with
#      torch.profiler capture of each (capture=always, no re-runs: the diagnosis is wanted
#      whatever the verdict; ncu, nsys, TORCH_TRACE skipped): each diagnosis' first sentence.
#   4. the overhead of the activity window (bench/activity_overhead.py, short).
#   5. the other example benchmarks, as in 1.
# Everything stays in $WORK (baselines, results, captures with kernel lists and probes, GPM
# windows): `python bench/activity_replay.py <unpacked folder>` re-checks the stories on a CPU.
set -u
T0=$(date +%s)
S=$WORK/summary.txt
: > "$S"
left() { echo $(( BUDGET_S - ($(date +%s) - T0) )); }
# step NAME CAP CMD...: run CMD with a timeout of min(CAP, budget left - 8 s), log in $WORK/NAME.log
step() {
  local name=$1 cap=$2; shift 2
  local l; l=$(left)
  local t=$(( cap < l - 8 ? cap : l - 8 ))
  if [ "$t" -lt 8 ]; then echo "$name: skipped, $l s of the budget left" >> "$S"; return 99; fi
  local s0; s0=$(date +%s)
  timeout --kill-after=5 "$t" "$@" > "$WORK/$name.log" 2>&1
  local rc=$?
  echo "$name: rc $rc in $(( $(date +%s) - s0 )) s (cap $t s)" >> "$S"
  return $rc
}
PYT=(python3 -m pytest -p no:cacheprovider --gpuperf-device=cuda)

# 1. sanity and the result detail
step sanity 40 "${PYT[@]}" examples/test_elementwise.py examples/test_matmul.py \
  -k "scale_inplace or 4096x4096x4096-bfloat16" -v \
  --gpuperf-json="$WORK/sanity.json" --gpuperf-html="$WORK/sanity.html"
rc=$?
python3 bench/gpu/activity_check.py examples "$WORK/sanity.log" "$WORK/sanity.json" \
  "$WORK/sanity.html" >> "$S" 2>&1
chk=$?
if [ $rc -ne 0 ] || [ $chk -ne 0 ]; then
  echo "SANITY FAILED (pytest rc $rc, check rc $chk): the part stops here; see sanity.log" >> "$S"
  tail -30 "$WORK/sanity.log" >> "$S"
  echo "activity part: $(( $(date +%s) - T0 )) s" >> "$S"
  exit 1
fi

# 2. which GPM figures move with the GEMMs' precision (ACTIVITY_TABLE=0 skips it: a call that
#    made it already)
if [ "${ACTIVITY_TABLE:-1}" = 1 ]; then
  step table 30 python3 bench/activity_table.py --json "$WORK/activity-table.json"
  sed -n '/^GPU activity per workload/,/^(/p' "$WORK/table.log" >> "$S"
  python3 bench/gpu/activity_check.py table "$WORK/activity-table.json" >> "$S" 2>&1
fi

# 3. the zoo's algorithm, precision and allocation cases, diagnosed
CASES="sdpa_mask_fallback or autocast_dropped or kv_cache_cat"
ZOO=("${PYT[@]}" bench/zoo/test_zoo.py -k "$CASES" --gpuperf-baseline-dir="$WORK/baselines")
step zoo-save 30 "${ZOO[@]}" --gpuperf-save=act --gpuperf-json="$WORK/zoo-good.json"
export GPUPERF_ZOO="bad:sdpa_mask_fallback,autocast_dropped,autocast_dropped_tf32,kv_cache_cat"
step zoo-bad 80 "${ZOO[@]}" --gpuperf-baseline=act --gpuperf-reruns=0 -v \
  --gpuperf-capture=always --gpuperf-capture-skip=nsys,ncu,torch_trace \
  --gpuperf-capture-budget=40 --gpuperf-artifacts-dir="$WORK/artifacts" \
  --gpuperf-json="$WORK/zoo-bad.json" --gpuperf-html="$WORK/zoo-bad.html"
unset GPUPERF_ZOO
echo "  (rc 1 is expected there: the bad variants fail their gate)" >> "$S"
if [ -f "$WORK/zoo-bad.json" ]; then
  echo "zoo diagnoses (first sentence; GPM sentences under it):" >> "$S"
  python3 bench/gpu/activity_check.py zoo "$WORK/zoo-bad.json" >> "$S" 2>&1 \
    || echo "  a case did not open with its algorithm/precision/allocation story" >> "$S"
fi

# 4. the activity window's overhead
step overhead 30 python3 bench/activity_overhead.py --reps 3 --json "$WORK/activity-overhead.json"
grep -E "^(GPU|one GPM|add_|matmul|GPM)" "$WORK/overhead.log" >> "$S"

# 5. the other example benchmarks
step examples 40 "${PYT[@]}" examples -k "not scale_inplace and not 4096x4096x4096-bfloat16" -v \
  --gpuperf-json="$WORK/examples.json" --gpuperf-html="$WORK/examples.html"
[ -f "$WORK/examples.json" ] && python3 bench/gpu/activity_check.py examples \
  "$WORK/examples.log" "$WORK/examples.json" "$WORK/examples.html" >> "$S" 2>&1

echo "activity part: $(( $(date +%s) - T0 )) s of $BUDGET_S" >> "$S"
