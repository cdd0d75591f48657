"""What bench/gpu/part-activity.sh checks in the files its steps wrote; prints summary lines.

    python3 bench/gpu/activity_check.py examples LOG JSON HTML
    python3 bench/gpu/activity_check.py table JSON

Exit status 1 when a check fails (the line says which); the files stay for a replay on
the CPU.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pytest_gpuperf.measure.peaks import describe
from pytest_gpuperf.reporting.activity import activity_line, memory_line
from pytest_gpuperf.telemetry import activity as act


def examples(log: Path, results: Path, html: Path) -> bool:
    """Activity in the result detail (-v's activity: block), the JSON and the HTML."""
    ok = True
    text = log.read_text(errors="replace")
    doc = json.loads(results.read_text())
    page = html.read_text(errors="replace")
    block = "activity (NVML GPM and the caching allocator" in text
    print(f"result detail (-v activity: block): {'yes' if block else 'NO'}")
    print(f"HTML section 'Activity and memory behaviour': "
          f"{'yes' if 'Activity and memory behaviour' in page else 'NO'}")  # fmt: skip
    ok &= block and "Activity and memory behaviour" in page
    for r in doc["results"]:
        a = (r.get("telemetry") or {}).get("activity")
        print(f"  {r['id']['key']}: activity {activity_line(a) or 'none'}")
        print(
            f"    allocator {memory_line(r.get('memory')) or 'none'}; {describe(r.get('of_peak'))}"
        )
        ok &= bool(a) and bool(r.get("memory"))
        if "scale_inplace" in r["id"]["key"] and a and a.get("available"):
            b = act.bound(a)
            called = b is not None and b.label == "memory-bound"
            print(f"  memory-bound from GPM alone (no ncu): {'yes' if called else 'NO'}: "
                  f"{b.sentence if b else '-'}")  # fmt: skip
            ok &= called
    return ok


def table(path: Path) -> bool:
    doc = json.loads(path.read_text())
    rows = {r["workload"]: r for r in doc["rows"]}
    mul = rows.get("mul fp32 256M (memory-bound)", {})
    print(f"GPM bound of the 256M fp32 mul: {mul.get('bound')}")
    return mul.get("bound") == "memory-bound"


def main() -> int:
    what, *paths = sys.argv[1:]
    check = {"examples": examples, "table": table}[what]
    return 0 if check(*map(Path, paths)) else 1


if __name__ == "__main__":
    sys.exit(main())
