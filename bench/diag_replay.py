"""Diagnose recorded evidence again with the current code, and keep it for the tests.

A capture writes what its diagnosis read to ``evidence.json`` in the test's folder
(:meth:`pytest_gpuperf.artifacts.analysis.diagnose.Evidence.to_record`: the profile's
analysis, both kernel inventories, the probes, the compile log's findings, the allocator
and GPM figures, the times). This script gathers those records from capture work folders
(an unpacked part of bench/gpu/acceptance.sh, or bench/capture_cost.py's ``--out``) into
one file, and diagnoses a file's records again, printing per zoo case the cause the zoo
expects (``bench/zoo/cases.py``), the one the current code names first, and its sentence:

    python bench/diag_replay.py --export /tmp/part/capture --out tests/data/diagnosis/x.json
    python bench/diag_replay.py tests/data/diagnosis/*.json

Captures made before ``evidence.json`` existed are rebuilt from their files (the profile's
``*.analysis.json``, the manifest's compile findings, the session's results JSON and its
baseline folder). ``tests/unit/test_diagnosis_replay.py`` checks
the first cause of every recorded case.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench" / "zoo")]

from cases import BY_NAME  # noqa: E402

from pytest_gpuperf.artifacts.analysis.diagnose import Evidence, diagnose, lead  # noqa: E402


def case_of(key: str) -> str:
    """``bench/zoo/test_zoo.py::test_zoo[h2d_pageable]@cuda-events`` -> ``h2d_pageable``."""
    return key.split("[", 1)[-1].split("]", 1)[0] if "[" in key else key


def expected(record: dict[str, Any]) -> str:
    case = BY_NAME.get(record.get("case") or case_of(record["key"]))
    if case is None:
        return ""
    cpu = (record.get("analysis") or {}).get("device") == "cpu"
    return case.cpu_cause if cpu else case.cause


def records(work: Path, baseline: str | None) -> list[dict[str, Any]]:
    """The evidence records of every capture under ``work``."""
    out = []
    for path in sorted(work.rglob("evidence.json")):
        for rec in json.loads(path.read_text()).values():
            out.append(rec)
    names = [b.stem for b in (work / "baselines").glob("*.json")]
    if not out and (baseline or len(names) == 1):
        out = _rebuilt(work, baseline or names[0])
    for rec in out:
        rec["case"] = case_of(rec["key"])
    return out


def _rebuilt(work: Path, baseline: str) -> list[dict[str, Any]]:
    """Records of a capture older than ``evidence.json``, from its files."""
    from pytest_gpuperf.artifacts.analysis.layout import read_manifest, safe_name
    from pytest_gpuperf.artifacts.analysis.timeline import ProfileAnalysis
    from pytest_gpuperf.baseline.store import BaselineStore
    from pytest_gpuperf.reporting.explain import change_text
    from pytest_gpuperf.reporting.json_report import load_results
    from pytest_gpuperf.shell.capture import baseline_inventory
    from pytest_gpuperf.verdict.judge import Judge

    judge = Judge(BaselineStore(work / "baselines").load(baseline))
    out = []
    for js in sorted(work.glob("*.json")):
        doc = json.loads(js.read_text())
        if doc.get("schema") != "pytest-gpuperf/results":
            continue
        for r in load_results(doc):
            analysis = next(iter(work.rglob(f"{safe_name(r.id.key)}.analysis.json")), None)
            if analysis is None or r.comparison is None:
                continue
            prof = json.loads(analysis.read_text())
            manifest = read_manifest(analysis.parent.parent)
            trace = next((c for c in manifest.get("collectors") or [] if c.get("name") == "torch_trace"), {})  # fmt: skip
            runs = judge.match(r).runs
            ev = Evidence(
                key=r.id.key, display=r.id.display, baseline_s=r.comparison.baseline_s,
                current_s=r.comparison.current_s, change=change_text(r.comparison, r.id.mode),
                verdict=r.comparison.kind, analysis=ProfileAnalysis.from_dict(prof["analysis"]),
                baseline_inventory=baseline_inventory(runs), current_inventory=prof["inventory"],
                current_probe=prof.get("probe"), triton_configs=prof.get("triton_configs") or {},
                compile=trace.get("summary") if trace.get("status") == "ok" else None,
                child_median_s=prof.get("child_median_s"), child_rounds=prof.get("child_rounds"),
                current_activity=(r.telemetry or {}).get("activity"), current_memory=r.memory,
                baseline_activity=[(x.telemetry or {}).get("activity") for x in runs],
                baseline_memory=[x.memory for x in runs],
                profiled_in="a fresh process of the current code",
            )  # fmt: skip
            rec = ev.to_record()
            rec["recorded"] = r.diagnosis.paragraph if r.diagnosis else ""
            out.append(rec)
    return out


def replay(path: Path) -> list[dict[str, Any]]:
    """Each record of a file diagnosed again: case, expected cause, cause now, sentence."""
    rows = []
    for rec in json.loads(path.read_text())["records"]:
        d = diagnose(Evidence.from_record(rec))
        want = expected(rec)
        rows.append({"case": rec["case"], "want": want, "got": d.cause, "ok": not want or d.cause == want,
                     "first": d.paragraph.split(". ", 1)[0], "lead": lead(d.paragraph)})  # fmt: skip
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("files", type=Path, nargs="*", help="record files to diagnose again")
    p.add_argument("--export", type=Path, nargs="+", metavar="WORK",
                   help="gather the evidence records of these capture work folders")  # fmt: skip
    p.add_argument("--out", type=Path, help="the record file --export writes")
    p.add_argument("--baseline", help="rebuild older captures against this baseline's runs "
                   "(default: the one baseline in WORK/baselines)")  # fmt: skip
    p.add_argument("--source", default="", help="where the evidence comes from (kept in the file)")
    p.add_argument("--slower", action="store_true", help="keep only the records with a slowdown")
    args = p.parse_args()
    if args.export:
        recs = [r for w in args.export for r in records(w, args.baseline)]
        if args.slower:  # a verdict of no change leaves nothing to diagnose
            recs = [r for r in recs if Evidence.from_record(r).slower]
        for r in recs:
            r.pop("kernel_diff", None)  # made again from the inventories when read
        lines = ",\n".join(json.dumps(r, sort_keys=True) for r in recs)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(f'{{"source": {json.dumps(args.source)}, "records": [\n{lines}\n]}}\n')
        print(f"{len(recs)} record(s) -> {args.out}")
        return 0
    bad = 0
    for path in args.files:
        print(f"== {path}")
        for row in replay(path):
            bad += not row["ok"]
            mark = "ok " if row["ok"] else "BAD"
            print(f"{mark} {row['case']:26} want {row['want'] or '-':20} got {row['got']}")
            print(f"    {row['first'][:400]}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
