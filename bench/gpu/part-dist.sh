#!/usr/bin/env bash
# Distributed benchmarks on one H200: NCCL at world size 1 (budget 60 s; run by
# bench/gpu/acceptance.sh, which gives ROOT, WORK and BUDGET_S).
#
# What world size 1 can show (busbw is 0 by its definition, and there is no peer transport):
#   1. a world_size=1 test starts its group (one spawned rank) and NCCL initialises;
#      all_reduce at 1 MiB and 256 MiB reports its algbw, busbw 0; NCCL's init log
#      (NCCL_DEBUG=INFO) is recorded in $WORK/nccl/ and read by the plugin's parser;
#   2. the same test under nsys with NVTX and CUDA trace (and NCCL's where nsys has a trace
#      option for it): the plugin's NVTX ranges, NCCL's own ranges and its kernels appear;
#   3. (time permitting) torchrun --nproc_per_node=1 runs it on torchrun's rank.
# Every step appends its lines to $WORK/summary.txt; a failed step stops the part there.
set -u
cd "$ROOT"
t0=$(date +%s)
S=$WORK/summary.txt
left() { echo $(( BUDGET_S - ($(date +%s) - t0) )); }
say() { echo "dist: $*" | tee -a "$S"; }
stop() { say "STOPPED: $*"; say "elapsed $(( $(date +%s) - t0 )) s"; exit 1; }
export NCCL_NVLS_ENABLE=0

# 0. sanity: NCCL in this torch, one GPU
python3 - > "$WORK/sanity.txt" 2>&1 <<'EOF' || stop "sanity: $(tail -1 "$WORK/sanity.txt")"
import torch, torch.distributed as dist
assert torch.cuda.is_available(), "no CUDA"
assert dist.is_nccl_available(), "this torch has no NCCL"
print("torch", torch.__version__, "NCCL", ".".join(map(str, torch.cuda.nccl.version())),
      "GPUs", torch.cuda.device_count())
EOF
say "$(cat "$WORK/sanity.txt")"

mkdir -p "$WORK/proj" "$WORK/nccl" "$WORK/nsys"
cat > "$WORK/proj/test_ws1.py" <<'EOF'
import pytest
import torch
import torch.distributed as dist

MiB = 2**20


