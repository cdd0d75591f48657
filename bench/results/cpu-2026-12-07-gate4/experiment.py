"""gate4 experiments: the CPU pools replayed (`replay`) and the synthetic A/A (`aa`) with knobs.

    KNOBS python bench/results/cpu-2026-12-07-gate4/experiment.py replay|aa

The rule is patched in memory (nothing in the package changes). Knobs (environment):
Q=<float> level quantile; ADAPT=<x> 5-run baseline when first 3 range > x class priors;
MAXR=<n> current runs (the policy's max_runs); SLOW2=1: 'slower' is the 2nd smallest current
run when r >= SLOW2N (default 4), not the smallest; E1=1: a "no change" before the class's runs
is final only when its 90 % interval lies below the cutoff the class's runs give (otherwise
measured again: more current processes where the baseline is noisy); KMAX=<n> the adaptive
baseline's runs (5; ADAPT=0 KMAX=6: always 6); ALPHA=<a> the policy's alpha. OUT=<file>: the full
replay is appended there. `aa` prints (false-failure rate, inconclusive rate) of the synthetic
A/A of tests/unit/test_verdict.py (the CPU model; the noisy +-30 % one, bound 1 %) with 3
baseline runs, and 5 with ADAPT.
"""

import importlib
import math
import os
import random
import sys
from pathlib import Path

sys.path[:0] = ["bench", ".", "tests/unit"]

import cpu_pools as P  # noqa: E402

from pytest_gpuperf.outcome import INCONCLUSIVE, REGRESSION  # noqa: E402
from pytest_gpuperf.verdict.policy import CLASSES, DecisionPolicy  # noqa: E402

D = importlib.import_module("pytest_gpuperf.verdict.decide")
SLOWER = "    slower = min(cur) - level  # every current run is at least this much slower\n"
RULED_OUT = "    if kind == NO_CHANGE and d + half >= cutoff:  # not ruled out: too small to tell\n"
E1_LINES = (
    "    if kind == NO_CHANGE and not last and r < klass.runs and d + half >= cut_full:\n"
    "        kind, final = REGRESSION, False\n"
)
ADAPT = os.environ.get("ADAPT")
MAXR = int(os.environ.get("MAXR", "5"))
ALPHA = float(os.environ.get("ALPHA", "0.0002"))
KMAX = int(os.environ.get("KMAX", "5"))


def patch() -> None:
    """The knobs' changes to decide.py, executed in its module (the package is untouched)."""
    src = Path(D.__file__).read_text()
    if os.environ.get("SLOW2"):
        n = int(os.environ.get("SLOW2N", "4"))
        assert SLOWER in src
        src = src.replace(
            SLOWER, f"    slower = (sorted(cur)[1] if r >= {n} else min(cur)) - level\n"
        )
    if os.environ.get("E1"):
        assert RULED_OUT in src
        src = src.replace(RULED_OUT, E1_LINES + RULED_OUT)
    if os.environ.get("SLOW2") or os.environ.get("E1"):
        exec(compile(src, D.__file__, "exec"), D.__dict__)
    if "Q" in os.environ:
        D.LEVEL_Q = float(os.environ["Q"])


def gp_sessions(good, current, rng, sessions, k, policy):
    """cpu_pools.gp_sessions with the knobs (the baseline drawn as a permutation, so that an
    adaptive baseline extends the same draw)."""
    policy = DecisionPolicy(max_runs=MAXR, alpha=ALPHA)
    out = []
    for _ in range(sessions):
        order = rng.sample(good, len(good))
        base = order[:k]
        if ADAPT:
            lv = [math.log(P.run_stat(r).level_s) for r in base]
            pr = CLASSES["cpu"].prior(min(P.run_stat(r).level_s for r in base))
            if max(lv) - min(lv) > float(ADAPT) * pr:
                base = order[: min(KMAX, len(good) - 2)]
        used = {r["proc"] for r in base}
        pool = [r for r in current if r["proc"] not in used]
        rng.shuffle(pool)
        runs = pool[: policy.max_runs]
        bstats = [P.run_stat(r) for r in base]
        cur, c = [], None
        for i, r in enumerate(runs):
            cur.append(P.run_stat(r))
            last = i == len(runs) - 1
            c = P.decide_stats(bstats, cur, policy=policy, mode=r["mode"], last=last, look=i + 1)
            if c.final:
                break
        out.append(c)
    return out


def replay() -> None:
    for pool in ("idle", "shared", "busy", "suite"):
        lines = P.replay(P.read_pools([f"tests/data/cpu-pools/pool-{pool}.jsonl.gz"]), 60, 3, 0)
        if os.environ.get("OUT"):
            with open(os.environ["OUT"], "a") as f:
                f.write("\n".join(lines) + "\n")
        totals = [x.strip().replace("total ", "") for x in lines if "total" in x]
        mm = [x for x in lines if "mm_threads" in x and "1.5x" in x]
        print(pool, " | ".join(t for t in totals if "3x pb" not in t), "| mm:",
              mm[0].split("|")[-1].strip() if mm else "")  # fmt: skip


def aa() -> None:
    import test_verdict as tv

    for k in [3] + ([5] if ADAPT else []):
        rng = random.Random(11)
        pol = DecisionPolicy(max_runs=MAXR, alpha=ALPHA)

        def rates(draw, n, k=k, pol=pol):
            cs = [tv.session([draw() for _ in range(k)], draw, mode=tv.MODE_CPU, policy=pol)
                  for _ in range(n)]  # fmt: skip
            fails = sum(c.kind == REGRESSION for c in cs) / n
            return round(fails, 4), round(sum(c.kind == INCONCLUSIVE for c in cs) / n, 4)

        cpu = rates(tv.Process(tv.T, 0.06, 1 / 7, rng, (1.5, 2.0)), 2000)
        noisy = rates(lambda rng=rng: tv.run(tv.T * rng.uniform(0.7, 1.3)), 4000)
        print("k", k, "cpu", cpu, "noisy", noisy)


if __name__ == "__main__":
    patch()
    P.gp_sessions = gp_sessions
    replay() if sys.argv[1] == "replay" else aa()
