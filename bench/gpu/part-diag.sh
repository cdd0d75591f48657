#!/usr/bin/env bash
# The diagnosis of the zoo's slowdowns on the H200 (issue 38): a one-run baseline of the good
# variants, then one session of the bad variants with every case captured by torch.profiler
# (and TORCH_TRACE for compiled code; Nsight left out: --gpuperf-capture=always
# --gpuperf-capture-skip=nsys,ncu, no confirmation re-runs), through bench/capture_cost.py,
# which prints per case the seconds from its verdict to its first diagnosis and the first
# sentences. Then bench/diag_replay.py gathers what each diagnosis read (the captures'
# evidence.json) into one small file and checks each case's first cause against the one
# bench/zoo/cases.py expects (ok / BAD per case, in the summary).
#
# Cases (DIAG_CASES, comma-separated): the 25 realistic slowdowns but recompile_on_float (its
# bad variant compiles 8 graphs from a cold cache; the CPU's recorded evidence covers it);
# the synthetic +5 % cases can be added (mul_256M_plus5,gemm_4096_plus5,layernorm_plus5,
# launches_plus10). Budget about 240 s: the save ~60 s, the session's measuring ~50 s, its
# captures the rest; capture_cost.py cuts the session's capture budget to end in time, and
# the cases it leaves are listed as leftovers.
#
# What comes back (diag.tgz): diag/evidence-records.json (the records, ~10 KB a case), the
# capture's manifests, analyses and logs, the session's results; the traces are left out.
# Replay here afterwards:
#   tar xzf diag.tgz -C /tmp && python bench/diag_replay.py /tmp/diag/evidence-records.json
# and keep the file as tests/data/diagnosis/h200-<date>.json for tests/unit/test_diagnosis_replay.py.
#
# The first diagnosis's time (issue 38, under 10 s): per case the profiler child's start-up
# (to the test's gpu_bench: a compiled test's torch.compile imports), its test (first call and
# brief re-measurement), its profile and its exit; and a line on the session's first capture,
# whose child starts cold, against the others, which run in a spare Python (torch, pytest and
# torch.compile's modules imported ahead). The first capture runs in the spare started at
# the session's start (imports only: its profile pays the profiler's start); the others in
# spares started during the capture before, with the profiler started too. Cases run in
# bench/zoo/cases.py's order, e.g.
#   DIAG_CASES=tf32_off,graph_break_in_loop,optimizer_foreach_off,layernorm_handwritten,\
#     checkpoint_recompute,h2d_pinned_lost ACCEPTANCE_S=400 bash bench/gpu/acceptance.sh diag=330
#
# What the session's spare costs a session without a regression (issue 38): after the
# diagnosis, DIAG_CLEAN_S seconds (default 90, 0: none) of clean sessions (the good variants
# of the first two cases, or of DIAG_CLEAN_CASES, against the same baseline), in rounds of
# three: the spare at the session's start left out ("none"), as shipped ("imports"), and
# with the profiler's start ("prelude"); each session's wall and verdicts, then each
# benchmark's median per mode (does an idle spare move them?). bench/gpu/profiler_warm.py
# first: whether the prelude (a CPU-only session) takes torch.profiler's one-time start
# ahead here. The part wants about 330 s (diag=330).
set -u
T0=$(date +%s)
out=$WORK/capcost
summary=$WORK/summary.txt
say() { echo "$*" | tee -a "$summary"; }
DEFAULT=triton_autotune_cut,autocast_dropped,tf32_off,channels_last_lost,contiguous_heads,sdpa_mask_fallback,decode_item_sync,item_per_layer,graph_break_in_loop,h2d_pageable,rotary_host_rebuild,python_loop_adds,optimizer_foreach_off,linear_bias_unfused,autocast_fp32_weights,dropout_left_on,key_transpose_contiguous,sdpa_efficient_backend,autocast_dropped_tf32,kv_cache_cat,layernorm_handwritten,gelu_tanh_handwritten,checkpoint_recompute,clip_grad_foreach_off,h2d_pinned_lost
CASES=${DIAG_CASES:-$DEFAULT}
if ! python3 -c 'import torch, pytest_gpuperf.plugin; assert torch.cuda.is_available()' > "$WORK/sanity.log" 2>&1; then
  say "diag: STOPPED at the sanity step (no CUDA, or the plugin does not import): $(tail -2 "$WORK/sanity.log" | tr '\n' ' ')"
  exit 1
