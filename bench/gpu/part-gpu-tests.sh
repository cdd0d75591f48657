#!/usr/bin/env bash
# The GPU tests (tests/gpu), with their verbose output.
set -u
timeout "$BUDGET_S" python3 -m pytest tests/gpu -v -p no:cacheprovider -rs > "$WORK/gpu-tests.txt" 2>&1
rc=$?
{ echo "pytest tests/gpu -v: rc $rc"; tail -1 "$WORK/gpu-tests.txt"; grep -E "FAILED|ERROR" "$WORK/gpu-tests.txt" | head -10; } > "$WORK/summary.txt"
exit $rc
