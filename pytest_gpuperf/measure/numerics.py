"""The numeric fingerprint of a benchmark's output: the torch side of numerics.py.

Called once per benchmark on the output of its first call, before the
timed rounds, so it costs no measured time: one pass over each output
tensor (in float64, in chunks of :data:`CHUNK` elements, on the tensor's own
device), then :data:`~pytest_gpuperf.verdict.numerics.SAMPLES` values and a handful
of statistics copied to the CPU. Only device-agnostic torch ops, so CUDA
and CPU outputs give the same fingerprint for the same values.

torch is imported inside the functions (STYLE.md: importing the plugin never
imports torch).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pytest_gpuperf.verdict.numerics import MAX_TENSORS, encode, sample_indices

#: Elements converted to float64 at a time (32 MiB), so a large output needs little memory.
CHUNK = 1 << 22
#: How deep a returned structure is walked.
MAX_DEPTH = 8


def fingerprint_output(out: Any) -> list[dict[str, Any]] | None:
    """The fingerprint of ``out`` (a tensor, or a tuple/list/dict of them, nested), or None.

    None when ``out`` holds no tensor. Non-tensors are ignored.
    """
    import torch

    found: list[tuple[str, Any]] = []
    _walk(out, "out", 0, found, torch.Tensor)
    if not found:
        return None
    return [_entry(path, t) for path, t in found[:MAX_TENSORS]]


def _walk(x: Any, path: str, depth: int, found: list[tuple[str, Any]], tensor: type) -> None:
    if len(found) >= MAX_TENSORS or depth > MAX_DEPTH:
        return
    if isinstance(x, tensor):
        found.append((path, x))
    elif isinstance(x, (tuple, list)):
        for i, y in enumerate(x):
            _walk(y, f"{path}[{i}]", depth + 1, found, tensor)
    elif isinstance(x, Mapping):
        for k, y in x.items():
            _walk(y, f"{path}[{k!r}]", depth + 1, found, tensor)


def _entry(path: str, t: Any) -> dict[str, Any]:
    import torch

    entry: dict[str, Any] = {"path": path, "shape": list(t.shape), "dtype": str(t.dtype)}
    if t.layout != torch.strided or t.device.type == "meta":
        entry["skipped"] = f"a {t.layout} tensor on {t.device.type}: its values are not read"
        return entry
    try:
        with torch.no_grad():
            x = t.detach()
            if x.is_complex():
                x = torch.view_as_real(x)
            flat = x.reshape(-1)
            entry.update(_stats(flat))
            idx = sample_indices(flat.numel())
            picked = flat[torch.tensor(idx, dtype=torch.long, device=flat.device)]
            entry["samples"] = [encode(v) for v in picked.to(torch.float64).cpu().tolist()]
    except Exception as e:  # an exotic dtype or subclass: keep what is known
        entry = {k: entry[k] for k in ("path", "shape", "dtype")}
        entry["skipped"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}"
    return entry


def _stats(flat: Any) -> dict[str, Any]:
    """Statistics of the finite values, NaN and Inf counts: one float64 pass in chunks.

    Means and variances of the chunks are combined with Chan's formula, so the
    standard deviation does not lose precision to cancellation.
    """
    import torch

    n = 0
    mean = m2 = abs_sum = 0.0
    lo, hi = math.inf, -math.inf
    nan = inf = 0
    for start in range(0, flat.numel(), CHUNK):
        c = flat[start : start + CHUNK].to(torch.float64)
        finite = torch.isfinite(c)
        k = int(finite.sum())
        v = c
        if k < c.numel():
            bad = c[~finite]
            nan += int(torch.isnan(bad).sum())
            inf += int(torch.isinf(bad).sum())
            v = c[finite]
        if k == 0:
            continue
        c_mean = float(v.mean())
        c_m2 = float(torch.square(v - c_mean).sum())
        abs_sum += float(v.abs().sum())
        c_lo, c_hi = torch.aminmax(v)
        lo, hi = min(lo, float(c_lo)), max(hi, float(c_hi))
        total = n + k
        delta = c_mean - mean
        mean += delta * k / total
        m2 += c_m2 + delta * delta * n * k / total
        n = total
    stats: dict[str, float | None] = {
        "mean": mean if n else None,
        "abs_mean": abs_sum / n if n else None,
        "min": lo if n else None,
        "max": hi if n else None,
        "std": math.sqrt(m2 / n) if n else None,
    }
    return {"numel": int(flat.numel()), "nan": nan, "inf": inf, "stats": stats}
