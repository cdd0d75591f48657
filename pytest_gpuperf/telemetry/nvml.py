"""NVML access: open the library, find the GPU torch uses, read samples in a background thread.

pynvml is imported inside functions. NVML calls release the GIL while the driver answers,
so the measuring thread loses only the Python between them (docs/performance.md).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from pytest_gpuperf.telemetry.stream import Sample


class NvmlUnavailable(Exception):
    """NVML cannot be used here; the message says why, for the header and the results."""


#: Error classes of pynvml (``NVMLError_<Name>``) with what they mean for a user.
_HINTS = {
    "NVMLError_LibraryNotFound": (
        "no NVIDIA driver library (libnvidia-ml.so.1): no NVIDIA GPU here, or a container "
        "started without the NVIDIA runtime"
    ),
    "NVMLError_DriverNotLoaded": "the NVIDIA kernel driver is not loaded",
    "NVMLError_NoPermission": "no permission to query the GPU through NVML",
    "NVMLError_LibRmVersionMismatch": (
        "the NVML library and the kernel driver differ in version (driver updated without a "
        "reboot?)"
    ),
    "NVMLError_GpuIsLost": "the GPU has fallen off the bus",
    "NVMLError_FunctionNotFound": "this driver's NVML lacks a function that pynvml calls",
}


def explain(e: BaseException) -> str:
    """An exception from NVML as a sentence a user can act on."""
    text = str(e).strip() or type(e).__name__
    hint = _HINTS.get(type(e).__name__)
    return f"{hint} [{text}]" if hint else text


def open_nvml() -> ModuleType:
    """pynvml, initialised (pair with :func:`close_nvml`); :class:`NvmlUnavailable` otherwise."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except ImportError as e:
        raise NvmlUnavailable(
            f"pynvml cannot be imported ({e}); install nvidia-ml-py: pip install nvidia-ml-py"
        ) from None
    except Exception as e:
        raise NvmlUnavailable(f"NVML could not start: {explain(e)}") from None
    return pynvml


def close_nvml(nvml: ModuleType) -> None:
    with contextlib.suppress(Exception):
        nvml.nvmlShutdown()


