"""The verdict's promises on the CPU backend, checked end to end in fresh pytest processes.

A suite of five benchmarks: ``quiet`` (a steady spin), ``noisy`` (its level moves +-30 %
from one process to the next), ``drift``, ``work`` (a fixed pure-Python loop) and ``ops``
(20 tiny torch ops from a Python loop, host-bound GPU code's shape). Three runs are saved as
the baseline on the quiet machine, then:

1. two unchanged re-runs: nothing fails;
2. ``quiet`` 2x slower: it fails, alone, next to the noisy neighbour;
3. ``noisy`` 10x slower: it fails;
4. ``drift`` 20x slower and drifting within the run (1 % slower every call): it fails;
5. in every session, no unchanged benchmark fails (the noisy neighbour included);
6. a neighbour process shares the benchmarks' core during the compare (``taskset`` puts a
   busy loop and the pytest process, whose confirmation children inherit it, on one core):
   unchanged code does not fail, and ``work`` made 3x slower under the same neighbour fails;
7. a tracer (``sys.settrace`` from a conftest, as coverage.py installs one) is active in the
   compare and was not in the baseline: nothing fails, and the output says why the timings
   are not comparable;
8. ``--gpuperf-reruns=0`` with ``work`` 20x slower: it fails;
9. ``pytest-gpuperf demo``: its three steps go as designed.

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
from collections.abc import Sequence
from pathlib import Path

SUITE = """
import os, random, time

import torch

torch.set_num_threads(1)
SLOW = dict(x.split("=") for x in os.environ.get("SLOW", "").split(",") if x)
LEVEL = random.Random(os.getpid() * 7919 + int(time.time())).uniform(0.7, 1.3)
calls = [0]
X = torch.ones(1)


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


def work(n):
    s = 0
    for i in range(n):
        s += i * i
    return s


def test_work(gpu_bench):
    gpu_bench(work, int(3000 * float(SLOW.get("work", 1))))


def ops():
    for _ in range(20):
        X.mul_(1.0)
    return X


def test_ops(gpu_bench):
    gpu_bench(ops)
"""

TRACER = """
import os
import sys


def _trace(frame, event, arg):  # a line tracer, as coverage.py's Python tracer is
    return _trace


if os.environ.get("TRACE") == "1":
    sys.settrace(_trace)
