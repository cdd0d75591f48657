"""Run the regression zoo in fresh pytest processes: a pool of runs, or gated sessions.

Two phases, each resumable (a run already under ``--out`` is not made again):

* ``pool``: ``--good`` and ``--bad`` fresh processes of the whole zoo, no baseline, each
  writing its results (``--gpuperf-json``). The raw material of ``zoo_replay.py``, which
  judges resampled sessions offline with the verdict code.
* ``sessions``: what a user runs, with the plugin's defaults: ``--saves`` runs saved into
  the baseline ``zoo``, then A/B sessions (every case's bad variant) and A/A sessions
  (the good variants again) compared with it, interleaved (``--order``). Confirmation
  re-runs, their time and every verdict land in each session's JSON; what each
  confirmation child measured is kept beside it (``<tag>.child-<n>.json``), so that the
  saves, the sessions and their children are also a pool for ``zoo_replay.py``.

    python3 bench/zoo_campaign.py pool --out /tmp/zoo --good 8 --bad 4
    python3 bench/zoo_campaign.py sessions --out /tmp/zoo --saves 3 --order ab,aa,aa,ab,aa
    # a second GPU comparing with the first one's baseline (the GPU's UUID is a soft key):
    python3 bench/zoo_campaign.py sessions --out /tmp/zoo1 --saves 0 \
        --baseline-dir /tmp/zoo/baselines --wait-for /tmp/zoo/sessions/save-3.meta

``zoo_report.py`` prints the figures of what is there.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ZOO = HERE / "zoo"


RUN_TIMEOUT_S = 300.0


def run_pytest(out: Path, tag: str, variant: str, args: list[str], budget_end: float) -> bool:
    """One fresh pytest process of the zoo; False when the budget is spent (nothing run).
    A process still running after ``RUN_TIMEOUT_S`` is killed (its meta says rc -9)."""
    meta = out / f"{tag}.meta"
    if meta.exists():
        return True
    if time.time() > budget_end:
        return False
    js = out / f"{tag}.json"
    # the confirmation children keep their results beside the session's (bench/zoo/conftest.py)
    env = dict(os.environ, GPUPERF_ZOO=variant, ZOO_KEEP_CHILDREN=str(out / tag))
    t = time.perf_counter()
    cmd = [sys.executable, "-m", "pytest", str(ZOO), "-q", "-p", "no:cacheprovider",
           "--rootdir", str(ZOO), f"--gpuperf-json={js}", "--gpuperf-capture=never", *args]  # fmt: skip
    try:
        proc = subprocess.run(
            cmd, env=env, cwd=ZOO, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
        )
        rc, text = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        rc, text = -9, f"killed after {RUN_TIMEOUT_S:.0f} s\n{e.stdout or ''}"
    (out / f"{tag}.log").write_text(text if isinstance(text, str) else text.decode())
    wall = time.perf_counter() - t
    meta.write_text(json.dumps({"wall": wall, "rc": rc, "variant": variant}))
    print(f"{tag}: rc {rc}, {wall:.1f} s", flush=True)
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("phase", choices=("pool", "sessions"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--good", type=int, default=8)
    ap.add_argument("--bad", type=int, default=4)
    ap.add_argument("--saves", type=int, default=3)
    ap.add_argument("--order", default="ab,aa,aa,aa,ab,aa,aa", help="sessions after the saves")
    ap.add_argument("--budget-s", type=float, default=1e9, help="start no run after this long")
    ap.add_argument("--baseline-dir", type=Path, help="default: <out>/baselines")
    ap.add_argument("--wait-for", type=Path, help="sessions: wait until this file exists")
    ap.add_argument("--device", default=os.environ.get("GPUPERF_CAMPAIGN_DEVICE", "cuda"))
    ap.add_argument("--run-timeout", type=float, default=RUN_TIMEOUT_S, help="seconds per run")
    args, extra = ap.parse_known_args()  # the rest goes to pytest
    globals()["RUN_TIMEOUT_S"] = args.run_timeout
    end = time.time() + args.budget_s
    base = [f"--gpuperf-device={args.device}", *extra]
    if args.phase == "pool":
        out = args.out / "pool"
        out.mkdir(parents=True, exist_ok=True)
        # alternate, so that drifts of the machine fall on both variants
        plan = []
        g, b = args.good, args.bad
        while g or b:
            if g:
                plan.append(("good", f"good-{args.good - g + 1:02d}"))
                g -= 1
            if b and (not g or (args.bad - b) * args.good <= (args.good - g) * args.bad):
                plan.append(("bad", f"bad-{args.bad - b + 1:02d}"))
                b -= 1
        for variant, tag in plan:
            if not run_pytest(out, tag, "" if variant == "good" else "bad", base, end):
                break
        return
    out = args.out / "sessions"
    out.mkdir(parents=True, exist_ok=True)
    bdir = f"--gpuperf-baseline-dir={args.baseline_dir or args.out / 'baselines'}"
    for i in range(1, args.saves + 1):
        if not run_pytest(out, f"save-{i}", "", [*base, bdir, "--gpuperf-save=zoo"], end):
            return
    while args.wait_for and not args.wait_for.exists():
        if time.time() > end:
            return
        time.sleep(2)  # another GPU is saving the baseline these sessions compare with
    counts = {"ab": 0, "aa": 0}
    for kind in [k.strip() for k in args.order.split(",") if k.strip()]:
        counts[kind] += 1
        variant = "bad" if kind == "ab" else ""
        tag = f"{kind}-{counts[kind]:02d}"
        if not run_pytest(out, tag, variant, [*base, bdir, "--gpuperf-baseline=zoo"], end):
            return


if __name__ == "__main__":
    main()
