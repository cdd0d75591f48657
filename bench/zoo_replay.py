"""Judge resampled sessions of the zoo offline, with the plugin's verdict code, on measured runs.

Reads pools of fresh-process runs of the zoo (one folder per GPU): ``zoo_campaign.py pool``
folders (``good-*.json``, ``bad-*.json``) and ``zoo_campaign.py sessions`` folders (saves and
A/A sessions are good runs, A/B sessions bad ones; ``*.child-N.json`` are the results of their
confirmation children, kept by ``bench/zoo/conftest.py``). A case of kind ``unchanged`` has
the same code in both variants: all its runs are good runs. Four replays:

* stored baseline (default): for each GPU and case, sets of ``--k`` good runs are a baseline;
  a session then draws its runs from the rest, as the gate would: the A/A current runs are
  other good runs, in a random order, added one at a time while the verdict is a suspect (up
  to ``--max-runs``); the A/B current runs are bad runs, likewise;
* ``--ab``: ``--gpuperf-ab``'s pairs: runs of the two variants that ran next to each other in
  time are a pair (base, current); a session adds pairs until every verdict is final or
  ``--max-runs`` pairs are in, the base runs as its baseline. A/A: pairs of good runs;
* ``--spread``: each case's good runs per figure, as ratios to the fastest (the data behind
  the noise classes).

Prints per case the share of REGRESSION / INCONCLUSIVE verdicts and the runs used, which
figure caught each regression, and totals by kind; the statistics are the plugin's own
(``pytest_gpuperf.verdict``), so this is the rule's A/A and A/B on real data.

    python3 bench/zoo_replay.py /tmp/zoo/z0/pool /tmp/zoo/z1/pool
    python3 bench/zoo_replay.py --ab --truth truth.json gate-a/g0 gate-a/g1
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import statistics
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from pytest_gpuperf.model import Result, Run
from pytest_gpuperf.verdict import DecisionPolicy, RunStat, classes_for, decide

sys.path.insert(0, str(Path(__file__).parent / "zoo"))
from cases import BY_NAME


@dataclass(frozen=True)
class Sample:
    """One fresh process's run of a case, as the rule sees it too, and where it came from."""

    run: Run
    stat: RunStat
    mode: str
    good: bool
    #: when the process started (ISO), then the file: the order the runs were made in
    when: tuple[str, str]


def _variant(folder: Path, js: Path) -> str:
    """The variant of the process that wrote ``js``: its own meta (a kept child's), its
    session's meta, else its name."""
    tag = js.name.split(".")[0]
    for meta in (js.with_suffix(".meta"), folder / f"{tag}.meta"):
        if meta.exists():
            return str(json.loads(meta.read_text()).get("variant", ""))
    return "bad" if tag.startswith(("bad", "ab")) else ""


def _is_bad(variant: str, case: str) -> bool:
    if variant == "bad":
        return True
    return variant.startswith("bad:") and case in variant[4:].replace(",", " ").split()


def load(folder: Path) -> dict[str, list[Sample]]:
    """case -> its runs in one pool folder, in the order they were made."""
    out: dict[str, list[Sample]] = defaultdict(list)
    for js in sorted(folder.glob("*.json")):
        try:
            doc = json.loads(js.read_text())
        except ValueError:
            continue
        variant = _variant(folder, js)
        started = str((doc.get("session") or {}).get("started") or "")
        for d in doc.get("results", []):
            r = Result.from_dict(d)
            if "[" not in r.id.nodeid:
                continue
            case = r.id.nodeid.split("[", 1)[1].rstrip("]")
            kind = BY_NAME[case].kind if case in BY_NAME else "?"
            good = kind == "unchanged" or not _is_bad(variant, case)
            sample = Sample(r.run, RunStat.from_run(r.run), r.id.mode, good, (started, js.name))
            out[case].append(sample)
    for runs in out.values():
        runs.sort(key=lambda x: x.when)
    return out


