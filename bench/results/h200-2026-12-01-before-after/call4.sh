#!/usr/bin/env bash
# Call 4: behaviour before (bafe23c, before the ring moves) and after (this tree) on the H200:
# the README main job (pytest-gpuperf demo) and the examples (3 saves, then a compare) on each
# side; then this tree's GPU tests. Verdicts per test are printed for both sides.
set -u
START=$(date +%s)
ROOT=$(pwd); BEFORE=$ROOT/.device/before
nvidia-smi -L
verdicts() { python3 - "$1" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
for r in doc.get("results", doc.get("benchmarks", [])):
    c = r.get("comparison") or {}
    print(f"  {r['id']['nodeid']:55s} {c.get('kind')!s:14s} {c.get('ratio')}")
PY
}
side() {  # $1: before|after ; $2: PYTHONPATH prefix ; $3: examples folder
  local d=/tmp/ex-$1; rm -rf $d; mkdir -p $d; cp -r $3 $d/examples; cp $ROOT/pyproject.toml $d/
  ( cd $d && export PYTHONPATH=$2${PYTHONPATH:+:$PYTHONPATH}
    python3 -c 'import pytest_gpuperf,sys;print("package:",pytest_gpuperf.__file__)'
    t0=$(date +%s)
    if [ $1 = before ]; then python3 -c 'import sys;from pytest_gpuperf.cli import main;sys.exit(main(["demo","--path","/tmp/demo-before"]))' > $OUT/demo-$1.txt 2>&1
    else python3 -m pytest_gpuperf.cli demo --path /tmp/demo-after > $OUT/demo-$1.txt 2>&1; fi
    echo "demo $1: rc $? in $(( $(date +%s) - t0 )) s"; tail -4 $OUT/demo-$1.txt
    for i in 1 2 3; do timeout 100 python3 -m pytest examples -q -p no:cacheprovider --gpuperf-save=main > save$i.log 2>&1; echo "save $i rc $?"; done
    timeout 100 python3 -m pytest examples -q -p no:cacheprovider --gpuperf-baseline=main --gpuperf-json=c.json > compare.log 2>&1; echo "compare rc $?"
    cp compare.log $OUT/compare-$1.log; cp c.json $OUT/c-$1.json 2>/dev/null; verdicts c.json )
  echo "side $1 done at $(( $(date +%s) - START )) s"
}
side before $BEFORE $BEFORE/examples
side after $ROOT $ROOT/examples
timeout 200 python3 -m pytest tests/gpu -v -p no:cacheprovider -rs > $OUT/gpu-tests.txt 2>&1; echo "gpu tests rc $?"
grep -E "PASSED|FAILED|ERROR|SKIPPED|passed|failed" $OUT/gpu-tests.txt | tail -30
echo "elapsed $(( $(date +%s) - START )) s"
