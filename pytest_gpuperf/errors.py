"""The plugin's exceptions and warnings. Each message says what went wrong and how to fix it."""

from __future__ import annotations


class GpuPerfError(Exception):
    """Base of every error the plugin raises on purpose."""

    __module__ = "pytest_gpuperf"


class GraphCaptureError(GpuPerfError):
    """The benchmarked function cannot be measured with CUDA-graph replay."""

    __module__ = "pytest_gpuperf"


class BenchOutOfMemory(GpuPerfError):
    """CUDA ran out of memory while benchmarking; memory was released."""

    __module__ = "pytest_gpuperf"


class DeviceUnavailable(GpuPerfError):
    """The requested device (``--gpuperf-device=cuda``) cannot be used."""

    __module__ = "pytest_gpuperf"


class GpuPerfWarning(UserWarning):
    """Base of the plugin's warnings (noisy or unstable results, missing tools)."""

    __module__ = "pytest_gpuperf"