fi
CLEAN_S=${DIAG_CLEAN_S:-90}
timeout 60 python3 bench/gpu/profiler_warm.py > "$WORK/profiler-warm.txt" 2>&1
grep -E "^profiler_warm|prelude \(|first CUDA" "$WORK/profiler-warm.txt" >> "$summary"
deadline=$(( T0 + BUDGET_S - 20 - CLEAN_S ))
timeout --kill-after=5 $(( BUDGET_S - 15 )) \
  python3 bench/capture_cost.py --out "$out" --saves 1 --always --cases "$CASES" \
    --deadline "$deadline" --verdicts-s 70 --margin-s 10 --no-leftover-check \
    -- --gpuperf-capture-skip=nsys,ncu --gpuperf-reruns=0 > "$WORK/capture-cost.txt" 2>&1
rc=$?
if grep -q "^session:" "$WORK/capture-cost.txt"; then
  sed -n '/^benchmark /,/^columns:/p' "$WORK/capture-cost.txt" >> "$summary"
  grep -E "^(verdicts|session|first diagnosis|  the first capture)" "$WORK/capture-cost.txt" >> "$summary"
else
  say "diag: the session did not finish (exit $rc); the last lines:"
  tail -15 "$WORK/capture-cost.txt" >> "$summary"
fi
python3 bench/diag_replay.py --export "$out" --out "$WORK/evidence-records.json" \
  --source "bench/gpu/part-diag.sh on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(date -u +%F)" \
  >> "$summary" 2>&1
python3 bench/diag_replay.py "$WORK/evidence-records.json" > "$WORK/replay.txt" 2>&1
say "diag: first causes as the zoo expects them: $(grep -c '^ok' "$WORK/replay.txt") ok, $(grep -c '^BAD' "$WORK/replay.txt") BAD"
cat "$WORK/replay.txt" >> "$summary"
# A -p plugin that sets how the session's spare starts (SPARE_MODE), for the clean sessions
cat > "$WORK/spare_mode.py" <<'PY'
import os

from pytest_gpuperf.shell.capture import SparePool

_MODE = os.environ.get("SPARE_MODE", "imports")
if _MODE == "none":
    SparePool.start_early = lambda self: None
elif _MODE == "prelude":
    SparePool.start_early = lambda self: self.start()
PY
K=$(echo "${DIAG_CLEAN_CASES:-$CASES}" | cut -d, -f1-2 | sed 's/,/ or /')
round=0
while [ "$CLEAN_S" -gt 0 ] && [ $(( T0 + BUDGET_S - 15 - $(date +%s) )) -gt 40 ]; do
  round=$(( round + 1 ))
  for mode in none imports prelude; do
    [ $(( T0 + BUDGET_S - 15 - $(date +%s) )) -gt 40 ] || break
    s0=$(date +%s%N)
    ( cd bench/zoo && GPUPERF_ZOO= SPARE_MODE=$mode PYTHONPATH="$WORK${PYTHONPATH:+:$PYTHONPATH}" \
      timeout 40 python3 -m pytest test_zoo.py -p no:cacheprovider -q -k "$K" -p spare_mode \
      --gpuperf-baseline-dir="$out/baselines" --gpuperf-artifacts-dir="$WORK/clean-artifacts" \
      --gpuperf-baseline=capcost --gpuperf-json="$WORK/clean-$mode-$round.json" \
      > "$WORK/clean-$mode-$round.log" 2>&1 )
    crc=$?
    ms=$(( ($(date +%s%N) - s0) / 1000000 ))
    say "diag clean session $round, session spare $mode: exit $crc, wall $((ms / 1000)).$(( ms % 1000 / 100 )) s, $(grep -E '(passed|failed)' "$WORK/clean-$mode-$round.log" | tail -1 | tr -d '=')"
  done
done
# whether an idle spare beside the measurements moves them: each benchmark's median per mode
python3 - "$WORK" >> "$summary" 2>&1 <<'PY'
import glob, json, statistics, sys
by = {}
for path in sorted(glob.glob(f"{sys.argv[1]}/clean-*-*.json")):
    mode = path.rsplit("/", 1)[1].split("-")[1]
    for r in json.load(open(path)).get("results") or []:
        name = r["id"]["nodeid"].rsplit("[", 1)[-1].rstrip("]")
        by.setdefault(name, {}).setdefault(mode, []).append(r["summary"]["median"] * 1e6)
for name, modes in by.items():
    cells = [f"{m} {statistics.median(v):.1f} us (n={len(v)})" for m, v in sorted(modes.items())]
    print(f"diag clean medians, {name}: " + ", ".join(cells))
PY
find "$out/artifacts" -name '*.trace.json' -delete 2>/dev/null
say "diag: part wall $(( $(date +%s) - T0 )) s of $BUDGET_S s (capture_cost exit $rc)"
exit $rc
