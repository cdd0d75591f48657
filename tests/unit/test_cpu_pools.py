"""The rule on CPU pools recorded on the shared 2-core machine (bench/cpu_pools.py record):
fresh-process runs of the same benchmarks, unchanged and made 1.5x and 3x slower, at four
loads (idle, load ~1; shared, nothing added but other developers' suites, load 6-13; a busy
loop on each CPU; a parallel test suite), kept in tests/data/cpu-pools.

Only what is robust is asserted: no A/A session fails anywhere (the README's examples, gloo
ones included, and default-threaded torch ops among them), and a 3x slowdown of work on one
thread is caught, and on the idle machine a 1.5x slowdown too.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from pytest_gpuperf.verdict import DecisionPolicy

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import cpu_pools

POOLS = sorted((Path(__file__).resolve().parents[1] / "data" / "cpu-pools").glob("*.jsonl.gz"))
ROWS = cpu_pools.read_pools(POOLS)
LOADS = sorted({r["load"] for r in ROWS})


def _sessions(load: str, variant: str, bench: str | None = None) -> list:  # type: ignore[type-arg]
    runs: dict[tuple[str, str], list] = {}  # type: ignore[type-arg]
    for r in ROWS:
        if r["tool"] == "gp" and r["load"] == load and (bench is None or r["bench"] == bench):
            runs.setdefault((r["suite"], r["bench"]), []).append(r)
    out = []
    for (_, name), rs in sorted(runs.items()):
        good = [r for r in rs if r["variant"] == "good"]
        cur = [r for r in rs if r["variant"] == variant]
        rng = random.Random(f"{load}{name}{variant}")
        out += cpu_pools.gp_sessions(good, cur, rng, 12, 3, DecisionPolicy())
    return out


def test_the_pools_hold_every_load_and_suite() -> None:
    assert set(LOADS) == {"idle", "shared", "busy", "suite"}
    assert {r["suite"] for r in ROWS} == {"cpu", "examples"}


@pytest.mark.parametrize("load", LOADS)
def test_unchanged_code_never_fails(load: str) -> None:
    cs = _sessions(load, "good")
    assert len(cs) >= 200
    assert [c.name for c in cs if c.kind == "regression"] == []


@pytest.mark.parametrize("load", LOADS)
def test_a_3x_slowdown_of_work_on_one_thread_is_caught(load: str) -> None:
    for bench in ("test_py_loop", "test_matmul"):
        cs = _sessions(load, "3x", bench)
        assert len(cs) == 12 and sum(c.kind == "regression" for c in cs) >= 0.9 * len(cs), bench


def test_a_1_5x_slowdown_of_work_on_one_thread_is_caught_on_the_idle_machine() -> None:
    for bench in ("test_py_loop", "test_matmul", "test_sort"):
        cs = _sessions("idle", "1.5x", bench)
        assert len(cs) == 12 and sum(c.kind == "regression" for c in cs) >= 0.9 * len(cs), bench
