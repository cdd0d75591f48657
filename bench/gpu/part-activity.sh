#!/usr/bin/env bash
# The activity part: what the GPU was doing (NVML GPM) and memory behaviour per call. Budget
# 90 s ($BUDGET_S); every step has its own cap and is skipped, with a line, when the budget
# left cannot hold it.
#
#   1. sanity + detail: two example benchmarks (the memory-bound 256M mul and the 4096^3 bf16
#      GEMM) with -v, JSON and HTML: activity in the result detail, the JSON and the HTML, and
#      the mul called memory-bound from GPM alone (no ncu). Stops the part if it fails.
#   2. the GPM table: bf16 / fp16 / fp32 with TF32 / fp32 GEMMs and the zoo's MLP block,
#      which figures move (bench/activity_table.py).
#   3. the overhead of the activity window (bench/activity_overhead.py, short).
#   4. the other example benchmarks, as in 1.
# Everything stays in $WORK (results, GPM windows). The zoo's algorithm, precision and
# allocation cases (sdpa_mask_fallback, autocast_dropped, autocast_dropped_tf32, kv_cache_cat)
# are diagnosed with the others by the diag part (bench/gpu/part-diag.sh).
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

# 3. the activity window's overhead
step overhead 30 python3 bench/activity_overhead.py --reps 3 --json "$WORK/activity-overhead.json"
grep -E "^(GPU|one GPM|add_|matmul|GPM)" "$WORK/overhead.log" >> "$S"

# 4. the other example benchmarks
step examples 40 "${PYT[@]}" examples -k "not scale_inplace and not 4096x4096x4096-bfloat16" -v \
  --gpuperf-json="$WORK/examples.json" --gpuperf-html="$WORK/examples.html"
[ -f "$WORK/examples.json" ] && python3 bench/gpu/activity_check.py examples \
  "$WORK/examples.log" "$WORK/examples.json" "$WORK/examples.html" >> "$S" 2>&1

echo "activity part: $(( $(date +%s) - T0 )) s of $BUDGET_S" >> "$S"
