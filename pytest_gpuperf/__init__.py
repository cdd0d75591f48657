"""pytest-gpuperf: GPU performance of PyTorch code as a pytest suite that gates pull requests.
Importing it never imports torch, scipy or pynvml: they load when a benchmark runs."""

from __future__ import annotations

from pytest_gpuperf.errors import (
    BenchOutOfMemory,
    DeviceBusy,
    DeviceUnavailable,
    GpuPerfError,
    GpuPerfWarning,
    GraphCaptureError,
    UnsafePath,
)

__version__ = "0.1.0"

__all__ = [
    "BenchOutOfMemory",
    "DeviceBusy",
    "DeviceUnavailable",
    "GpuPerfError",
    "GpuPerfWarning",
    "GraphCaptureError",
    "UnsafePath",
    "__version__",
]
