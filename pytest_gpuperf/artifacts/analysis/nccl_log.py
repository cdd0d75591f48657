"""What NCCL's own log (``NCCL_DEBUG=INFO``) says about a communicator. Pure Python.

A summary stored with the results (``Result.extra["group"]["nccl"]``), so that a later run
can tell a *fallback*: a move to a slower transport (peer access, host shared memory, network).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: transport kinds from fastest to slowest, for one node
SPEED_ORDER = ("NVLS", "COLLNET", "P2P", "SHM", "NET")

_PREFIX = re.compile(r"NCCL INFO\s+(.*)$")
_VERSION = re.compile(r"NCCL version (\S+)")
_CHANNEL = re.compile(
    r"Channel\s+(\d+)(?:/\d+)?\s*:\s*(\d+)\[[^\]]*\]\s*->\s*(\d+)\[[^\]]*\]\s*(?:\[(\w+)\]\s*)?via\s+(\S+)"
)
_COMM = re.compile(
    r"comm\s+(0x[0-9a-fA-F]+)\s+rank\s+(\d+)\s+n[Rr]anks\s+(\d+).*?(Init (?:START|COMPLETE))"
)
_NETWORK = re.compile(r"Using network (\S+)")
_ENV = re.compile(r"(NCCL_\w+) set by environment to (\S+?)\.?$")
_NVLS = re.compile(r"NVLS multicast support is (not )?available")


@dataclass
class NcclLog:
    """One process's NCCL log, read."""

    version: str | None = None
    network: str | None = None
    #: (communicator, rank, nranks) of each communicator whose init completed
    comms: list[tuple[str, int, int]] = field(default_factory=list)
    #: transport (``P2P/CUMEM``) -> connection lines naming it
    transports: Counter[str] = field(default_factory=Counter)
    #: NCCL_* settings NCCL read from the environment
    env: dict[str, str] = field(default_factory=dict)
    nvls: bool | None = None
    lines: int = 0

    @property
    def nranks(self) -> int | None:
        return max((c[2] for c in self.comms), default=None)


def transport_name(via: str) -> str:
    """``P2P/CUMEM/read`` -> ``P2P/CUMEM``; ``NET/IB/0/GDRDMA`` -> ``NET/IB``; ``NVLS``."""
    parts = [p for p in via.split("/") if p]
    if parts and parts[0].upper() == "NET" and len(parts) > 1:
        return f"NET/{parts[1]}"
    return "/".join(parts[:2]) or "?"


def parse(text: str | Iterable[str]) -> NcclLog:
    """Read the NCCL lines of a log (other lines, and NCCL's WARN/TRACE lines, are skipped)."""
    out = NcclLog()
    lines = text.splitlines() if isinstance(text, str) else text
    for raw in lines:
        m = _PREFIX.search(raw)
        if m is None:
            continue
        out.lines += 1
        body = m.group(1).strip()
        if (v := _VERSION.search(body)) and out.version is None:
            out.version = v.group(1)
        elif c := _CHANNEL.search(body):
            out.transports[transport_name(c.group(5))] += 1
        elif (comm := _COMM.search(body)) and comm.group(4).endswith("COMPLETE"):
            entry = (comm.group(1), int(comm.group(2)), int(comm.group(3)))
            if entry not in out.comms:
                out.comms.append(entry)
        elif net := _NETWORK.search(body):
            out.network = net.group(1)
        elif env := _ENV.search(body):
            out.env[env.group(1)] = env.group(2)
        elif nv := _NVLS.search(body):
            out.nvls = nv.group(1) is None
    return out


def summarize(logs: Sequence[NcclLog]) -> dict[str, Any]:
    """The JSON summary of the logs of a group's ranks (one per process; stored with results)."""
    return merge(
        [
            {
                "version": log.version,
                "network": log.network,
                "nranks": log.nranks,
                "transports": dict(log.transports),
                "env": dict(log.env),
                "nvls": log.nvls,
                "ranks_logged": 1 if log.lines else 0,
            }
            for log in logs
        ]
    )


def merge(summaries: Sequence[Mapping[str, Any] | None]) -> dict[str, Any]:
    """One summary of several ranks' summaries (each rank reads only its own log)."""
    transports: Counter[str] = Counter()
    env: dict[str, str] = {}
    got = [s for s in summaries if s is not None]
    for s in got:
        transports.update({str(k): int(v) for k, v in (s.get("transports") or {}).items()})
        env.update(s.get("env") or {})

    def first(key: str) -> Any:
        return next((s[key] for s in got if s.get(key) is not None), None)

    return {
        "version": first("version"),
        "network": first("network"),
        "nranks": max((int(s.get("nranks") or 0) for s in got), default=0) or None,
        "transports": dict(transports.most_common()),
        "env": env,
        "nvls": first("nvls"),
        "ranks_logged": sum(int(s.get("ranks_logged") or 0) for s in got),
    }


def main_transport(summary: Mapping[str, Any] | None) -> str | None:
    """The transport most connections of a summary use, or None (none logged)."""
    transports = (summary or {}).get("transports") or {}
    return str(max(transports.items(), key=lambda kv: (kv[1], kv[0]))[0]) if transports else None


def _speed(transport: str) -> int:
    kind = transport.split("/", 1)[0].upper()
    return SPEED_ORDER.index(kind) if kind in SPEED_ORDER else len(SPEED_ORDER)


def describe(summary: Mapping[str, Any] | None) -> str:
    """``NCCL 2.28.9, 2 ranks, P2P/CUMEM (64 connections)``, for a report's details."""
    if not summary:
        return "no NCCL log"
    parts = [f"NCCL {summary.get('version') or '?'}"]
    if summary.get("nranks"):
        parts.append(f"{summary['nranks']} rank(s)")
    transports = summary.get("transports") or {}
    if transports:
        parts.append(", ".join(f"{t} ({n} connection(s))" for t, n in transports.items()))
    elif summary.get("nranks") == 1:
        parts.append("no peer transport (world size 1)")
    else:
        parts.append("no transport logged (run with NCCL_DEBUG=INFO)")
    if summary.get("network"):
        parts.append(f"network {summary['network']}")
    return ", ".join(parts)


def transport_change(
    baseline: Mapping[str, Any] | None, current: Mapping[str, Any] | None
) -> str | None:
    """``transport fallback: ...`` where the main transport changed, else None."""
    was, now = main_transport(baseline), main_transport(current)
    if was is None or now is None or was == now:
        return None
    env = (current or {}).get("env") or {}
    why = "".join(
        f"; {k}={v} in the environment"
        for k, v in sorted(env.items())
        if ((baseline or {}).get("env") or {}).get(k) != v
    )
    slower = _speed(now) > _speed(was)
    what = "transport fallback" if slower else "transport change"
    return f"{what}: the ranks now connect via {now} (the baseline via {was}){why}"
