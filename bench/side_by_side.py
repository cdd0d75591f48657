"""pytest-gpuperf beside pytest-benchmark on the CPU: the same functions, the same plants.

The benchmarks of bench/cpu_pools.py (``pool_common.py``): a 256x256 ``matmul``, a Python
loop over 1000 floats (``py_loop``), a 1M-float ``add``, a ``sort`` of 100k floats, on one
torch thread, and a default-threaded 192x192 ``torch.mm`` (``mm_threads``). The A/B sessions
make ``matmul`` 3x and ``py_loop`` 1.5x larger (``PLANT=matmul:3,py_loop:1.5``).

Each tool gets its own folder and its own three saves (pytest-benchmark:
``--benchmark-autosave``; pytest-gpuperf: ``--gpuperf-save=base``), then ``N`` rounds of
compare sessions, the tools interleaved: an A/A session of each (unchanged code) and an A/B
session of each (the plants). pytest-benchmark compares with
``--benchmark-compare --benchmark-compare-fail=median:10%`` against its newest save;
pytest-gpuperf with ``--gpuperf-baseline=base``, defaults otherwise. A plain run of each
tool (no save, no baseline) gives the wall time a compare session is held against.

Printed: for each tool, the slowdowns caught (of N), the A/A sessions that failed, the false
benchmark failures, and the wall times of its sessions beside its plain run; the load
average (1 min) before each session. Needs pytest-benchmark in the same environment
(``pip install pytest-benchmark``); it is not a dependency of the plugin.

    python3 bench/side_by_side.py --sessions 10
    python3 bench/side_by_side.py --sessions 3 --keep /tmp/sbs    # keep the folders
    python3 bench/side_by_side.py --sessions 3 --load busy        # a busy loop on each CPU

``--load`` is bench/cpu_pools.py's (idle, busy, suite). pytest-gpuperf's sessions take their
CPU lock in a folder of their own, so another user's session never stalls them.

Timings on a shared machine are only as quiet as the machine: read the load averages.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_pools import COMMON, GP_TESTS, PB_TESTS, loaded

#: the benchmarks with a plant in the A/B sessions, and what the plant is
PLANTED = {"test_matmul": "3x", "test_py_loop": "1.5x"}
TESTS = ("test_matmul", "test_py_loop", "test_add", "test_sort", "test_mm_threads")
PLANTS = "matmul:3,py_loop:1.5"


@dataclass
class Session:
    tool: str
    kind: str  # "save", "plain", "A/A", "A/B"
    wall_s: float
    load1: float
    returncode: int
    failed: set[str] = field(default_factory=set)
    figures: dict[str, str] = field(default_factory=dict)


def load1() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def run(folder: Path, args: list[str], env: dict[str, str]) -> tuple[float, float, int, str]:
    """One pytest process in ``folder``: its wall time, the load before it, rc, output."""
    before = load1()
    t0 = time.monotonic()
    locks = {"GPUPERF_LOCK_DIR": str(folder.parent / "locks")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=folder,
        env={**os.environ, **locks, **env},
        capture_output=True,
        text=True,
        check=False,
    )
    return time.monotonic() - t0, before, done.returncode, done.stdout + done.stderr


def pb_session(folder: Path, kind: str, plant: str = "") -> Session:
    args = ["-p", "no:gpuperf", "-q"]
    if kind == "save":
        args.append("--benchmark-autosave")
    elif kind in ("A/A", "A/B"):
        args += ["--benchmark-compare", "--benchmark-compare-fail=median:10%"]
    wall, before, rc, out = run(folder, args, {"PLANT": plant})
    s = Session("pytest-benchmark", kind, wall, before, rc)
    # "test_matmul (0003_unversi) - Field 'median' has failed PercentageRegressionCheck: 39.1 >"
    for name, pct in re.findall(r"(test_\w+) \(\d{4}_\w*\) - Field 'median' has failed "
                                r"PercentageRegressionCheck: +([\d.]+)", out):  # fmt: skip
        s.failed.add(name)
        s.figures[name] = f"+{float(pct):.1f} %"
    if rc not in (0, 1):
        raise SystemExit(f"pytest-benchmark session failed (rc {rc}):\n{out[-3000:]}")
    return s


#: extra options of pytest-gpuperf's sessions (--no-capture: --gpuperf-capture=never)
GP_ARGS: list[str] = []


def gp_session(folder: Path, kind: str, plant: str = "") -> Session:
    args = ["-p", "no:benchmark", "-q", "--gpuperf-json=out.json", *GP_ARGS]
    if kind == "save":
        args.append("--gpuperf-save=base")
    elif kind in ("A/A", "A/B"):
        args.append("--gpuperf-baseline=base")
    (folder / "out.json").unlink(missing_ok=True)
    wall, before, rc, out = run(folder, args, {"PLANT": plant})
    s = Session("pytest-gpuperf", kind, wall, before, rc)
    if rc not in (0, 1):
        raise SystemExit(f"pytest-gpuperf session failed (rc {rc}):\n{out[-3000:]}")
    again = re.search(
        r"confirmation: (\d+) fresh-process re-measurement\(s\) added ([\d.]+) s", out
    )
    if again:
        s.figures["test_reruns"] = f"{again.group(1)} ({again.group(2)} s)"
    doc = json.loads((folder / "out.json").read_text())
    for r in doc.get("results", []):
        name = r["id"]["nodeid"].rsplit("::", 1)[-1]
        c = r.get("comparison") or {}
        ratio = c.get("ratio")
        if ratio is not None:
            why = (
                f" ({c.get('why')}, {c.get('r')} runs)" if c.get("why") else f" ({c.get('r')} runs)"
            )
            s.figures[name] = f"{ratio:.2f}x {c.get('kind')}" + (why if name in PLANTED else "")
        if c.get("kind") == "regression":
            s.failed.add(name)
    return s


def prepare(root: Path) -> tuple[Path, Path]:
    folders = []
    for name, tests in (("pb", PB_TESTS), ("gp", GP_TESTS)):
        f = root / name
        f.mkdir(parents=True, exist_ok=True)
        (f / "pool_common.py").write_text(COMMON)
        (f / "test_bench.py").write_text(tests)
        (f / "pytest.ini").write_text("[pytest]\n")
        folders.append(f)
    return folders[0], folders[1]


def campaign(root: Path, sessions: int, saves: int, log: bool) -> list[Session]:
    pb, gp = prepare(root)
    done: list[Session] = []

    def note(s: Session) -> None:
        done.append(s)
        if log:
            figs = ", ".join(f"{k[5:]} {v}" for k, v in sorted(s.figures.items()))
            print(f"  {s.tool:16} {s.kind:5} {s.wall_s:5.1f} s  load {s.load1:4.2f}  rc {s.returncode}"
                  f"  failed {sorted(s.failed) or '-'}  {figs}", flush=True)  # fmt: skip

    for _ in range(saves):
        note(pb_session(pb, "save"))
        note(gp_session(gp, "save"))
    note(pb_session(pb, "plain"))
    note(gp_session(gp, "plain"))
    for _ in range(sessions):
        note(pb_session(pb, "A/A"))
        note(gp_session(gp, "A/A"))
        note(pb_session(pb, "A/B", PLANTS))
        note(gp_session(gp, "A/B", PLANTS))
    note(pb_session(pb, "plain"))
    note(gp_session(gp, "plain"))
    return done


def _walls(xs: list[Session]) -> str:
    if not xs:
        return "-"
    w = [s.wall_s for s in xs]
    return f"median {statistics.median(w):.1f} s ({min(w):.1f}-{max(w):.1f})"


def summary(done: list[Session], sessions: int) -> list[str]:
    lines = []
    for tool in ("pytest-benchmark", "pytest-gpuperf"):
        mine = [s for s in done if s.tool == tool]
        aa = [s for s in mine if s.kind == "A/A"]
        ab = [s for s in mine if s.kind == "A/B"]
        plain = [s for s in mine if s.kind == "plain"]
        lines.append(f"{tool}:")
        for test, size in PLANTED.items():
            caught = sum(test in s.failed for s in ab)
            lines.append(f"  {size} slowdown ({test}) caught: {caught} of {len(ab)}")
        false_ab = sum(len(s.failed - set(PLANTED)) for s in ab)
        lines.append(f"  unchanged benchmarks failed in A/B sessions: {false_ab}")
        lines.append(f"  A/A sessions failed: {sum(bool(s.failed) for s in aa)} of {len(aa)}")
        lines.append(
            f"  A/A false benchmark failures: {sum(len(s.failed) for s in aa)} of "
            f"{len(aa) * len(TESTS)}"
        )
        lines.append(f"  wall, plain run: {_walls(plain)}")
        lines.append(f"  wall, A/A compare: {_walls(aa)}")
        lines.append(f"  wall, A/B compare: {_walls(ab)}")
        if plain and aa:
            ratio = statistics.median(s.wall_s for s in aa) / statistics.median(
                s.wall_s for s in plain
            )
            lines.append(f"  A/A compare / plain run (medians): {ratio:.2f}x")
    gp = [s.wall_s for s in done if s.tool == "pytest-gpuperf" and s.kind == "A/B"]
    pb = [s.wall_s for s in done if s.tool == "pytest-benchmark" and s.kind == "A/B"]
    if gp and pb:
        lines.append(
            "compare with a slowdown, pytest-gpuperf over pytest-benchmark (medians): "
            f"{statistics.median(gp) / statistics.median(pb):.2f}x"
        )
    loads = [s.load1 for s in done]
    lines.append(
        f"load average (1 min) before the sessions: {min(loads):.2f} to {max(loads):.2f} "
        f"(median {statistics.median(loads):.2f}) on {os.cpu_count()} cores; {sessions} rounds"
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", type=int, default=10, help="A/A and A/B sessions of each tool")
    p.add_argument("--saves", type=int, default=3, help="saves of each tool before comparing")
    p.add_argument("--keep", metavar="DIR", help="work in DIR (kept) instead of a temp folder")
    p.add_argument("--json", metavar="FILE", help="also write every session's figures here")
    p.add_argument("--load", default="idle", choices=("idle", "busy", "suite"))
    p.add_argument(
        "--no-capture", action="store_true",
        help="pytest-gpuperf without its evidence capture of a regression (the rule's cost alone)",
    )  # fmt: skip
    args = p.parse_args(argv)
    if args.no_capture:
        GP_ARGS.append("--gpuperf-capture=never")
    try:
        import pytest_benchmark  # noqa: F401
    except ImportError:
        print("needs pytest-benchmark: pip install pytest-benchmark", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="gpuperf-sbs-") as tmp:
        root = Path(args.keep) if args.keep else Path(tmp)
        print(
            f"side by side in {root}: {args.saves} saves, then {args.sessions} rounds", flush=True
        )
        with loaded(args.load, root):
            done = campaign(root, args.sessions, args.saves, log=True)
    print(f"\nload {args.load}; {subprocess.getoutput('uptime')}")
    for line in summary(done, args.sessions):
        print(line)
    if args.json:
        Path(args.json).write_text(
            json.dumps([s.__dict__ | {"failed": sorted(s.failed)} for s in done], indent=1)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
