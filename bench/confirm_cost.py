"""The wall time of a compare with a slowdown, two trees of the plugin side by side with
pytest-benchmark, interleaved in the same minutes (the bar: at most 3x pytest-benchmark's).

Uses a kept ``bench/side_by_side.py --keep DIR`` folder (its saves); each round runs
pytest-benchmark's A/B session, then each given Python's pytest-gpuperf A/B session (a venv
whose editable install is the tree to time), printing walls, re-runs and the load:

    python3 bench/side_by_side.py --sessions 0 --keep /tmp/sbs
    python3 bench/confirm_cost.py /tmp/sbs --rounds 4 main=/work/main/.venv/bin/python \
        branch=.venv/bin/python
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import side_by_side as sbs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path, help="a side_by_side.py --keep folder, saves made")
    p.add_argument("pythons", nargs="+", metavar="NAME=PYTHON")
    p.add_argument("--rounds", type=int, default=4)
    args = p.parse_args(argv)
    pythons = dict(x.split("=", 1) for x in args.pythons)
    sbs.GP_ARGS.append("--gpuperf-capture=never")
    walls: dict[str, list[float]] = {name: [] for name in ["pytest-benchmark", *pythons]}
    print(subprocess.getoutput("uptime"), flush=True)
    for i in range(args.rounds):
        s = sbs.pb_session(args.folder / "pb", "A/B", sbs.PLANTS)
        walls["pytest-benchmark"].append(s.wall_s)
        print(f"round {i + 1}: pytest-benchmark {s.wall_s:5.1f} s load {s.load1:.2f}", flush=True)
        for name, python in pythons.items():
            sys.executable = python  # side_by_side runs `sys.executable -m pytest`
            s = sbs.gp_session(args.folder / "gp", "A/B", sbs.PLANTS)
            walls[name].append(s.wall_s)
            print(f"round {i + 1}: {name:16} {s.wall_s:5.1f} s load {s.load1:.2f} failed "
                  f"{sorted(s.failed)} reruns {s.figures.get('test_reruns', '0')}", flush=True)  # fmt: skip
    pb = statistics.median(walls["pytest-benchmark"])
    for name, w in walls.items():
        print(f"{name:16} median {statistics.median(w):5.1f} s ({min(w):.1f}-{max(w):.1f}), "
              f"{statistics.median(w) / pb:.2f}x pytest-benchmark's")  # fmt: skip
    print(subprocess.getoutput("uptime"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
