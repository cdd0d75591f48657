"""Scale of the baseline store: a save into a large store, `list`, concurrent saves.

    python bench/baseline_scale.py                       # 2,000 benchmarks x 20 runs, 8 savers
    python bench/baseline_scale.py --benchmarks 200 --runs 5 --savers 2   # a quick look
    python bench/baseline_scale.py --against ../main    # and main's package, alternately

What it builds: a baseline of ``--benchmarks`` GPU benchmarks with ``--runs``
runs each, as a default save keeps them: 30 rounds, the telemetry summary and
the kernel inventory (6 kernels with real-length names) of every run, git meta.
The store is first built by ``--runs`` saves in one process; every figure after
that is taken on it.

What it prints, each measured in a fresh process:
- the save of one session (``--benchmarks`` results) into the full store:
  wall time of ``BaselineStore.save`` and the peak resident memory of the process;
- ``pytest-gpuperf list``: wall time of the whole command (interpreter start included);
- ``pytest-gpuperf show``: likewise (it reads every run);
- loading the baseline as ``--gpuperf-baseline`` does: wall time and peak memory;
- ``--savers`` processes saving one session each at the same moment, with the default
  lock timeout: whether every run of every saver is in the store afterwards.

The targets (docs/performance.md, "The baseline store at scale"): save <= 2 s and <= 150 MB; the load <= 3 s and <= 200 MB;
list <= 1 s; 8 concurrent saves lose no run. The figures are recorded in
docs/performance.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
GPU_ENV: dict[str, Any] = {
    "device": "cuda",
    "gpu_name": "NVIDIA H200",
    "sm_count": 132,
    "gpu_memory_bytes": 150_121_086_976,
    "compute_capability": "9.0",
    "driver": "580.159.04",
    "cuda_runtime": "13.0",
    "torch": "2.11.0+cu130",
    "triton": "3.6.0",
    "python": "3.12.3",
    "hostname": "runner-1",
}
POLICY = {"round_ms": 5.0, "rounds": 30, "warmup_ms": 500.0, "l2_flush": True}
META = {"git_sha": "3f2a9c1e" * 5, "ci_run_id": "12345678901", "ci_ref": "refs/heads/main"}
TELEMETRY = {
    "available": True,
    "sm_clock_mhz": {"min": 1965.0, "median": 1980.0, "max": 1980.0},
    "mem_clock_mhz": {"min": 3201.0, "median": 3201.0, "max": 3201.0},
    "clock_events": ["SW power cap"],
    "throttled_share": 0.0,
    "other_processes": 0,
}
KERNELS = [
    "nvjet_sm90_tst_256x128_64x4_2x1_v_bz_coopA_NNT",
    "triton_poi_fused_add_mul_relu_0",
    "at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "std::array<char*, 3ul> >",
    "at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, "
    "float, float, float>, unsigned int, float, 4, 4> >",
    "triton_red_fused__softmax_1",
    "Memcpy DtoD (Device -> Device)",
]


def inventory(rng: random.Random, level: float) -> dict[str, Any]:
    """A kernel inventory as artifacts/analysis/inventory.py makes it, with per-run jitter."""
    kernels = []
    for i, name in enumerate(KERNELS):
        us = level * 1e6 / (i + 2) * math.exp(rng.gauss(0, 0.01))
        entry: dict[str, Any] = {
            "name": name,
            "kind": "memcpy" if name.startswith("Memcpy") else "kernel",
            "launches": 1.0,
            "us_per_call": round(us, 3),
            "us_per_launch": round(us, 3),
        }
        if entry["kind"] == "kernel":
            entry.update(grid=[132, 2, 1], block=[256, 1, 1], registers=64)
        kernels.append(entry)
    return {
        "kernels": {
            "schema": 1,
            "source": "torch.profiler",
            "device": "cuda",
            "device_name": "NVIDIA H200",
            "calls": 10,
            "per_call_us": round(level * 1e6, 2),
            "cpu_per_call_us": 12.5,
            "gpu_us_per_call": round(level * 0.97e6, 2),
            "busy_fraction": 0.97,
            "syncs_per_call": 0.0,
            "h2d_per_call": 0.0,
            "h2d_bytes_per_call": 0.0,
            "d2h_per_call": 0.0,
            "compiled_regions_per_call": 1.0,
            "kernels": kernels,
            "other_us_per_call": 0.0,
        }
    }


def session(n: int, run: int) -> list[Any]:
    """The runs of one session of ``n`` benchmarks, each with its kernel inventory."""
    from pytest_gpuperf.model import BenchId, Run

    rng = random.Random(run)
    runs = []
    for b in range(n):
        level = 1e-5 * (1 + b % 97)
        r = Run(
            id=BenchId(
                f"tests/test_model_{b // 50}.py::test_op[{b}]",
                None,
                "cuda-events",
                (("shape", f"{b}x1024"), ("dtype", "bfloat16")),
            ),
            device="cuda",
            rounds=tuple(level * math.exp(rng.gauss(0, 0.01)) for _ in range(30)),
            calls_per_round=50,
            first_call_s=0.012,
            warmup=(level,) * 12,
            peak_memory_bytes=1 << 28,
            environment=GPU_ENV,
            policy=POLICY,
            run_id=f"run-{run}",
            telemetry=TELEMETRY,
            extra=inventory(rng, level),
        )
        runs.append(r)
    return runs


def stamp(run: int) -> dt.datetime:
    return T0 + dt.timedelta(days=run)


def build(root: Path, n: int, runs: int) -> int:
    """The store of ``runs`` saves of ``n`` benchmarks, saved in this process. Returns its
    size."""
    from pytest_gpuperf.baseline.store import BaselineStore

    store = BaselineStore(root)
    for run in range(runs):
        store.save("main", session(n, run), meta=META, now=stamp(run))
    return store_bytes(root)


def peak_mb() -> float:
    """Peak resident memory of this process so far, in MB.

    Linux: VmHWM, which starts afresh at exec (ru_maxrss would carry the parent's peak
    across fork + exec). Elsewhere ru_maxrss, so run the steps from a small parent.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 1024 if sys.platform != "darwin" else rss / 2**20


