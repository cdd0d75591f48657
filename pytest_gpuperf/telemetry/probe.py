"""The fixture's telemetry probe: sample NVML while a benchmark is measured, then summarise.

One :class:`NvmlTelemetry` per process opens NVML once; each measurement gets its own
sampler thread. Nothing here raises into a measurement: every failure becomes
``{"available": False, "reason": ...}``.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from pytest_gpuperf.telemetry import gpm as _gpm
from pytest_gpuperf.telemetry import nvml as _nvml
from pytest_gpuperf.telemetry.activity import unavailable
from pytest_gpuperf.telemetry.reasons import KNOWN, reason_names
from pytest_gpuperf.telemetry.stream import mark_rounds, raw_table, round_clocks, summarize

#: How often the slowly changing metrics are read, in seconds.
SLOW_METRICS_S = 0.05

#: What the fixture's probe yields: called with the RawMeasurement, returns the telemetry dict.
Finish = Callable[[Any], dict[str, Any]]


def gather(finishers: list[Any], raw: Any) -> dict[str, Any] | None:
    """What the telemetry probes' finishers found over the measurement ``raw``, merged."""
    merged: dict[str, Any] = {}
    for finish in finishers:
        if callable(finish):
            merged.update(finish(raw) or {})
    return merged or None


def torch_device_identity() -> tuple[int, str | None]:
    """(current CUDA device index, its UUID) as torch sees them."""
    import torch

    index = torch.cuda.current_device()
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    return index, (str(uuid) if uuid else None)


@dataclass
class _Run:
    device: _nvml.Device
    sampler: _nvml.Sampler
    clock0: float
    wall0: float


