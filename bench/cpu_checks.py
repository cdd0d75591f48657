"""The verdict's promises on the CPU backend, checked end to end in fresh pytest processes.

A suite of three benchmarks: ``quiet`` (a steady spin), ``noisy`` (its level moves +-30 %
from one process to the next) and ``drift``. Three runs are saved as the baseline, then:

1. two unchanged re-runs: nothing fails;
2. ``quiet`` 2x slower: it fails, alone, next to the noisy neighbour;
3. ``noisy`` 10x slower: it fails;
4. ``drift`` 20x slower and drifting within the run (1 % slower every call): it fails;
5. in every session, no unchanged benchmark fails (the noisy neighbour included).

Each check prints PASS or FAIL with the verdicts it saw; the exit status is the number of
failed checks. ``--repeat N`` does it all N times from an empty store (timing checks on a
shared CPU are only as quiet as the machine: run it on an idle one).

    python3 bench/cpu_checks.py --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SUITE = """
import os, random, time

SLOW = dict(x.split("=") for x in os.environ.get("SLOW", "").split(",") if x)
LEVEL = random.Random(os.getpid() * 7919 + int(time.time())).uniform(0.7, 1.3)
calls = [0]


def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_quiet(gpu_bench):
    gpu_bench(spin, 0.0003 * float(SLOW.get("quiet", 1)))


def test_noisy(gpu_bench):
    gpu_bench(spin, 0.0003 * LEVEL * float(SLOW.get("noisy", 1)))


def test_drift(gpu_bench):
    factor = float(SLOW.get("drift", 1))

    def drifting():
        calls[0] += 1
        grow = 1 + 0.01 * calls[0] if factor > 1 else 1
        spin(0.0003 * factor * grow)

    gpu_bench(drifting)
"""


def session(root: Path, tag: str, slow: str, *args: str) -> dict[str, str]:
    """One fresh pytest process; returns {test: verdict kind (or 'failed'/'passed')}."""
    out = root / f"{tag}.json"
    env = dict(os.environ, SLOW=slow)
    env.pop("PYTEST_ADDOPTS", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "test_suite.py", "-q", "-p", "no:cacheprovider",
         "-p", "no:randomly", "--gpuperf-device=cpu", f"--gpuperf-json={out}",
         "--gpuperf-capture=never", *args],
        cwd=root, env=env, capture_output=True, text=True,
    )  # fmt: skip
    (root / f"{tag}.log").write_text(proc.stdout + proc.stderr)
    kinds: dict[str, str] = {}
    if out.exists():
        for r in json.loads(out.read_text())["results"]:
            name = r["id"]["nodeid"].rsplit("::", 1)[-1].removeprefix("test_")
            kinds[name] = (r.get("comparison") or {}).get("kind") or "measured"
    failed = {
        line.split("::")[-1].split()[0].removeprefix("test_")
        for line in proc.stdout.splitlines()
        if line.startswith("FAILED ")
    }
    return {k: ("FAILED " + v if k in failed else v) for k, v in kinds.items()}


def one_round(i: int) -> list[tuple[str, bool, str]]:
    with tempfile.TemporaryDirectory(prefix="gpuperf-cpu-checks-") as tmp:
        root = Path(tmp)
        (root / "test_suite.py").write_text(SUITE)
        for k in range(3):
            session(root, f"save-{k}", "", "--gpuperf-save=main")
        base = ("--gpuperf-baseline=main",)
        results = []
        seen_unchanged_fail = []
        for k in range(2):
            v = session(root, f"aa-{k}", "", *base)
            ok = not any(x.startswith("FAILED") for x in v.values())
            results.append((f"unchanged re-run {k + 1} passes", ok, str(v)))
        for name, slow in (("quiet", "quiet=2"), ("noisy", "noisy=10"), ("drift", "drift=20")):
            v = session(root, f"ab-{name}", slow, *base)
            ok = v.get(name, "").startswith("FAILED") and "regression" in v.get(name, "")
            what = {"quiet": "2x slower quiet benchmark fails next to a noisy neighbour",
                    "noisy": "10x slower benchmark moving +-30 % between processes fails",
                    "drift": "20x slower benchmark that keeps drifting fails"}[name]  # fmt: skip
            results.append((what, ok, str(v)))
            seen_unchanged_fail += [k for k, x in v.items() if k != name and x.startswith("FAILED")]
        results.append(
            ("no unchanged benchmark fails in the slowed sessions", not seen_unchanged_fail,
             ", ".join(seen_unchanged_fail) or "none"),
        )  # fmt: skip
        return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    failures = 0
    for i in range(args.repeat):
        t = time.perf_counter()
        for what, ok, detail in one_round(i):
            failures += not ok
            print(f"round {i + 1}: {'PASS' if ok else 'FAIL'}  {what}  [{detail}]", flush=True)
        print(f"round {i + 1}: {time.perf_counter() - t:.0f} s", flush=True)
    print(f"{failures} failed check(s) in {args.repeat} round(s)")
    return failures


if __name__ == "__main__":
    sys.exit(main())
