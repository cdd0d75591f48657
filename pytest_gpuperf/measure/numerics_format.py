"""The numerics fingerprint's format: what :mod:`.numerics` writes, the baseline store checks
and :mod:`pytest_gpuperf.verdict.numerics` compares (its docstring describes the format).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

#: Values sampled per tensor.
SAMPLES = 16
#: Tensors kept per output (the first ones found, depth first); more are counted, not kept.
MAX_TENSORS = 32
#: The statistics of an entry, in the order they are reported.
STATS = ("mean", "abs_mean", "min", "max", "std")

Fingerprint = Sequence[Mapping[str, Any]]


def sample_indices(numel: int, k: int = SAMPLES) -> list[int]:
    """``k`` flat positions spread evenly over ``numel``, first and last included (or all)."""
    if numel <= 0:
        return []
    if numel <= k:
        return list(range(numel))
    return [(i * (numel - 1)) // (k - 1) for i in range(k)]


def encode(x: float) -> float | str:
    """A float as JSON keeps it: non-finite values as ``"nan"``, ``"inf"``, ``"-inf"``."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return float(x)


def decode(v: Any) -> float:
    return float(v) if isinstance(v, (int, float, str)) else math.nan


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def problem(fp: Any) -> str | None:
    """What is wrong with a stored fingerprint, or None when it is valid."""
    if not isinstance(fp, list):
        return "expected a list of tensor entries"
    for i, e in enumerate(fp):
        at = f"[{i}]"
        if not isinstance(e, dict):
            return f"{at}: expected an object"
        fields = ("path", "shape", "dtype", "numel", "nan", "inf", "stats", "samples", "skipped")
        unknown = set(e) - set(fields)
        if unknown:
            return f"{at}: unknown field {', '.join(sorted(map(repr, unknown)))}"
        for name in ("path", "dtype"):
            if not (isinstance(e.get(name), str) and e[name]):
                return f"{at}.{name}: expected a non-empty string"
        shape = e.get("shape")
        if not (isinstance(shape, list) and all(_count(d) for d in shape)):
            return f"{at}.shape: expected a list of whole numbers >= 0"
        if "skipped" in e:
            if not isinstance(e["skipped"], str):
                return f"{at}.skipped: expected a string"
            continue
        for name in ("numel", "nan", "inf"):
            if not _count(e.get(name)):
                return f"{at}.{name}: expected a whole number >= 0"
        stats = e.get("stats")
        if not (isinstance(stats, dict) and set(stats) == set(STATS)):
            return f"{at}.stats: expected an object of {', '.join(STATS)}"
        if not all(v is None or _number(v) for v in stats.values()):
            return f"{at}.stats: expected finite numbers or null"
        samples = e.get("samples")
        if not (
            isinstance(samples, list)
            and len(samples) <= SAMPLES
            and all(_number(v) or v in ("nan", "inf", "-inf") for v in samples)
        ):
            return f'{at}.samples: expected at most {SAMPLES} numbers or "nan"/"inf"/"-inf"'
    return None


def is_fingerprint(fp: Any) -> bool:
    return problem(fp) is None