def cpu_s() -> float:
    """CPU time of this process so far (user + system), in seconds: steadier than wall time
    on a machine other work shares."""
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def store_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


# --- the measured steps, each run in a fresh process ------------------------------------


def step_build(root: str, n: int, runs: int) -> dict[str, Any]:
    return {"bytes": build(Path(root), n, runs)}


def step_save(root: str, n: int, run: int, barrier: str | None = None) -> dict[str, Any]:
    from pytest_gpuperf.baseline.store import BaselineStore

    runs = session(n, run)
    before = peak_mb()
    if barrier:
        while not Path(barrier).exists():
            time.sleep(0.002)
    t, c = time.perf_counter(), cpu_s()
    summary = BaselineStore(root).save("main", runs, meta=META, now=stamp(run))
    took = time.perf_counter() - t
    return {
        "save_s": took,
        "cpu_s": cpu_s() - c,
        "peak_mb": peak_mb(),
        "peak_mb_before_save": before,
        "added": summary.added,
    }


def step_load(root: str, collected: int | None = None, replaced: bool = False) -> dict[str, Any]:
    """Load as ``--gpuperf-baseline`` does: where the package's store takes ``nodeids``, the
    session's two steps (at configure, the index and the segments' ends; after collection,
    the runs of the ``collected`` first benchmarks' tests, all by default); otherwise (a package
    from before that two-step load) the whole baseline, as its session did at configure.
    ``replaced``: every segment is replaced (the same bytes, a new file renamed over it)
    between the load and the use of the runs, untimed."""
    import inspect

    from pytest_gpuperf.baseline.store import BaselineStore

    store = BaselineStore(root)
    index = json.loads((Path(root) / "main.json").read_text())  # pytest's collection, untimed
    nodeids = sorted({b["nodeid"] for b in index["benchmarks"].values()})[:collected]
    del index
    t, c = time.perf_counter(), cpu_s()
    if "nodeids" in inspect.signature(store.load).parameters:
        store.load("main", nodeids=())
        b = store.load("main", nodeids=nodeids)
    else:
        b = store.load("main")
    took, cpu, peak = time.perf_counter() - t, cpu_s() - c, peak_mb()
    if not hasattr(b, "stored_runs"):  # a package whose load keeps every run as a record
        runs = sum(len(e.runs) for e in b.benchmarks.values())
        return {"load_s": took, "cpu_s": cpu, "peak_mb": peak, "runs": runs}
    if replaced:
        for seg in sorted((Path(root) / "main.runs").glob("*.json")):
            new = seg.with_name(seg.name + ".new")
            new.write_bytes(seg.read_bytes())
            os.replace(new, seg)
    # then each benchmark's runs once, one after the other, as the gate judges them
    t, c = time.perf_counter(), cpu_s()
    used = sum(len(b.benchmarks[key].runs) for key in b.benchmarks)
    return {
        "load_s": took,
        "cpu_s": cpu,
        "peak_mb": peak,
        "runs": b.stored_runs(),
        "use_s": time.perf_counter() - t,
        "use_cpu_s": cpu_s() - c,
        "use_peak_mb": peak_mb(),
        "used": used,
    }


