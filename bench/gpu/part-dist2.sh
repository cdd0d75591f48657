#!/usr/bin/env bash
# The two-GPU checks of the distributed benchmarks, on an nvidia-h200-x2 machine (two H200
# on NVLink). Run by bench/gpu/acceptance.sh (ROOT, WORK, BUDGET_S), in two device calls:
#
#   source .device/setup.sh && DIST2_PHASE=a bash bench/gpu/acceptance.sh dist2
#   source .device/setup.sh && DIST2_PHASE=b bash bench/gpu/acceptance.sh dist2
#
# (DIST2_PHASE=all runs both: longer than one call.) Phase a:
#   a1-a2. all_reduce at 1 MiB, 16 MiB, 256 MiB and 1 GiB through the plugin
#          (examples/test_distributed.py), then bench/busbw.py (nccl-tests' method) in the
#          same call, compared size by size: each busbw within 5 %;
#   a3.    A/A: the distributed examples saved, then compared, in 2 fresh sessions: no failure;
#   a4.    torchrun --nproc_per_node=2 save, then compare: every rank's exit status, and one
#          baseline run file;
#   a5.    xdist -n 2 beside a distributed test: the lock holders' recorded start and end
#          times never overlap on a GPU.
# Phase b, the planted regressions in one session (saved once, then one run per plant), each
# expected to fail with the first sentence of its diagnosis naming it:
#   NCCL_P2P_DISABLE=1 (transport fallback), one rank with 30 % more compute (rank
#   imbalance), a synchronise before the all-reduces (lost overlap), buckets 16x smaller
#   (more, smaller collectives).
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0): these machines require it.
set -u
cd "$ROOT"
t0=$(date +%s)
S=$WORK/summary.txt
PHASE=${DIST2_PHASE:-a}
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
left() { echo $(( BUDGET_S - ($(date +%s) - t0) )); }
say() { echo "dist2: $*" | tee -a "$S"; }
stop() { say "STOPPED: $*"; say "elapsed $(( $(date +%s) - t0 )) s"; exit 1; }
EX=examples/test_distributed.py
PY=(python3 -m pytest -p no:cacheprovider -p no:randomly --gpuperf-baseline-dir="$WORK/baselines"
    --gpuperf-artifacts-dir="$WORK/artifacts")

python3 - > "$WORK/sanity.txt" 2>&1 <<'EOF' || stop "sanity: $(tail -1 "$WORK/sanity.txt")"
import torch, torch.distributed as dist
n = torch.cuda.device_count()
assert n >= 2, f"{n} GPU(s): this part needs the nvidia-h200-x2 machine"
assert dist.is_nccl_available()
print("torch", torch.__version__, "NCCL", ".".join(map(str, torch.cuda.nccl.version())), "GPUs", n)
EOF
say "$(cat "$WORK/sanity.txt"), phase $PHASE"
nvidia-smi topo -m > "$WORK/topo.txt" 2>&1

verdicts() {  # verdicts of a --gpuperf-json file: kind -> count, and the failing diagnoses' first sentences
  python3 - "$1" <<'EOF'
import collections, json, sys
doc = json.load(open(sys.argv[1]))
kinds = collections.Counter((r.get("comparison") or {}).get("kind", "not compared") for r in doc["results"])
print(dict(kinds))
for r in doc["results"]:
    d = (r.get("comparison") or {}).get("diagnosis") or {}
    if d.get("paragraph"):
        print("  " + r["id"]["key"] + ": " + d["paragraph"].split(". ")[0])
EOF
}

