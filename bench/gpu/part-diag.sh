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
# torch.compile's modules imported ahead). A compiled case shows the spare's effect only
# after another case: cases run in bench/zoo/cases.py's order, e.g.
#   DIAG_CASES=tf32_off,graph_break_in_loop,optimizer_foreach_off,layernorm_handwritten,\
#     checkpoint_recompute,h2d_pinned_lost ACCEPTANCE_S=300 bash bench/gpu/acceptance.sh diag
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
deadline=$(( T0 + BUDGET_S - 20 ))
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
find "$out/artifacts" -name '*.trace.json' -delete 2>/dev/null
say "diag: part wall $(( $(date +%s) - T0 )) s of $BUDGET_S s (capture_cost exit $rc)"
exit $rc