@pytest.mark.gpuperf(world_size=1, collective="all_reduce")
@pytest.mark.parametrize("nbytes", [1 * MiB, 256 * MiB], ids=["1MiB", "256MiB"])
def test_all_reduce(gpu_bench, nbytes):
    x = torch.ones(nbytes // 2, dtype=torch.bfloat16, device=gpu_bench.device)
    gpu_bench(dist.all_reduce, x)
EOF
FAST=(-p no:cacheprovider -p no:randomly --gpuperf-rounds=10 --gpuperf-warmup-ms=200 --gpuperf-min-warmup-ms=100)

# 1. the group starts, NCCL initialises and logs, algbw reported, the log parsed
( cd "$WORK/proj" && NCCL_DEBUG=INFO NCCL_DEBUG_FILE="$WORK/nccl/nccl.%h.%p.log" \
  timeout $(( $(left) > 40 ? $(left) - 25 : 15 )) python3 -m pytest test_ws1.py "${FAST[@]}" -v \
    --gpuperf-inventory=always --gpuperf-json="$WORK/ws1.json" ) > "$WORK/ws1.txt" 2>&1 \
  || stop "world_size=1 run (rc $?): $(grep -E 'FAILED|Error' "$WORK/ws1.txt" | head -3)"
python3 - "$WORK" >> "$S" 2>&1 <<'EOF' || stop "reading the world_size=1 results failed"
import glob, json, sys
from pytest_gpuperf.artifacts.analysis import nccl_log
from pytest_gpuperf.measure.collectives import busbw_gbps
from pytest_gpuperf.model import Result
work = sys.argv[1]
doc = json.load(open(f"{work}/ws1.json"))
for d in doc["results"]:
    env = doc["environments"].get(d.get("environment_id") or "", {})
    r = Result.from_dict({**d, "environment": env})
    g = r.run.extra["group"]
    comms = g.get("comms") or {}
    print(f"dist: {r.id.key}: mode {r.id.mode}, world size {g['world_size']}, {g['backend']}, "
          f"median {r.run.median * 1e6:.1f} us, algbw {r.run.gbps:.1f} GB/s, busbw {busbw_gbps(r.run):.1f} GB/s"
          f" (0 at world size 1); profile: {comms.get('collectives_per_call')} collective(s) per "
          f"call, algorithms {comms.get('algos')}")
    print(f"dist:   NCCL as the rank recorded it: {nccl_log.describe(g.get('nccl'))}")
logs = sorted(glob.glob(f"{work}/nccl/nccl.*.log"))
assert logs, "no NCCL log was written"
for path in logs:
    log = nccl_log.parse(open(path).read())
    print(f"dist: parsed {path.rsplit('/', 1)[-1]}: {log.lines} NCCL lines, version {log.version}, "
          f"communicators {log.comms}, transports {dict(log.transports) or 'none (world size 1)'}, "
          f"network {log.network}; keep it as tests/data/nccl/h200-ws1.log")
EOF

# 2. nsys: which trace options this nsys has for NCCL, then the plugin's and NCCL's ranges
TRACE=cuda,nvtx,osrt
if nsys profile --help 2>/dev/null | grep -A14 -- '--trace=' | grep -qiw nccl; then
  TRACE=$TRACE,nccl; say "nsys: its --trace has nccl: using -t $TRACE"
else
  say "nsys: $(nsys --version 2>&1 | head -1): no nccl in --trace; NCCL's NVTX ranges come with -t $TRACE"
fi
if [ "$(left)" -gt 25 ]; then
  ( cd "$WORK/proj" && timeout $(( $(left) - 8 )) nsys profile -t "$TRACE" --sample=none \
      --cpuctxsw=none -o "$WORK/nsys/ws1" -f true \
      python3 -m pytest test_ws1.py -k 1MiB "${FAST[@]}" --gpuperf-rounds=5 --gpuperf-inventory=never ) \
    > "$WORK/nsys.txt" 2>&1 || say "nsys run: rc $? ($(tail -1 "$WORK/nsys.txt"))"
  rep=$(ls "$WORK"/nsys/ws1*.nsys-rep 2>/dev/null | head -1)
  if [ -n "$rep" ]; then
    nsys stats -r nvtx_sum,cuda_gpu_kern_sum -f csv -o "$WORK/nsys/stats" --force-export=true "$rep" \
      > "$WORK/nsys-stats.txt" 2>&1
    python3 - "$WORK" >> "$S" 2>&1 <<'EOF'
import csv, glob, sys
work = sys.argv[1]
def rows(name):
    for p in glob.glob(f"{work}/nsys/stats_{name}.csv"):
        lines = [l for l in open(p) if "," in l]
        return list(csv.DictReader(lines))
    return []
ranges = [r.get("Range", "") for r in rows("nvtx_sum")]
kernels = [r.get("Name", "") for r in rows("cuda_gpu_kern_sum")]
mine = [r for r in ranges if "test_all_reduce" in r]
nccl = [r for r in ranges if "nccl" in r.lower()]
nk = [k for k in kernels if k.lower().startswith("nccl")]
print(f"dist: nsys: {len(mine)} gpuperf NVTX range(s) (e.g. {mine[:2]}), {len(nccl)} NCCL range(s) "
      f"(e.g. {nccl[:3]}), {len(nk)} NCCL kernel name(s) (e.g. {[k[:60] for k in nk[:2]]})")
EOF
    rm -f "$WORK"/nsys/*.sqlite
  else
    say "nsys: no report written: $(tail -2 "$WORK/nsys.txt" | tr '\n' ' ')"
  fi
else
  say "nsys: skipped, $(left) s left"
fi

# 3. torchrun's rank runs the same test (world size 1 under torchrun)
if [ "$(left)" -gt 15 ]; then
  ( cd "$WORK/proj" && timeout $(( $(left) - 3 )) python3 -m torch.distributed.run --standalone \
      --nproc_per_node=1 -m pytest test_ws1.py -k 1MiB "${FAST[@]}" --gpuperf-rounds=5 \
      --gpuperf-inventory=never -q ) > "$WORK/torchrun.txt" 2>&1
  say "torchrun --nproc_per_node=1: rc $?, $(grep -E 'passed|failed|error' "$WORK/torchrun.txt" | tail -1)"
else
  say "torchrun: skipped, $(left) s left"
fi
say "elapsed $(( $(date +%s) - t0 )) s (budget $BUDGET_S s)"
