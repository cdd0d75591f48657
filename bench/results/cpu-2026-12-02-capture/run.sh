#!/bin/bash
. /work/wt/capture/.venv/bin/activate
export GPUPERF_LOCK_DIR=/tmp/caplock
B=/work/wt/capture/bench/capture_cost.py
rm -rf /tmp/cf-before /tmp/cf-after /tmp/cf-default /tmp/cf-demo1 /tmp/cf-demo2
echo "== before (main f45767f), --always; load $(cut -d' ' -f1-3 /proc/loadavg)"
PYTHONPATH=/tmp/capbefore python $B --out /tmp/cf-before --always --no-leftover-check 2>&1 | grep -v '^\$\|^  save\|^  session'
echo "== after, --always; load $(cut -d' ' -f1-3 /proc/loadavg)"
python $B --out /tmp/cf-after --always --no-leftover-check 2>&1 | grep -v '^\$\|^  save\|^  session'
echo "== after, defaults (regressions only); load $(cut -d' ' -f1-3 /proc/loadavg)"
python $B --out /tmp/cf-default 2>&1 | grep -v '^\$\|^  save'
for i in 1 2; do
  echo "== demo $i; load $(cut -d' ' -f1-3 /proc/loadavg)"
  /usr/bin/time -f "demo wall %e s" pytest-gpuperf demo --path /tmp/cf-demo$i 2>&1 | grep -E "run [0-9] of|as designed|NOT as designed|demo wall|capture:|first diagnosis"
done
echo "== end; load $(cut -d' ' -f1-3 /proc/loadavg)"
