"""Collectives and a data-parallel training step on 2 ranks (``world_size=2``).

Each test runs on 2 ranks: one process per GPU with NCCL, or 2 processes on the CPU with
gloo, torch.distributed initialised by the plugin. A round is timed on every rank in step
and the result is the slowest rank's; a collective reports its algorithm and bus bandwidth
(nccl-tests' definitions). On a CUDA machine with fewer than 2 GPUs they skip, saying so.
Under ``torchrun --nproc_per_node=2 -m pytest ...`` they run on torchrun's ranks instead.

Planted regressions (``GPUPERF_PLANT``, names separated by commas), for checking what a
failure's diagnosis says (save a baseline without plants first):

* ``imbalance``: the last rank computes more before its gradients' all-reduces
  (``GPUPERF_PLANT_FACTOR`` times the step's compute, default 3);
* ``no_overlap``: the step synchronises before its all-reduces, so that none overlaps the
  backward pass;
* ``small_buckets``: gradient buckets 16x smaller (16x more, smaller all-reduces).

``NCCL_P2P_DISABLE=1``, NCCL's own setting, plants a transport fallback on GPUs.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist

WORLD = 2
ON_GPU = torch.cuda.is_available()
PLANT = set(os.environ.get("GPUPERF_PLANT", "").replace(",", " ").split())
FACTOR = float(os.environ.get("GPUPERF_PLANT_FACTOR", "3"))
MiB = 2**20
# Message sizes: nccl-tests' range on GPUs; at most 4 MiB with gloo, so that CI stays quick.
SIZES = [1 * MiB, 16 * MiB, 256 * MiB, 1024 * MiB] if ON_GPU else [1 * MiB, 4 * MiB]
OTHER_SIZES = SIZES if ON_GPU else [1 * MiB]
DTYPE = torch.bfloat16 if ON_GPU else torch.float32


def _ids(sizes: list[int]) -> list[str]:
    return [f"{s // MiB}MiB" if s < 1024 * MiB else f"{s // (1024 * MiB)}GiB" for s in sizes]


def _buffer(nbytes: int, device: str) -> torch.Tensor:
    return torch.ones(nbytes // DTYPE.itemsize, dtype=DTYPE, device=device)


# torch 2.13 renamed these; 2.11 has the older names only
ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


@pytest.mark.gpuperf(world_size=WORLD, collective="all_reduce")
@pytest.mark.parametrize("nbytes", SIZES, ids=_ids(SIZES))
def test_all_reduce(gpu_bench, nbytes):
    gpu_bench(dist.all_reduce, _buffer(nbytes, gpu_bench.device))


@pytest.mark.gpuperf(world_size=WORLD, collective="all_gather")
@pytest.mark.parametrize("nbytes", OTHER_SIZES, ids=_ids(OTHER_SIZES))
def test_all_gather(gpu_bench, nbytes):
    out = _buffer(nbytes, gpu_bench.device)  # every rank's part: nccl-tests' size
    gpu_bench(ALL_GATHER, out, _buffer(nbytes // WORLD, gpu_bench.device))


@pytest.mark.gpuperf(world_size=WORLD, collective="reduce_scatter")
@pytest.mark.parametrize("nbytes", OTHER_SIZES, ids=_ids(OTHER_SIZES))
def test_reduce_scatter(gpu_bench, nbytes):
    out = _buffer(nbytes // WORLD, gpu_bench.device)
    gpu_bench(REDUCE_SCATTER, out, _buffer(nbytes, gpu_bench.device))


@pytest.mark.gpuperf(world_size=WORLD, collective="broadcast")
@pytest.mark.parametrize("nbytes", OTHER_SIZES, ids=_ids(OTHER_SIZES))
def test_broadcast(gpu_bench, nbytes):
    gpu_bench(dist.broadcast, _buffer(nbytes, gpu_bench.device), 0)


@pytest.mark.gpuperf(world_size=WORLD, collective="all_to_all")
@pytest.mark.parametrize("nbytes", OTHER_SIZES, ids=_ids(OTHER_SIZES))
def test_all_to_all(gpu_bench, nbytes):
    out = _buffer(nbytes, gpu_bench.device)
    gpu_bench(dist.all_to_all_single, out, _buffer(nbytes, gpu_bench.device))


class BucketedAllReduce:
    """What DistributedDataParallel does with gradients, in a few lines: parameters in
    buckets (last layer first, the order backward produces them), each bucket's gradients
    all-reduced, asynchronously, as soon as the last of them is ready, so that the
    communication overlaps the rest of the backward pass; then averaged."""

    def __init__(self, params: list[torch.nn.Parameter], bucket_bytes: int, *, overlap: bool):
        self.overlap = overlap
        self.buckets: list[list[torch.nn.Parameter]] = [[]]
        size = 0
        for p in reversed(params):
            if size and size + p.numel() * p.element_size() > bucket_bytes:
                self.buckets.append([])
                size = 0
            self.buckets[-1].append(p)
            size += p.numel() * p.element_size()
        self.bucket_of = {id(p): i for i, b in enumerate(self.buckets) for p in b}
        self.pending: list[tuple[object, torch.Tensor, int]] = []
        self.ready = [0] * len(self.buckets)
        for p in params:
            p.register_post_accumulate_grad_hook(self._on_grad)

    def _launch(self, i: int) -> None:
        flat = torch.cat([p.grad.reshape(-1) for p in self.buckets[i]])
        self.pending.append((dist.all_reduce(flat, async_op=True), flat, i))

    def _on_grad(self, p: torch.nn.Parameter) -> None:
        i = self.bucket_of[id(p)]
        self.ready[i] += 1
        if self.overlap and self.ready[i] == len(self.buckets[i]):
            self._launch(i)

    def finish(self) -> None:
        if not self.overlap:  # planted: every all-reduce after the whole backward pass
            if ON_GPU:
                torch.cuda.synchronize()
            for i in range(len(self.buckets)):
                self._launch(i)
        for work, flat, i in self.pending:
            work.wait()
            flat /= WORLD
            offset = 0
            for p in self.buckets[i]:
                n = p.numel()
                p.grad.copy_(flat[offset : offset + n].view_as(p.grad))
                offset += n
        self.pending.clear()
        self.ready = [0] * len(self.buckets)


# width, depth, batch, bucket size. Layers much smaller than a bucket, as in a real model,
# so that buckets 16x smaller make 16x more all-reduces: 64 bf16 layers of 1024 (2 MiB each,
# 128 MiB of gradients in 4 buckets) on GPUs, 32 fp32 layers of 64 (16 KiB each, one bucket)
# on the CPU
DDP = (1024, 64, 4096, 32 * MiB) if ON_GPU else (64, 32, 64, 512 * 1024)


@pytest.mark.gpuperf(world_size=WORLD)
def test_ddp_step(gpu_bench):
    width, depth, batch, bucket = DDP
    device = gpu_bench.device
    torch.manual_seed(0)
    layers = [torch.nn.Linear(width, width, bias=False) for _ in range(depth)]
    model = torch.nn.Sequential(*layers).to(device=device, dtype=DTYPE)
    x = torch.randn(batch, width, device=device, dtype=DTYPE)
    if "small_buckets" in PLANT:
        bucket //= 16
    reducer = BucketedAllReduce(list(model.parameters()), bucket, overlap="no_overlap" not in PLANT)
    extra = 0
    if "imbalance" in PLANT and dist.get_rank() == WORLD - 1:
        extra = round((FACTOR - 1) * 3 * depth)  # forward + backward: ~3 matmuls per layer
    w = layers[0].weight.detach()

    def step():
        for p in model.parameters():
            p.grad = None
        h = x
        for _ in range(extra):  # planted: this rank computes more before its all-reduces
            h = h @ w
        loss = model(x + 0 * h[:1]).float().square().mean()
        loss.backward()
        reducer.finish()

    gpu_bench(step)
    assert all(p.grad is not None for p in model.parameters())
