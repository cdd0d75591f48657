"""The session header: the GPUs as NVML sees them at the start, and what makes results unreliable.

:func:`collect_gpu_state` reads NVML (never torch) and never raises; :func:`render_header`
and :func:`conditions` are pure, so every condition is tested on synthetic states.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_gpuperf.measure.environment import package_version
from pytest_gpuperf.telemetry import gpm as _gpm
from pytest_gpuperf.telemetry import nvml as _nvml
from pytest_gpuperf.telemetry.reasons import decode, reason_names, slowdown
from pytest_gpuperf.telemetry.stream import process_list

#: Utilisation above this at the start means some other work is running.
BUSY_UTIL_PCT = 10
#: Within this many degrees of the slowdown temperature, the GPU is about to throttle.
HOT_MARGIN_C = 5


def _visible(nvml: Any, count: int, visible: str | None) -> list[int]:
    """NVML indices of the GPUs CUDA_VISIBLE_DEVICES shows (all when unset)."""
    if visible is None:
        return list(range(count))
    uuids = [_nvml.uuid_of(nvml, nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
    out = []
    for pos in range(len([e for e in visible.split(",") if e.strip()])):
        i = _nvml.visible_nvml_index(visible, pos, uuids)
        if i is None or not 0 <= i < count:
            break  # CUDA stops at the first entry it cannot use
        out.append(i)
    return out


def _gpu_state(nvml: Any, i: int, own_pid: int) -> dict[str, Any]:
    h = nvml.nvmlDeviceGetHandleByIndex(i)

    def get(fn: str, *args: Any, scale: float | None = None) -> Any:
        f = getattr(nvml, fn, None)
        v = None if f is None else _nvml.maybe(lambda: f(h, *args))
        return v if v is None or scale is None else v / scale

    sm, mem = nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_MEM
    now = _nvml.readers(nvml, h)[2]  # each metric read once, by the try
    persistence = get("nvmlDeviceGetPersistenceMode")
    mig = get("nvmlDeviceGetMigMode")
    ecc = get("nvmlDeviceGetEccMode")
    name, uuid = get("nvmlDeviceGetName"), get("nvmlDeviceGetUUID")
    procs, _ = _nvml.foreign_processes(_nvml.processes(nvml, h), own_pid, own_context=False)
    return {
        "index": i,
        "name": _nvml.text(name) if name is not None else None,
        "uuid": _nvml.text(uuid) if uuid is not None else None,
        "sm_clock_mhz": now.get("sm_clock_mhz"),
        "sm_clock_max_mhz": get("nvmlDeviceGetMaxClockInfo", sm),
        "mem_clock_mhz": now.get("mem_clock_mhz"),
        "mem_clock_max_mhz": get("nvmlDeviceGetMaxClockInfo", mem),
        "power_w": now.get("power_w"),
        "power_limit_w": get("nvmlDeviceGetEnforcedPowerLimit", scale=1000.0),
        "power_default_limit_w": get("nvmlDeviceGetPowerManagementDefaultLimit", scale=1000.0),
        "temperature_c": now.get("temperature_c"),
        "slowdown_temperature_c": get(
            "nvmlDeviceGetTemperatureThreshold",
            getattr(nvml, "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN", 1),
        ),
        "gpu_util_pct": getattr(now.get("utilization"), "gpu", None),
        "persistence": None if persistence is None else bool(persistence),
        "mig": None if mig is None else bool(mig[0]),
        "ecc": None if ecc is None else bool(ecc[0]),
        "ecc_pending": None if ecc is None else bool(ecc[1]),
        "clock_events": now.get("clock_events"),
        "other_processes": procs,
        "gpm_unavailable": _gpm.support(nvml, h),
    }


def collect_gpu_state(
    *, visible: str | None = None, own_pid: int | None = None, use_env: bool = True
) -> dict[str, Any]:
    """The GPUs CUDA will see, read through NVML; ``{"available": False, "reason"}`` without it."""
    if use_env and visible is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    own = own_pid if own_pid is not None else os.getpid()
    state: dict[str, Any] = {"torch": package_version("torch")}
    try:
        nvml = _nvml.open_nvml()
    except _nvml.NvmlUnavailable as e:
        return {**state, "available": False, "reason": str(e)}
    try:
        driver = _nvml.maybe(nvml.nvmlSystemGetDriverVersion)
        cuda = _nvml.maybe(nvml.nvmlSystemGetCudaDriverVersion)
        count = int(nvml.nvmlDeviceGetCount())
        names = reason_names(nvml)
        gpus = [_gpu_state(nvml, i, own) for i in _visible(nvml, count, visible)]
        for g in gpus:
            mask = g.get("clock_events")
            g["clock_event_names"] = decode(mask, names) if mask else []
            g["throttled"] = decode(slowdown(mask), names) if mask else []
        return {
            **state,
            "available": True,
            "driver": _nvml.text(driver) if driver is not None else None,
            "cuda_driver": f"{cuda // 1000}.{(cuda % 1000) // 10}" if cuda else None,
            "gpu_count": count,
            "cuda_visible_devices": visible,
            "gpus": gpus,
        }
    except Exception as e:
        return {**state, "available": False, "reason": f"NVML failed: {_nvml.explain(e)}"}
    finally:
        _nvml.close_nvml(nvml)


@dataclass(frozen=True)
class Condition:
    """Something that makes measurements unreliable, and what to do about it."""

    gpu: int | None
    what: str
    remedy: str

    def line(self) -> str:
        where = f"GPU {self.gpu}: " if self.gpu is not None else ""
        return f"{where}{self.what}; remedy: {self.remedy}"


def conditions(state: Mapping[str, Any]) -> list[Condition]:
    """Every condition of the GPUs in ``state`` that makes measurements unreliable."""
    out: list[Condition] = []
    if not state.get("available"):
        return out
    if state.get("cuda_visible_devices") is not None and not state.get("gpus"):
        out.append(
            Condition(
                None,
                f"CUDA_VISIBLE_DEVICES={state['cuda_visible_devices']!r} shows no GPU",
                "set CUDA_VISIBLE_DEVICES to the GPU(s) to benchmark on",
            )
        )
    for g in state.get("gpus", []):
        out.extend(_gpu_conditions(g))
    return out


def _gpu_conditions(g: Mapping[str, Any]) -> Iterator[Condition]:
    """Other work on GPU ``g`` before any benchmark ran, and its settings that skew timings."""
    i = g.get("index")
    procs = g.get("other_processes") or []
    if procs:
        yield Condition(
            i,
            f"{len(procs)} other process(es) on the GPU ({process_list(procs)}): they "
            "share its SMs, memory bandwidth and power budget",
            "stop them, or benchmark on an idle GPU (CUDA_VISIBLE_DEVICES)",
        )
    elif (g.get("gpu_util_pct") or 0) > BUSY_UTIL_PCT:
        yield Condition(
            i,
            f"the GPU is {g['gpu_util_pct']} % busy before any benchmark ran, with no "
            "process visible here (another container?)",
            "find and stop that work, or benchmark on an idle GPU",
        )
    if g.get("persistence") is False:
        yield Condition(
            i,
            "persistence mode is off: the driver tears the GPU down between processes, "
            "so each run starts from cold clocks and pays the initialisation",
            f"enable it: sudo nvidia-smi -i {i} -pm 1",
        )
    if g.get("throttled"):
        yield Condition(
            i,
            f"already throttled before any benchmark ran ({', '.join(g['throttled'])})",
            "let the GPU cool and check its cooling and power supply; results measured "
            "now are marked throttled",
        )
    temp, slow = g.get("temperature_c"), g.get("slowdown_temperature_c")
    if temp is not None and slow and temp >= slow - HOT_MARGIN_C:
        yield Condition(
            i,
            f"{temp} °C, within {HOT_MARGIN_C} °C of its slowdown temperature ({slow} °C)",
            "let the GPU cool down before benchmarking; check the cooling",
        )
    if g.get("mig"):
        yield Condition(
            i,
            "MIG is enabled: a benchmark gets one slice of the GPU and shares memory "
            "bandwidth and power with the other instances",
            f"benchmark on a GPU without MIG (sudo nvidia-smi -i {i} -mig 0), or "
            "compare only with baselines from the same MIG profile",
        )
    limit, default = g.get("power_limit_w"), g.get("power_default_limit_w")
    if limit and default and limit < 0.99 * default:
        yield Condition(
            i,
            f"power limit {limit:.0f} W is below the default {default:.0f} W: clocks "
            "throttle sooner under load",
            f"restore it: sudo nvidia-smi -i {i} -pl {default:.0f}",
        )
    if None not in (g.get("ecc"), g.get("ecc_pending")) and g["ecc"] != g["ecc_pending"]:
        yield Condition(
            i,
            "an ECC mode change is pending: memory bandwidth will change at the next reset",
            "reset or reboot before benchmarking, so baseline and runs share one ECC mode",
        )


def _onoff(v: Any) -> str:
    return "?" if v is None else ("on" if v else "off")


def _num(v: Any, unit: str) -> str:
    return "?" if v is None else f"{v:.0f}{unit}"


def gpu_line(g: Mapping[str, Any]) -> str:
    procs = g.get("other_processes") or []
    parts = [
        f"SM {_num(g.get('sm_clock_mhz'), '')}/{_num(g.get('sm_clock_max_mhz'), ' MHz')}",
        f"memory {_num(g.get('mem_clock_mhz'), '')}/{_num(g.get('mem_clock_max_mhz'), ' MHz')}",
        f"power {_num(g.get('power_w'), '')}/{_num(g.get('power_limit_w'), ' W')}",
        _num(g.get("temperature_c"), " °C"),
        f"persistence {_onoff(g.get('persistence'))}",
        f"MIG {_onoff(g.get('mig'))}",
        f"ECC {_onoff(g.get('ecc'))}",
        f"other processes: {len(procs)}" if procs else "no other processes",
    ]
    return f"GPU {g.get('index')} {g.get('name') or '?'}: " + ", ".join(parts)


def render_header(
    state: Mapping[str, Any], *, interval_ms: float | None = None, activity: bool = False
) -> list[str]:
    """Header lines (no ``gpuperf:`` prefix) for a state from :func:`collect_gpu_state`
    (``activity``: GPM is read, so a GPU without it gets a line that says why)."""
    if not state.get("available"):
        why = state.get("reason", "unknown reason")
        lines = [f"telemetry unavailable: {why}"]
        if activity:
            lines.append("activity unavailable: no NVML, so no GPM (SM, tensor, DRAM figures)")
        return lines
    every = f", NVML telemetry every {interval_ms:g} ms" if interval_ms else ""
    gpus = state.get("gpus", [])
    if activity and gpus and not any(g.get("gpm_unavailable") for g in gpus):
        every += ", GPM activity"
    lines = [
        f"driver {state.get('driver') or '?'} (CUDA {state.get('cuda_driver') or '?'}), "
        f"torch {state.get('torch') or '?'}, {len(gpus)} of "
        f"{state.get('gpu_count', '?')} GPU(s) visible{every}"
    ]
    lines.extend(gpu_line(g) for g in gpus)
    lines.extend("unreliable: " + c.line() for c in conditions(state))
    for g in gpus if activity else []:
        if g.get("gpm_unavailable"):
            lines.append(
                f"activity unavailable on GPU {g.get('index')}: {g['gpm_unavailable']}; results "
                "keep the allocator's figures, not the SM/tensor/DRAM activity"
            )
    return lines
