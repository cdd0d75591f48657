#!/usr/bin/env bash
# Every GPU check of the open issues, on one H200, in parts that each end well inside one
# device call (10 minutes). Run from the repository root on the GPU machine, after
# `bash ../shared/device/prepare.sh` here and with `.device` carried:
#
#   source .device/setup.sh && bash bench/gpu/acceptance.sh PART [PART ...]
#
# PART is one of the parts below, or `all` (every part in order; longer than one call).
# Each part is bench/gpu/part-PART.sh: it runs in its own scratch folder ($WORK), within
# its own time budget ($BUDGET_S, seconds), and appends its short figures to
# $WORK/summary.txt. The driver packs each part's folder into $OUT/PART.tgz (at most one
# file per part comes back) and writes $OUT/summary.txt: every part's summary, its exit
# status and its wall time.
#
# Budgets (seconds): the plan for the ~30 device minutes of the open issues is
#   call 1: gate-a + dist          (480 + 60)
#   call 2: gate-b + activity       (360 + 150)
#   call 3: gpu-tests + capture     (140 + 180)
# and what is left (about 5 minutes) for one re-run of what failed.
# dist2 is for the two-GPU machine (nvidia-h200-x2), not in `all`: two calls, one per phase
# (DIST2_PHASE=a, then DIST2_PHASE=b; see bench/gpu/part-dist2.sh).
set -u
ROOT=$(pwd)
OUT=${OUT:-/tmp/acceptance-out}
mkdir -p "$OUT"
declare -A BUDGET=([gpu-tests]=140 [gate-a]=480 [gate-b]=360 [capture]=180 [activity]=150 [dist]=60 [dist2]=540)
ORDER=(gate-a dist gate-b activity gpu-tests capture)
parts=("$@")
[ ${#parts[@]} -eq 0 ] && { echo "usage: $0 PART [PART ...] | all  (parts: ${ORDER[*]})" >&2; exit 2; }
[ "${parts[0]}" = all ] && parts=("${ORDER[@]}")
summary=$OUT/summary.txt
{
  echo "# acceptance at $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?') on $(hostname), $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader 2>&1 | head -2
  python3 -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__)' 2>&1
} > "$summary"
rc_all=0
for part in "${parts[@]}"; do
  script=$ROOT/bench/gpu/part-$part.sh
  if [ ! -f "$script" ]; then echo "== $part: no such part ($script)" >> "$summary"; rc_all=2; continue; fi
  WORK=/tmp/acceptance/$part
  rm -rf "$WORK"; mkdir -p "$WORK"
  t0=$(date +%s)
  budget=${BUDGET[$part]:-300}
  ( cd "$ROOT" && ROOT=$ROOT WORK=$WORK BUDGET_S=$budget PYTHONUNBUFFERED=1 \
      timeout --kill-after=10 $((budget + 30)) bash "$script" ) > "$WORK/part.log" 2>&1
  rc=$?
  wall=$(( $(date +%s) - t0 ))
  [ $rc -ne 0 ] && rc_all=1
  {
    echo; echo "== $part: rc $rc in $wall s (budget $budget s)"
    [ -f "$WORK/summary.txt" ] && cat "$WORK/summary.txt" || tail -20 "$WORK/part.log"
  } >> "$summary"
  tar czf "$OUT/$part.tgz" -C /tmp/acceptance "$part" 2>/dev/null
  sz=$(stat -c %s "$OUT/$part.tgz")
  if [ "$sz" -gt 15000000 ]; then  # the device tool brings back files of at most 16 MiB
    tar czf "$OUT/$part.tgz" -C /tmp/acceptance --exclude='*.nsys-rep' --exclude='*.ncu-rep' \
      --exclude='*.sqlite' --exclude='*.pt.trace.json' "$part"
    echo "  (large reports left out of $part.tgz)" >> "$summary"
  fi
done
cat "$summary"
exit $rc_all
