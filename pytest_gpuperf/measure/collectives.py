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

from pytest_gpuperf.units import fmt_rate


class Measured(Protocol):
    """What the bandwidths read of a run (:class:`pytest_gpuperf.model.Run`)."""

    @property
    def extra(self) -> Mapping[str, Any]: ...

    @property
    def gbps(self) -> float | None: ...


def _ring(n: int) -> float:
    return (n - 1) / n


#: collective -> its bus-bandwidth factor as a function of the world size
FACTORS = {
    "all_reduce": lambda n: 2 * _ring(n),
    "all_gather": _ring,
    "reduce_scatter": _ring,
    "all_to_all": _ring,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "send_recv": lambda n: 1.0,
}
COLLECTIVES = tuple(FACTORS)

#: spellings seen in torch.distributed, c10d, gloo, NCCL and its kernels -> the name above
_ALIASES = {
    "allreduce": "all_reduce",
    **dict.fromkeys(
        ("allgather", "allgatherintotensor", "allgatherbase", "allgathersingle"), "all_gather"
    ),
    **dict.fromkeys(
        ("reducescatter", "reducescattertensor", "reducescatterbase", "reducescattersingle"),
        "reduce_scatter",
    ),
    **dict.fromkeys(("alltoall", "alltoallsingle", "alltoallbase"), "all_to_all"),
    "broadcast": "broadcast",
    "reduce": "reduce",
    **dict.fromkeys(("sendrecv", "send", "recv"), "send_recv"),
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
    return f"algbw {fmt_rate(None, algbw)}, busbw {fmt_rate(None, busbw)}"


def message_bytes(sizes: Any) -> int | None:
    """``S`` of a collective from the bytes of each argument (a tensor's, a list of those
    for a list of tensors, None for no tensor): the largest, a list counting as its sum."""
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
