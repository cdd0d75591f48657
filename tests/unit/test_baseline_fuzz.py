"""Random mutations of valid baseline files: a load, or a clear error naming the file.

A seeded generator (deterministic, quick: a few hundred mutations in a few
seconds) damages one file of a valid baseline at a time: the index, or one of
its segments. Byte-level
damage (flips, cuts, repeats, junk) and JSON-level damage (a value replaced
by another type, a key removed or added, deep nesting) both. Whatever comes
out must be a loaded baseline that can be used, or a ``GpuPerfError`` whose
message names the damaged file; never another exception; and no file of the
baseline may change.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf.baseline.fingerprint import fingerprint
from pytest_gpuperf.baseline.store import BaselineStore
from pytest_gpuperf.errors import GpuPerfError
from pytest_gpuperf.verdict import RunStat
from tests.unit.reporting_data import GPU_ENV
from tests.unit.test_baseline import CPU_ENV, T0, make_run, store_files

MUTATIONS_PER_FILE = 60
SEEDS = range(3)

#: JSON values a mutation puts where another value was.
ODD_VALUES: list[Any] = [
    None,
    True,
    0,
    -1,
    10**400,
    1e308,
    -0.0,
    "",
    "x",
    "2025-13-45T99:99:99+00:00",
    [],
    [1, "a", None],
    {},
    {"k": [1, {"z": None}]},
]


def build(root: Path) -> BaselineStore:
    """A small valid baseline: 3 benchmarks, 2 environments, 3 saves, meta and extras."""
    store = BaselineStore(root)
    for day in range(3):
        inventory = {"kernels": {"kernels": [{"name": "gemm", "us": 1.5}]}}
        runs = [
            make_run(run_id=f"r{day}", level=5e-4 * (1 + 0.01 * day), extra=inventory),
            make_run("tests/t.py::test_b", name="fwd", mode="cuda-graph", run_id=f"r{day}"),
            make_run("tests/t.py::test_c", mode="cpu", env=CPU_ENV, run_id=f"r{day}", n=6),
        ]
        store.save("main", runs, meta={"git_sha": f"{day}" * 40}, now=T0 + dt.timedelta(days=day))
    return store


# --- mutations ----------------------------------------------------------------------


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    n = len(data)
    i = rng.randrange(n)
    j = min(n, i + rng.randint(1, 40))
    op = rng.choice(["flip", "cut", "repeat", "junk", "truncate", "swap"])
    if op == "flip":
        return data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1 :]
    if op == "cut":
        return data[:i] + data[j:]
    if op == "repeat":
        return data[:j] + data[i:j] + data[j:]
    if op == "junk":
        junk = bytes(rng.choice(b'{}[]",:0123456789.-eE \n\\ntrufalsxyz\xff') for _ in range(8))
        return data[:i] + junk + data[i:]
    if op == "truncate":
        return data[:i]
    k = rng.randrange(n)
    a, b = sorted((i, k))
    return data[:a] + data[b : b + 1] + data[a + 1 : b] + data[a : a + 1] + data[b + 1 :]


def _containers(doc: Any) -> list[Any]:
    out, stack = [], [doc]
    while stack:
        x = stack.pop()
        if isinstance(x, (dict, list)) and x:
            out.append(x)
            stack.extend(x.values() if isinstance(x, dict) else x)
    return out


def mutate_json(data: bytes, rng: random.Random) -> bytes:
    doc = json.loads(data)
    target = rng.choice(_containers(doc))
    keys = list(target) if isinstance(target, dict) else list(range(len(target)))
    key = rng.choice(keys)
    op = rng.choice(["replace", "replace", "delete", "add", "deep", "rename"])
    if op == "replace":
        target[key] = rng.choice(ODD_VALUES)
    elif op == "delete":
        del target[key]
    elif op == "add" and isinstance(target, dict):
        target[rng.choice(["extra_field", "median", "runs", "schema"])] = rng.choice(ODD_VALUES)
    elif op == "add":
        target.append(rng.choice(ODD_VALUES))
    elif op == "deep":
        depth = rng.choice([40, 5000])
        target[key] = json.loads("[" * depth + "]" * depth) if depth < 900 else None
        if depth >= 900:  # too deep for json.dumps: write it as text
            text = json.dumps(doc).replace("null", "[" * depth + "]" * depth, 1)
            return text.encode()
    elif isinstance(target, dict):  # rename a key
        target[key + "x"] = target.pop(key)
    else:
        target.reverse()
    return json.dumps(doc, indent=1).encode()


# --- the property -------------------------------------------------------------------------


def use(store: BaselineStore) -> None:
    """What the plugin and the CLI do with a loaded baseline."""
    b = store.load("main")
    for key, entry in b.benchmarks.items():
        for fid in entry.fingerprint_ids():
            runs = b.runs(key, fid)
            _ = [RunStat.from_run(r) for r in runs]
        b.match(key, fingerprint(GPU_ENV), None)
        b.match(key, fingerprint(CPU_ENV), {"round_ms": 5.0})
    store.overview("main")


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("form", ["index", "segment"])
def test_random_damage_is_a_load_or_a_clear_error_and_changes_nothing(
    tmp_path: Path, seed: int, form: str
) -> None:
    rng = random.Random(f"{form}-{seed}")
    pristine = build(tmp_path / "pristine")
    clean = store_files(pristine)
    if form == "segment":
        candidates = [name for name in clean if name.startswith("main.runs/")]
    else:
        candidates = ["main.json"]
    outcomes = {"loaded": 0, "refused": 0}
    for i in range(MUTATIONS_PER_FILE):
        root = tmp_path / f"m{i}"
        for name, data in clean.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(data)
        name = rng.choice(candidates)
        path = root / name
        mutated = (mutate_json if rng.random() < 0.5 else mutate_bytes)(path.read_bytes(), rng)
        path.write_bytes(mutated)
        store = BaselineStore(root)
        before = store_files(store)
        try:
            use(store)
            outcomes["loaded"] += 1
        except GpuPerfError as e:
            outcomes["refused"] += 1
            assert path.name in str(e), f"mutation {i} of {name}: {e}"
        except Exception as e:  # a traceback: the defect this test is for
            pytest.fail(f"mutation {i} of {name} ({form}, seed {seed}): {type(e).__name__}: {e}")
        assert store_files(store) == before, f"mutation {i} changed a file"
    assert outcomes["refused"] > 0  # the generator does damage
