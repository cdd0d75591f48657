#!/usr/bin/env bash
# bisect (issue 39): --gpuperf-bisect on a real GPU history, as a user runs it. A fixture
# repository: GOOD, then 5 commits; commit 2 drops autocast from an MLP (its bf16 GEMMs
# become fp32 ones), commit 4 adds a host sync (a float() of the state) to each step of a
# decode loop; 3 touches a README, the others a notes file. The search must answer
# test_mlp: commit 2 and test_decode: commit 4, each confirmed against its parent and
# diagnosed against it (the parent profiled, the commit captured with torch.profiler; Nsight
# and TORCH_TRACE left out to fit the call), never a docs commit, the checkout untouched.
#
#   source .device/setup.sh && bash bench/gpu/acceptance.sh bisect        (about 3 minutes)
#
# A dry run of the script's logic on the CPU machine (small sizes; a CPU may not tell the
# changes apart, which the summary then says):
#   BISECT_DEVICE=cpu ROOT=$PWD WORK=/tmp/bs BUDGET_S=900 bash bench/gpu/part-bisect.sh
set -u
T0=$(date +%s)
DEVICE=${BISECT_DEVICE:-cuda}
PY=python3
S=$WORK/summary.txt
say() { echo "$*" | tee -a "$S"; }
fix=$WORK/repo
rm -rf "$fix"; mkdir -p "$fix/gpupkg"
cat > "$fix/gpupkg/__init__.py" <<'EOF'
import torch

AUTOCAST = True
SYNC = False


def mlp(x, w1, w2):
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=AUTOCAST):
        return torch.relu(x @ w1) @ w2


def decode(h, w, steps=16):
    for _ in range(steps):
        h = torch.tanh(h @ w)
        if SYNC:
            float(h[0, 0])  # the host waits for the GPU at every step
    return h
EOF
cat > "$fix/test_gpu_bisect.py" <<'EOF'
import torch

import gpupkg

DEV = "cuda" if torch.cuda.is_available() else "cpu"
N = 4096 if DEV == "cuda" else 256


def test_mlp(gpu_bench):
    x = torch.randn(N, N, device=DEV)
    w1, w2 = torch.randn(N, N, device=DEV) / N**0.5, torch.randn(N, N, device=DEV) / N**0.5
    gpu_bench(gpupkg.mlp, x, w1, w2)


def test_decode(gpu_bench):
    h = torch.randn(64, 1024, device=DEV)
    w = torch.randn(1024, 1024, device=DEV) / 32
    gpu_bench(gpupkg.decode, h, w)
EOF
printf '.gpuperf/\n' > "$fix/.gitignore"
g() { git -C "$fix" -c user.name=bisect -c user.email=bisect@localhost "$@"; }
g init -q -b main && g add -A && g commit -qm "good"
for k in 1 2 3 4 5; do
  case $k in
    2) sed -i 's/^AUTOCAST = True$/AUTOCAST = False/' "$fix/gpupkg/__init__.py"; msg="the MLP without autocast" ;;
    3) echo "docs $k" >> "$fix/README.md"; msg="docs only" ;;
    4) sed -i 's/^SYNC = False$/SYNC = True/' "$fix/gpupkg/__init__.py"; msg="read the state back each step" ;;
    *) echo "$k" >> "$fix/notes.txt"; msg="notes $k" ;;
  esac
  g add -A && g commit -qm "$msg"
done
before=$(g rev-parse HEAD; g status --porcelain; g worktree list | wc -l)
say "bisect: a history of 5 commits (autocast dropped at 2, a host sync at 4) on $DEVICE; budget ${BUDGET_S} s"
t=$(date +%s)
( cd "$fix" && timeout $(( BUDGET_S - 20 )) $PY -m pytest test_gpu_bisect.py -p no:cacheprovider \
    --rootdir "$fix" --gpuperf-device="$DEVICE" --gpuperf-bisect=HEAD~5 \
    --gpuperf-bisect-budget=$(( BUDGET_S - 40 )) --gpuperf-rounds=15 --gpuperf-warmup-ms=300 \
    --gpuperf-capture-skip=nsys,ncu,torch_trace --gpuperf-json="$WORK/bisect.json" ) > "$WORK/bisect.log" 2>&1
rc=$?
after=$(g rev-parse HEAD; g status --porcelain; g worktree list | wc -l)
say "pytest --gpuperf-bisect=HEAD~5: rc $rc (1: slower commits found) in $(( $(date +%s) - t )) s;" \
  "checkout untouched: $([ "$before" = "$after" ] && echo yes || echo NO)"
$PY - "$WORK/bisect.json" >> "$S" 2>&1 <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))["session"]["bisect"]
want = {"test_mlp": 2, "test_decode": 4}
print(f"  {len(doc['steps'])} steps, {doc['processes']} fresh processes, {doc['wall_s']:.0f} s")
for s in doc["steps"]:
    told = ", ".join(f"{k.split('::')[-1]} {o} {(s['verdicts'].get(k) or {}).get('ratio') or 0:.2f}x"
                     for k, o in s["outcomes"].items())
    print(f"  step {s['number']}: commit {s['commit']['index']} against "
          f"{'GOOD' if s['against']['index'] == 0 else 'parent'} ({s['purpose']}): {told}")
for a in doc["answers"]:
    name = a["key"].split("::")[-1].split("@")[0]
    at = a["commit"]["index"] if a["commit"] else None
    ok = "right" if at == want.get(name) else f"WRONG (planted at {want.get(name)})"
    vs = a["against_parent"] or {}
    print(f"  {name}: {a['status']} at commit {at} ({ok}); against its parent {vs.get('kind')} "
          f"{vs.get('figure')} {vs.get('ratio') or 0:.2f}x")
    d = (a.get("diagnosis") or {}).get("paragraph") or "no diagnosis"
    print(f"    diagnosis: {' '.join(d.split())[:300]}")
EOF
tail -25 "$WORK/bisect.log" > "$WORK/bisect-tail.txt"
say "bisect: done in $(( $(date +%s) - T0 )) s"
