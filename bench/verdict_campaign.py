"""A/A and A/B campaign of the regression verdict, on a GPU, in fresh pytest processes.

1. A baseline ``aa`` is saved from ``--save-runs`` runs of bench_suite.py (8 benchmarks).
2. A/A: ``--aa-runs`` fresh runs of the same code compare with it (the plugin's default
   procedure, confirmation re-runs included); every REGRESSION is a false failure.
3. A/B, workload level: runs with GPUPERF_SLOWDOWN=theta (the work of every benchmark
   grows by theta) compare with it; REGRESSION is a detection.
4. A/B, statistic level: each A/A run's measured medians multiplied by 1 + theta, judged
   by the same verdict code against the same baseline (many more trials for free).

    python3 bench/verdict_campaign.py --out /tmp/campaign

Every run is kept under ``--out`` (its JSON report, log and wall time), and a run already
there is not made again: when ``--budget-s`` ends a call, the same command with the same
``--out`` goes on where it stopped, and ``--report-only`` prints the figures of what is there.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
LARGE_US = 100.0
DEVICE = os.environ.get("GPUPERF_CAMPAIGN_DEVICE", "cuda")  # "cpu": a smoke test of the script


def pytest_run(out: Path, tag: str, args: list[str], theta: float = 0.0) -> dict:
    env = dict(os.environ, GPUPERF_SLOWDOWN=str(theta))
    js = out / f"{tag}.json"
    t = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(HERE / "bench_suite.py"),
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "python_files=bench_*.py",
            "--rootdir",
            str(HERE),
            f"--gpuperf-device={DEVICE}",
            f"--gpuperf-baseline-dir={out / 'baselines'}",
            f"--gpuperf-json={js}",
            "--gpuperf-capture=never",  # the verdict is measured here, not the evidence capture
            *args,
        ],
        env=env,
        cwd=HERE,
        capture_output=True,
        text=True,
    )
    (out / f"{tag}.log").write_text(proc.stdout + proc.stderr)
    wall = time.perf_counter() - t
    (out / f"{tag}.meta").write_text(json.dumps({"wall": wall, "rc": proc.returncode}))
    return load_run(out, tag)


def load_run(out: Path, tag: str) -> dict:
    """A run made earlier (this call or an earlier one with the same --out)."""
    meta = json.loads((out / f"{tag}.meta").read_text())
    js = out / f"{tag}.json"
    doc = json.loads(js.read_text()) if js.exists() else {"results": []}
    return {**meta, "results": doc["results"]}


def done(out: Path, tag: str) -> bool:
    return (out / f"{tag}.meta").exists()


def remeasured(runs: list[dict]) -> int:
    """Benchmarks of these runs re-measured in fresh processes (confirmation looks)."""
    return sum(
        1 for run in runs for r in run["results"] if (r.get("comparison") or {}).get("look", 1) > 1
    )


def verdicts(run: dict) -> dict[str, dict]:
    return {r["id"]["key"]: r for r in run["results"]}


def size(key: str, baseline: dict) -> str:
    runs = baseline["benchmarks"][key]["runs"]
    med = sorted(r["median"] for r in runs)[len(runs) // 2]
    return "large" if med * 1e6 >= LARGE_US else "tiny"


def statistic_level(out: Path, raw: dict, aa_runs: list[dict], thetas: list[float]) -> dict:
    """Multiply each A/A run's medians by 1 + theta and judge them like the plugin does."""
    sys.path.insert(0, str(HERE.parent))
    from pytest_gpuperf.baseline import BaselineStore
    from pytest_gpuperf.compare import run_stat
    from pytest_gpuperf.verdict import DecisionPolicy, RunStat, decide, pool_noise

    base = BaselineStore(out / "baselines").load("aa")
    policy = DecisionPolicy()
    m = len(base.benchmarks)
    entries = list(base.benchmarks.values())
    prior = pool_noise(
        [[run_stat(r) for r in e.runs] for e in entries], policy, modes=[e.mode for e in entries]
    )
    table: dict = defaultdict(lambda: defaultdict(int))
    for run in aa_runs:
        for key, r in verdicts(run).items():
            entry = base.benchmarks[key]
            b = [run_stat(x) for x in entry.runs]
            cls = size(key, raw)
            for theta in thetas:
                cur = RunStat(
                    median_s=r["summary"]["median"] * (1 + theta),
                    unstable=r["stability"] in ("shift", "no-steady-state"),
                    stability=r["stability"],
                )
                c = decide(
                    b,
                    [cur],
                    policy=policy,
                    m=m,
                    look=policy.looks,
                    prior=prior,
                    mode=entry.mode,
                )
                table[(cls, theta)][c.kind] += 1
                table[(cls, theta)]["n"] += 1
    return table


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("/tmp/gpuperf-campaign"))
    ap.add_argument("--save-runs", type=int, default=5)
    ap.add_argument("--aa-runs", type=int, default=10)
    ap.add_argument("--ab-runs", type=int, default=3)
    ap.add_argument("--thetas", default="0.02,0.05,0.10")
    ap.add_argument("--ab-reruns", type=int, default=0, help="confirmation re-runs in the A/B runs")
    ap.add_argument("--budget-s", type=float, default=540)
    ap.add_argument("--aa-share", type=float, default=0.6, help="share of the budget for A/A")
    ap.add_argument(
        "--report-only", action="store_true", help="run nothing: report the runs under --out"
    )
    args = ap.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    thetas = [float(t) for t in args.thetas.split(",")]

    def run(
        tag: str, pytest_args: list[str], share: float = 1.0, theta: float = 0.0
    ) -> dict | None:
        """The run ``tag``: made earlier, made now, or None when the budget is spent."""
        if done(out, tag):
            return load_run(out, tag)
        if args.report_only or time.perf_counter() - start > args.budget_s * share:
            return None
        made = pytest_run(out, tag, pytest_args, theta)
        print(f"run {tag}: {made['wall']:.0f} s", flush=True)
        return made

    saves = []
    for i in range(args.save_runs):
        save = run(f"save-{i}", ["--gpuperf-save=aa"])
        if save is None:
            break
        saves.append(save)
    print(f"baseline: {len(saves)} runs, {sum(s['wall'] for s in saves):.0f} s", flush=True)
    if len(saves) < args.save_runs:
        print("the budget ran out while saving the baseline: run again with the same --out")
        return
    base = json.loads((out / "baselines" / "aa.json").read_text())

    aa = [
        r
        for i in range(args.aa_runs)
        if (r := run(f"aa-{i}", ["--gpuperf-baseline=aa"], args.aa_share)) is not None
    ]
    ab: dict[float, list[dict]] = {t: [] for t in thetas}
    ab_tag = f"ab{args.ab_reruns}" if args.ab_reruns else "ab"
    ab_args = ["--gpuperf-baseline=aa", f"--gpuperf-reruns={args.ab_reruns}"]
    for i in range(args.ab_runs):
        for t in thetas:
            if (r := run(f"{ab_tag}-{t}-{i}", ab_args, theta=t)) is not None:
                ab[t].append(r)

    # --- report ---
    print(
        f"\nA/A: {len(aa)} fresh runs x {len(base['benchmarks'])} benchmarks vs a baseline of {args.save_runs} runs"
    )
    counts: dict = defaultdict(lambda: defaultdict(int))
    rerun_wall = []
    for run in aa:
        for key, r in verdicts(run).items():
            c = r.get("comparison") or {}
            counts[size(key, base)][c.get("kind", "?")] += 1
            counts[size(key, base)]["n"] += 1
        rerun_wall.append(run["wall"])
    for cls, d in sorted(counts.items()):
        n = d.pop("n")
        print(
            f"  {cls}: {n} comparisons: "
            + ", ".join(f"{k} {v} ({100 * v / n:.1f} %)" for k, v in sorted(d.items()))
        )
    fails = sum(c.get("regression", 0) for c in counts.values())
    total = sum(sum(v for k, v in c.items()) for c in counts.values())
    print(f"  false failures: {fails} of {total} comparisons")
    if aa:
        print(
            f"  wall per A/A run (confirmations included): median {sorted(rerun_wall)[len(rerun_wall) // 2]:.1f} s; "
            f"save runs (no confirmations) median {sorted(s['wall'] for s in saves)[len(saves) // 2]:.1f} s"
        )
        print(f"  benchmarks re-measured in fresh processes: {remeasured(aa)} of {total}")

    print(f"\nA/B, workload level (--gpuperf-reruns={args.ab_reruns}):")
    for t, runs in ab.items():
        d: dict = defaultdict(lambda: defaultdict(int))
        achieved = defaultdict(list)
        for run in runs:
            for key, r in verdicts(run).items():
                c = r.get("comparison") or {}
                cls = size(key, base)
                d[cls][c.get("kind", "?")] += 1
                d[cls]["n"] += 1
                if c.get("ratio"):
                    achieved[cls].append(c["ratio"] - 1)
        for cls in sorted(d):
            n = d[cls].pop("n")
            ach = sorted(achieved[cls])
            med = ach[len(ach) // 2] if ach else float("nan")
            print(
                f"  +{100 * t:.0f} % {cls}: {n} comparisons (measured slowdown, median {100 * med:+.1f} %): "
                + ", ".join(f"{k} {v} ({100 * v / n:.0f} %)" for k, v in sorted(d[cls].items()))
            )
        if runs:
            walls = sorted(r["wall"] for r in runs)
            print(
                f"    {len(runs)} runs, wall median {walls[len(walls) // 2]:.0f} s; "
                f"benchmarks re-measured in fresh processes: {remeasured(runs)}"
            )

    print("\nA/B per benchmark (detected / runs; measured slowdown; reported MDE):")
    for t, runs in ab.items():
        per: dict = defaultdict(list)
        for run in runs:
            for key, r in verdicts(run).items():
                per[key].append(r.get("comparison") or {})
        for key, cs in per.items():
            name = key.split("[", 1)[-1].split("]", 1)[0]
            other = Counter(c.get("kind", "?") for c in cs)
            det = other.pop("regression", 0)
            slow = sorted(100 * (c.get("ratio", 1) - 1) for c in cs if c.get("ratio"))
            mde = sorted(100 * c["mde"] for c in cs if c.get("mde"))
            print(
                f"  +{100 * t:.0f} % {name:20} {size(key, base):5} {det}/{len(cs)}"
                + (
                    " (" + ", ".join(f"{k} {v}" for k, v in sorted(other.items())) + ")"
                    if other
                    else ""
                )
                + (f"; slowdown {slow[0]:+.1f}..{slow[-1]:+.1f} %" if slow else "")
                + (f"; MDE {mde[len(mde) // 2]:.1f} %" if mde else "")
            )

    if aa:
        print(
            "\nA/B, statistic level (A/A medians x (1 + theta); one run each, judged as final: "
            "no confirmation re-runs, so stricter than the plugin):"
        )
        table = statistic_level(out, base, aa, [0.0, *thetas])
        for (cls, t), d in sorted(table.items()):
            n = d.pop("n")
            print(
                f"  +{100 * t:.0f} % {cls}: {n} comparisons: "
                + ", ".join(f"{k} {v} ({100 * v / n:.0f} %)" for k, v in sorted(d.items()))
            )
    print(f"\ncampaign wall time {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