def load_all(arg: str) -> dict[str, list[Sample]]:
    """One GPU's runs from the comma-separated folders in ``arg``, in the order they were made."""
    out: dict[str, list[Sample]] = defaultdict(list)
    for folder in arg.split(","):
        for case, runs in load(Path(folder)).items():
            out[case] += runs
    for runs in out.values():
        runs.sort(key=lambda x: x.when)
    return out


def session(base, pool, rng, policy: DecisionPolicy, mode: str):
    order = list(pool)
    rng.shuffle(order)
    cur = []
    c = None
    for i, x in enumerate(order[: policy.max_runs]):
        cur.append(x)
        last = i == min(len(order), policy.max_runs) - 1
        c = decide(base, cur, policy=policy, mode=mode, last=last)
        if c.final:
            break
    return c


def _baselines(n: int, k: int, most: int, rng: random.Random) -> list[tuple[int, ...]]:
    """Sets of ``k`` of ``n`` runs: all of them, or ``most`` drawn at random."""
    if math.comb(n, k) <= most:
        return list(itertools.combinations(range(n), k))
    seen: set[tuple[int, ...]] = set()
    while len(seen) < most:
        seen.add(tuple(sorted(rng.sample(range(n), k))))
    return sorted(seen)


class Tally:
    """Verdicts per case and replay (``aa`` / ``ab``): kinds, runs used, catching figure."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Counter]] = defaultdict(lambda: defaultdict(Counter))
        self.runs: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
        #: A/B sessions with a figure beyond its one-run bar: [not failed, failed]
        self.beyond = [0, 0]

    def add(self, case: str, replay: str, c) -> None:
        if replay == "ab" and any(f.slower > f.one_run for f in c.figures):
            self.beyond[c.kind == "regression"] += 1  # beyond a figure's one-run bar
        key = c.kind if c.kind != "regression" else f"regression:{c.lead.figure}"
        if c.kind == "inconclusive" and c.why:
            key = f"inconclusive:{c.why}"
        self.rows[case][replay][key] += 1
        self.runs[case][replay].append(c.r)

    def share(self, case: str, replay: str, prefix: str) -> tuple[int, int]:
        row = self.rows[case][replay]
        return sum(v for k, v in row.items() if k.startswith(prefix)), sum(row.values())


def replay_stored(data, args, policy, rng, tally: Tally) -> None:
    for case, runs in data.items():
        good = [x for x in runs if x.good]
        bad = [x.run for x in runs if not x.good]
        if len(good) <= args.k:
            continue
        mode = good[0].mode
        kept = [x.run for x in good]
        for idx in _baselines(len(kept), args.k, args.baselines, rng):
            base = [kept[i] for i in idx]
            rest = [kept[i] for i in range(len(kept)) if i not in idx]
            for _ in range(args.trials):
                tally.add(case, "aa", session(base, rest, rng, policy, mode))
                if bad:
                    tally.add(case, "ab", session(base, bad, rng, policy, mode))


def _pairs(runs: list[Sample], want_bad: bool) -> list[tuple[Run, Run]]:
    """(base, current) runs made next to each other: each current run (a bad one, or a good
    one for A/A) with the nearest good run before or after it that no pair has taken."""
    out, used = [], set()
    for i, x in enumerate(runs):
        if x.good == want_bad or (not want_bad and i in used):
            continue
        for j in sorted(range(len(runs)), key=lambda j: (abs(j - i), j)):
            if j != i and runs[j].good and j not in used:
                used.update({i, j})
                out.append((runs[j].run, x.run))
                break
    return out


def ab_session(pairs, rng, policy: DecisionPolicy, mode: str):
    """Pairs added one at a time, each judged as ``--gpuperf-ab`` judges: the base runs so far
    are the baseline, the current runs so far the current runs."""
    order = list(pairs)
    rng.shuffle(order)
    base, cur, c = [], [], None
    n = min(len(order), policy.max_runs)
    for i, (b, x) in enumerate(order[:n]):
        base.append(b)
        cur.append(x)
        c = decide(base, cur, policy=policy, mode=mode, last=i == n - 1)
        if c.final:
            break
    return c


def replay_ab(data, args, policy, rng, tally: Tally) -> None:
    for case, runs in data.items():
        if not runs:
            continue
        mode = runs[0].mode
        for replay, want_bad in (("aa", False), ("ab", True)):
            pairs = _pairs(runs, want_bad)
            if not pairs:
                continue
            for _ in range(args.sessions):
                tally.add(case, replay, ab_session(pairs, rng, policy, mode))


def _host_bound(runs: list[Sample]) -> bool:
    good = [x.stat for x in runs if x.good]
    return (
        bool(good)
        and classes_for(good, runs[0].mode).get("end-to-end") is not None
        and (classes_for(good, runs[0].mode)["end-to-end"].name == "host")
    )


def _truth_ratio(truth: dict, case: str) -> float:
    t = truth.get(case, {})
    return max(t.get("ratio_e2e", 0.0), t.get("ratio_device", 0.0))


def report(data_by_gpu, tally: Tally, truth: dict, label: str) -> None:
    host = {c for data in data_by_gpu for c, runs in data.items() if _host_bound(runs)}
    print(f"{'case':26} {'kind':9} {'truth':>6} hb | {'A/A fail':>8} {'incon':>6} {'runs':>5} | "
          f"{'A/B caught':>10} {'incon':>6} {'runs':>5}  by figure / why")  # fmt: skip
    tot: Counter = Counter()
    for case in sorted(tally.rows, key=lambda c: (BY_NAME[c].kind if c in BY_NAME else "?", c)):
        kind = BY_NAME[case].kind if case in BY_NAME else "?"
        fails, n_aa = tally.share(case, "aa", "regression")
        incon, _ = tally.share(case, "aa", "inconclusive")
        caught, n_ab = tally.share(case, "ab", "regression")
        ab_incon, _ = tally.share(case, "ab", "inconclusive")
        ratio = _truth_ratio(truth, case)
        runs_aa = statistics.mean(tally.runs[case]["aa"]) if n_aa else float("nan")
        line = (
            f"{case:26} {kind:9} {ratio:6.2f} {'H' if case in host else ' '}  | "
            f"{fails / max(n_aa, 1):8.3f} {incon / max(n_aa, 1):6.3f} {runs_aa:5.2f} |"
        )
        if n_ab:
            by = {k.split(":", 1)[1]: v for k, v in tally.rows[case]["ab"].items() if ":" in k}
            line += (
                f" {caught / n_ab:10.3f} {ab_incon / n_ab:6.3f} "
                f"{statistics.mean(tally.runs[case]['ab']):5.2f}  {by}"
            )
        print(line)
        _totals(tot, case, kind, ratio, case in host, fails, incon, n_aa, caught, n_ab)
    _print_totals(tot, label)
    missed, failed = tally.beyond
    if missed + failed:
        print(
            f"{label}: {missed + failed} A/B sessions had a figure beyond its one-run bar: "
            f"{failed} failed, {missed} did not"
        )


def _totals(tot, case, kind, ratio, host, fails, incon, n_aa, caught, n_ab) -> None:
    tot["aa"] += n_aa
    tot["aa_fail"] += fails
    tot["aa_incon"] += incon
    if kind in ("benign", "unchanged"):
        tot[f"{kind}_n"] += n_aa + n_ab
        tot[f"{kind}_fail"] += fails + (caught if kind == "benign" else 0)
    if kind == "unchanged":
        tot["unchanged_n"] -= n_ab  # its bad runs are good runs: no A/B replay of it
    if kind != "realistic" or not n_ab or not ratio:
        return
    band = "big" if ratio >= 1.5 else "mid" if ratio >= 1.2 else "small"
    tot[f"{band}_cases"] += 1
    tot[f"{band}_cases_95"] += caught >= 0.95 * n_ab
    tot[f"{band}_cases_90"] += caught >= 0.90 * n_ab
    tot[f"{band}_caught"] += caught
    tot[f"{band}_n"] += n_ab
    if host and ratio >= 1.2:
        tot["host_cases"] += 1
        tot["host_cases_95"] += caught >= 0.95 * n_ab
        tot["host_caught"] += caught
        tot["host_n"] += n_ab


def _print_totals(tot: Counter, label: str) -> None:
    print()
    print(
        f"{label} A/A: {tot['aa_fail']} false failures and {tot['aa_incon']} inconclusive in "
        f"{tot['aa']} comparisons ({100 * tot['aa_incon'] / max(tot['aa'], 1):.1f} %)"
    )
    for kind in ("unchanged", "benign"):
        if tot[f"{kind}_n"]:
            print(f"{label} {kind} cases: {tot[f'{kind}_fail']} failures in "
                  f"{tot[f'{kind}_n']} comparisons")  # fmt: skip
    for band, what in (("big", ">= 1.5x"), ("mid", "1.2-1.5x"), ("small", "< 1.2x")):
        if tot[f"{band}_n"]:
            print(
                f"{label} realistic {what}: {tot[f'{band}_caught']} of {tot[f'{band}_n']} "
                f"sessions failed ({100 * tot[f'{band}_caught'] / tot[f'{band}_n']:.1f} %); "
                f"cases caught in >= 95 % of sessions: {tot[f'{band}_cases_95']} of "
                f"{tot[f'{band}_cases']}, in >= 90 %: {tot[f'{band}_cases_90']}"
            )
    if tot["host_n"]:
        print(
            f"{label} host-bound realistic >= 1.2x: {tot['host_caught']} of {tot['host_n']} "
            f"sessions failed; cases caught in >= 95 % of sessions: {tot['host_cases_95']} of "
            f"{tot['host_cases']}"
        )


def spread(pools: list[str]) -> None:
    for folder in pools:
        print(f"== {folder}")
        for case, runs in sorted(load_all(folder).items()):
            good = [x.stat for x in runs if x.good]
            if not good:
                continue
            classes = classes_for(good, runs[0].mode)
            for fig, get in (("device", lambda x: x.level_s), ("end-to-end", lambda x: x.e2e_s)):
                xs = [get(x) for x in good if get(x)]
                if not xs:
                    continue
                lo = min(xs)
                ratios = " ".join(f"{x / lo:5.3f}" for x in sorted(xs))
                klass = classes.get(fig) or classes.get("time")
                name = klass.name if klass else "-"
                print(f"{case:26} {fig:10} {name:8} {lo * 1e6:9.1f} us  {ratios}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "pools", nargs="+",
        help="pool folders, one per GPU; a,b: the runs of both folders as one GPU's",
    )  # fmt: skip
    ap.add_argument("--k", type=int, default=3, help="baseline runs")
    ap.add_argument("--max-runs", type=int, default=5, help="runs (pairs with --ab) at most")
    ap.add_argument("--trials", type=int, default=3, help="orders drawn per baseline")
    ap.add_argument("--baselines", type=int, default=400, help="baselines per case at most")
    ap.add_argument("--sessions", type=int, default=200, help="--ab: sessions per case")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--truth", type=Path, action="append", default=[])
    ap.add_argument("--ab", action="store_true", help="replay --gpuperf-ab's pairs")
    ap.add_argument("--spread", action="store_true", help="each case's good runs per figure")
    args = ap.parse_args()
    if args.spread:
        return spread(args.pools)
    truth: dict = {}
    for t in args.truth:
        truth.update({row["case"]: row for row in json.loads(t.read_text())})
    policy = DecisionPolicy(max_runs=args.max_runs)
    rng = random.Random(args.seed)
    tally = Tally()
    data_by_gpu = [load_all(arg) for arg in args.pools]
    for data in data_by_gpu:
        (replay_ab if args.ab else replay_stored)(data, args, policy, rng, tally)
    report(data_by_gpu, tally, truth, "A/B pairs" if args.ab else "stored baseline")


if __name__ == "__main__":
    main()
