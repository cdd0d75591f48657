"""CPU pools: fresh-process runs of CPU benchmarks at a given load, and the rule replayed on them.

``record`` measures, in fresh pytest processes, round after round, interleaved in the same
minutes:

* the ``cpu`` suite with pytest-gpuperf and with pytest-benchmark: the side-by-side's four
  functions (a 256^2 matmul, a Python loop over 1000 floats, a 1M-float add, a sort of 100k
  floats; one torch thread) and a default-threaded 192^2 ``torch.mm``, each unchanged
  (``good``) and with its work made 1.5x and 3x larger (``PLANT``);
* the README's examples (``examples/``, the gloo ones included), unchanged, with
  pytest-gpuperf only (they use its fixture).

The load is an argument: ``idle`` (nothing added; others may be running), ``busy`` (one
busy loop pinned to each CPU, ``taskset -c N python3 -c 'while 1: pass'``) or ``suite``
(this repository's tests, ``pytest tests -n 2``, running in a copy of it in a temporary
folder). Each process's one-minute load average is kept with its runs. The test data's
``shared`` pool is an ``idle`` one recorded while other developers' suites ran (load 6-13). The runs are written
compactly (what the rule reads of a run: :meth:`pytest_gpuperf.verdict.RunStat.of`'s
inputs) to ``POOL.jsonl.gz``.

``replay`` judges sessions drawn from pools, as the gate would: a baseline of ``--k`` good
runs from distinct processes, then current runs from other processes (good ones for A/A,
planted ones for 1.5x and 3x), added one at a time while the verdict is a suspect, up to the
policy's runs; pytest-benchmark's rule on its own runs of the same minutes: the median of one
run against the median of one saved run, failed beyond +10 % (``--benchmark-compare-fail=
median:10%``). Printed per load: false failures, inconclusive and caught, per benchmark and in
total (a slowdown's missed sessions by verdict, its kind of inconclusive and its runs), and
the figure shown for unchanged code (the median of the sessions' ratios).

    python3 bench/cpu_pools.py record --load idle --out bench/results/cpu-2026-12-07/idle
    python3 bench/cpu_pools.py record --load busy --rounds 8 --out /tmp/busy
    python3 bench/cpu_pools.py replay tests/data/cpu-pools/*.jsonl.gz

Needs pytest-benchmark in the same environment for ``record`` (``pip install
pytest-benchmark``); it is not a dependency of the plugin.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import itertools
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_gpuperf.verdict import DecisionPolicy, RunStat  # noqa: E402
from pytest_gpuperf.verdict.decide import decide_stats  # noqa: E402

COMMON = """
import os
import random

import torch

THREADS = torch.get_num_threads()  # torch's default: one per core
torch.set_num_threads(1)
# PLANT: a variant for every benchmark (good, 1.5x, 3x), or NAME:FACTOR,... for some of them
PLANT = os.environ.get("PLANT", "good")
ALL = {"good": 1.0, "1.5x": 1.5, "3x": 3.0}.get(PLANT)
SOME = {} if ALL else dict(x.split(":") for x in PLANT.split(",") if x)


def f(name):
    return ALL or float(SOME.get(name, 1.0))


torch.manual_seed(0)
A = torch.randn(256, 256)
B = torch.randn(256, round(256 * f("matmul")))
X = torch.randn(round(1_000_000 * f("add")))
C = torch.randn(192, 192)
D = torch.randn(192, round(192 * f("mm")))
FLOATS = [random.Random(0).random() for _ in range(round(1000 * f("py_loop")))]
SORTABLE = [random.Random(1).random() for _ in range(round(100_000 * f("sort")))]


def matmul():
    return A @ B


def py_loop():
    total = 0.0
    for f in FLOATS:
        total += f * f
    return total


def add():
    return torch.add(X, X)


def sort():
    return sorted(SORTABLE)


def mm():
    return C @ D
"""

PB_TESTS = """
import torch

from pool_common import THREADS, add, matmul, mm, py_loop, sort


def test_matmul(benchmark):
    benchmark(matmul)


def test_py_loop(benchmark):
    benchmark(py_loop)


