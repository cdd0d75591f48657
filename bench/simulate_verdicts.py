"""Simulated A/A and A/B sessions of the regression verdict, at the H200's noise levels.

    .venv/bin/python bench/simulate_verdicts.py [--sessions N] [--seed S] [--quick]

Prints four tables for K = 5 baseline runs and up to r = 1, 2 or 3 current
runs (``--gpuperf-reruns`` 0, 1, 2):

1. A/A: the share of sessions with any false failure (target <= alpha = 1 %),
   per-comparison false regressions, inconclusive verdicts, and the fresh
   processes spent on re-measuring;
2. A/B: detection of 2 / 5 / 10 % slowdowns injected into every benchmark;
3. the reported MDE against the measured 95 %-detection point;
4. the same for the H200-like mixed session, large and launch-bound kernels
   apart.

Noise levels from GPU-MACHINE.md (SD between fresh processes, log scale):
kernels >= 100 µs ~0.3 % (a 4096³ matmul up to ~1 %), launch-bound calls
5-10 % with an occasional process in a slow mode (one of 8 at 2x). The
model is statistics.md §1 at the run level (pytest_gpuperf.simulation):
30 % of the variance shared by the benchmarks of a process, 25 % by the
current runs of a session.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from pytest_gpuperf import stats
from pytest_gpuperf.simulation import Scenario, binomial_upper, simulate
from pytest_gpuperf.verdict import DEFAULT_POLICY, DecisionPolicy

K = 5
SHARE = 0.25
SCENARIOS: dict[str, dict[str, Any]] = {
    "large 0.3 %": {"sd": [0.003] * 8, "median_s": [200e-6] * 8},
    "large 1 %": {"sd": [0.01] * 8, "median_s": [200e-6] * 8},
    "tiny 5 %": {"sd": [0.05] * 8, "median_s": [10e-6] * 8},
    "tiny 10 %": {"sd": [0.10] * 8, "median_s": [10e-6] * 8},
    "tiny 5 % + slow mode": {"sd": [0.05] * 8, "median_s": [10e-6] * 8, "outlier_rate": 0.125},
    "mixed (H200-like)": {
        "sd": [0.003, 0.003, 0.01, 0.01, 0.05, 0.05, 0.10, 0.10],
        "median_s": [500e-6, 200e-6, 200e-6, 180e-6, 10e-6, 5e-6, 20e-6, 3e-6],
        "outlier_rate": [0, 0, 0, 0, 0.125, 0.125, 0.125, 0.125],
    },
}


def scenario(name: str, m: int = 8, **over: Any) -> Scenario:
    spec = dict(SCENARIOS[name])
    if m != 8:  # repeat the 8 benchmarks to reach m
        for key in ("sd", "median_s", "outlier_rate"):
            if isinstance(spec.get(key), list):
                spec[key] = (spec[key] * (m // 8 + 1))[:m]
    spec.update(over)
    return Scenario(session_share=SHARE, **spec)


def pct(x: float, digits: int = 1) -> str:
    return "-" if not math.isfinite(x) else f"{100 * x:.{digits}f} %"


def table(title: str, header: Sequence[str], rows: list[Sequence[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print(f"\n{title}")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))


def aa(sessions: int, seed: int) -> None:
    rows = []
    for name in SCENARIOS:
        for m in (8, 100):
            for looks in (1, 2, 3):
                n = sessions if m == 8 else max(sessions // 4, 200)
                pol = DecisionPolicy(looks=looks)
                res = simulate(scenario(name, m), sessions=n, k=K, policy=pol, seed=seed)
                hits, total = res.session_false_failure()
                rows.append(
                    [
                        name,
                        str(m),
                        str(looks),
                        f"{hits}/{total}",
                        pct(hits / total, 2),
                        pct(binomial_upper(hits, total), 2),
                        pct(res.rate(stats.REGRESSION), 3),
                        pct(res.rate(stats.INCONCLUSIVE)),
                        f"{res.extra_runs():.2f}",
                    ]
                )
    table(
        f"1. A/A: no change anywhere (K = {K}; alpha = {DEFAULT_POLICY.alpha:g} per session)",
        [
            "scenario",
            "m",
            "r max",
            "sessions failed",
            "rate",
            "95 % upper",
            "per comparison",
            "inconclusive",
            "extra runs",
        ],
        rows,
    )


def ab(sessions: int, seed: int) -> None:
    rows = []
    for name in ("large 0.3 %", "large 1 %", "tiny 5 %", "tiny 10 %"):
        for looks in (1, 2, 3):
            pol = DecisionPolicy(looks=looks)
            row = [name, str(looks)]
            for theta in (0.02, 0.05, 0.10):
                res = simulate(
                    scenario(name, slowdown=theta), sessions=sessions, k=K, policy=pol, seed=seed
                )
                row.append(
                    f"{pct(res.rate(stats.REGRESSION))} / {pct(res.rate(stats.INCONCLUSIVE))}"
                    f" / {pct(res.rate(stats.NO_CHANGE))}"
                )
            rows.append(row)
    table(
        "2. A/B: every benchmark slowed down; regression / inconclusive / no change "
        f"(K = {K}, m = 8; threshold {pct(DEFAULT_POLICY.threshold, 0)}: 2 % never fails)",
        ["scenario", "r max", "+2 %", "+5 %", "+10 %"],
        rows,
    )


def theta95(spec: Scenario, pol: DecisionPolicy, sessions: int, seed: int) -> float:
    """Smallest slowdown detected in >= 95 % of comparisons (common random numbers)."""
    lo, hi = 0.0, 2.0
    for _ in range(12):
        mid = (lo + hi) / 2
        res = simulate(
            Scenario(**{**spec.__dict__, "slowdown": mid}),
            sessions=sessions,
            k=K,
            policy=pol,
            seed=seed,
        )
        lo, hi = (lo, mid) if res.rate(stats.REGRESSION) >= pol.power else (mid, hi)
    return hi


def mde(sessions: int, seed: int) -> None:
    rows = []
    for sd in (0.003, 0.005, 0.01, 0.02, 0.05, 0.10):
        t = 200e-6 if sd <= 0.01 else 50e-6 if sd <= 0.02 else 10e-6
        spec = Scenario(sd=[sd] * 8, median_s=[t] * 8, session_share=SHARE)
        for looks in (1, 2, 3):
            pol = DecisionPolicy(looks=looks)
            rep = simulate(spec, sessions=sessions, k=K, policy=pol, seed=seed, with_mde=True)
            own = simulate(spec, sessions=sessions, k=K, policy=pol, seed=seed + 1, at_mde=True)
            measured = theta95(spec, pol, max(sessions // 2, 300), seed + 2)
            reported = float(np.median(rep.mde))
            rows.append(
                [
                    pct(sd),
                    str(looks),
                    pct(reported),
                    pct(measured),
                    f"{reported / measured:.2f}",
                    pct(own.rate(stats.REGRESSION)),
                ]
            )
    table(
        f"3. Reported MDE vs measured 95 %-detection point (K = {K}, m = 8, pooled prior)",
        [
            "run SD",
            "r max",
            "median reported MDE",
            "measured theta95",
            "ratio",
            "detected at own MDE",
        ],
        rows,
    )


def mixed(sessions: int, seed: int) -> None:
    rows = []
    large, tiny = [0, 1, 2, 3], [4, 5, 6, 7]
    for looks in (1, 2, 3):
        pol = DecisionPolicy(looks=looks)
        for theta in (0.0, 0.02, 0.05, 0.10):
            res = simulate(
                scenario("mixed (H200-like)", slowdown=theta),
                sessions=sessions,
                k=K,
                policy=pol,
                seed=seed,
                with_mde=True,
            )
            row = [str(looks), pct(theta, 0)]
            for sel in ([0, 1], [2, 3], tiny):
                row.append(
                    f"{pct(res.rate(stats.REGRESSION, sel))} / "
                    f"{pct(res.rate(stats.INCONCLUSIVE, sel))}"
                )
            row.append(
                f"{pct(float(np.median(res.mde[:, large[:2]])))} / "
                f"{pct(float(np.median(res.mde[:, large[2:]])))} / "
                f"{pct(float(np.median(res.mde[:, tiny])))}"
            )
            rows.append(row)
    table(
        "4. Mixed H200-like session (0.3 %, 1 %, 5-10 % with a slow mode): regression / "
        "inconclusive",
        ["r max", "slowdown", "0.3 % kernels", "1 % kernels", "launch-bound", "median MDE"],
        rows,
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sessions", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--quick", action="store_true", help="1000 sessions")
    args = ap.parse_args(argv)
    sessions = 1000 if args.quick else args.sessions
    p = DEFAULT_POLICY
    print("$ " + " ".join(["python", *sys.argv]))
    print(
        f"policy: threshold {pct(p.threshold, 0)}, detect {pct(p.detect, 0)}, alpha {p.alpha:g} "
        f"per session (Bonferroni over m, at the last look), power {p.power:g}, "
        f"clear error {p.clear_error:g}, shared share {p.shared:g}, prior nu0 <= {p.nu0_max:g}; "
        f"{sessions} sessions, seed {args.seed}"
    )
    start = time.time()
    aa(sessions, args.seed)
    ab(sessions, args.seed + 1)
    mde(sessions, args.seed + 2)
    mixed(sessions, args.seed + 3)
    print(f"\n({time.time() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