"""


class Neighbour:
    """A busy loop pinned to ``core`` while the block runs (started and ended by its pid)."""

    def __init__(self, core: int):
        self.core = core
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Neighbour:
        self.proc = subprocess.Popen(
            ["taskset", "-c", str(self.core), sys.executable, "-c", "while True: pass"]
        )
        time.sleep(0.3)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()


def session(
    root: Path, tag: str, slow: str, *args: str, prefix: Sequence[str] = (), trace: bool = False
) -> tuple[dict[str, str], str]:
    """One fresh pytest process; returns ({test: verdict kind, 'FAILED ...' when it failed,
    with the why of an inconclusive}, its output)."""
    out = root / f"{tag}.json"
    env = dict(os.environ, SLOW=slow, TRACE="1" if trace else "0")
    env.pop("PYTEST_ADDOPTS", None)
    proc = subprocess.run(
        [*prefix, sys.executable, "-m", "pytest", "test_suite.py", "-q", "-p",
         "no:cacheprovider", "-p", "no:randomly", "--gpuperf-device=cpu",
         f"--gpuperf-json={out}", "--gpuperf-capture=never", *args],
        cwd=root, env=env, capture_output=True, text=True,
    )  # fmt: skip
    text = proc.stdout + proc.stderr
    (root / f"{tag}.log").write_text(text)
    kinds: dict[str, str] = {}
    if out.exists():
        for r in json.loads(out.read_text())["results"]:
            name = r["id"]["nodeid"].rsplit("::", 1)[-1].removeprefix("test_")
            c = r.get("comparison") or {}
            kind = c.get("kind") or "measured"
            kinds[name] = f"{kind} ({c['why']})" if c.get("why") else kind
    failed = {
        line.split("::")[-1].split()[0].removeprefix("test_")
        for line in proc.stdout.splitlines()
        if line.startswith("FAILED ")
    }
    return {k: ("FAILED " + v if k in failed else v) for k, v in kinds.items()}, text


def _failed(v: dict[str, str], but: str = "") -> list[str]:
    return [k for k, x in v.items() if k != but and x.startswith("FAILED")]


def classic_checks(root: Path, base: tuple[str, ...]) -> list[tuple[str, bool, str]]:
    """Checks 1-5: unchanged re-runs, three slowdowns, no unchanged benchmark failing."""
    results = []
    seen_unchanged_fail = []
    for k in range(2):
        v, _ = session(root, f"aa-{k}", "", *base)
        results.append((f"unchanged re-run {k + 1} passes", not _failed(v), str(v)))
    for name, slow in (("quiet", "quiet=2"), ("noisy", "noisy=10"), ("drift", "drift=20")):
        v, _ = session(root, f"ab-{name}", slow, *base)
        ok = v.get(name, "").startswith("FAILED") and "regression" in v.get(name, "")
        what = {"quiet": "2x slower quiet benchmark fails next to a noisy neighbour",
                "noisy": "10x slower benchmark moving +-30 % between processes fails",
                "drift": "20x slower benchmark that keeps drifting fails"}[name]  # fmt: skip
        results.append((what, ok, str(v)))
        seen_unchanged_fail += _failed(v, but=name)
    results.append(
        ("no unchanged benchmark fails in the slowed sessions", not seen_unchanged_fail,
         ", ".join(seen_unchanged_fail) or "none"),
    )  # fmt: skip
    return results


def host_checks(root: Path, base: tuple[str, ...]) -> list[tuple[str, bool, str]]:
    """Checks 6-8: a neighbour on the core, a tracer, no confirmations."""
    core = sorted(os.sched_getaffinity(0))[-1]
    pinned = ("taskset", "-c", str(core))
    results = []
    with Neighbour(core):
        v, _ = session(root, "neighbour-aa", "", *base, prefix=pinned)
    results.append(("unchanged code passes while a neighbour shares its core", not _failed(v),
                    str(v)))  # fmt: skip
    with Neighbour(core):
        v, _ = session(root, "neighbour-ab", "work=3", *base, prefix=pinned)
    ok = v.get("work", "").startswith("FAILED regression") and not _failed(v, but="work")
    results.append(("a 3x slower work fails under the same neighbour, alone", ok, str(v)))
    v, text = session(root, "tracer", "", *base, trace=True)
    flat = " ".join(text.split())  # the reason may be folded over lines at 120 columns
    said = "not comparable" in flat and "tracer" in flat
    ok = not _failed(v) and said and "not-comparable" in v.get("work", "")
    results.append(("unchanged code under a tracer passes, saying its timings are not "
                    "comparable", ok, str(v)))  # fmt: skip
    v, _ = session(root, "reruns0", "work=20", *base, "--gpuperf-reruns=0")
    ok = v.get("work", "").startswith("FAILED regression")
    results.append(("--gpuperf-reruns=0: a 20x slower work fails", ok, str(v)))
    return results


def demo_check(root: Path) -> tuple[str, bool, str]:
    t = time.perf_counter()
    env = dict(os.environ)
    env.pop("PYTEST_ADDOPTS", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_gpuperf.cli", "demo", "--path", str(root / "demo")],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    (root / "demo.log").write_text(proc.stdout + proc.stderr)
    last = (proc.stdout.strip().splitlines() or ["(no output)"])[-2:]
    ok = proc.returncode == 0 and "demo: as designed" in proc.stdout
    return (f"the demo's three steps go as designed ({time.perf_counter() - t:.0f} s)", ok,
            " ".join(x.strip() for x in last))  # fmt: skip


def one_round(i: int, keep: Path | None) -> list[tuple[str, bool, str]]:
    with tempfile.TemporaryDirectory(prefix="gpuperf-cpu-checks-") as tmp:
        root = Path(tmp)
        (root / "test_suite.py").write_text(SUITE)
        (root / "conftest.py").write_text(TRACER)
        for k in range(3):
            session(root, f"save-{k}", "", "--gpuperf-save=main")
        base = ("--gpuperf-baseline=main",)
        results = classic_checks(root, base) + host_checks(root, base) + [demo_check(root)]
        if keep is not None:
            dest = keep / f"round-{i + 1}"
            dest.mkdir(parents=True, exist_ok=True)
            for f in [*root.glob("*.log"), *root.glob("*.json")]:
                (dest / f.name).write_text(f.read_text())
        return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--keep", type=Path, help="copy every session's output here")
    args = ap.parse_args()
    print(f"$ python3 bench/cpu_checks.py {' '.join(sys.argv[1:])}", flush=True)
    failures = 0
    for i in range(args.repeat):
        t = time.perf_counter()
        for what, ok, detail in one_round(i, args.keep):
            failures += not ok
            print(f"round {i + 1}: {'PASS' if ok else 'FAIL'}  {what}  [{detail}]", flush=True)
        print(f"round {i + 1}: {time.perf_counter() - t:.0f} s", flush=True)
    print(f"{failures} failed check(s) in {args.repeat} round(s)")
    return failures


if __name__ == "__main__":
    sys.exit(main())
