"""NVML GPM (GPU performance monitoring): two samples around a window, the metrics between them.

GPM is NVML's counterpart of DCGM's profiling metrics, read through nvidia-ml-py with no
DCGM install. Its counters refresh every 100 ms, so a window lasts longer. It needs a Hopper
or newer GPU; on MIG it is per instance, which this module does not read. Nothing here raises:
a failure is the ``reason`` of an unavailable activity.
"""

from __future__ import annotations

import contextlib
import math
from types import ModuleType
from typing import Any

from pytest_gpuperf.telemetry.activity import METRICS, unavailable
from pytest_gpuperf.telemetry.nvml import explain, maybe

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
    if maybe(lambda: int(nvml.nvmlDeviceGetMigMode(handle)[0])) == 1:  # None: no MIG here
        return (
            "MIG is enabled on this GPU: its GPM counters are per MIG instance, which "
            "pytest-gpuperf does not read"
        )
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
    """GPM over a window of calls on one device (:meth:`start`, the calls, :meth:`stop`), one at
    a time; made by :meth:`open`; one with a ``reason`` reads nothing and is not :attr:`wanted`."""

    def __init__(self, nvml: Any = None, handle: Any = None, reason: str | None = None):
        self._nvml = nvml
        self._handle = handle
        self.reason = reason
        #: (key, NVML metric id) of each metric this pynvml knows
        self._metrics = [
            (key, int(getattr(nvml, const)))
            for key, const, _, _ in METRICS
            if isinstance(getattr(nvml, const, None), int)
        ]
        self._samples: list[Any] = []
        self._started = False
        self._error: str | None = None

    @property
    def wanted(self) -> bool:
        return self.reason is None

    @classmethod
    def open(cls, nvml: ModuleType, handle: Any) -> GpmReader:
        """A reader for ``handle``, or one whose ``reason`` says why there is none."""
        reason = support(nvml, handle)
        if reason is not None:
            return cls(reason=reason)
        reader = cls(nvml, handle)
        try:
            reader._samples = [nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()]
        except Exception as e:
            reader.close()
            return cls(reason=f"NVML could not allocate GPM samples: {_why(e)}")
        return reader

    def start(self) -> None:
        """The first sample (a failure is kept for :meth:`stop`)."""
        self._error = self._take(0) if self.wanted else None
        self._started = self.wanted and self._error is None

    def stop(self, **facts: Any) -> dict[str, Any]:
        """The activity dict: the metrics between the samples, ``facts``, ``unsupported`` ones."""
        started, self._started = self._started, False
        not_started = None if started else "GPM window stopped before it started"
        why = self.reason or self._error or not_started or self._take(1)  # the second sample
        if why is not None:
            return unavailable(why)
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
            return unavailable(f"NVML could not compute the GPM metrics: {_why(e)}")
        out: dict[str, Any] = {"available": True, "source": "nvml-gpm", **facts}
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

    def _take(self, i: int) -> str | None:
        """Read sample ``i``; why that failed, or ``None``."""
        try:
            self._nvml.nvmlGpmSampleGet(self._handle, self._samples[i])
        except Exception as e:
            return f"NVML could not read a GPM sample: {_why(e)}"
        return None

    def close(self) -> None:
        for s in self._samples:
            with contextlib.suppress(Exception):
                self._nvml.nvmlGpmSampleFree(s)
        self._samples = []
