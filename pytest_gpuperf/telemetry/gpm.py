"""NVML GPM (GPU performance monitoring): two samples around a window, the metrics between them.

GPM is NVML's counterpart of DCGM's profiling metrics, read through nvidia-ml-py with no
DCGM install. Its counters refresh every 100 ms, so a window lasts longer. It needs a Hopper
or newer GPU; on MIG it is per instance, which this module does not read. Nothing here raises
to the caller but :class:`GpmUnavailable`.
"""

from __future__ import annotations

import contextlib
import math
from types import ModuleType
from typing import Any

from pytest_gpuperf.telemetry.activity import METRICS
from pytest_gpuperf.telemetry.nvml import explain


class GpmUnavailable(Exception):
    """GPM cannot be read here; the message says why (for the header and the results)."""


_NEEDED = (
    "nvmlGpmQueryDeviceSupport",
    "nvmlGpmSampleAlloc",
    "nvmlGpmSampleGet",
    "nvmlGpmSampleFree",
    "nvmlGpmMetricsGet",
    "c_nvmlGpmMetricsGet_t",
)


def support(nvml: ModuleType, handle: Any) -> str | None:
    """``None`` when GPM can be read on this device, else why not (one sentence)."""
    missing = [name for name in _NEEDED if not hasattr(nvml, name)]
    if missing:
        return (
            f"this nvidia-ml-py has no GPM interface ({missing[0]} is missing): "
            "pip install -U nvidia-ml-py"
        )
    mig = getattr(nvml, "nvmlDeviceGetMigMode", None)
    if mig is not None:
        try:
            if int(mig(handle)[0]) == 1:
                return (
                    "MIG is enabled on this GPU: its GPM counters are per MIG instance, which "
                    "pytest-gpuperf does not read"
                )
        except Exception:
            pass  # no MIG on this GPU or driver
    try:
        ok = nvml.nvmlGpmQueryDeviceSupport(handle)
    except Exception as e:
        return f"NVML cannot tell whether this GPU has GPM: {_why(e)}"
    if not int(getattr(ok, "isSupportedDevice", 0)):
        return (
            "this GPU has no GPM counters (NVML GPM needs a Hopper or newer data-center GPU, "
            "e.g. H100 or H200)"
        )
    return None


def _why(e: BaseException) -> str:
    name = type(e).__name__
    if name == "NVMLError_NoPermission":
        return (
            f"no permission to read the GPU's performance counters [{e}]: run as a user "
            "allowed to profile (root, or the driver option NVreg_RestrictProfilingToAdminUsers=0)"
        )
    if name == "NVMLError_NotSupported":
        return f"not supported by this GPU or driver [{e}]"
    if name == "NVMLError_InUse":
        return f"the counters are in use by another profiler (ncu, DCGM) [{e}]"
    return explain(e)


class GpmReader:
    """Two GPM sample buffers for one device (made by :meth:`open`): :meth:`start`,
    :meth:`stop` -> the metrics; one window at a time, from the measuring thread."""

    def __init__(self, nvml: ModuleType, handle: Any):
        self._nvml = nvml
        self._handle = handle
        #: (key, NVML metric id) of each metric this pynvml knows
        self._metrics = [
            (key, int(getattr(nvml, const)))
            for key, const, _, _ in METRICS
            if isinstance(getattr(nvml, const, None), int)
        ]
        self._samples: list[Any] = []
        self._started = False

    @classmethod
    def open(cls, nvml: ModuleType, handle: Any) -> GpmReader:
        """A reader for ``handle``, or :class:`GpmUnavailable` saying why there is none."""
        reason = support(nvml, handle)
        if reason is not None:
            raise GpmUnavailable(reason)
        reader = cls(nvml, handle)
        try:
            reader._samples = [nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()]
        except Exception as e:
            reader.close()
            raise GpmUnavailable(f"NVML could not allocate GPM samples: {_why(e)}") from None
        return reader

    def start(self) -> None:
        """The first sample (raises :class:`GpmUnavailable`)."""
        self._take(0)
        self._started = True

    def stop(self) -> dict[str, Any]:
        """The second sample and the metrics between the two: ``{key: value}`` plus
        ``unsupported`` (the metrics this GPU does not report)."""
        if not self._started:
            raise GpmUnavailable("GPM window stopped before it started")
        self._started = False
        self._take(1)
        nvml = self._nvml
        req = nvml.c_nvmlGpmMetricsGet_t()
        req.version = getattr(nvml, "NVML_GPM_METRICS_GET_VERSION", 1)
        req.numMetrics = len(self._metrics)
        req.sample1, req.sample2 = self._samples
        for i, (_, mid) in enumerate(self._metrics):
            req.metrics[i].metricId = mid
        try:
            nvml.nvmlGpmMetricsGet(req)
        except Exception as e:
            raise GpmUnavailable(f"NVML could not compute the GPM metrics: {_why(e)}") from None
        out: dict[str, Any] = {}
        unsupported = []
        for i, (key, _) in enumerate(self._metrics):
            m = req.metrics[i]
            value = float(m.value)
            if int(m.nvmlReturn) != 0 or not math.isfinite(value) or value < 0:
                unsupported.append(key)
                continue
            out[key] = round(value, 3)
        if unsupported:
            out["unsupported"] = unsupported
        return out

    def _take(self, i: int) -> None:
        try:
            self._nvml.nvmlGpmSampleGet(self._handle, self._samples[i])
        except Exception as e:
            raise GpmUnavailable(f"NVML could not read a GPM sample: {_why(e)}") from None

    def close(self) -> None:
        for s in self._samples:
            with contextlib.suppress(Exception):
                self._nvml.nvmlGpmSampleFree(s)
        self._samples = []
