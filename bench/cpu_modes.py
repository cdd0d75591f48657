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
    python3 bench/cpu_modes.py --replay /tmp/rows.json   # the figures of saved rows, unmeasured

A benchmark some of whose runs carry no canary (or canaries of different kinds) is judged
as measured by the plugin (verdict/host_speed.py ``HostSpeed.of``): its "host out" and
"factors" columns say ``n/a`` rather than take out the host of only some of its runs.

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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from canary_check import SUITE as HOST_SUITE
from side_by_side import COMMON, GP_TESTS

from pytest_gpuperf.verdict.decide import RunStat
from pytest_gpuperf.verdict.host_speed import HostSpeed, quiet


def mad_sd(xs: list[float]) -> float:
    m = statistics.median(xs)
    return 1.4826 * statistics.median([abs(x - m) for x in xs])


def run_of(row: dict[str, Any]) -> RunStat:
    """A raw row (``--raw``) as the verdict sees the run: its level and its canary."""
    median = float(row["median"])
    return RunStat.of(median, (median,), "steady", canary=row.get("canary"))


def host_out(logs: list[float], runs: list[RunStat]) -> tuple[list[float], float] | None:
    """The levels (log) with each run's host taken out, as the plugin does
    (``HostSpeed.shifts``), and the host factors' max/min; None where the plugin judges the
    runs as measured (a run without a canary, or canaries of different kinds)."""
    speed = HostSpeed.of(runs, ())
    if speed is None:
        return None
    shifts, _ = speed.shifts()
    return [y - d for y, d in zip(logs, shifts, strict=True)], math.exp(
        max(speed.base) - min(speed.base)
    )


def table(rows: list[dict[str, Any]]) -> list[str]:
    """The figures per benchmark of raw rows (``--raw``), one line each after a header."""
    levels: dict[str, list[float]] = {}
    runs: dict[str, list[RunStat]] = {}
    for row in rows:
        levels.setdefault(row["name"], []).append(row["median"])
        runs.setdefault(row["name"], []).append(run_of(row))
    w = max([24, *(len(n) for n in levels)])
    out = [
        f"{'benchmark':{w}} {'median':>10} {'max/min':>8} {'rsd':>6} | {'host out':>8} "
        f"{'rsd':>6} | {'factors max/min':>15} | quiet"
    ]
    for name, ys in levels.items():
        logs = [math.log(y) for y in ys]
        out_ = host_out(logs, runs[name])
        if out_ is None:
            host = f"{'n/a':>8} {'n/a':>6} | {'n/a':>15}"
        else:
            shifted, fr = out_
            host = (
                f"{math.exp(max(shifted) - min(shifted)):8.3f} {mad_sd(shifted):6.3f} | {fr:15.3f}"
            )
        out.append(
            f"{name:{w}} {statistics.median(ys) * 1e6:8.1f}us {math.exp(max(logs) - min(logs)):8.3f} "
            f"{mad_sd(logs):6.3f} | {host} | {sum(quiet(x) for x in runs[name])}/{len(ys)}"
        )
    return out


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
    p.add_argument(
        "--replay", type=Path, help="measure nothing: the figures of rows saved with --raw"
    )
    args = p.parse_args(argv)
    if args.replay:
        rows = json.loads(args.replay.read_text())
        n = len({r["process"] for r in rows})
        print(f"{n} processes replayed from {args.replay}")
        print("\n".join(table(rows)))
        return 0
    busy = None
    if args.neighbour:
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    raw: list[dict[str, Any]] = []
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
                    raw.append({"process": i, "name": name, "median": r["summary"]["median"],
                                "canary": r.get("host_canary")})  # fmt: skip
    finally:
        if busy is not None:
            busy.kill()
    load1 = os.getloadavg()[0]
    if args.raw:
        args.raw.write_text(json.dumps(raw, indent=1))
    print(
        f"{args.processes} fresh processes, neighbour {'on' if args.neighbour else 'off'}, "
        f"load {load0:.2f} -> {load1:.2f} on {os.cpu_count()} cores"
    )
    print("\n".join(table(raw)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
