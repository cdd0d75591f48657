"""The numeric fingerprint of a benchmark's output: the torch side of numerics.py.

Read once per benchmark from its first call's output, before the timed rounds: one float64
pass over each tensor on its own device (in chunks; a huge tensor through a strided view, so
the cost is bounded), then a few samples and statistics copied to the CPU. Device-agnostic
torch ops only, so CUDA and CPU outputs give the same fingerprint for the same values.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

from pytest_gpuperf.measure.numerics_format import MAX_TENSORS, encode, sample_indices

#: Elements converted to float64 at a time (32 MiB), so a large output needs little memory.
CHUNK = 1 << 22
#: How deep a returned structure is walked.
MAX_DEPTH = 8
#: How many objects of a returned structure are looked at, at most.
MAX_NODES = 10_000
#: How long the walk may take, in seconds, at most (a container whose iteration is slow).
MAX_WALK_S = 1.0
#: Elements of one tensor whose values are read, at most (a larger one through a strided view).
MAX_READ = 4 * CHUNK


def fingerprint_output(out: Any) -> list[dict[str, Any]] | None:
    """The fingerprint of ``out`` (a tensor, or nested tuples/lists/dicts of them), or None."""
    import torch

    found = _tensors(out, torch.Tensor)
    if not found:
        return None
    return [_entry(path, t) for path, t in found[:MAX_TENSORS]]


def _key(k: Any) -> str:
    """A dict key as a path shows it: its ``repr``, or its type when that fails."""
    try:
        return repr(k)  # a __repr__ returning no str raises TypeError
    except Exception:
        return f"<{type(k).__name__} key>"


def _tensors(out: Any, tensor: type) -> list[tuple[str, Any]]:
    """(path, tensor) of a returned structure, depth first, within the MAX_* limits; each
    container entered once, one whose iteration raises left out."""
    found: list[tuple[str, Any]] = []
    seen: set[int] = set()
    nodes = 0
    deadline = time.monotonic() + MAX_WALK_S

    def spent() -> bool:
        return len(found) >= MAX_TENSORS or nodes >= MAX_NODES or time.monotonic() > deadline

    def visit(x: Any, path: str, depth: int) -> None:
        nonlocal nodes
        if depth > MAX_DEPTH or spent():
            return
        nodes += 1
        if isinstance(x, tensor):
            found.append((path, x))
            return
        if not isinstance(x, (tuple, list, Mapping)) or id(x) in seen:
            return
        seen.add(id(x))
        mapping = isinstance(x, Mapping)
        try:
            for k, y in x.items() if isinstance(x, Mapping) else enumerate(x):
                visit(y, f"{path}[{_key(k) if mapping else k}]", depth + 1)
                if spent():
                    return
        except Exception:  # a container whose iteration fails: what was found stays
            return

    visit(out, "out", 0)
    return found


def _read_view(x: Any) -> Any:
    """``x``, or an evenly strided view (no copy) of at most :data:`MAX_READ` elements."""
    for dim in range(x.dim()):
        if x.numel() <= MAX_READ:
            break
        step = min(math.ceil(x.numel() / MAX_READ), x.shape[dim])
        if step > 1:
            x = x[(slice(None),) * dim + (slice(None, None, step),)]
    return x


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
            flat = _read_view(x).reshape(-1)
            entry.update(_stats(flat))
            entry["numel"] = int(t.numel())  # the statistics may be of a strided view
            idx = sample_indices(flat.numel())
            picked = flat[torch.tensor(idx, dtype=torch.long, device=flat.device)]
            entry["samples"] = [encode(v) for v in picked.to(torch.float64).cpu().tolist()]
    except Exception as e:  # an exotic dtype or subclass: keep what is known
        entry = {k: entry[k] for k in ("path", "shape", "dtype")}
        entry["skipped"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}"
    return entry


def _stats(flat: Any) -> dict[str, Any]:
    """Statistics of the finite values, NaN and Inf counts: one float64 pass in chunks,
    combined with Chan's formula (no precision lost to cancellation)."""
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