class NvmlTelemetry:
    """NVML telemetry for the measurements of one process; :meth:`probe` is a fixture ``Probe``
    (``off_reason`` turns it off; ``identity`` says which CUDA device runs the benchmarks)."""

    def __init__(
        self,
        *,
        interval_ms: float = 10.0,
        raw: bool = False,
        off_reason: str | None = None,
        identity: Callable[[], tuple[int, str | None]] = torch_device_identity,
        visible: str | None = None,
        pid: int | None = None,
    ):
        self.interval_s = interval_ms / 1000.0
        #: memory clock, power, temperature, utilisation: about every 50 ms
        self.slow_every = max(1, round(SLOW_METRICS_S / self.interval_s))
        self.raw = raw
        self.off_reason = off_reason
        self._identity = identity
        self._visible = visible if visible is not None else os.environ.get("CUDA_VISIBLE_DEVICES")
        self._pid = pid if pid is not None else os.getpid()
        self._nvml: ModuleType | None = None
        self._reason: str | None = None
        self._opened = False
        self._names: dict[int, str] = dict(KNOWN)
        self._devices: dict[tuple[int, str | None], _nvml.Device] = {}
        #: per device: its GPM reader, or one that says why there is none (decided once)
        self._gpm: dict[tuple[int, str | None], _gpm.GpmReader] = {}

    def _open(self) -> str | None:
        """Why NVML is not ready, or ``None`` (decided once)."""
        if not self._opened:
            self._opened = True
            try:
                self._nvml = _nvml.open_nvml()
                self._names = reason_names(self._nvml)
            except _nvml.NvmlUnavailable as e:
                self._reason = str(e)
        return self._reason

    def close(self) -> None:
        for reader in self._gpm.values():
            reader.close()
        self._gpm.clear()
        if self._nvml is not None:
            _nvml.close_nvml(self._nvml)
            self._nvml = None
        self._devices.clear()

    def activity_window(self) -> _gpm.GpmReader:
        """A GPM window on the device torch uses (one reader per device, made once)."""
        reason = self._open()
        if reason:
            return _gpm.GpmReader(reason=f"NVML is not available: {reason}")
        try:
            key = self._identity()
            if key not in self._gpm:
                assert self._nvml is not None
                self._gpm[key] = _gpm.GpmReader.open(self._nvml, self._device().handle)
            return self._gpm[key]
        except _nvml.NvmlUnavailable as e:
            return _gpm.GpmReader(reason=str(e))
        except Exception as e:
            return _gpm.GpmReader(reason=f"GPM could not be set up: {_nvml.explain(e)}")

    def _device(self) -> _nvml.Device:
        assert self._nvml is not None
        key = index, uuid = self._identity()
        if key not in self._devices:
            self._devices[key] = _nvml.select_device(
                self._nvml, uuid=uuid, cuda_index=index, visible=self._visible
            )
        return self._devices[key]

    @contextlib.contextmanager
    def probe(self, bench_id: Any, clock: Callable[[], float]) -> Iterator[Finish]:
        run = self._start(clock)
        try:
            yield lambda raw: self._finish(run, raw)
        finally:
            if isinstance(run, _Run):
                run.sampler.stop()

    def _start(self, clock: Callable[[], float]) -> _Run | str:
        if self.off_reason:
            return self.off_reason
        reason = self._open()
        if reason:
            return reason
        try:
            dev = self._device()
            nv = self._nvml
            assert nv is not None
            sampler = _nvml.Sampler(
                _nvml.sample_reader(dev, clock, slow_every=self.slow_every),
                interval_s=self.interval_s,
                read_processes=lambda: _nvml.processes(nv, dev.handle),
            )
            run = _Run(dev, sampler, clock(), time.time())
            sampler.start()
            return run
        except _nvml.NvmlUnavailable as e:
            return str(e)
        except Exception as e:
            return f"NVML failed before the measurement: {_nvml.explain(e)}"

    def _finish(self, run: _Run | str, raw: Any) -> dict[str, Any]:
        if isinstance(run, str):
            return unavailable(run)
        try:
            return self._summarise(run, raw)
        except Exception as e:  # a bug here must not cost the measurement
            return unavailable(f"telemetry failed: {type(e).__name__}: {e}", failed=True)

    def _summarise(self, run: _Run, raw: Any) -> dict[str, Any]:
        sampler = run.sampler
        sampler.stop()
        samples = sorted(sampler.samples, key=lambda s: s.t)
        if sampler.error is not None:
            return unavailable(
                f"NVML error during the measurement, after {len(samples)} sample(s): "
                f"{sampler.error}",
                failed=True,
            )
        dev = run.device
        t0 = float(raw.t0)
        spans = [(t0 + a, t0 + b) for a, b in raw.spans]
        first, last = samples[0].t, samples[-1].t
        w0, w1 = (spans[0][0], spans[-1][1]) if spans else (first, last)

        out: dict[str, Any] = {
            "available": True,
            "source": "nvml",
            "device": dev.describe(),
            "interval_ms": round(1000 * self.interval_s, 3),
            "samples_total": len(samples),
        }
        out.update(summarize(samples, w0, w1, self._names))
        out["sm_clock_max_mhz"] = dev.sm_clock_max_mhz
        out["mem_clock_max_mhz"] = dev.mem_clock_max_mhz
        out["power_limit_w"] = dev.power_limit_w
        every = summarize(samples, first, last, self._names)  # all samples lie in [first, last]
        out["whole_run"] = {"duration_s": round(last - first, 6)} | {
            k: every[k] for k in ("clock_events", "throttled_share", "sm_clock_mhz") if k in every
        }
        marks = mark_rounds(samples, spans, sm_clock_max_mhz=dev.sm_clock_max_mhz)
        out["rounds_checked"] = len(spans)
        out["throttled_rounds"] = marks.throttled
        out["machine_throttled_rounds"] = marks.machine
        out["low_clock_rounds"] = marks.low_clock
        out["round_sm_clock_mhz"] = round_clocks(samples, spans)
        others, note = _nvml.foreign_processes(sampler.processes, self._pid, own_context=True)
        if os.environ.get("PYTEST_XDIST_WORKER"):
            ppid = os.getppid()
            others, siblings = _nvml.split_siblings(
                others, lambda pid: _nvml.parent_pid(pid) == ppid
            )
            if siblings:
                out["xdist_siblings"] = siblings
        out["other_processes"] = others
        if note:
            out["processes_note"] = note
        out["window"] = {
            "start_unix": round(run.wall0 + (w0 - run.clock0), 6),
            "end_unix": round(run.wall0 + (w1 - run.clock0), 6),
        }
        if dev.unsupported:
            out["unsupported"] = list(dev.unsupported)
        if self.raw:
            out["raw"] = raw_table(samples, t0)
        return out