def test_add(benchmark):
    benchmark(add)


def test_sort(benchmark):
    benchmark(sort)


def test_mm_threads(benchmark):
    torch.set_num_threads(THREADS)
    try:
        benchmark(mm)
    finally:
        torch.set_num_threads(1)
"""

GP_TESTS = PB_TESTS.replace("(benchmark)", "(gpu_bench)").replace(
    "    benchmark(", "    gpu_bench("
)
VARIANTS = ("good", "1.5x", "3x")
#: what the rule reads of a run (RunStat.of's inputs), kept from a result
KEPT = ("rounds", "stability", "e2e_rounds", "host_hidden", "host_s", "contention",
        "tracer")  # fmt: skip


def load1() -> float:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return float("nan")


def _sig(x: float) -> float:
    return float(f"{x:.4g}")


@contextlib.contextmanager
def loaded(load: str, work: Path) -> Iterator[None]:
    """The machine under ``load`` while the block runs (the processes started are stopped)."""
    procs: list[subprocess.Popen[bytes]] = []
    if load in ("busy", "busy1"):  # a busy loop on each CPU, or on the first one
        cpus = sorted(os.sched_getaffinity(0))
        for cpu in cpus if load == "busy" else cpus[:1]:
            procs.append(subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-c",
                                           "while 1: pass"]))  # fmt: skip
    elif load == "suite":
        copy = work / "suite-copy"
        skip = shutil.ignore_patterns(".venv", ".git", "*.egg-info", "__pycache__", ".gpuperf")
        for name in ("pytest_gpuperf", "tests", "examples", "pyproject.toml"):
            src = ROOT / name
            if src.is_dir():
                shutil.copytree(src, copy / name, ignore=skip)
            else:
                shutil.copy2(src, copy / name)
        loop = (f"while true; do {sys.executable} -m pytest tests -n 2 -q -p no:cacheprovider "
                "-x > /dev/null 2>&1; done")  # fmt: skip
        env = {**os.environ, "GPUPERF_LOCK_DIR": str(work / "suite-locks")}
        procs.append(subprocess.Popen(["bash", "-c", loop], cwd=copy, env=env,
                                      start_new_session=True))  # fmt: skip
    elif load != "idle":
        raise SystemExit(f"unknown load {load!r}: idle, busy, busy1 or suite")
    try:
        time.sleep(3 if procs else 0)  # the load is running
        yield
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, 9) if load == "suite" else p.kill()
            p.wait()


def _pytest(folder: Path, args: list[str], env: dict[str, str]) -> tuple[float, float, int, str]:
    before = load1()
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
                          cwd=folder, env={**os.environ, **env}, capture_output=True, text=True,
                          check=False)  # fmt: skip
    return before, time.monotonic() - t0, done.returncode, done.stdout + done.stderr


def _gp_rows(path: Path, base: dict[str, Any]) -> list[dict[str, Any]]:
    doc = json.loads(path.read_text())
    rows = []
    for r in doc.get("results", []):
        row = {**base, "tool": "gp", "bench": r["id"]["nodeid"].split("::", 1)[-1],
               "mode": r["id"]["mode"], "median": _sig(r["summary"]["median"])}  # fmt: skip
        for key in KEPT:
            value = r.get(key)
            if key in ("rounds", "e2e_rounds") and value:
                value = [_sig(x) for x in value]
            if value not in (None, [], {}):
                row[key] = value
        rows.append(row)
    return rows


def _pb_rows(path: Path, base: dict[str, Any]) -> list[dict[str, Any]]:
    doc = json.loads(path.read_text())
    rows = []
    for b in doc.get("benchmarks", []):
        stats = b["stats"]
        rows.append({**base, "tool": "pb", "bench": b["name"], "median": _sig(stats["median"]),
                     "rounds": stats["rounds"]})  # fmt: skip
    return rows


def record(out: Path, load: str, rounds: int, example_rounds: int) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpuperf-pools-"))
    cpu = work / "cpu"
    cpu.mkdir()
    (cpu / "pool_common.py").write_text(COMMON)
    (cpu / "test_gp.py").write_text(GP_TESTS)
    (cpu / "test_pb.py").write_text(PB_TESTS)
    (cpu / "pytest.ini").write_text("[pytest]\n")
    ex = work / "examples"
    shutil.copytree(ROOT / "examples", ex / "examples")
    (ex / "pytest.ini").write_text("[pytest]\n")
    env = {"GPUPERF_LOCK_DIR": str(work / "locks")}  # other users' sessions never stall it
    rows: list[dict[str, Any]] = []
    proc = itertools.count()
    partial = out / f"pool-{load}.partial.jsonl"  # what is done so far, should the run stop
    partial.unlink(missing_ok=True)

    def keep(new: list[dict[str, Any]]) -> None:
        rows.extend(new)
        with partial.open("a") as f:
            f.writelines(json.dumps(row, separators=(",", ":")) + "\n" for row in new)

    with loaded(load, work):
        for i in range(rounds):
            for variant in VARIANTS:
                for tool in ("gp", "pb"):
                    n = next(proc)
                    js = work / f"{tool}-{n}.json"
                    args = (["test_gp.py", "-p", "no:benchmark", f"--gpuperf-json={js}"]
                            if tool == "gp" else
                            ["test_pb.py", "-p", "no:gpuperf", f"--benchmark-json={js}"])  # fmt: skip
                    before, wall, rc, log = _pytest(cpu, args, {**env, "PLANT": variant})
                    if rc != 0 or not js.exists():
                        raise SystemExit(f"{tool} {variant} failed (rc {rc}):\n{log[-3000:]}")
                    base = {"suite": "cpu", "load": load, "variant": variant, "proc": n,
                            "load1": before, "wall_s": round(wall, 2)}  # fmt: skip
                    keep((_gp_rows if tool == "gp" else _pb_rows)(js, base))
                    print(f"  {load} round {i + 1}/{rounds} {tool} {variant:4} load {before:5.2f} "
                          f"{wall:5.1f} s", flush=True)  # fmt: skip
            if i < example_rounds:
                n = next(proc)
                js = work / f"ex-{n}.json"
                before, wall, rc, log = _pytest(ex, ["examples", f"--gpuperf-json={js}"], env)
                if rc != 0 or not js.exists():
                    raise SystemExit(f"examples failed (rc {rc}):\n{log[-3000:]}")
                base = {"suite": "examples", "load": load, "variant": "good", "proc": n,
                        "load1": before, "wall_s": round(wall, 2)}  # fmt: skip
                keep(_gp_rows(js, base))
                print(f"  {load} round {i + 1}/{rounds} examples load {before:5.2f} {wall:5.1f} s",
                      flush=True)  # fmt: skip
    shutil.rmtree(work, ignore_errors=True)
    path = out / f"pool-{load}.jsonl.gz"
    with gzip.open(path, "wt") as f:
        for row in rows:
            f.write(json.dumps(row, separators=(",", ":")) + "\n")
    partial.unlink()
    return path


# --- replay ---------------------------------------------------------------------------------


def read_pools(paths: Sequence[str | Path]) -> list[dict[str, Any]]:
    rows = []
    for p in paths:
        with gzip.open(p, "rt") if str(p).endswith(".gz") else open(p) as f:
            rows += [json.loads(line) for line in f if line.strip()]
    return rows


def run_stat(row: dict[str, Any]) -> RunStat:
    """A pool's run as the rule reads it."""
    return RunStat.of(
        row["median"],
        row["rounds"],
        row.get("stability", "steady"),
        e2e_rounds=row.get("e2e_rounds") or (),
        host_hidden=row.get("host_hidden"),
        host_s=row.get("host_s"),
        contention=row.get("contention"),
        tracer=row.get("tracer"),
    )


