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
import os, sys, math, random
sys.path[:0] = ["bench", ".", "tests/unit"]
import importlib; D = importlib.import_module("pytest_gpuperf.verdict.decide")
src = open(D.__file__).read()
if os.environ.get("SLOW2"):
    n = int(os.environ.get("SLOW2N", "4"))
    old = "    slower = min(cur) - level  # every current run is at least this much slower\n"
    assert old in src
    src = src.replace(old, f"    slower = (sorted(cur)[1] if r >= {n} else min(cur)) - level\n")
    exec(compile(src, D.__file__, "exec"), D.__dict__)
if os.environ.get("E1"):
    old = "    if kind == NO_CHANGE and d + half >= cutoff:  # not ruled out: too small to tell\n"
    assert old in src
    src = src.replace(old, "    if kind == NO_CHANGE and not last and r < klass.runs and d + half >= cut_full:\n        kind, final = REGRESSION, False\n" + old)
    exec(compile(src, D.__file__, "exec"), D.__dict__)
if "Q" in os.environ:
    D.LEVEL_Q = float(os.environ["Q"])
import cpu_pools as P
from pytest_gpuperf.verdict.policy import CLASSES, DecisionPolicy

ADAPT = os.environ.get("ADAPT")
MAXR = int(os.environ.get("MAXR", "5"))
ALPHA = float(os.environ.get("ALPHA", "0.0002"))
KMAX = int(os.environ.get("KMAX", "5"))

def gp_sessions(good, current, rng, sessions, k, policy):
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
        c.__dict__  # noqa
        out.append(c)
    return out

P.gp_sessions = gp_sessions

if sys.argv[1] == "replay":
    for pool in ("idle", "shared", "busy", "suite"):
        lines = P.replay(P.read_pools([f"tests/data/cpu-pools/pool-{pool}.jsonl.gz"]), 60, 3, 0)
        out = open(os.devnull, "w") if not os.environ.get("OUT") else open(os.environ["OUT"], "a")
        out.write("\n".join(lines) + "\n")
        tot = [l for l in lines if "total" in l]
        mm = [l for l in lines if "mm_threads" in l and "1.5x" in l]
        print(pool, " | ".join(t.strip().replace("total ", "") for t in tot if "3x pb" not in t), "| mm:", mm[0].split("|")[-1].strip() if mm else "")
elif sys.argv[1] == "aa":
    import test_verdict as tv
    from pytest_gpuperf.outcome import INCONCLUSIVE, REGRESSION
    ks = [3] + ([5] if ADAPT else [])
    for k in ks:
        rng = random.Random(11)
        pol = DecisionPolicy(max_runs=MAXR, alpha=ALPHA)
        def aa(draw, mode, n):
            cs = [tv.session([draw() for _ in range(k)], draw, mode=mode, policy=pol) for _ in range(n)]
            return round(sum(c.kind == REGRESSION for c in cs) / n, 4), round(sum(c.kind == INCONCLUSIVE for c in cs) / n, 4)
        print("k", k, "cpu", aa(tv.Process(tv.T, 0.06, 1 / 7, rng, (1.5, 2.0)), tv.MODE_CPU, 2000),
              "noisy", aa(lambda: tv.run(tv.T * rng.uniform(0.7, 1.3)), tv.MODE_CPU, 4000))
