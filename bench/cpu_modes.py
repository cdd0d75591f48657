"""The CPU class's between-process spread on this machine, as measured and with the host out.

The "cpu" noise class (verdict/policy.py) says how far a CPU benchmark's level moves from one
fresh process to the next; the host-speed canary (measure/canary.py) says how much of that
is the host. This script measures both on the machine it runs on: ``--processes`` fresh
pytest processes, each measuring the side-by-side's four functions (bench/side_by_side.py:
a 256^2 matmul, a pure-Python loop, a 1M-float add, a sort of 100k floats, one torch thread)
and bench/canary_check.py's (``work``, ``ops``, a 128^2 matmul), with the plugin's defaults.
Per benchmark (``FILE:TEST``) it prints:

* ``spread``: max/min of the process levels (medians), and their robust SD (log, MAD*1.4826);
* the same with each process's host factor taken out (as verdict/host_speed.py does: the
  factor over the fastest host's, within the CPU canary's dead band left as measured);
* the host factors' own spread;
* in how many processes the run was on a quiet host (verdict/host_speed.py ``quiet``: the
  ``cpu-quiet`` class needs every run of both sides so).

    python3 bench/cpu_modes.py --processes 10
    python3 bench/cpu_modes.py --processes 10 --neighbour   # a busy loop runs throughout
    python3 bench/cpu_modes.py --processes 10 --raw /tmp/rows.json   # and each process's rows
    python3 bench/cpu_modes.py --processes 10 --suite examples       # the README's examples

A number without its conditions is not a result: the load average before and after is
printed, and ``--neighbour`` starts one busy-loop process for the whole run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from canary_check import SUITE as HOST_SUITE
from side_by_side import COMMON, GP_TESTS

from pytest_gpuperf.verdict.host_speed import SAME_HOST_BY_KIND, factor, quiet


class _Run:
    def __init__(self, canary: dict[str, object] | None) -> None:
        c = canary or {}
        self.canary_op_s = c.get("op_s")
        self.canary_share = c.get("share")
        self.canary_others = c.get("others")


def mad_sd(xs: list[float]) -> float:
    m = statistics.median(xs)
    return 1.4826 * statistics.median([abs(x - m) for x in xs])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--processes", type=int, default=10)
    p.add_argument("--neighbour", action="store_true", help="a busy loop runs throughout")
    p.add_argument("--raw", type=Path, help="also write each process's rows (level, canary) here")
    p.add_argument(
        "--suite",
        type=Path,
        help="measure the tests of this folder instead (e.g. examples/), copied, as they are",
    )
    args = p.parse_args(argv)
    busy = None
    if args.neighbour:
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    levels: dict[str, list[float]] = {}
    factors: dict[str, list[float]] = {}
    quiets: dict[str, list[bool]] = {}
    raw: list[dict[str, object]] = []
    load0 = os.getloadavg()[0]
    try:
        with tempfile.TemporaryDirectory(prefix="gpuperf-cpu-modes-") as tmp:
            root = Path(tmp) / "suite"
            if args.suite:
                shutil.copytree(args.suite, root, ignore=shutil.ignore_patterns(".gpuperf*"))
            else:
                root.mkdir()
                (root / "bench_common.py").write_text(COMMON)
                (root / "test_bench.py").write_text(GP_TESTS)
                (root / "test_host.py").write_text(HOST_SUITE)
                (root / "pytest.ini").write_text("[pytest]\n")
            for i in range(args.processes):
                out = root / f"r{i}.json"
                subprocess.run(
                    [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                     "-p", "no:benchmark", "--gpuperf-capture=never", f"--gpuperf-json={out}"],
                    cwd=root, capture_output=True, text=True, timeout=300, check=False,
                )  # fmt: skip
                for r in json.loads(out.read_text())["results"]:
                    name = r["id"]["nodeid"].replace(".py::", ":")
                    levels.setdefault(name, []).append(r["summary"]["median"])
                    f = factor(_Run(r.get("host_canary")))  # type: ignore[arg-type]
                    factors.setdefault(name, []).append(f if f is not None else math.nan)
                    quiets.setdefault(name, []).append(quiet(_Run(r.get("host_canary"))))  # type: ignore[arg-type]
                    raw.append({"process": i, "name": name, "median": r["summary"]["median"],
                                "canary": r.get("host_canary")})  # fmt: skip
    finally:
        if busy is not None:
            busy.kill()
    load1 = os.getloadavg()[0]
    if args.raw:
        args.raw.write_text(json.dumps(raw, indent=1))
    band = math.log(SAME_HOST_BY_KIND["torch-cpu"])
    print(
        f"{args.processes} fresh processes, neighbour {'on' if args.neighbour else 'off'}, "
        f"load {load0:.2f} -> {load1:.2f} on {os.cpu_count()} cores"
    )
    w = max([24, *(len(n) for n in levels)])
    print(f"{'benchmark':{w}} {'median':>10} {'max/min':>8} {'rsd':>6} | {'host out':>8} "
          f"{'rsd':>6} | {'factors max/min':>15} | quiet")  # fmt: skip
    for name, ys in levels.items():
        logs = [math.log(y) for y in ys]
        fs = factors[name]
        ref = min(f for f in fs if not math.isnan(f))
        shifted = [
            y - ((f - ref) if not math.isnan(f) and f - ref > band else 0.0)
            for y, f in zip(logs, fs, strict=True)
        ]
        fr = math.exp(max(fs) - ref) if not any(math.isnan(f) for f in fs) else math.nan
        print(
            f"{name:{w}} {statistics.median(ys) * 1e6:8.1f}us {math.exp(max(logs) - min(logs)):8.3f} "
            f"{mad_sd(logs):6.3f} | {math.exp(max(shifted) - min(shifted)):8.3f} "
            f"{mad_sd(shifted):6.3f} | {fr:15.3f} | {sum(quiets[name])}/{len(ys)}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
