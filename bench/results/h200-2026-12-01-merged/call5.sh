#!/usr/bin/env bash
# Call 5 (the merged tree): GPU tests; the examples (3 saves, a compare) and the README's main
# job (pytest-gpuperf demo) from empty stores; two planted captures if time is left.
set -u
START=$(date +%s)
ROOT=$(pwd)
nvidia-smi -L
timeout 200 python3 -m pytest tests/gpu -v -p no:cacheprovider -rs > $OUT/gpu-tests.txt 2>&1; echo "gpu tests rc $?"
grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/gpu-tests.txt | tail -30
d=/tmp/ex; rm -rf $d; mkdir -p $d; cp -r examples pyproject.toml $d/
( cd $d && export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
  for i in 1 2 3; do timeout 100 python3 -m pytest examples -q -p no:cacheprovider --gpuperf-save=main > save$i.log 2>&1; echo "save $i rc $?"; done
  timeout 100 python3 -m pytest examples -q -p no:cacheprovider --gpuperf-baseline=main --gpuperf-json=c.json > compare.log 2>&1; echo "compare rc $?"
  cp save3.log $OUT/save3.log; cp compare.log $OUT/compare.log; cp c.json $OUT/c.json
  python3 - <<'PY'
import json
for r in json.load(open("c.json"))["results"]:
    c = r.get("comparison") or {}
    print(f"  {r['id']['nodeid']:55s} {r['id']['mode']:12s} {c.get('kind')!s:14s} {c.get('ratio')}")
PY
  tail -3 compare.log )
echo "examples done at $(( $(date +%s) - START )) s"
t0=$(date +%s); timeout 150 python3 -m pytest_gpuperf.cli demo --path /tmp/demo > $OUT/demo.txt 2>&1
echo "demo rc $? in $(( $(date +%s) - t0 )) s"; tail -4 $OUT/demo.txt
left=$(( 540 - ($(date +%s) - START) ))
echo "time left for the planted captures: $left s"
if [ $left -gt 60 ]; then
  GPUPERF_CAPTURE_TESTS=1 GPUPERF_REPORTS=$OUT/planted timeout $left python3 -m pytest tests/gpu/test_capture_gpu.py tests/gpu/test_compile_capture_gpu.py -k "sync or loop_break" -v -p no:cacheprovider -rs > $OUT/planted.txt 2>&1
  echo "planted captures rc $?"; grep -E "PASSED|FAILED|ERROR|passed|failed|Timeout" $OUT/planted.txt | tail -8
fi
echo "elapsed $(( $(date +%s) - START )) s"
