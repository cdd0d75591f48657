"""Collectives: their names, and the bandwidths nccl-tests reports for them. Pure Python.

``algbw = S / t`` with ``S`` the size nccl-tests gives each operation, and
``busbw = algbw * factor(n)``, what each link carried, so that one figure compares
across world sizes and with the hardware's peak (nccl-tests' PERFORMANCE.md; the
table is in docs/distributed.md). At world size 1 the all-reduce, all-gather,
reduce-scatter and all-to-all factors are 0: one rank moves nothing over a bus.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, Protocol


class Measured(Protocol):
    """What the bandwidths read of a run (:class:`pytest_gpuperf.model.Run`)."""

    @property
    def extra(self) -> Mapping[str, Any]: ...

    @property
    def gbps(self) -> float | None: ...


ALL_REDUCE = "all_reduce"
ALL_GATHER = "all_gather"
REDUCE_SCATTER = "reduce_scatter"
ALL_TO_ALL = "all_to_all"
BROADCAST = "broadcast"
REDUCE = "reduce"
SEND_RECV = "send_recv"


def _ring(n: int) -> float:
    return (n - 1) / n


#: collective -> its bus-bandwidth factor as a function of the world size
FACTORS = {
    ALL_REDUCE: lambda n: 2 * _ring(n),
    ALL_GATHER: _ring,
    REDUCE_SCATTER: _ring,
    ALL_TO_ALL: _ring,
    BROADCAST: lambda n: 1.0,
    REDUCE: lambda n: 1.0,
    SEND_RECV: lambda n: 1.0,
}
COLLECTIVES = tuple(FACTORS)

#: spellings seen in torch.distributed, c10d, gloo, NCCL and its kernels -> the name above
_ALIASES = {
    "allreduce": ALL_REDUCE,
    **dict.fromkeys(
        ("allgather", "allgatherintotensor", "allgatherbase", "allgathersingle"), ALL_GATHER
    ),
    **dict.fromkeys(
        ("reducescatter", "reducescattertensor", "reducescatterbase", "reducescattersingle"),
        REDUCE_SCATTER,
    ),
    **dict.fromkeys(("alltoall", "alltoallsingle", "alltoallbase"), ALL_TO_ALL),
    "broadcast": BROADCAST,
    "reduce": REDUCE,
    **dict.fromkeys(("sendrecv", "send", "recv"), SEND_RECV),
}


def normalize(name: str) -> str | None:
    """The collective a name means (``"allreduce"``, ``"AllReduce"``, ``"nccl:all_reduce"``,
    ``"c10d::allreduce_"``, ``"ncclDevKernel_AllGather_RING_LL"``...), or None."""
    text = name.rsplit(":", 1)[-1]
    m = re.match(r"nccl(?:Dev)?Kernel_([A-Za-z]+)", text)
    if m:
        text = m.group(1)
    key = re.sub(r"[^a-z]", "", text.lower())
    key = key.removeprefix("nccl").removeprefix("gloo").removeprefix("c10d")
    return _ALIASES.get(key)


def check(name: str) -> str:
    """``collective=`` as given by a user: the canonical name, or a ValueError naming them."""
    found = normalize(name)
    if found is None:
        raise ValueError(
            f"unknown collective {name!r}; one of {', '.join(COLLECTIVES)} "
            "(the bus-bandwidth factors of nccl-tests)"
        )
    return found


def bus_factor(name: str, world_size: int) -> float:
    """nccl-tests' factor from algbw to busbw for ``name`` at ``world_size`` ranks."""
    if world_size < 1:
        raise ValueError(f"world size must be at least 1, got {world_size}")
    return float(FACTORS[check(name)](world_size))


def algbw_gbps(result: Measured) -> float | None:
    """The algorithm bandwidth of a collective's result, GB/s (``bytes`` over the median)."""
    return result.gbps


def busbw_gbps(result: Measured) -> float | None:
    """The bus bandwidth of a collective's result, GB/s; None when it times no collective."""
    g = (result.extra or {}).get("group")
    algbw = result.gbps
    if not isinstance(g, Mapping) or g.get("collective") is None:
        return None
    if algbw is None or not math.isfinite(algbw):
        return None
    return algbw * bus_factor(g["collective"], int(g.get("world_size") or 1))


def rate_text(result: Measured) -> str | None:
    """``algbw 12.3 GB/s, busbw 24.6 GB/s`` for a collective's result, else None."""
    busbw = busbw_gbps(result)
    algbw = result.gbps
    if busbw is None or algbw is None:
        return None
    return f"algbw {_gb(algbw)}, busbw {_gb(busbw)}"


def _gb(gbps: float) -> str:
    return f"{gbps / 1e3:.3g} TB/s" if gbps >= 1000 else f"{gbps:.3g} GB/s"


def message_bytes(sizes: Any) -> int | None:
    """``S`` of a collective from the sizes of its tensor arguments: the largest argument,
    a list of tensors counting as the sum of its parts (see the module docstring).

    ``sizes`` holds, per argument, the bytes of a tensor, a list of those for a list of
    tensors, or None for an argument that is not a tensor.
    """
    best = 0
    for s in sizes or ():
        if isinstance(s, (list, tuple)):
            n = sum(int(x) for x in s if isinstance(x, (int, float)))
        elif isinstance(s, (int, float)):
            n = int(s)
        else:
            continue
        best = max(best, n)
    return best or None