phase_a() {
  # a1-a2: the plugin's all_reduce, then nccl-tests' method, in the same call
  "${PY[@]}" "$EX" -k all_reduce --gpuperf-json="$WORK/plugin-ar.json" > "$WORK/a1.txt" 2>&1 \
    || stop "a1: the plugin's all_reduce (rc $?): $(grep -E 'FAILED|Error' "$WORK/a1.txt" | head -2)"
  grep -E "test_all_reduce\[" "$WORK/a1.txt" | sed 's/^/dist2: a1 /' | tee -a "$S"
  python3 -m torch.distributed.run --standalone --nproc_per_node=2 bench/busbw.py \
    --sizes 1M,16M,256M,1G --dtype bfloat16 --json "$WORK/busbw.json" \
    --against "$WORK/plugin-ar.json" --tolerance 0.05 > "$WORK/a2.txt" 2>&1
  rc=$?
  grep -vE "^W[0-9]|\*\*\*\*|OMP_NUM" "$WORK/a2.txt" | sed 's/^/dist2: a2 /' | tee -a "$S"
  say "a2: busbw.py against the plugin: $([ $rc -eq 0 ] && echo 'every size within 5 %' || echo "NOT within 5 % (rc $rc)")"

  # a3: A/A across 2 fresh sessions
  "${PY[@]}" "$EX" --gpuperf-save=aa > "$WORK/a3-save.txt" 2>&1 || stop "a3: save (rc $?)"
  "${PY[@]}" "$EX" --gpuperf-baseline=aa --gpuperf-json="$WORK/a3.json" > "$WORK/a3.txt" 2>&1
  rc=$?
  say "a3: A/A, 2 sessions: rc $rc ($([ $rc -eq 0 ] && echo 'no false failure' || echo 'FALSE FAILURE'));" \
      "verdicts $(verdicts "$WORK/a3.json" | head -1)"
  [ "$(left)" -lt 120 ] && { say "a4, a5: skipped, $(left) s left"; return; }

  # a4: torchrun save, then compare: each rank's exit status, one baseline run file
  cat > "$WORK/rankstatus.py" <<'EOF'
import os
SESSION = []
def pytest_sessionstart(session):
    SESSION.append(session)
def pytest_unconfigure(config):
    with open(os.path.join(os.environ["RANK_STATUS_DIR"], f"status-{os.environ['RANK']}"), "w") as f:
        f.write(str(int(SESSION[0].exitstatus)))
EOF
  for step in save baseline; do
    mkdir -p "$WORK/a4-$step"
    RANK_STATUS_DIR="$WORK/a4-$step" PYTHONPATH="$WORK:${PYTHONPATH:-}" python3 -m torch.distributed.run \
      --standalone --nproc_per_node=2 --tee=3 -m pytest -p rankstatus -p no:cacheprovider \
      --gpuperf-baseline-dir="$WORK/baselines" "$EX" -k "all_reduce or ddp" "--gpuperf-$step=tr" \
      > "$WORK/a4-$step.txt" 2>&1
    say "a4: torchrun --nproc_per_node=2 --gpuperf-$step=tr: torchrun rc $?, rank statuses" \
        "$(cat "$WORK"/a4-$step/status-* 2>/dev/null | tr '\n' ' ')," \
        "baseline run files $(ls "$WORK"/baselines/tr.runs/ 2>/dev/null | wc -l)"
  done

  # a5: xdist beside a distributed test: one holder of a GPU at a time
  GPUPERF_LOCK_LOG="$WORK/holds.jsonl" "${PY[@]}" -n 2 "$EX::test_ddp_step" "$EX::test_all_reduce[16MiB]" \
    examples/test_matmul.py examples/test_elementwise.py > "$WORK/a5.txt" 2>&1
  rc=$?
  python3 - "$WORK/holds.jsonl" <<EOF | sed 's/^/dist2: a5 /' | tee -a "$S"
import collections, itertools, json, sys
holds = [json.loads(l) for l in open(sys.argv[1])]
by = collections.defaultdict(list)
for h in holds:
    by[h["device"]].append(h)
bad = 0
for dev, hs in sorted(by.items()):
    hs.sort(key=lambda h: h["taken"])
    over = [(a["owner"], b["owner"]) for a, b in itertools.pairwise(hs) if b["taken"] < a["released"]]
    bad += len(over)
    groups = sum("world_size=" in str(h["owner"]) for h in hs)
    print(f"{dev}: {len(hs)} holds by {len({h['pid'] for h in hs})} process(es), {groups} by the group, "
          f"{len(over)} overlapping")
print(f"xdist -n 2 (pytest rc $rc): {'never two holders of one GPU at a time' if not bad else 'OVERLAP'}")
EOF
}

planted() {  # planted NAME EXPECTED ENV... -- PYTEST ARGS: one run against baseline pl
  local name=$1 want=$2; shift 2
  local envs=() ; while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" "${PY[@]}" "$EX" --gpuperf-baseline=pl --gpuperf-json="$WORK/b-$name.json" "$@" \
    > "$WORK/b-$name.txt" 2>&1
  local rc=$?
  local got
  got=$(verdicts "$WORK/b-$name.json" 2>/dev/null | tail -n +2 | head -2)
  if [ $rc -ne 0 ] && echo "$got" | grep -q "$want"; then
    say "b $name: FAILED as planted, named: $got"
  else
    say "b $name: NOT as planted (rc $rc, wanted '$want'): ${got:-$(grep -E 'passed|failed' "$WORK/b-$name.txt" | tail -1)}"
  fi
}

phase_b() {
  "${PY[@]}" "$EX" -k "ddp or (all_reduce and 256MiB)" --gpuperf-save=pl > "$WORK/b-save.txt" 2>&1 \
    || stop "b: save (rc $?): $(grep -E 'FAILED|Error' "$WORK/b-save.txt" | head -2)"
  planted p2p "transport fallback" NCCL_P2P_DISABLE=1 -- -k "all_reduce and 256MiB" --gpuperf-capture-skip=ncu
  planted imbalance "rank imbalance: rank 1" GPUPERF_PLANT=imbalance GPUPERF_PLANT_FACTOR=1.3 \
    -- -k ddp --gpuperf-capture-skip=nsys,ncu
  planted no_overlap "lost overlap" GPUPERF_PLANT=no_overlap -- -k ddp --gpuperf-capture-skip=nsys,ncu
  planted small_buckets "more, smaller collectives" GPUPERF_PLANT=small_buckets \
    -- -k ddp --gpuperf-capture-skip=nsys,ncu
}

case $PHASE in
  a) phase_a ;;
  b) phase_b ;;
  all) phase_a; phase_b ;;
  *) stop "DIST2_PHASE must be a, b or all, got $PHASE" ;;
esac
find "$WORK" -name '*.sqlite' -delete
say "elapsed $(( $(date +%s) - t0 )) s (budget $BUDGET_S s)"
