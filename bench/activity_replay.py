"""Re-run the diagnosis of the activity part's zoo cases on the CPU, with the current code.

bench/gpu/part-activity.sh keeps, in its work folder, the baseline it saved from the good
variants (``baselines/``), the results of the bad variants (``zoo-bad.json``, with each
result's GPM activity and allocator figures) and the capture's files (``artifacts/``:
per case the torch.profiler trace, its kernel inventory and the probe of one call). This
script rebuilds each case's evidence from them and diagnoses it again, so the story rules
can be changed and re-checked without a GPU:

    tar xzf activity.tgz -C /tmp && python bench/activity_replay.py /tmp/activity

It prints, per case, the first sentence the GPU run gave and the one the current code
gives, and the GPM figures that moved against the baseline.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pytest_gpuperf.artifacts.analysis.diagnose import Evidence, diagnose
from pytest_gpuperf.artifacts.analysis.inventory import diff_inventories
from pytest_gpuperf.artifacts.analysis.layout import safe_name
from pytest_gpuperf.artifacts.analysis.timeline import analyze, load_trace, parse_trace
from pytest_gpuperf.baseline.store import BaselineStore
from pytest_gpuperf.reporting.json_report import load_results
from pytest_gpuperf.shell.capture import baseline_inventory
from pytest_gpuperf.telemetry import activity as act
from pytest_gpuperf.verdict.judge import Judge


def first_sentence(paragraph: str) -> str:
    text = paragraph.split("Likely cause: ", 1)[-1]
    return text.split(". ", 1)[0].rstrip(".")


def _profile(artifacts: Path, key: str) -> dict[str, Any]:
    """The capture child's analysis of ``key`` (inventory, probe) and its trace, if kept."""
    for path in sorted(artifacts.rglob(f"{safe_name(key)}.analysis.json")):
        info: dict[str, Any] = json.loads(path.read_text())
        trace = path.with_name(f"{safe_name(key)}.trace.json")
        info["_trace"] = trace if trace.exists() else None
        return info
    return {}


def replay(work: Path, baseline: str) -> list[dict[str, Any]]:
    store = BaselineStore(work / "baselines")
    judge = Judge(store.load(baseline))
    doc = json.loads((work / "zoo-bad.json").read_text())
    out = []
    for r in load_results(doc):
        recorded = (r.diagnosis.paragraph if r.diagnosis else "") or ""
        if not recorded:
            continue
        runs = judge.match(r).runs
        base_inv = baseline_inventory(runs)
        prof = _profile(work / "artifacts", r.id.key)
        cur_inv = prof.get("inventory")
        trace = prof.get("_trace")
        ev = Evidence(
            key=r.id.key,
            display=r.id.display,
            baseline_s=r.comparison.baseline_s if r.comparison else None,
            current_s=r.comparison.current_s if r.comparison else r.median,
            analysis=analyze(parse_trace(load_trace(trace))) if trace else None,
            baseline_inventory=base_inv,
            current_inventory=cur_inv,
            current_probe=prof.get("probe"),
            current_activity=(r.telemetry or {}).get("activity"),
            baseline_activity=[(x.telemetry or {}).get("activity") for x in runs],
            current_memory=r.memory,
            baseline_memory=[x.memory for x in runs],
        )
        if base_inv and cur_inv:
            ev.kernel_diff = diff_inventories(base_inv, cur_inv, ev.slowdown_s)
        d = diagnose(ev)
        moves = act.moved(ev.baseline_activity, ev.current_activity)
        out.append(
            {
                "key": r.id.key,
                "gpu_run": first_sentence(recorded),  # what the recorded run's code said
                "now": first_sentence(d.paragraph),
                "cause": d.cause,
                "moved": [m.text() for m in moves],
            }
        )
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("work", type=Path, help="the part's work folder (unpacked activity.tgz)")
    p.add_argument("--baseline", default="act", help="the baseline's name (default act)")
    args = p.parse_args()
    print("command: python bench/activity_replay.py " + " ".join(sys.argv[1:]))
    for row in replay(args.work, args.baseline):
        print(f"{row['key']}: {row['cause']}")
        print(f"  recorded:  {row['gpu_run']}")
        print(f"  now:       {row['now']}")
        print(f"  GPM moved: {', '.join(row['moved']) or 'nothing'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
