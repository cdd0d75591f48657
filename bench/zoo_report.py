"""The figures of a zoo campaign (``zoo_campaign.py sessions``): what the gate caught, missed and
cleared, session by session, against the ground truth (``zoo_truth.py --json``).

For every A/B session (every case's bad variant against the baseline of good runs) and every
A/A session (the good variants again), one line per case: the verdict, the runs it took, the
figure that decided it and the slowdown seen; then the totals the regression issue asks for:

* realistic slowdowns of 1.5x or more (by the ground truth's larger figure) that failed;
* those between 1.2x and 1.5x;
* the synthetic small slowdowns (+5 % of kernel-bound work, +10 % of host-bound work);
* benign refactors and unchanged tiny kernels that failed (must be none);
* A/A false failures and inconclusive share;
* confirmation re-runs and session wall times (plain sessions against those with re-runs).

    python3 bench/zoo_report.py --truth truth.json /tmp/zoo/sessions /tmp/zoo1/sessions
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "zoo"))
from cases import BY_NAME


def load(folder: Path) -> list[tuple[str, dict, list[dict]]]:
    out = []
    for meta in sorted(folder.glob("*.meta")):
        tag = meta.stem
        if (
            ".child-" in tag
        ):  # a kept confirmation child's (bench/zoo/conftest.py): a run, not a session
            continue
        js = folder / f"{tag}.json"
        doc = json.loads(js.read_text()) if js.exists() else {"results": []}
        out.append((f"{folder.parent.name}/{tag}", json.loads(meta.read_text()), doc["results"]))
    return out


def case_of(r: dict) -> str:
    return r["id"]["nodeid"].split("[", 1)[1].rstrip("]")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--truth", type=Path, action="append", default=[])
    ap.add_argument("--detail", action="store_true", help="one line per case and session")
    args = ap.parse_args()
    truth: dict[str, dict] = {}
    for t in args.truth:
        for row in json.loads(t.read_text()):
            truth[row["case"]] = row
    sessions = [s for f in args.folders for s in load(f)]
    by_case: dict[str, dict[str, list]] = defaultdict(lambda: {"ab": [], "aa": []})
    walls = defaultdict(list)
    for tag, meta, results in sessions:
        kind = tag.split("/")[1].split("-")[0]
        walls[kind].append(meta["wall"])
        if kind not in ("ab", "aa"):
            continue
        for r in results:
            c = r.get("comparison") or {}
            figs = {f["figure"]: f["kind"] for f in c.get("figures") or []}
            by_case[case_of(r)][kind].append(
                (tag, c.get("kind"), c.get("r"), c.get("figure"), c.get("slower"), figs)
            )
    print(f"{'case':26} {'kind':9} {'truth e2e':>9} {'dev':>6} | A/B: caught/sessions, runs, "
          "figure | A/A: fail/incon/sessions, runs")  # fmt: skip
    tot = Counter()
    for case, row in sorted(by_case.items(), key=lambda kv: (BY_NAME[kv[0]].kind, kv[0])):
        c = BY_NAME[case]
        t = truth.get(case, {})
        ratio = max(t.get("ratio_e2e", 0), t.get("ratio_device", 0))
        ab, aa = row["ab"], row["aa"]
        caught = sum(k == "regression" for _, k, *_ in ab)
        figs = Counter(f for _, k, _, f, *_ in ab if k == "regression")
        runs_ab = sum(r or 0 for _, _, r, *_ in ab) / max(len(ab), 1)
        fails = sum(k == "regression" for _, k, *_ in aa)
        incon = sum(k == "inconclusive" for _, k, *_ in aa)
        runs_aa = sum(r or 0 for _, _, r, *_ in aa) / max(len(aa), 1)
        print(
            f"{case:26} {c.kind:9} {t.get('ratio_e2e', float('nan')):9.3f} "
            f"{t.get('ratio_device', float('nan')):6.3f} | {caught}/{len(ab)}, {runs_ab:.1f}, "
            f"{dict(figs)} | {fails}/{incon}/{len(aa)}, {runs_aa:.1f}"
        )
        if args.detail:
            for tag, k, r, f, slower, fg in ab + aa:
                print(f"    {tag:16} {k:13} r={r} {f} slower={slower:.3f} {fg}")
        if c.kind == "realistic" and ratio >= 1.5:
            tot["big"] += len(ab)
            tot["big_caught"] += caught
        elif c.kind == "realistic" and ratio >= 1.2:
            tot["mid"] += len(ab)
            tot["mid_caught"] += caught
        elif c.kind == "realistic":
            tot["small"] += len(ab)
            tot["small_caught"] += caught
        if c.kind in ("benign", "unchanged"):
            tot[c.kind] += len(ab) + len(aa)
            tot[f"{c.kind}_failed"] += caught + fails
        if c.kind == "synthetic":
            tot[f"syn:{case}"] = caught
            tot[f"syn_n:{case}"] = len(ab)
        tot["aa"] += len(aa)
        tot["aa_fail"] += fails
        tot["aa_incon"] += incon
    print()
    print(f"realistic >= 1.5x: {tot['big_caught']} of {tot['big']} failed")
    print(f"realistic 1.2-1.5x: {tot['mid_caught']} of {tot['mid']} failed")
    if tot["small"]:
        print(f"realistic < 1.2x: {tot['small_caught']} of {tot['small']} failed")
    for k in sorted(k for k in tot if k.startswith("syn:")):
        name = k[4:]
        print(f"synthetic {name}: {tot[k]} of {tot['syn_n:' + name]} failed")
    print(f"benign refactors: {tot['benign_failed']} failures in {tot['benign']} comparisons")
    print(
        f"unchanged tiny kernels: {tot['unchanged_failed']} failures in {tot['unchanged']} "
        "comparisons"
    )
    n_aa_sessions = sum(1 for tag, *_ in sessions if "/aa-" in tag)
    aa_failed_sessions = sum(
        1
        for tag, meta, results in sessions
        if "/aa-" in tag
        and any((r.get("comparison") or {}).get("kind") == "regression" for r in results)
    )
    print(
        f"A/A: {aa_failed_sessions} of {n_aa_sessions} sessions with a false failure; "
        f"{tot['aa_fail']} false failures and {tot['aa_incon']} inconclusive in {tot['aa']} "
        f"comparisons ({100 * tot['aa_incon'] / max(tot['aa'], 1):.1f} %)"
    )
    for kind in ("save", "aa", "ab"):
        w = walls.get(kind) or []
        if w:
            print(f"wall time of {kind} sessions: {min(w):.0f}-{max(w):.0f} s (median "
                  f"{sorted(w)[len(w) // 2]:.0f} s, {len(w)} sessions)")  # fmt: skip


if __name__ == "__main__":
    main()
