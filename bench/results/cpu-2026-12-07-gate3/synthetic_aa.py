"""The synthetic A/A of test_a_and_a_with_process_modes_fails_almost_never with K baseline runs.

    python bench/results/cpu-2026-12-07-gate3/synthetic_aa.py K

Prints per model (false-failure rate, inconclusive rate) over 2000 sessions.
"""

import random
import sys

sys.path[:0] = ["tests/unit", "."]

import test_verdict as tv  # noqa: E402

from pytest_gpuperf.outcome import INCONCLUSIVE, REGRESSION  # noqa: E402

k = int(sys.argv[1])


def aa(draw, mode, n):
    cs = [tv.session([draw() for _ in range(k)], draw, mode=mode) for _ in range(n)]
    return sum(c.kind == REGRESSION for c in cs) / n, sum(c.kind == INCONCLUSIVE for c in cs) / n


rng = random.Random(11)
print("host", aa(tv.HostBound(rng), tv.MODE_EVENTS, 2000))
print("graph", aa(tv.Process(2e-6, 0.005, 0.3, rng, (1.03, 1.08)), tv.MODE_GRAPH, 2000))
print("cpu", aa(tv.Process(tv.T, 0.06, 1 / 7, rng, (1.5, 2.0)), tv.MODE_CPU, 2000))
print("noisy", aa(lambda: tv.run(tv.T * rng.uniform(0.7, 1.3)), tv.MODE_CPU, 2000))
