#!/usr/bin/env bash
# Every GPU check of the open issues, on one H200, in parts that each end well inside one
# device call (10 minutes). Run from the repository root on the GPU machine, after
# `bash ../shared/device/prepare.sh` here and with `.device` carried:
#
#   source .device/setup.sh && bash bench/gpu/acceptance.sh PART [PART ...]
#
# PART is one of the parts below, or `all` (every part in order, in one call: the plan below);
# PART=SECONDS gives that part another budget.
# Each part is bench/gpu/part-PART.sh: it runs in its own scratch folder ($WORK), within
# its own time budget ($BUDGET_S, seconds), and appends its short figures to
# $WORK/summary.txt. The driver packs each part's folder into $OUT/PART.tgz (at most one
# file per part comes back) and writes $OUT/summary.txt: every part's summary, its exit
# status and its wall time.
#
# The plans, each one device call of at most 9 minutes (budgets in seconds, as measured on the
# H200 on 2026-12-04, bench/results/h200-2026-12-04/):
#   a (issue 22, the gate): capture 140, gate-a 200, ab 130, demo 85            (555 s)
#   b (issues 25, 27 and the rest): gpu-tests 135, dist 60, activity 90, demo 95,
#     examples 130                                                                (510 s)
# `all` is both, for one machine held long enough (about 18 minutes); make it two calls,
# `a` then `b`. A first plan of every part in 535 s (2026-12-04, call 1) cut most of them.
# gate-a in the plans runs the 13 cases issue 22 added (tiny A/A, host-side benign refactors,
# 1.2-1.5x slowdowns; GATE_A_CASES): 3 saves, A/A, A/B and A/A sessions as the budget allows;
# its replays are made afterwards on the CPU machine from the tarball (part-gate-a.sh says
# how). Each plan's demo adds one to the demos run; the figures that need several sessions
# come from the calls together (the replays read the pools of every call).
# bisect (issue 39, --gpuperf-bisect on a history that drops autocast, then adds a host sync)
# is in no plan yet: one call of its own, `bash bench/gpu/acceptance.sh bisect` (240 s).
# dist2 is for the two-GPU machine (nvidia-h200-x2), in no plan: two calls, one per phase
# (DIST2_PHASE=a, then DIST2_PHASE=b; see bench/gpu/part-dist2.sh).
# diag (issue 38), in no plan: the zoo's slowdowns diagnosed, each case's first cause checked
# and its evidence brought back for bench/diag_replay.py (`ACCEPTANCE_S=300 ... diag`).
# hard (issue 37, outside the store: the header, the lock place, the lock log, SIGTERM) is in
# no plan: `bash bench/gpu/acceptance.sh hard`, or after a plan's parts where time is left.
set -u
ROOT=$(pwd)
OUT=${OUT:-/tmp/acceptance-out}
mkdir -p "$OUT"
declare -A BUDGET=([gpu-tests]=135 [dist]=60 [activity]=90 [capture]=140 [gate-a]=200 [ab]=130
                  [demo]=90 [examples]=130 [gate-b]=360 [dist2]=540 [bisect]=240 [diag]=240 [hard]=150)
PLAN_A=(capture gate-a ab demo=85)
PLAN_B=(gpu-tests dist activity demo=95 examples)
NEW_CASES=tiny_layer_norm,tiny_softmax,tiny_elementwise_chain,tiny_rmsnorm,benign_attention_unbind,benign_more_python,benign_op_sequence,benign_extra_view,linear_bias_unfused,autocast_fp32_weights,dropout_left_on,key_transpose_contiguous,sdpa_efficient_backend
parts=("$@")
[ ${#parts[@]} -eq 0 ] && { echo "usage: $0 a | b | all | PART[=SECONDS] ...  (parts: ${!BUDGET[*]})" >&2; exit 2; }
case ${parts[0]} in
  a) parts=("${PLAN_A[@]}") ;;
  b) parts=("${PLAN_B[@]}") ;;
  all) parts=("${PLAN_A[@]}" "${PLAN_B[@]}"); ACCEPTANCE_S=${ACCEPTANCE_S:-1120} ;;
esac
# gate-a's form in the plans (see above), unless the caller chose otherwise
export GATE_A_ORDER=${GATE_A_ORDER:-aa,ab,aa} GATE_A_RUN_S=${GATE_A_RUN_S:-40} GATE_A_TRUTH=${GATE_A_TRUTH:-0} \
  GATE_A_REPLAY=${GATE_A_REPLAY:-0} GATE_A_CASES=${GATE_A_CASES-$NEW_CASES}
summary=$OUT/summary.txt
{
  echo "# acceptance at $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?') on $(hostname), $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader 2>&1 | head -2
  python3 -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__)' 2>&1
} > "$summary"
# The plugin that runs is the one installed (the wheel that prepare.sh built), not the tree's
# files: every pytest the parts start from another folder imports the wheel. A wheel older
# than the tree measures old code under new scripts (2026-12-05, call 3): stop at once, then.
stale=$(cd / && python3 - "$ROOT/pytest_gpuperf" <<'PY'
import hashlib, pathlib, sys
try:
    import pytest_gpuperf
except ImportError:
    sys.exit(0)
def digest(root):
    h = hashlib.sha256()
    for f in sorted(pathlib.Path(root).rglob("*.py")):
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()
installed = pathlib.Path(pytest_gpuperf.__file__).parent
if installed.resolve() != pathlib.Path(sys.argv[1]).resolve() and digest(installed) != digest(sys.argv[1]):
    print(installed)
PY
)
if [ -n "$stale" ]; then
  echo "acceptance: the installed pytest_gpuperf ($stale) is not this tree's: run" \
    "'bash ../shared/device/prepare.sh' on the development machine again (it rebuilds the" \
    "project's wheel), then call again" | tee -a "$summary" >&2
  exit 2
fi
rc_all=0
T_END=$(( $(date +%s) + ${ACCEPTANCE_S:-560} ))
for part in "${parts[@]}"; do
  # PART=SECONDS runs PART with that budget instead of the table's
  want=${part#*=}; part=${part%%=*}; [ "$want" = "$part" ] && want=${BUDGET[$part]:-300}
  script=$ROOT/bench/gpu/part-$part.sh
  if [ ! -f "$script" ]; then echo "== $part: no such part ($script)" >> "$summary"; rc_all=2; continue; fi
  WORK=/tmp/acceptance/$part
  rm -rf "$WORK"; mkdir -p "$WORK"
  t0=$(date +%s)
  budget=$want
  # a part may overrun its budget by 15 s, never the call's deadline (ACCEPTANCE_S, default 560 s)
  cap=$(( budget + 15 )); left=$(( T_END - t0 ))
  [ "$cap" -gt "$left" ] && cap=$left
  if [ "$cap" -lt 20 ]; then echo; echo "== $part: not run, $left s of the call left" >> "$summary"; rc_all=1; continue; fi
  ( cd "$ROOT" && ROOT=$ROOT WORK=$WORK BUDGET_S=$budget PYTHONUNBUFFERED=1 \
      timeout --kill-after=5 "$cap" bash "$script" ) > "$WORK/part.log" 2>&1
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