def text(value: Any) -> str:
    """An NVML string: bytes in old pynvml releases, str in new ones."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def normalize_uuid(uuid: str) -> str:
    """``GPU-8e1c...`` (NVML) and ``8e1c...`` (torch) compare equal."""
    return str(uuid).strip().lower().removeprefix("gpu-").removeprefix("mig-")


def visible_nvml_index(visible: str | None, cuda_index: int, uuids: Sequence[str]) -> int | None:
    """The NVML index of CUDA device ``cuda_index`` according to ``CUDA_VISIBLE_DEVICES``.

    NVML numbers GPUs in PCI order, CUDA renumbers the visible ones (fastest first): a UUID
    entry is exact, a number right only with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` or alike GPUs.
    """
    if visible is None or not visible.strip():
        return cuda_index if cuda_index < len(uuids) else None
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    if cuda_index >= len(entries):
        return None
    entry = entries[cuda_index]
    if entry.isdigit():
        return int(entry)
    want = normalize_uuid(entry)
    hits = [i for i, u in enumerate(uuids) if normalize_uuid(u).startswith(want)]
    return hits[0] if len(hits) == 1 else None


@dataclass
class Device:
    """The NVML device a measurement runs on, with what does not change during a session."""

    handle: Any
    index: int
    uuid: str | None
    name: str | None
    selected_by: str  # "uuid" or "index"
    sm_clock_max_mhz: float | None = None
    mem_clock_max_mhz: float | None = None
    power_limit_w: float | None = None
    #: metric -> zero-argument reader, for the metrics this GPU reports
    readers: dict[str, Callable[[], Any]] = field(default_factory=dict)
    unsupported: list[str] = field(default_factory=list)

    def describe(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("index", "uuid", "name", "selected_by")}


def maybe(fn: Callable[[], Any]) -> Any:
    """``fn()``, or ``None`` when it raises (a value this GPU or driver does not report)."""
    try:
        return fn()
    except Exception:
        return None


def uuid_of(nvml: ModuleType, handle: Any) -> str:
    """The NVML UUID of a device (``GPU-...``), ``""`` when it cannot be read."""
    uuid = maybe(lambda: nvml.nvmlDeviceGetUUID(handle))
    return "" if uuid is None else text(uuid)


def select_device(
    nvml: ModuleType, *, uuid: str | None, cuda_index: int, visible: str | None
) -> Device:
    """The NVML device of CUDA device ``cuda_index``: by UUID, else through CUDA_VISIBLE_DEVICES."""
    count = int(nvml.nvmlDeviceGetCount())
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    uuids = [uuid_of(nvml, h) for h in handles]
    chosen: int | None = None
    how = "uuid"
    if uuid:
        want = normalize_uuid(uuid)
        chosen = next((i for i, u in enumerate(uuids) if u and normalize_uuid(u) == want), None)
    if chosen is None:
        how = "index"
        chosen = visible_nvml_index(visible, cuda_index, uuids)
    if chosen is None or not 0 <= chosen < count:
        raise NvmlUnavailable(
            f"cannot tell which of the {count} GPU(s) NVML sees is CUDA device {cuda_index} "
            f"(torch UUID {uuid or 'unknown'}, CUDA_VISIBLE_DEVICES={visible!r})"
        )
    h = handles[chosen]
    name = maybe(lambda: nvml.nvmlDeviceGetName(h))
    sm_max = maybe(lambda: nvml.nvmlDeviceGetMaxClockInfo(h, nvml.NVML_CLOCK_SM))
    mem_max = maybe(lambda: nvml.nvmlDeviceGetMaxClockInfo(h, nvml.NVML_CLOCK_MEM))
    limit_mw = maybe(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(h))
    dev = Device(
        handle=h,
        index=chosen,
        uuid=uuids[chosen] or None,
        name=text(name) if name is not None else None,
        selected_by=how,
        sm_clock_max_mhz=float(sm_max) if sm_max else None,
        mem_clock_max_mhz=float(mem_max) if mem_max else None,
        power_limit_w=limit_mw / 1000.0 if limit_mw else None,
    )
    dev.readers, dev.unsupported, _ = readers(nvml, h)
    if "sm_clock_mhz" not in dev.readers:
        raise NvmlUnavailable(f"GPU {chosen} ({dev.name}) does not report its SM clock via NVML")
    return dev


def readers(
    nvml: ModuleType, h: Any
) -> tuple[dict[str, Callable[[], Any]], list[str], dict[str, Any]]:
    """One reader per metric this GPU reports (each tried once), the metrics it does not, and
    the values the tries read."""
    clock = nvml.nvmlDeviceGetClockInfo
    sm, mem = nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_MEM
    candidates: list[tuple[str, Callable[[], Any]]] = [
        ("sm_clock_mhz", lambda: clock(h, sm)),
        ("mem_clock_mhz", lambda: clock(h, mem)),
        ("power_w", lambda: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0),
        ("temperature_c", lambda: nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU)),
        ("utilization", lambda: nvml.nvmlDeviceGetUtilizationRates(h)),
        # the newer name first; an older driver has only the older one
        ("clock_events", lambda: int(nvml.nvmlDeviceGetCurrentClocksEventReasons(h))),
        ("clock_events", lambda: int(nvml.nvmlDeviceGetCurrentClocksThrottleReasons(h))),
    ]
    out: dict[str, Callable[[], Any]] = {}
    now: dict[str, Any] = {}
    for name, fn in candidates:
        if name not in out and (v := maybe(fn)) is not None:
            out[name], now[name] = fn, v
    return out, [name for name in dict.fromkeys(n for n, _ in candidates) if name not in out], now


_SLOW = ("mem_clock_mhz", "power_w", "temperature_c", "utilization")


def sample_reader(
    dev: Device, clock: Callable[[], float], *, slow_every: int = 1
) -> Callable[[], Sample]:
    """A reader of one :class:`Sample` of ``dev`` (raises what NVML raises); :data:`_SLOW` only
    every ``slow_every``-th time (NVML averages them over 0.1-1 s; each call waits for the GIL)."""
    r = dev.readers
    fast = [(k, r[k]) for k in ("sm_clock_mhz", "clock_events") if k in r]
    slow = fast + [(k, r[k]) for k in _SLOW if k in r]
    tick = 0

    def read() -> Sample:
        nonlocal tick
        readers = slow if tick % slow_every == 0 else fast
        tick += 1
        a = clock()
        got = {k: fn() for k, fn in readers}
        b = clock()
        u = got.pop("utilization", None)
        if u is not None:
            got.update(gpu_util_pct=u.gpu, mem_util_pct=u.memory)
        return Sample((a + b) / 2, **got)

    return read


def processes(nvml: ModuleType, h: Any) -> dict[int, int | None]:
    """pid -> GPU memory used (bytes, ``None`` when unknown) of every process on the GPU."""
    out: dict[int, int | None] = {}
    for name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        for p in maybe(lambda: getattr(nvml, name)(h)) or []:  # noqa: B023 (called at once)
            pid = int(p.pid)
            mem = getattr(p, "usedGpuMemory", None)
            mem = int(mem) if isinstance(mem, int) and mem >= 0 else None
            out[pid] = max(filter(None, (out.get(pid), mem)), default=None)
    return out


def process_name(pid: int) -> str | None:
    """The command name of ``pid`` where this process can see it (``/proc``)."""
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
            return f.read().strip() or None
    except OSError:
        return None


def foreign_processes(
    seen: Mapping[int, int | None], own_pid: int, own_context: bool
) -> tuple[list[dict[str, Any]], str | None]:
    """The processes on the GPU other than this one, and a note where that is uncertain.

    In a container NVML may report the host's pids: when this process holds a CUDA context
    (``own_context``) and a single unknown pid is listed, that one is taken to be it.
    """
    pids = sorted(seen)
    if own_pid in seen or not own_context:
        others = [p for p in pids if p != own_pid]
        note = None
    elif len(pids) <= 1:
        others, note = [], None
    else:
        others = pids
        note = (
            "this process is not among the pids NVML reports (a container's PID namespace); "
            "one of those listed is this process"
        )
    out = [{"pid": p, "name": process_name(p), "used_memory_bytes": seen.get(p)} for p in others]
    return out, note


def parent_pid(pid: int) -> int | None:
    """The parent of ``pid`` where this process can see it (``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            data = f.read()
        return int(data.rsplit(")", 1)[1].split()[1])  # the name may hold spaces and ")"
    except (OSError, ValueError, IndexError):
        return None


def split_siblings(
    others: list[dict[str, Any]], is_sibling: Callable[[int], bool]
) -> tuple[list[dict[str, Any]], list[int]]:
    """(processes that are not siblings, pids of the siblings): pytest-xdist workers of the
    same controller, which the per-GPU lock keeps from measuring while this process does."""
    siblings = [int(p["pid"]) for p in others if is_sibling(int(p["pid"]))]
    return [p for p in others if int(p["pid"]) not in siblings], siblings


class Sampler:
    """Reads samples every ``interval_s`` in a daemon thread, and one in :meth:`start` and
    :meth:`stop` (a short measurement is covered too); an error ends it, kept in :attr:`error`."""

    #: the processes on the GPU are read about this often (s); samples kept at most
    PROCESSES_EVERY_S, MAX_SAMPLES = 0.25, 200_000

    def __init__(
        self,
        read: Callable[[], Sample],
        *,
        interval_s: float,
        read_processes: Callable[[], Mapping[int, int | None]] | None = None,
    ):
        self._read = read
        self._read_processes = read_processes
        self.interval_s = interval_s
        self._procs_every = max(1, round(self.PROCESSES_EVERY_S / interval_s))
        self.samples: list[Sample] = []
        self.processes: dict[int, int | None] = {}
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ticks = 0

    def _tick(self) -> bool:
        try:
            self.samples.append(self._read())
            if self._read_processes is not None and self._ticks % self._procs_every == 0:
                for pid, mem in self._read_processes().items():
                    self.processes[pid] = max(
                        filter(None, (self.processes.get(pid), mem)), default=None
                    )
        except Exception as e:
            self.error = explain(e)
            return False
        self._ticks += 1
        return len(self.samples) < self.MAX_SAMPLES

    def _loop(self) -> None:
        interval = self.interval_s
        next_t = time.monotonic() + interval
        while not self._stop.wait(max(0.0, next_t - time.monotonic())):
            if not self._tick():
                return
            next_t += interval
            now = time.monotonic()
            if next_t < now:  # fell behind (GIL, slow driver): skip, do not burst
                next_t = now + interval

    def start(self) -> None:
        if not self._tick():
            return
        self._thread = threading.Thread(target=self._loop, name="gpuperf-telemetry", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and read a last sample; safe to call twice."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            if self._thread.is_alive() and self.error is None:
                self.error = "the NVML sampler did not stop within 2 s (a driver call hung)"
        if self.error is None:
            self._ticks = 0  # a last look at the processes too
            self._tick()
