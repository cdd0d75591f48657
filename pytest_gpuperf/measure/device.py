"""Which device benchmarks run on, decided once per process (imports torch when called)."""

from __future__ import annotations

import os

from pytest_gpuperf.errors import DeviceUnavailable


def cuda_unavailable_reason(*, short: bool = False) -> str | None:
    """Why torch cannot use CUDA here, or ``None`` (``short``: in a few words)."""
    try:
        import torch
    except ImportError as e:
        if short:
            return "no torch"
        return f"torch cannot be imported ({e}); install it with `pip install torch`"
    if torch.version.cuda is None:
        if short:
            return "no CUDA"
        return f"this torch ({torch.__version__}) is built without CUDA support"
    if not torch.cuda.is_available():
        if short:
            return "no GPU found"
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        extra = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
        return f"torch {torch.__version__} finds no usable CUDA device{extra}: no GPU, or no driver"
    return None


def resolve_device(requested: str) -> str:
    """``auto`` -> ``cuda`` where available, else ``cpu``; ``cuda`` without CUDA is an error."""
    if requested == "cpu":
        return "cpu"
    reason = cuda_unavailable_reason()
    if reason is None:
        return "cuda"
    if requested == "cuda":
        raise DeviceUnavailable(
            f"--gpuperf-device=cuda was asked for, but {reason}. Install a CUDA build of torch "
            "on a machine with an NVIDIA GPU, or use --gpuperf-device=auto (the CPU where there "
            "is no GPU) or --gpuperf-device=cpu."
        )
    return "cpu"
