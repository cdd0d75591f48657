"""What a ``--gpuperf-bisect`` search costs and finds on this machine, in real time.

Builds a git history in a temporary folder: a package of two benchmarks (pure-Python loops
timed on the real clock, no virtual time), then N commits, commit k making the first
benchmark's loop SLOWDOWN times longer and the others touching a notes file; runs
``pytest --gpuperf-bisect=HEAD~N`` there and prints, per history, the commit found (and
whether it is k), each step with what it told, the fresh processes and the wall time, with
the machine's load before and after (``uptime``).

    python3 bench/bisect_cost.py                          # 12 and 64 commits, a 3x
    python3 bench/bisect_cost.py --commits 12 --slowdown 1.5
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

PACKAGE = "LOOPS = {loops!r}\n\n\ndef work(name):\n    s = 0\n    for i in range(LOOPS[name]):\n        s += i\n    return s\n"
BENCH = """
import mypkg


def test_a(gpu_bench):
    gpu_bench(mypkg.work, "a")


def test_b(gpu_bench):
    gpu_bench(mypkg.work, "b")
"""
#: loop iterations per call: about 1 ms and 0.7 ms of CPython on the 2-core machine
LOOPS = {"a": 30_000, "b": 20_000}


def git(root: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.com",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@example.com"}  # fmt: skip
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, env=env)
    if done.returncode:
        raise SystemExit(f"git {' '.join(args)}: {done.stderr}")
    return done.stdout.strip()


def build(root: Path, n: int, k: int, slowdown: float) -> None:
    """GOOD, then commits 1..n."""
    git(root, "init", "-q", "-b", "main")
    (root / "mypkg").mkdir()
    (root / "mypkg" / "__init__.py").write_text(PACKAGE.format(loops=LOOPS))
    (root / "test_bench.py").write_text(BENCH)
    (root / ".gitignore").write_text("o.json\n.gpuperf/\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "good")
    for i in range(1, n + 1):
        if i == k:
            slower = {**LOOPS, "a": int(LOOPS["a"] * slowdown)}
            (root / "mypkg" / "__init__.py").write_text(PACKAGE.format(loops=slower))
        else:
            with (root / "notes.txt").open("a") as f:
                f.write(f"{i}\n")
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", f"commit {i}")


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def one(n: int, k: int, slowdown: float, extra: list[str], raw: Path | None) -> None:
    with tempfile.TemporaryDirectory(prefix="bisect-cost-") as tmp:
        root = Path(tmp)
        build(root, n, k, slowdown)
        print(f"\n== {n} commits, a {slowdown:g}x of test_a planted at commit {k}")
        print(f"   load before: {uptime()}")
        t0 = time.monotonic()
        cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly",
               "--gpuperf-capture=never", f"--gpuperf-bisect=HEAD~{n}", "--gpuperf-json=o.json",
               *extra]  # fmt: skip
        done = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
        wall = time.monotonic() - t0
        print(f"   load after:  {uptime()}")
        try:
            text = (root / "o.json").read_text()
            if raw:
                (raw / f"bisect-{n}-{slowdown:g}x.json").write_text(text)
            doc = json.loads(text)["session"]["bisect"]
        except (OSError, ValueError, KeyError):
            print(f"   no report (exit {done.returncode}):\n{done.stdout[-3000:]}{done.stderr}")
            return
        for s in doc["steps"]:
            told = ", ".join(f"{key.split('::')[-1]} {o}" for key, o in s["outcomes"].items())
            print(f"   step {s['number']:2}: commit {s['commit']['index']:2} against "
                  f"{'GOOD' if s['against']['index'] == 0 else 'parent'} ({s['purpose']}): "
                  f"{told}; {s['processes']} processes, {s['wall_s']:.1f} s")  # fmt: skip
        for a in doc["answers"]:
            at = a["commit"]["index"] if a["commit"] else None
            planted = k if "test_a@" in a["key"] else None
            print(f"   {a['key']}: {a['status']}" + (f" at commit {at}" if at else "")
                  + (f" (planted at {planted})" if planted else ""))  # fmt: skip
        print(f"   exit {done.returncode}; {len(doc['steps'])} steps, {doc['processes']} fresh "
              f"processes; search {doc['wall_s']:.1f} s, whole session {wall:.1f} s")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, nargs="+", default=[12, 64])
    ap.add_argument("--slowdown", type=float, nargs="+", default=[3.0])
    ap.add_argument("--at", type=float, default=0.6, help="k as a share of the commits")
    ap.add_argument("--raw", type=Path, help="a folder for each search's JSON")
    ap.add_argument("args", nargs="*", help="more pytest arguments (after --)")
    opts = ap.parse_args()
    for n in opts.commits:
        for slowdown in opts.slowdown:
            one(n, max(1, round(opts.at * n)), slowdown, opts.args, opts.raw)


if __name__ == "__main__":
    main()
