"""Bus bandwidth of a collective, measured the way nccl-tests does it, without the plugin.

Run it under torchrun, one process per GPU (NCCL), or on the CPU (gloo)::

    torchrun --standalone --nproc_per_node=2 bench/busbw.py --sizes 1M,16M,256M,1G
    torchrun --standalone --nproc_per_node=2 bench/busbw.py --backend gloo --sizes 1M,4M

Per message size: ``--warmup`` calls, then ``--repeats`` rounds; each round starts with a
barrier, times ``--iters`` back-to-back calls between two CUDA events (``perf_counter`` on
the CPU), and takes the slowest rank's time per call; the figure is the median round.
``algbw = S / t`` and ``busbw = algbw * factor`` with nccl-tests' size convention and
factors (``pytest_gpuperf/measure/collectives.py``: all_reduce 2(n-1)/n, all_gather and
reduce_scatter (n-1)/n, broadcast 1). Rank 0 prints one line per size and, with
``--json``, writes them. ``--against RESULTS.json`` (a ``--gpuperf-json`` file) compares
each size's busbw with the plugin's ``test_<op>[<size>]`` result and says whether they
agree within ``--tolerance`` (default 5 %); the exit status is 1 when one does not.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pytest_gpuperf.measure.collectives import bus_factor, check

UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}


def parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+)\s*([KMG]?)(i?B)?", text.strip(), re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 1M, 16M, 256M, 1G)")
    return int(m.group(1)) * UNITS[m.group(2).upper()]


def size_id(nbytes: int) -> str:
    """``1MiB``, ``1GiB``: the ids of examples/test_distributed.py's parameters."""
    return f"{nbytes // 2**30}GiB" if nbytes >= 2**30 else f"{nbytes // 2**20}MiB"


def buffers(op: str, nbytes: int, world: int, device: str, dtype):  # type: ignore[no-untyped-def]
    """The call and its buffers for a collective of ``nbytes`` (nccl-tests' size S)."""
    import torch
    import torch.distributed as dist

    n = nbytes // torch.tensor([], dtype=dtype).element_size()

    def t(count: int):  # type: ignore[no-untyped-def]
        return torch.ones(count, dtype=dtype, device=device)

    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    if op == "all_reduce":
        x = t(n)
        return lambda: dist.all_reduce(x)
    if op == "all_gather":
        out, inp = t(n), t(n // world)
        return lambda: gather(out, inp)
    if op == "reduce_scatter":
        out, inp = t(n // world), t(n)
        return lambda: scatter(out, inp)
    if op == "broadcast":
        x = t(n)
        return lambda: dist.broadcast(x, 0)
    if op == "all_to_all":
        out, inp = t(n), t(n)
        return lambda: dist.all_to_all_single(out, inp)
    raise SystemExit(f"busbw.py does not time {op!r}")


def time_size(call, args, device: str) -> float:  # type: ignore[no-untyped-def]
    """The median over rounds of the slowest rank's time per call (seconds)."""
    import torch
    import torch.distributed as dist

    def sync() -> None:
        if device != "cpu":
            torch.cuda.synchronize()

    for _ in range(args.warmup):
        call()
    sync()
    rounds = []
    for _ in range(args.repeats):
        dist.barrier()
        sync()
        if device == "cpu":
            t0 = time.perf_counter()
            for _ in range(args.iters):
                call()
            mine = (time.perf_counter() - t0) / args.iters
        else:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(args.iters):
                call()
            end.record()
            end.synchronize()
            mine = start.elapsed_time(end) / 1e3 / args.iters
        slowest = torch.tensor([mine], dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        rounds.append(float(slowest.item()))
    return statistics.median(rounds)


def compare(lines: list[dict], against: Path, op: str, tolerance: float) -> bool:  # type: ignore[type-arg]
    """Each size's busbw against the plugin's result of ``test_<op>[<size>]``."""
    doc = json.loads(against.read_text())
    plugin = {}
    for r in doc.get("results", []):
        nodeid = r["id"]["nodeid"]
        m = re.search(rf"test_{op}\[(\w+)\]$", nodeid)
        if m and r.get("gbps"):
            g = (r.get("extra") or {}).get("group") or {}
            factor = bus_factor(op, int(g.get("world_size") or 1))
            plugin[m.group(1)] = r["gbps"] * factor
    ok = True
    for line in lines:
        mine = plugin.get(line["id"])
        if mine is None:
            print(f"  {line['id']}: no result of test_{op}[{line['id']}] in {against}")
            ok = False
            continue
        diff = mine / line["busbw_gbps"] - 1 if line["busbw_gbps"] else float("inf")
        good = abs(diff) <= tolerance
        ok &= good
        print(
            f"  {line['id']}: plugin {mine:.1f} GB/s, busbw.py {line['busbw_gbps']:.1f} GB/s, "
            f"{100 * diff:+.1f} % ({'within' if good else 'BEYOND'} {100 * tolerance:.0f} %)"
        )
    return ok


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--op", default="all_reduce", type=check)
    p.add_argument("--sizes", default="1M,16M,256M,1G")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--backend", default=None, help="nccl on GPUs, gloo on the CPU (default)")
    p.add_argument("--iters", type=int, default=20, help="calls per timed round")
    p.add_argument("--repeats", type=int, default=20, help="rounds per size (the median is kept)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--against", type=Path, default=None)
    p.add_argument("--tolerance", type=float, default=0.05)
    args = p.parse_args()

    import torch
    import torch.distributed as dist

    backend = args.backend or ("nccl" if torch.cuda.is_available() else "gloo")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = "cpu" if backend == "gloo" else f"cuda:{local}"
    if device != "cpu":
        torch.cuda.set_device(local)
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=300))
    rank, world = dist.get_rank(), dist.get_world_size()
    dtype = getattr(torch, args.dtype)
    if backend == "gloo" and dtype == torch.bfloat16:
        dtype = torch.float32
    lines = []
    if rank == 0:
        print(f"busbw.py: {args.op}, {world} ranks, {backend}, {dtype}, median of {args.repeats} "
              f"rounds of {args.iters} calls; {' '.join(sys.argv)}")  # fmt: skip
        print(f"{'size':>10} {'time (us)':>12} {'algbw (GB/s)':>14} {'busbw (GB/s)':>14}")
    for text in args.sizes.split(","):
        nbytes = parse_size(text)
        t = time_size(buffers(args.op, nbytes, world, device, dtype), args, device)
        algbw = nbytes / t / 1e9
        busbw = algbw * bus_factor(args.op, world)
        lines.append({"id": size_id(nbytes), "bytes": nbytes, "time_s": t,
                      "algbw_gbps": algbw, "busbw_gbps": busbw})  # fmt: skip
        if rank == 0:
            print(f"{size_id(nbytes):>10} {t * 1e6:>12.1f} {algbw:>14.2f} {busbw:>14.2f}")
    ok = True
    if rank == 0:
        if args.json:
            args.json.write_text(json.dumps({"op": args.op, "world_size": world,
                                             "backend": backend, "sizes": lines}, indent=1))  # fmt: skip
        if args.against:
            ok = compare(lines, args.against, args.op, args.tolerance)
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
