"""Every diagnosis the recorded profiles give, to one JSON file: diff two to see a change.

    python bench/diag_snapshot.py /tmp/before.json   # on the old tree
    python bench/diag_snapshot.py /tmp/after.json    # on the new tree
    cmp /tmp/before.json /tmp/after.json

It reads every evidence record (``tests/data/diagnosis/*.json``,
``bench/results/*/diag-*evidence.json``), each once as recorded, once after a round trip
through ``Evidence.to_record``, and crossed with the other records of its file of the same
device (one record's baseline side, another's current side: stories the zoo never planted);
the recorded Kineto traces (``tests/data/artifacts/kineto_*.json``: their analysis,
inventory, and the diagnosis of each pair); the H200 zoo's recorded inventories, pairwise;
and the recorded NCCL logs. Each diagnosis is kept whole: first sentence, cause, causes,
paragraph and details.
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_gpuperf.artifacts.analysis import diagnose as dg  # noqa: E402
from pytest_gpuperf.artifacts.analysis import nccl_log  # noqa: E402
from pytest_gpuperf.artifacts.analysis.inventory import combine, inventory_from_trace  # noqa: E402
from pytest_gpuperf.artifacts.analysis.timeline import analyze, load_trace, parse_trace  # noqa: E402

#: what a record's current side is made of
CURRENT = ("current_inventory", "current_probe", "analysis", "current_memory", "current_activity",
           "compile", "triton_configs", "current_s", "child_median_s", "child_rounds", "nsys", "ncu")  # fmt: skip


def told(ev: dg.Evidence) -> dict[str, Any]:
    return dg.diagnose(ev).to_dict()


def snapshot() -> dict[str, Any]:
    out: dict[str, Any] = {}
    files = [*(ROOT / "tests/data/diagnosis").glob("*.json"), *ROOT.glob("bench/results/*/diag-*evidence.json")]  # fmt: skip
    for f in sorted(files):
        name, recs = f.relative_to(ROOT), json.loads(f.read_text())["records"]
        for i, rec in enumerate(recs):
            ev = dg.Evidence.from_record(rec)
            out[f"{name}#{i}"] = told(ev)
            back = json.loads(json.dumps(ev.to_record(), default=str))
            out[f"{name}#{i}:round-trip"] = told(dg.Evidence.from_record(back))
        for (i, a), (j, b) in itertools.permutations(enumerate(recs), 2):
            if (a.get("analysis") or {}).get("device") == (b.get("analysis") or {}).get("device"):
                mix = {**a, **{k: b[k] for k in CURRENT if k in b}, "kernel_diff": None}
                out[f"{name}#{i}x{j}"] = told(dg.Evidence.from_record(mix))
    invs = {}
    for t in sorted((ROOT / "tests/data/artifacts").glob("kineto_*.json")):
        trace = parse_trace(load_trace(t))
        a = analyze(trace)
        inv = inventory_from_trace(trace, analysis=a)
        invs[t.name] = (a, inv)
        out[f"{t.name}:analysis"], out[f"{t.name}:inventory"] = a.to_dict(), inv
    out["kineto:combined"] = combine([inv for _, inv in invs.values()])
    for (na, (_, ia)), (nb, (ab, ib)) in itertools.permutations(invs.items(), 2):
        b_s, c_s = ia["per_call_us"] * 1e-6, ib["per_call_us"] * 1.5e-6
        ev = dg.Evidence(key=f"{na}x{nb}", baseline_s=b_s, current_s=c_s, analysis=ab,
                         baseline_inventory=ia, current_inventory=ib)  # fmt: skip
        out[f"{na}x{nb}"] = told(ev)
    zoo = json.loads((ROOT / "tests/data/artifacts/h200_zoo_inventories.json").read_text())
    for (na, ia), (nb, ib) in itertools.permutations(zoo["inventories"].items(), 2):
        pa, pb = ia.get("per_call_us") or 100.0, ib.get("per_call_us") or 100.0
        ev = dg.Evidence(key=f"{na}x{nb}", baseline_s=pa * 1e-6, current_s=max(1.2 * pa, pb) * 1e-6,
                         baseline_inventory=ia, current_inventory=ib)  # fmt: skip
        out[f"zoo:{na}x{nb}"] = told(ev)
    for log in sorted((ROOT / "tests/data/nccl").glob("*.log")):
        s = nccl_log.summarize([nccl_log.parse(log.read_text())])
        out[f"nccl:{log.name}"] = {"summary": s, "describe": nccl_log.describe(s)}
    return out


if __name__ == "__main__":
    snap = snapshot()
    Path(sys.argv[1]).write_text(json.dumps(snap, indent=1, sort_keys=True, default=str) + "\n")
    print(f"{len(snap)} entries -> {sys.argv[1]}")
