#!/usr/bin/env bash
# Issue 37 (hardening, third pass) on a GPU, outside the store: the header's lines within 120
# columns; the device lock in the machine's shared place (/dev/shm, whatever TMPDIR says):
# two sessions with two TMPDIRs never hold the GPU at once (GPUPERF_LOCK_LOG); a lock log
# that is a FIFO refused at the start; SIGTERM of a save (as `timeout` sends) says NOT saved;
# a lock held elsewhere fails the benchmark with its text alone, no traceback.
# DEVICE=cpu runs it on a machine without a GPU (a dry run of the script).
set -u
DEVICE=${DEVICE:-cuda}
cd "$WORK" || exit 2
cat > test_hard.py <<EOF
import time

import pytest
import torch

@pytest.mark.parametrize("n", [256, 384, 512, 640, 768, 896])
def test_mm(gpu_bench, n):
    a = torch.randn(n, n, device="$DEVICE")
    gpu_bench(torch.mm, a, a)


def test_slow():  # where the SIGTERM comes, after the benchmarks
    time.sleep(120)
EOF
FAST=(-p no:cacheprovider "--gpuperf-device=$DEVICE" --gpuperf-rounds=10 --gpuperf-round-ms=5
      --gpuperf-warmup-ms=100 --gpuperf-capture=never --gpuperf-inventory=never --gpuperf-reruns=0)
unset GPUPERF_LOCK_DIR GPUPERF_NO_LOCK
mkdir -p tA tB
rc=0
{
  # 1. two sessions at once, each with its own TMPDIR, one lock log
  t0=$(date +%s)
  TMPDIR=$WORK/tA GPUPERF_LOCK_LOG=$WORK/holds.jsonl timeout 150 python3 -m pytest test_hard.py \
    -k mm "${FAST[@]}" > s1.txt 2>&1 &
  TMPDIR=$WORK/tB GPUPERF_LOCK_LOG=$WORK/holds.jsonl timeout 150 python3 -m pytest test_hard.py \
    -k mm "${FAST[@]}" > s2.txt 2>&1
  rc2=$?; wait $!; rc1=$?
  echo "two sessions, TMPDIR tA and tB: rc $rc1 and $rc2 in $(( $(date +%s) - t0 )) s"
  python3 - holds.jsonl <<'PY' || rc=1
import itertools, json, sys
holds = [json.loads(x) for x in open(sys.argv[1])]
by = {}
for h in holds:
    by.setdefault(h["device"], []).append((h["taken"], h["released"], h["pid"]))
worst = 0.0
for spans in by.values():
    spans.sort()
    for (_, end, p), (start, _, q) in itertools.pairwise(spans):
        if p != q:
            worst = max(worst, end - start)
print(f"lock log: {len(holds)} holds of {sorted(by)}, from {len({h['pid'] for h in holds})} "
      f"processes; largest overlap {worst:.3f} s (must be <= 0)")
sys.exit(0 if worst <= 0 and len(holds) >= 12 else 1)
PY
  ls -l /dev/shm/pytest-gpuperf-* 2>&1 | head -4
  wide=$(grep -h '^gpuperf: ' s1.txt s2.txt | awk 'length > 120' | wc -l)
  echo "header: $(grep -m2 '^gpuperf: measuring\|^gpuperf: [0-9]* rounds' s1.txt | awk '{print length}' | tr '\n' ' ')columns; lines over 120: $wide"
  [ "$wide" -eq 0 ] || rc=1
  [ "$rc1" -eq 0 ] && [ "$rc2" -eq 0 ] || rc=1

  # 2. a lock log that is a FIFO: one error at the start, nothing measured
  mkfifo holds.fifo
  t0=$(date +%s)
  GPUPERF_LOCK_LOG=$WORK/holds.fifo timeout 60 python3 -m pytest test_hard.py -k mm "${FAST[@]}" \
    > s3.txt 2>&1
  rc3=$?
  echo "GPUPERF_LOCK_LOG=FIFO: rc $rc3 (want 4) in $(( $(date +%s) - t0 )) s: $(grep -m1 -o 'GPUPERF_LOCK_LOG: cannot append.\{0,60\}' s3.txt)"
  [ "$rc3" -eq 4 ] || rc=1

  # 3. SIGTERM of a save, as `timeout` or a CI cancellation sends it (in test_slow)
  timeout -s TERM 40 python3 -m pytest test_hard.py "${FAST[@]}" --gpuperf-save=s > s4.txt 2>&1
  rc4=$?
  echo "timeout -s TERM 40 of a save: rc $rc4; $(grep -c 'NOT saved' s4.txt) NOT-saved line(s);" \
    "baseline written: $([ -e .gpuperf/baselines/s.json ] && echo yes || echo no)"
  grep -m1 'NOT saved' s4.txt
  grep -q 'NOT saved' s4.txt && [ ! -e .gpuperf/baselines/s.json ] || rc=1

  # 4. another process holds the GPU's lock: each benchmark fails with the text alone (R7)
  python3 - "$DEVICE" > holder.txt 2>&1 <<'PY' &
import sys, time
from pytest_gpuperf.shell.locks import device_key, device_lock
with device_lock(device_key(sys.argv[1]), owner="part-hard's holder"):
    print("holding", flush=True)
    time.sleep(60)
PY
  hp=$!
  for _ in $(seq 300); do grep -q holding holder.txt && break; sleep 0.1; done
  timeout 60 python3 -m pytest test_hard.py -k "mm and 256" "${FAST[@]}" \
    --gpuperf-lock-timeout=1 > s5.txt 2>&1
  rc5=$?
  kill "$hp"; wait "$hp" 2>/dev/null
  inside=$(sed -n '/ FAILURES /,/ short test summary /p' s5.txt | grep -c 'Traceback\|locks.py\|^E ')
  echo "a lock held elsewhere: rc $rc5 (want 1); $(grep -m1 -o 'gpuperf: .\{0,40\}stayed busy for 1 s' s5.txt);" \
    "traceback lines in the failure: $inside (want 0)"
  [ "$rc5" -eq 1 ] && [ "$inside" -eq 0 ] && grep -q 'stayed busy' s5.txt || rc=1
} > summary.txt 2>&1
exit $rc
