"""What the benchmarks ran on: GPU, driver, CUDA, torch, Python, CPU.

torch and pynvml are imported inside functions. Every probe is best-effort:
a value that cannot be read is ``None``, never an exception.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import socket
import sys
from typing import Any


def cpu_model() -> str | None:
    with (
        contextlib.suppress(OSError),
        open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f,
    ):
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or None


def driver_version() -> str | None:
    """The NVIDIA driver version (e.g. ``580.159.04``), through NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            v = pynvml.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else str(v)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML library, no driver, or no permission
        return None


def package_version(module: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:
        return None


@functools.lru_cache(maxsize=4)
def _collect(device: str, index: int) -> tuple[tuple[str, Any], ...]:
    try:
        import torch
    except ImportError:  # the CPU backend times plain Python callables too
        torch = None

    env: dict[str, Any] = {
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch": str(torch.__version__) if torch else None,
        "torch_git": getattr(torch.version, "git_version", None) if torch else None,
        "cuda_runtime": torch.version.cuda if torch else None,
        "triton": package_version("triton"),
        "device": device,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "torch_threads": torch.get_num_threads() if torch else None,
    }
    if device == "cuda" and torch is not None:
        props = torch.cuda.get_device_properties(index)
        env.update(
            {
                "gpu_name": props.name,
                "gpu_count": torch.cuda.device_count(),
                "gpu_index": index,
                "compute_capability": f"{props.major}.{props.minor}",
                "sm_count": props.multi_processor_count,
                "gpu_memory_bytes": int(props.total_memory),
                "l2_cache_bytes": int(getattr(props, "L2_cache_size", 0)) or None,
                "gpu_uuid": str(getattr(props, "uuid", "")) or None,
                "driver": driver_version(),
                "cudnn": torch.backends.cudnn.version()
                if torch.backends.cudnn.is_available()
                else None,
                "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
            }
        )
    return tuple(env.items())


def collect_environment(device: str) -> dict[str, Any]:
    """The environment of this process for ``device`` ("cuda" or "cpu"); cached."""
    index = 0
    if device == "cuda":
        import torch

        index = torch.cuda.current_device()
    return dict(_collect(device, index))
