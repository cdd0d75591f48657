"""Compares while saves land in their baseline: none may fail because of a save, none lost.

Two saver loops (``pytest --gpuperf-save=m --gpuperf-keep-runs=2``: each save drops old runs,
and with them whole segments) and two comparer loops (``pytest --gpuperf-baseline=m``, on
unchanged code) run against one baseline for ``--seconds``, each process a fresh pytest
on the CPU. It prints how many compares failed, and why: because of the store (a file
missing, or anything else about the baseline), or on a verdict; and whether the baseline
is whole at the end: it loads, and holds the newest runs of the saves that said they saved.

    python3 bench/store_race.py                  # 2 savers, 2 comparers, 100 s
    PYTHONPATH=../main python3 bench/store_race.py --seconds 60   # another checkout's package

Exit status: the number of compares that failed because of the store, plus one if the
baseline is not whole at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BENCH = """
import torch

torch.set_num_threads(1)


def test_add(gpu_bench):
    x = torch.ones(256)
    gpu_bench(torch.add, x, x)


def test_mul(gpu_bench):
    x = torch.ones(256)
    gpu_bench(torch.mul, x, x)
"""

INI = """[pytest]
gpuperf_warmup_ms = 20
gpuperf_min_warmup_ms = 5
gpuperf_rounds = 5
gpuperf_round_ms = 1
gpuperf_reruns = 0
gpuperf_capture = never
gpuperf_inventory = never
gpuperf_progress = off
"""

#: What a failure because of the baseline says (the defect: "the file is missing, and
#: m.json lists runs in it"), as opposed to a verdict.
STORE_WORDS = ("no verdict", "cannot be used", "baseline file", "is missing")


def pytest(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    return subprocess.run(cmd, cwd=root, capture_output=True, text=True, check=False)


class Tally:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.saves: list[str] = []  # the run ids of the saves that said they saved
        self.save_failures: list[str] = []
        self.compares = 0
        self.store_failures: list[str] = []
        self.verdict_failures: list[str] = []


def saver(root: Path, n: int, keep: int, deadline: float, tally: Tally) -> None:
    i = 0
    while time.monotonic() < deadline:
        i += 1
        report = root / f"save-{n}-{i}.json"
        out = pytest(
            root, "--gpuperf-save=m", f"--gpuperf-keep-runs={keep}", f"--gpuperf-json={report}"
        )
        text = out.stdout + out.stderr
        with tally.lock:
            if out.returncode == 0 and "saved 2 run(s)" in text:
                tally.saves.append(json.loads(report.read_text())["session"]["run_id"])
            else:
                tally.save_failures.append(text[-400:])


def comparer(root: Path, deadline: float, tally: Tally) -> None:
    while time.monotonic() < deadline:
        out = pytest(root, "--gpuperf-baseline=m")
        text = out.stdout + out.stderr
        with tally.lock:
            tally.compares += 1
            if out.returncode == 0:
                continue
            kind = tally.store_failures if any(w in text for w in STORE_WORDS) else None
            (kind if kind is not None else tally.verdict_failures).append(_cause(text))


def _cause(text: str) -> str:
    lines = [ln for ln in text.splitlines() if "gpuperf:" in ln or "Error" in ln]
    return (lines[0] if lines else text.strip().splitlines()[-1])[:300]


#: Run in a fresh interpreter, so that the package is the one the loops ran (PYTHONPATH).
READ = """
import json, sys
from pytest_gpuperf.baseline.store import BaselineStore
b = BaselineStore(sys.argv[1]).load("m")
print(json.dumps({k: [r.run_id for r in e.runs] for k, e in b.benchmarks.items()}))
"""


def whole(root: Path, keep: int, tally: Tally) -> list[str]:
    """What is wrong with the baseline at the end: it must load, and hold ``keep`` runs of
    each benchmark, each of a save that said it saved, the last of them among them."""
    folder = str(root / ".gpuperf" / "baselines")
    out = subprocess.run(  # in the loops' folder: ``-c`` puts the current folder first
        [sys.executable, "-c", READ, folder], cwd=root, capture_output=True, text=True
    )
    if out.returncode != 0:
        return [f"the baseline does not load: {out.stderr.strip().splitlines()[-1:]}"]
    problems = []
    for key, ids in json.loads(out.stdout).items():
        if len(ids) != keep or not set(ids) <= set(tally.saves) or tally.saves[-1] not in ids:
            problems.append(f"{key}: runs {ids}; the saves said they saved {tally.saves[-keep:]}")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=100.0)
    ap.add_argument("--savers", type=int, default=2)
    ap.add_argument("--comparers", type=int, default=2)
    ap.add_argument("--keep-runs", type=int, default=2)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="gpuperf-race-"))
    (root / "test_race.py").write_text(BENCH)
    (root / "pytest.ini").write_text(INI)
    for _ in range(2):  # a baseline to compare with, before the loops start
        first = pytest(root, "--gpuperf-save=m", f"--gpuperf-keep-runs={args.keep_runs}")
        if first.returncode != 0:
            print(first.stdout + first.stderr)
            return 1
    tally = Tally()
    deadline = time.monotonic() + args.seconds
    threads = [
        *(threading.Thread(target=saver, args=(root, n, args.keep_runs, deadline, tally))
          for n in range(args.savers)),
        *(threading.Thread(target=comparer, args=(root, deadline, tally))
          for _ in range(args.comparers)),
    ]  # fmt: skip
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - started
    problems = whole(root, args.keep_runs, tally)
    print(
        f"{args.savers} savers (keep-runs {args.keep_runs}) and {args.comparers} comparers "
        f"for {wall:.0f} s ({os.getloadavg()[0]:.1f} load at the end), in {root}"
    )
    print(f"saves: {len(tally.saves)} saved, {len(tally.save_failures)} failed")
    for text in tally.save_failures[:3]:
        print(f"  save failed: {text.strip().splitlines()[-1]}")
    print(
        f"compares: {tally.compares}, failed because of the store: "
        f"{len(tally.store_failures)}, failed on a verdict: {len(tally.verdict_failures)}"
    )
    for cause in (tally.store_failures + tally.verdict_failures)[:5]:
        print(f"  {cause}")
    print("the baseline at the end: " + ("whole" if not problems else "; ".join(problems)))
    return len(tally.store_failures) + bool(problems)


if __name__ == "__main__":
    sys.exit(main())
