"""Judge resampled sessions of the zoo offline, with the plugin's verdict code, on measured runs.

Reads a pool made by ``zoo_campaign.py pool`` (fresh processes of every case's good and
bad variants, one folder per GPU). For each GPU and case, every choice of ``--k`` good
runs is a baseline; a session then draws its runs from the rest, as the gate would:

* A/A: the current runs are other good runs, in a random order, added one at a time while
  the verdict is a suspect (up to ``--max-runs``);
* A/B: the current runs are bad runs, likewise.

Prints per case the share of REGRESSION / INCONCLUSIVE verdicts and the runs used, which
figure caught each regression, and totals. The statistics are the plugin's own
(``pytest_gpuperf.verdict.decide``), so this is the rule's A/A and A/B on real data,
without the cost of a GPU session per trial; ``--compare`` puts other run statistics
(mean, median) side by side to show which one holds on this data.

    python3 bench/zoo_replay.py /tmp/zoo/z0/pool /tmp/zoo/z1/pool
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import sys
from collections import Counter, defaultdict
from pathlib import Path

from pytest_gpuperf.model import Result
from pytest_gpuperf.verdict import DecisionPolicy, RunStat, decide

sys.path.insert(0, str(Path(__file__).parent / "zoo"))
from cases import BY_NAME


def load(folder: Path) -> dict[str, dict[str, list[tuple[RunStat, str]]]]:
    """case -> variant -> [(run, mode)] for one pool folder."""
    out: dict[str, dict[str, list[tuple[RunStat, str]]]] = defaultdict(lambda: defaultdict(list))
    for js in sorted(folder.glob("*.json")):
        variant = "bad" if js.name.startswith("bad") else "good"
        for d in json.loads(js.read_text())["results"]:
            r = Result.from_dict(d)
            case = r.id.nodeid.split("[", 1)[1].rstrip("]")
            out[case][variant].append((RunStat.from_result(r), r.id.mode))
    return out


def session(base, pool, rng, policy: DecisionPolicy, mode: str):
    order = list(pool)
    rng.shuffle(order)
    cur = []
    c = None
    for i, x in enumerate(order):
        cur.append(x)
        last = i == len(order) - 1
        c = decide(base, cur, policy=policy, mode=mode, last=last)
        if c.final:
            break
    return c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("pools", nargs="+", type=Path)
    ap.add_argument("--k", type=int, default=3, help="baseline runs")
    ap.add_argument("--max-runs", type=int, default=5)
    ap.add_argument("--trials", type=int, default=3, help="orders drawn per baseline")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    policy = DecisionPolicy(max_runs=args.max_runs)
    rng = random.Random(args.seed)
    rows = defaultdict(lambda: {"aa": Counter(), "ab": Counter(), "ab_runs": [], "aa_runs": []})
    for folder in args.pools:
        data = load(folder)
        for case, variants in data.items():
            good, bad = variants["good"], variants["bad"]
            mode = good[0][1]
            runs = [x for x, _ in good]
            for idx in itertools.combinations(range(len(runs)), args.k):
                base = [runs[i] for i in idx]
                rest = [runs[i] for i in range(len(runs)) if i not in idx]
                for _ in range(args.trials):
                    c = session(base, rest[: args.max_runs], rng, policy, mode)
                    rows[case]["aa"][c.kind] += 1
                    rows[case]["aa_runs"].append(c.r)
                    if bad:
                        c = session(base, [x for x, _ in bad][: args.max_runs], rng, policy, mode)
                        key = c.kind if c.kind != "regression" else f"regression:{c.figure}"
                        rows[case]["ab"][key] += 1
                        rows[case]["ab_runs"].append(c.r)
    print(f"{'case':26} {'kind':9} | {'A/A fail':>8} {'incon':>6} {'runs':>5} | "
          f"{'A/B caught':>10} {'incon':>6} {'runs':>5}  by figure")  # fmt: skip
    tot = Counter()
    for case, row in rows.items():
        aa, ab = row["aa"], row["ab"]
        n_aa, n_ab = sum(aa.values()), sum(ab.values())
        caught = sum(v for k, v in ab.items() if k.startswith("regression"))
        figs = {k.split(":")[1]: v for k, v in ab.items() if k.startswith("regression:")}
        kind = BY_NAME[case].kind if case in BY_NAME else "?"
        print(
            f"{case:26} {kind:9} | {aa['regression'] / n_aa:8.3f} {aa['inconclusive'] / n_aa:6.3f} "
            f"{sum(row['aa_runs']) / n_aa:5.2f} | "
            + (
                f"{caught / n_ab:10.3f} {ab['inconclusive'] / n_ab:6.3f} "
                f"{sum(row['ab_runs']) / n_ab:5.2f}  {dict(figs)}"
                if n_ab
                else ""
            )
        )
        tot["aa"] += n_aa
        tot["aa_fail"] += aa["regression"]
        tot["aa_incon"] += aa["inconclusive"]
    print(
        f"A/A: {tot['aa_fail']} false failures and {tot['aa_incon']} inconclusive in "
        f"{tot['aa']} comparisons ({100 * tot['aa_incon'] / max(tot['aa'], 1):.1f} %)"
    )
    _ = math


if __name__ == "__main__":
    main()
