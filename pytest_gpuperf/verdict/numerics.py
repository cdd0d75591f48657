"""Numerics beside time: comparing the output fingerprints of two sides.

A fingerprint (:mod:`pytest_gpuperf.measure.numerics`; its format ``numerics_format``) holds
per output tensor its path, shape, dtype, statistics, NaN/Inf counts and sampled values. A
relative difference is taken against the larger of the two values and the tensor's mean
absolute value, so values near zero do not blow it up. When runs of the same code differ
among themselves the inputs were not seeded: the comparison says so (``unseeded``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_gpuperf.measure.numerics_format import STATS, Fingerprint, decode
from pytest_gpuperf.outcome import (
    NO_BASELINE,
    NUMERICS_CHANGED,
    NUMERICS_SAME,
    NUMERICS_UNSEEDED,
    NumericsComparison,
)

#: Options of ``numerics=`` read here: no fingerprint / fail on a change (``report``: neither).
OFF, GATE = "off", "gate"


@dataclass(frozen=True)
class Difference:
    """The largest relative difference between two fingerprints, and where it is."""

    rel: float = 0.0
    where: str = ""  # e.g. "out[0] sample 7" or "out mean"
    current: float | None = None
    baseline: float | None = None
    #: changes that are not a number: structure, dtype, shape, NaN/Inf counts
    changes: tuple[str, ...] = ()


def _rel(a: float, b: float, scale: float) -> float:
    if math.isnan(a) and math.isnan(b):
        return 0.0
    if math.isnan(a) or math.isnan(b):
        return math.inf
    if math.isinf(a) or math.isinf(b):
        return 0.0 if a == b else math.inf
    denom = max(abs(a), abs(b), scale)
    return abs(a - b) / denom if denom > 0 else 0.0


def difference(baseline: Fingerprint, current: Fingerprint) -> Difference:
    """How ``current`` differs from ``baseline`` (two fingerprints of one benchmark)."""
    base = {str(e["path"]): e for e in baseline}
    cur = {str(e["path"]): e for e in current}
    changes: list[str] = []
    gone = [p for p in base if p not in cur]
    new = [p for p in cur if p not in base]
    if gone:
        changes.append(f"no longer returned: {', '.join(gone)}")
    if new:
        changes.append(f"newly returned: {', '.join(new)}")
    best = Difference()
    for path, b in base.items():
        c = cur.get(path)
        if c is None:
            continue
        if b["dtype"] != c["dtype"]:
            changes.append(f"{path} dtype {_short(b['dtype'])} -> {_short(c['dtype'])}")
        same_shape = list(b["shape"]) == list(c["shape"])
        if not same_shape:
            changes.append(f"{path} shape {_shape(b['shape'])} -> {_shape(c['shape'])}")
        if "skipped" in b or "skipped" in c:
            continue
        for name, label in (("nan", "NaN"), ("inf", "Inf")):
            if b[name] != c[name]:
                changes.append(f"{path} {label} count {b[name]} -> {c[name]}")
        bs, cs = b["stats"], c["stats"]
        scale = max(abs(bs["abs_mean"] or 0.0), abs(cs["abs_mean"] or 0.0))
        pairs = [(f"{path} {s}", bs[s], cs[s]) for s in STATS]
        if same_shape:
            pairs += [
                (f"{path} sample {i}", x, y)
                for i, (x, y) in enumerate(zip(b["samples"], c["samples"], strict=False))
            ]
        for where, x, y in pairs:
            if x is None and y is None:
                continue
            bx, cy = decode(x), decode(y)
            rel = _rel(bx, cy, scale)
            if rel > best.rel:
                best = Difference(rel, where, cy, bx)
    return Difference(best.rel, best.where, best.current, best.baseline, tuple(changes))


def spread(fps: Sequence[Fingerprint]) -> float:
    """The largest relative difference among runs of the same code (against the first)."""
    return max((difference(fps[0], fp).rel for fp in fps[1:]), default=0.0)


@dataclass(frozen=True)
class StoredFingerprint:
    """A baseline run's fingerprint, with the commit it was measured at (None: unknown)."""

    fingerprint: Fingerprint
    commit: str | None = None


def compare(
    baseline: Sequence[StoredFingerprint],
    current: Sequence[Fingerprint],
    tolerance: float,
    *,
    gated: bool = False,
) -> NumericsComparison:
    """The current runs' fingerprints (first: this run) against the baseline's (oldest first).

    The reference is the newest baseline fingerprint. ``gated``: a change
    beyond ``tolerance`` fails the test (:attr:`NumericsComparison.fails`).
    """
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    base = [b for b in baseline if b.fingerprint]
    cur = [c for c in current if c]
    common: dict[str, Any] = {
        "tolerance": tolerance,
        "baseline_runs": len(base),
        "current_runs": len(cur),
        "gated": gated,
    }
    if not base or not cur:
        return NumericsComparison(NO_BASELINE, **common)
    d = difference(base[-1].fingerprint, cur[0])
    groups: dict[str | None, list[Fingerprint]] = {}  # runs of one commit (or unknown)
    for b in base:
        groups.setdefault(b.commit, []).append(b.fingerprint)
    b_spread = max(spread(fps) for fps in groups.values())
    c_spread = spread(cur)
    common.update(
        max_rel=d.rel,
        where=d.where,
        current=d.current,
        baseline=d.baseline,
        changes=d.changes,
        baseline_spread=b_spread if len(base) > 1 else None,
        current_spread=c_spread if len(cur) > 1 else None,
    )
    if b_spread > tolerance or c_spread > tolerance:
        return NumericsComparison(NUMERICS_UNSEEDED, **common)
    changed = bool(d.changes) or d.rel > tolerance
    return NumericsComparison(NUMERICS_CHANGED if changed else NUMERICS_SAME, **common)


def _short(dtype: str) -> str:
    return dtype.removeprefix("torch.")


def _shape(shape: Sequence[int]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"