def _by_proc(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {r["proc"]: r for r in rows}


def gp_sessions(
    good: list[dict[str, Any]],
    current: list[dict[str, Any]],
    rng: random.Random,
    sessions: int,
    k: int,
    policy: DecisionPolicy,
) -> list[Any]:
    """``sessions`` verdicts: a baseline of ``k`` good runs, current runs drawn from
    ``current`` (other processes), added while the verdict is a suspect."""
    out = []
    for _ in range(sessions):
        base = rng.sample(good, k)
        used = {r["proc"] for r in base}
        pool = [r for r in current if r["proc"] not in used]
        rng.shuffle(pool)
        runs = pool[: policy.max_runs]
        if not runs:
            break
        bstats = [run_stat(r) for r in base]
        cur = []
        c = None
        for i, r in enumerate(runs):
            cur.append(run_stat(r))
            last = i == len(runs) - 1
            c = decide_stats(bstats, cur, policy=policy, mode=r["mode"], last=last, look=i + 1)
            if c.final:
                break
        out.append(c)
    return out


def pb_sessions(
    good: list[dict[str, Any]], current: list[dict[str, Any]], rng: random.Random, sessions: int
) -> list[float]:
    """pytest-benchmark's compares: one current run's median over one saved run's."""
    out = []
    for _ in range(sessions):
        base = rng.choice(good)
        pool = [r for r in current if r["proc"] != base["proc"]]
        if not pool:
            break
        out.append(rng.choice(pool)["median"] / base["median"])
    return out


def replay(rows: list[dict[str, Any]], sessions: int, k: int, seed: int) -> list[str]:
    policy = DecisionPolicy()
    lines = []
    by = defaultdict(list)
    for r in rows:
        by[(r["load"], r["suite"], r["tool"], r["bench"], r["variant"])].append(r)
    loads = sorted({r["load"] for r in rows}, key=["idle", "shared", "busy", "suite"].index)
    for load in loads:
        mine = [r for r in rows if r["load"] == load]
        l1 = [r["load1"] for r in mine]
        lines.append(f"load {load}: load1 {min(l1):.2f}-{max(l1):.2f} (median "
                     f"{statistics.median(l1):.2f}); {len({r['proc'] for r in mine})} processes")  # fmt: skip
        lines.append(f"  {'benchmark':34} {'plant':5} | {'gpuperf: fail incon  runs  shown':34} | "
                     "pytest-benchmark: fail")  # fmt: skip
        totals: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
        shown: list[float] = []
        for (ld, suite, tool, bench, variant), runs in sorted(by.items()):
            if ld != load or tool != "gp":
                continue
            good = by[(ld, suite, "gp", bench, "good")]
            if len(good) < k + 1:
                continue
            rng = random.Random(f"{seed}{load}{bench}{variant}")
            cs = gp_sessions(good, runs, rng, sessions, k, policy)
            fails = sum(c.kind == "regression" for c in cs)
            incon = sum(c.kind == "inconclusive" for c in cs)
            mean_r = statistics.mean(c.r for c in cs)
            ratios = [c.ratio for c in cs if c.ratio is not None]
            med = statistics.median(ratios) if ratios else float("nan")
            if variant == "good":
                shown += [x for x in ratios if x == x]
            pb = by.get((ld, suite, "pb", bench, variant))
            pb_txt = "-"
            if pb:
                pbr = pb_sessions(by[(ld, suite, "pb", bench, "good")], pb, rng, sessions)
                pb_fail = sum(x > 1.10 for x in pbr)
                pb_txt = f"{pb_fail:3d} of {len(pbr)}"
                totals[(f"{suite}", variant + " pb")][0] += pb_fail
                totals[(f"{suite}", variant + " pb")][2] += len(pbr)
            t = totals[(suite, variant)]
            t[0] += fails
            t[1] += incon
            t[2] += len(cs)
            shown_txt = f"{med:6.3f}x" if ratios else "     - "
            lines.append(f"  {suite + ':' + bench:34} {variant:5} | {fails:4d} {incon:5d} "
                         f"{mean_r:5.2f} {shown_txt} of {len(cs):3d} | {pb_txt}")  # fmt: skip
            missed = Counter(f"{c.kind} {c.why or ''} r={c.r}".replace("  ", " ") for c in cs
                             if variant != "good" and c.kind != "regression")  # fmt: skip
            if missed:
                lines.append(
                    "      missed: " + ", ".join(f"{k} x{n}" for k, n in missed.most_common())
                )
        for (suite, variant), (fails, incon, n) in sorted(totals.items()):
            what = "false failures" if variant.startswith("good") else "caught"
            lines.append(f"  total {suite} {variant}: {what} {fails} of {n}"
                         + ("" if variant.endswith("pb") else f", inconclusive {incon}"))  # fmt: skip
        if shown:
            lines.append(f"  unchanged code shown: median {statistics.median(shown):.3f}x, "
                         f"middle 80 % {_q(shown, 0.1):.3f}x-{_q(shown, 0.9):.3f}x")  # fmt: skip
    return lines


def _q(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def examples_flow(load: str, saves: int, compares: int) -> list[str]:
    """The README's flow, live: ``pytest examples --gpuperf-save=main`` ``saves`` times, then
    ``--gpuperf-baseline=main`` ``compares`` times, under ``load``; one line per session."""
    work = Path(tempfile.mkdtemp(prefix="gpuperf-flow-"))
    shutil.copytree(ROOT / "examples", work / "examples")
    (work / "pytest.ini").write_text("[pytest]\n")
    env = {"GPUPERF_LOCK_DIR": str(work / "locks")}
    lines, failed = [], 0
    with loaded(load, work):
        for i in range(saves + compares):
            save = i < saves
            js = work / f"c{i}.json"
            args = ["examples", "--gpuperf-save=main" if save else "--gpuperf-baseline=main",
                    f"--gpuperf-json={js}", "--gpuperf-capture=never"]  # fmt: skip
            before, wall, rc, log = _pytest(work, args, env)
            kinds: dict[str, int] = defaultdict(int)
            for r in json.loads(js.read_text()).get("results", []) if js.exists() else []:
                kinds[(r.get("comparison") or {}).get("kind", "saved" if save else "none")] += 1
            failed += (not save) and rc != 0
            why = "" if rc in (0, 1) else f" ({log.strip().splitlines()[-1][:80]})"
            lines.append(f"{'save' if save else 'compare'} {i + 1}: rc {rc}{why}, {wall:.0f} s, "
                         f"load {before:.2f}: {dict(sorted(kinds.items()))}")  # fmt: skip
            print(lines[-1], flush=True)
    shutil.rmtree(work, ignore_errors=True)
    lines.append(f"compares failed: {failed} of {compares} (load {load})")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="record a pool at a load")
    r.add_argument("--load", choices=("idle", "busy", "suite"), required=True)
    r.add_argument("--out", type=Path, required=True, help="folder of the pool file")
    r.add_argument("--rounds", type=int, default=10, help="rounds of the cpu suite's variants")
    r.add_argument("--examples", type=int, default=6, help="rounds that also run the examples")
    e = sub.add_parser("examples-flow", help="the README's examples: saves, then compares")
    e.add_argument("--load", choices=("idle", "busy", "busy1", "suite"), default="busy1")
    e.add_argument("--saves", type=int, default=3)
    e.add_argument("--compares", type=int, default=10)
    q = sub.add_parser("replay", help="the rule on pools")
    q.add_argument("pools", nargs="+")
    q.add_argument("--sessions", type=int, default=40, help="sessions per benchmark and plant")
    q.add_argument("--k", type=int, default=3, help="baseline runs")
    q.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.cmd == "record":
        if not shutil.which("taskset") and args.load == "busy":
            print("needs taskset (util-linux)", file=sys.stderr)
            return 2
        print(f"recording at load {args.load}; {subprocess.getoutput('uptime')}", flush=True)
        path = record(args.out, args.load, args.rounds, args.examples)
        print(f"wrote {path}; {subprocess.getoutput('uptime')}")
        return 0
    if args.cmd == "examples-flow":
        print(f"examples flow at load {args.load}; {subprocess.getoutput('uptime')}", flush=True)
        for line in examples_flow(args.load, args.saves, args.compares)[-1:]:
            print(line)
        print(subprocess.getoutput("uptime"))
        return 0
    for line in replay(read_pools(args.pools), args.sessions, args.k, args.seed):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
