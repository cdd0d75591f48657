"""The planted-regression captures of tests/gpu (needs CUDA): a test measured in a fresh
pytest process with a plant switched on or off, and the whole capture of its planted run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from pytest_gpuperf.model import Result, thawed
from pytest_gpuperf.reporting.json_report import load_results
from pytest_gpuperf.shell.capture import CaptureReport, capture
from pytest_gpuperf.verdict import REGRESSION
from tests.child_runner import standalone_runner
from tests.unit.reporting_data import comparison as reported


def measure(root: Path, nodeid: str, plant: str, inventory: str, out: Path) -> Result:
    """The one result of ``nodeid``, run on CUDA in ``root`` with ``GPUPERF_PLANT=plant``
    and ``--gpuperf-inventory=inventory``, its JSON written to ``out``."""
    env = dict(os.environ, GPUPERF_PLANT=plant)
    env.pop("PYTEST_ADDOPTS", None)
    cmd = [sys.executable, "-m", "pytest", nodeid, "-q", "-p", "no:cacheprovider",
           "--gpuperf-device=cuda", f"--gpuperf-json={out}", f"--gpuperf-inventory={inventory}"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (r,) = load_results(json.loads(out.read_text()))
    return r


def capture_planted(
    root: Path,
    nodeid: str,
    plant: str,
    base: Result,
    cur: Result,
    *,
    run_id: str,
    reports: Path,
    name: str,
) -> CaptureReport:
    """The whole capture of ``cur`` (measured with ``plant``) as a regression from ``base``
    (whose ``extra`` holds the baseline's kernel inventory), its children run in ``root``
    with the plant. The report is printed (``-s``) and written to ``reports/<name>.txt``,
    the capture's folder to ``reports/artifacts``."""
    key = cur.id.key
    ratio = cur.run.median / base.run.median
    comparison = reported(REGRESSION, ratio, baseline_s=base.run.median)
    runner = standalone_runner(nodeid, rootdir=root, device="cuda", env={"GPUPERF_PLANT": plant})
    rep = capture(
        None, nodeid, [cur], {key: comparison}, device="cuda", run_id=run_id,
        baselines={key: [{"extra": thawed(base.run.extra)}]}, run_child=runner,
        artifacts_dir=reports / "artifacts",
    )  # fmt: skip
    assert rep is not None
    text = rep.message()
    print(f"\n===== {plant} =====\n{text}")
    reports.mkdir(parents=True, exist_ok=True)
    (reports / f"{name}.txt").write_text(text)
    return rep
