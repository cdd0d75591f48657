"""Device memory: recognise an out-of-memory error, give the memory back, read the allocator.

torch is imported inside functions only.
"""

from __future__ import annotations

import contextlib
import gc


def is_oom(e: BaseException) -> bool:
    """Whether ``e`` is torch's out-of-memory error (or a CUDA one raised as RuntimeError)."""
    cls = type(e)
    if any(c.__name__ == "OutOfMemoryError" for c in cls.__mro__):
        return True
    return isinstance(e, RuntimeError) and "out of memory" in str(e).lower() and "CUDA" in str(e)


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def release_memory() -> None:
    """Collect garbage and return cached CUDA memory to the driver."""
    gc.collect()
    with contextlib.suppress(Exception):
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
            torch.cuda.empty_cache()


def allocator_counters() -> dict[str, int] | None:
    """The caching allocator's counters now, or None where they mean nothing (no CUDA, or
    the ``cudaMallocAsync`` backend)."""
    from pytest_gpuperf.measure.allocation import pick

    try:
        import torch

        if not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return None
        backend = getattr(torch.cuda, "get_allocator_backend", lambda: "native")()
        if backend != "native":
            return None
        return pick(torch.cuda.memory_stats())
    except Exception:
        return None


def allocator_reason() -> str:
    """Why :func:`allocator_counters` gives nothing, in one sentence."""
    try:
        import torch

        backend = getattr(torch.cuda, "get_allocator_backend", lambda: "native")()
    except Exception as e:
        return f"torch.cuda is not usable here ({type(e).__name__}: {e})"
    if backend != "native":
        return (
            f"the CUDA allocator backend is {backend} (PYTORCH_CUDA_ALLOC_CONF), whose "
            "statistics are zero; the native caching allocator counts allocations"
        )
    return "torch.cuda.memory_stats() could not be read"