def step_show(root: str) -> dict[str, Any]:
    """``pytest-gpuperf show main`` in this process (its text thrown away)."""
    import contextlib
    import io

    from pytest_gpuperf.cli.main import main as cli

    t, c = time.perf_counter(), cpu_s()
    with contextlib.redirect_stdout(io.StringIO()):
        cli(["show", "main", "--dir", root])
    return {"show_s": time.perf_counter() - t, "cpu_s": cpu_s() - c, "peak_mb": peak_mb()}


def step_check(root: str, n: int, first_run: int, savers: int) -> dict[str, Any]:
    from pytest_gpuperf.baseline.store import BaselineStore

    b = BaselineStore(root).load("main")
    want = {f"run-{first_run + i}" for i in range(savers)}
    missing = 0
    for e in b.benchmarks.values():
        missing += len(want - {r.run_id for r in e.runs})
    return {"benchmarks": len(b.benchmarks), "missing_runs": missing}


def child(step: str, *args: Any, tree: Path = ROOT) -> dict[str, Any]:
    """Run one step in a fresh interpreter, on the package of ``tree`` (this checkout, or
    the one ``--against`` names); returns what it printed (JSON)."""
    code = (
        f"import json, sys; sys.path.insert(0, {str(ROOT / 'bench')!r}); "
        f"import baseline_scale as b; sys.path.insert(0, {str(tree)!r}); "
        f"print(json.dumps(b.step_{step}(*{args!r})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=tree
    )
    if out.returncode != 0:
        raise SystemExit(f"step {step} failed:\n{out.stderr}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--benchmarks", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--savers", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3, help="saves measured (the median is kept)")
    ap.add_argument("--dir", help="where to build the store (default: a temporary folder)")
    ap.add_argument(
        "--against",
        metavar="CHECKOUT",
        help="also time the save, the load and show with the package of another checkout "
        "(e.g. main), alternately with this one, each on its own copy of the store",
    )
    ap.add_argument(
        "--collected",
        type=int,
        nargs="+",
        metavar="N",
        help="the loads measured: a session that collected the tests of the first N "
        "benchmarks, for each N (default: all of them)",
    )
    ap.add_argument(
        "--only-load",
        action="store_true",
        help="time the loads only (and --against's), on the store a run with the same --dir "
        "built before",
    )
    ap.add_argument(
        "--replaced",
        action="store_true",
        help="in the loads, replace every segment (the same bytes, a new file) between the "
        "load and the use of the runs, as a save by another process does mid-session",
    )
    args = ap.parse_args()
    n, runs = args.benchmarks, args.runs
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="gpuperf-scale-"))
    root = work / "baselines"
    collected = args.collected or [n]
    if args.only_load:
        if not (root / "main.json").is_file():
            raise SystemExit(f"--only-load: no store in {root}; build it first with --dir")
        loads(root, collected, args.replaced)
        if args.against:
            against(
                root,
                work,
                Path(args.against).resolve(),
                n,
                0,
                collected,
                steps=("load",),
                replaced=args.replaced,
            )
        return 0
    shutil.rmtree(root, ignore_errors=True)
    print(f"store: {n} benchmarks x {runs} runs, 30 rounds, telemetry and kernel inventory")
    t = time.perf_counter()
    size = child("build", str(root), n, runs)["bytes"]
    print(f"  built by {runs} saves: {size / 1e6:.1f} MB in {time.perf_counter() - t:.1f} s")

    saves = [child("save", str(root), n, runs + 1 + i) for i in range(args.repeat)]
    times = sorted(s["save_s"] for s in saves)
    peaks = sorted(s["peak_mb"] for s in saves)
    print(
        f"save of {n} results into the full store: median {times[len(times) // 2]:.2f} s "
        f"(all: {', '.join(f'{x:.2f}' for x in times)}), "
        f"peak memory {peaks[-1]:.0f} MB ({saves[0]['peak_mb_before_save']:.0f} MB "
        "before the save: interpreter, results)"
    )

    lists = []
    for _ in range(3):
        t = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-m", "pytest_gpuperf.cli", "list", "--dir", str(root)],
            capture_output=True,
            text=True,
            check=False,
            cwd=ROOT,
        )
        lists.append(time.perf_counter() - t)
        if out.returncode != 0:
            raise SystemExit(f"list failed: {out.stderr}")
    print(f"pytest-gpuperf list: {sorted(lists)[1]:.2f} s (median of 3, interpreter included)")

    t = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "pytest_gpuperf.cli", "show", "main", "--dir", str(root)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    if out.returncode != 0:
        raise SystemExit(f"show failed: {out.stderr}")
    print(f"pytest-gpuperf show: {time.perf_counter() - t:.2f} s (interpreter included)")

    loads(root, collected, args.replaced)

    first_run = runs + 1 + args.repeat
    barrier = work / "go"
    barrier.unlink(missing_ok=True)
    code = (
        f"import json, sys; sys.path.insert(0, {str(ROOT / 'bench')!r}); "
        "import baseline_scale as b; "
        f"print(json.dumps(b.step_save({str(root)!r}, {n}, int(sys.argv[1]), {str(barrier)!r})))"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(first_run + i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for i in range(args.savers)
    ]
    time.sleep(3.0)  # every saver has built its results and waits at the barrier
    t = time.perf_counter()
    barrier.touch()
    outs = [p.communicate() for p in procs]
    wall = time.perf_counter() - t
    failed = [
        err.strip().splitlines()[-1:]
        for p, (_, err) in zip(procs, outs, strict=True)
        if p.returncode
    ]
    check = child("check", str(root), n, first_run, args.savers)
    print(
        f"{args.savers} concurrent saves: all done in {wall:.1f} s, {len(failed)} failed "
        f"{failed or ''}, {check['missing_runs']} run(s) missing afterwards"
    )
    if args.against:
        first = runs + 1 + args.repeat + args.savers
        against(
            root, work, Path(args.against).resolve(), n, first, collected, replaced=args.replaced
        )
    if not args.dir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def loads(root: Path, collected: list[int], replaced: bool = False) -> None:
    """One load as ``--gpuperf-baseline`` does per number of benchmarks collected
    (``replaced``: every segment replaced between the load and the use of the runs)."""
    for c in collected:
        load = child("load", str(root), c, replaced)
        print(
            f"load as --gpuperf-baseline does, {c} benchmarks collected: {load['load_s']:.2f} s, "
            f"{load['cpu_s']:.2f} s CPU, peak {load['peak_mb']:.0f} MB, {load['runs']} runs"
        )
        if "use_s" in load:
            print(
                f"  then each benchmark's runs read once, as the gate judges them"
                f"{' (every segment replaced since the load)' if replaced else ''}: "
                f"{load['use_s']:.2f} s, {load['use_cpu_s']:.2f} s CPU, peak "
                f"{load['use_peak_mb']:.0f} MB, {load['used']} runs"
            )


def against(
    root: Path,
    work: Path,
    other: Path,
    n: int,
    first_run: int,
    collected: list[int],
    rounds: int = 3,
    steps: tuple[str, ...] = ("save", "load", "show"),
    replaced: bool = False,
) -> None:
    """Save, load and show, alternately with ``other``'s package and this one's (who goes
    first alternates too), each on its own copy of the store; medians of wall and CPU time,
    the highest peak. A load per number in ``collected``."""
    trees = {"this": ROOT, "other": other}
    copies = {}
    for label in trees:
        copies[label] = work / f"store-{label}"
        shutil.rmtree(copies[label], ignore_errors=True)
        shutil.copytree(root, copies[label])
    got: dict[tuple[str, str], list[dict[str, Any]]] = {}
    named = [
        f"load-{c}" if s == "load" else s
        for s in steps
        for c in (collected if s == "load" else [0])
    ]
    for i in range(rounds):
        for step in named:
            for label in ("this", "other") if i % 2 else ("other", "this"):
                if step == "save":
                    extra: tuple[Any, ...] = (n, first_run + i)
                elif step.startswith("load-"):
                    extra = (int(step[5:]), replaced)
                else:
                    extra = ()
                d = child(step.split("-")[0], str(copies[label]), *extra, tree=trees[label])
                got.setdefault((step, label), []).append(d)
    print(f"against {other} (alternately, {rounds} times each; medians):")
    for step in named:
        for label in ("other", "this"):
            ds = got[step, label]
            wall = sorted(d[f"{step.split('-')[0]}_s"] for d in ds)[len(ds) // 2]
            cpu = sorted(d["cpu_s"] for d in ds)[len(ds) // 2]
            peak = max(d["peak_mb"] for d in ds)
            print(f"  {step} ({label}): {wall:.2f} s wall, {cpu:.2f} s CPU, peak {peak:.0f} MB")
            if all("use_s" in d for d in ds):
                use = sorted(d["use_s"] for d in ds)[len(ds) // 2]
                peak = max(d["use_peak_mb"] for d in ds)
                print(
                    f"    then the runs used{' (segments replaced)' if replaced else ''}: "
                    f"{use:.2f} s wall, peak {peak:.0f} MB"
                )


if __name__ == "__main__":
    sys.exit(main())
