"""Device memory after a failure: recognise an out-of-memory error, give the memory back.

torch is imported inside functions only.
"""

from __future__ import annotations

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
    try:
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    except Exception:
        pass
