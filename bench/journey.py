"""Follow one benchmark through the package: which modules its path visits, in order.

Runs a one-benchmark pytest session in this process (CPU backend, a tiny workload) with a
profiler hook that records every call into a ``pytest_gpuperf`` module, and prints two
journeys, each as the sequence of stops (a stop: one or more calls in a row in the same
module) and its distinct modules:

* **measure -> verdict -> saved run**: from the ``gpu_bench(...)`` call to the baseline
  written, in a session run with ``--gpuperf-baseline=main --gpuperf-save=main`` against a
  baseline saved first;
* **--gpuperf-baseline**: from the option's resolution to the baseline loaded and matched.

Only the *main line* is counted: calls into helpers that every path uses (``model`` value
objects, ``errors``, the progress line, the per-device lock, telemetry and NVTX, which
are off or idle on the CPU) are listed apart. A "climb back up" is a stop in a module of
a lower ring followed by one in a higher ring (core -> shell) that is not a return to the
caller's own module: the reader has to go up the house again to follow the value.

    python3 bench/journey.py            # both journeys
    python3 bench/journey.py --all      # every stop, helpers included
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import textwrap
from pathlib import Path

RING = {"shell": 3, "cli": 4, "plugin": 3}
ADAPTERS = (
    "measure.cpu",
    "measure.cuda",
    "measure.memory",
    "measure.numerics",
    "measure.device",
    "measure.environment",
    "measure.nvtx_ranges",
    "telemetry.nvml",
    "telemetry.probe",
    "telemetry.header",
    "artifacts.collectors",
)
#: modules every path calls for small things: shown apart, not counted as stops
HELPERS = (
    "model",
    "errors",
    "values",
    "settings_fields",
    "shell.progress",
    "shell.locks",
    "shell.config",
    "shell.settings",
    "shell.markers",
    "shell.options",
    "measure.summary",
    "measure.nvtx_ranges",
    "telemetry",
    "reporting.units",
    "baseline.fileio",
    "baseline.filelock",
)

BENCH = """
import torch

def test_add(gpu_bench):
    x = torch.ones(64)
    gpu_bench(torch.add, x, x)
"""


def ring(mod: str) -> int:
    top = mod.split(".")[0]
    if top in RING:
        return RING[top]
    return 2 if mod.startswith(ADAPTERS) else 1


def record(argv: list[str], start: str | None) -> list[str]:
    """The package modules called, in order, one entry per stop, from the first call of
    a function named ``start`` (or from the beginning)."""
    import pytest

    stops: list[str] = []
    started = start is None

    def prof(frame, event, arg):  # type: ignore[no-untyped-def]
        nonlocal started
        if event != "call":
            return
        name = frame.f_globals.get("__name__", "")
        if not name.startswith("pytest_gpuperf"):
            return
        if not started:
            if frame.f_code.co_name != start:
                return
            started = True
        mod = name[len("pytest_gpuperf.") :] or "__init__"
        if not stops or stops[-1] != mod:
            stops.append(mod)

    sys.setprofile(prof)
    try:
        pytest.main(argv)
    finally:
        sys.setprofile(None)
    return stops


def report(title: str, stops: list[str], everything: bool) -> None:
    main = [s for s in stops if everything or not s.startswith(HELPERS)]
    squeezed = [m for i, m in enumerate(main) if i == 0 or main[i - 1] != m]
    climbs = sum(
        1
        for i in range(1, len(squeezed))
        if ring(squeezed[i]) > ring(squeezed[i - 1]) and squeezed[i] not in squeezed[: i - 1]
    )
    modules = list(dict.fromkeys(squeezed))
    print(f"\n{title}")
    print(f"  {len(modules)} modules, {len(squeezed)} stops, {climbs} climbs back up")
    print(textwrap.fill(" -> ".join(squeezed), 100, initial_indent="  ", subsequent_indent="  "))
    helpers = sorted({s for s in stops if s.startswith(HELPERS)} - set(modules))
    if helpers and not everything:
        print("  helpers along the way: " + ", ".join(helpers))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--all", action="store_true", help="count helper modules as stops too")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuperf-journey-") as tmp:
        root = Path(tmp)
        (root / "test_bench.py").write_text(BENCH)
        (root / "pytest.ini").write_text("[pytest]\n")
        os.chdir(root)
        fast = [
            "-q", "-p", "no:cacheprovider", "--gpuperf-device=cpu", "--gpuperf-rounds=5",
            "--gpuperf-round-ms=1", "--gpuperf-warmup-ms=20", "--gpuperf-capture=never",
            "--gpuperf-inventory=never", "--gpuperf-telemetry=off", "--gpuperf-reruns=0",
        ]  # fmt: skip
        import pytest

        pytest.main([*fast, "--gpuperf-save=main", "test_bench.py"])  # the baseline: not traced
        stops = record(
            [*fast, "--gpuperf-baseline=main", "--gpuperf-save=main", "test_bench.py"],
            "__call__",
        )
        end = (
            len(stops) - stops[::-1].index("baseline.store") if "baseline.store" in stops else None
        )
        report("measure -> verdict -> saved run (from gpu_bench(...))", stops[:end], args.all)
        stops = record([*fast, "--gpuperf-baseline=main", "test_bench.py"], "pytest_configure")
        first_bench = stops.index("shell.fixture") if "shell.fixture" in stops else None
        report("--gpuperf-baseline (from pytest_configure to the first benchmark)",
               stops[:first_bench], args.all)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
