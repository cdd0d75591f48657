"""Telemetry without a GPU: a fake pynvml module, synthetic sample streams with known truth."""

from __future__ import annotations

import sys
import threading
import time
import types
from typing import Any

import pytest

from pytest_gpuperf.measure.engine import RawMeasurement
from pytest_gpuperf.measure.nvtx_ranges import NvtxRanges, range_name
from pytest_gpuperf.model import BenchId
from pytest_gpuperf.telemetry import nvml as nvml_mod
from pytest_gpuperf.telemetry.header import Condition, collect_gpu_state, conditions, render_header
from pytest_gpuperf.telemetry.probe import NvmlTelemetry
from pytest_gpuperf.telemetry.reasons import KNOWN, decode, reason_names, slowdown
from pytest_gpuperf.telemetry.regime import (
    confirm_in_cycles,
    regime_difference,
    regime_summary,
)
from pytest_gpuperf.telemetry.stream import (
    Sample,
    covering,
    mark_rounds,
    notes,
    reason_shares,
    round_clocks,
    stats,
    summarize,
    weights,
)

# --- a fake pynvml ---------------------------------------------------------------------


class FakeNVMLError(Exception):
    def __init__(self, value: int = 999, msg: str = "Unknown Error"):
        super().__init__(msg)
        self.value = value
        self.msg = msg

    def __str__(self) -> str:
        return self.msg


class NVMLError_LibraryNotFound(FakeNVMLError):
    def __init__(self) -> None:
        super().__init__(12, "NVML Shared Library Not Found")


class NVMLError_GpuIsLost(FakeNVMLError):
    def __init__(self) -> None:
        super().__init__(15, "GPU is lost")


class NVMLError_NotSupported(FakeNVMLError):
    def __init__(self) -> None:
        super().__init__(3, "Not Supported")


class Proc:
    def __init__(self, pid: int, mem: int | None = 2**30):
        self.pid = pid
        self.usedGpuMemory = mem


class FakeGpu:
    """One GPU; ``reasons`` and ``sm`` may be callables of the time (``time.perf_counter``)."""

    def __init__(self, uuid: str, **kw: Any):
        self.uuid = uuid
        self.name = kw.pop("name", "NVIDIA H200")
        self.sm: Any = kw.pop("sm", 1980)
        self.mem = kw.pop("mem", 3201)
        self.sm_max = kw.pop("sm_max", 1980)
        self.mem_max = kw.pop("mem_max", 3201)
        self.power_mw = kw.pop("power_mw", 250_000)
        self.limit_mw = kw.pop("limit_mw", 700_000)
        self.default_mw = kw.pop("default_mw", 700_000)
        self.temp = kw.pop("temp", 40)
        self.slowdown_c = kw.pop("slowdown_c", 90)
        self.util = kw.pop("util", (0, 0))
        self.reasons: Any = kw.pop("reasons", 0)
        self.persistence = kw.pop("persistence", 1)
        self.mig = kw.pop("mig", (0, 0))
        self.ecc = kw.pop("ecc", (1, 1))
        self.procs: list[Proc] = kw.pop("procs", [])
        self.unsupported: set[str] = set(kw.pop("unsupported", ()))
        self.fail_after: int | None = kw.pop("fail_after", None)
        assert not kw, kw
        self.reads = 0


def _value(v: Any) -> Any:
    return v(time.perf_counter()) if callable(v) else v


def make_fake_nvml(
    gpus: list[FakeGpu], *, init_error: Exception | None = None, new_bit: bool = True
) -> types.ModuleType:
    m = types.ModuleType("pynvml")
    m.NVMLError = FakeNVMLError  # type: ignore[attr-defined]
    m.NVML_CLOCK_SM, m.NVML_CLOCK_MEM = 1, 2  # type: ignore[attr-defined]
    m.NVML_TEMPERATURE_GPU = 0  # type: ignore[attr-defined]
    m.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1  # type: ignore[attr-defined]
    for bit, suffix in [
        (0x1, "GpuIdle"),
        (0x2, "ApplicationsClocksSetting"),
        (0x2, "UserDefinedClocks"),
        (0x4, "SwPowerCap"),
        (0x8, "HwSlowdown"),
        (0x0, "None"),
        (0x7FF, "All"),
    ]:
        setattr(m, "nvmlClocksEventReason" + suffix, bit)
        setattr(m, "nvmlClocksThrottleReason" + suffix, bit)
    if new_bit:
        m.nvmlClocksEventReasonHwFancyNewLimit = 0x800  # type: ignore[attr-defined]
    m.calls = {"init": 0, "shutdown": 0}  # type: ignore[attr-defined]

    def check(g: FakeGpu, what: str) -> None:
        if what in g.unsupported:
            raise NVMLError_NotSupported()

    def init() -> None:
        if init_error is not None:
            raise init_error
        m.calls["init"] += 1  # type: ignore[attr-defined]

    def shutdown() -> None:
        m.calls["shutdown"] += 1  # type: ignore[attr-defined]

    def clock(g: FakeGpu, kind: int) -> int:
        if kind == 1:
            g.reads += 1
            if g.fail_after is not None and g.reads > g.fail_after:
                raise NVMLError_GpuIsLost()
            return int(_value(g.sm))
        return int(g.mem)

    def max_clock(g: FakeGpu, kind: int) -> int:
        return g.sm_max if kind == 1 else g.mem_max

    def power(g: FakeGpu) -> int:
        check(g, "power")
        return g.power_mw

    def util(g: FakeGpu) -> Any:
        return types.SimpleNamespace(gpu=g.util[0], memory=g.util[1])

    def reasons(g: FakeGpu) -> int:
        return int(_value(g.reasons))

    fns = {
        "nvmlInit": init,
        "nvmlShutdown": shutdown,
        "nvmlSystemGetDriverVersion": lambda: "580.159.04",
        "nvmlSystemGetCudaDriverVersion": lambda: 13000,
        "nvmlDeviceGetCount": lambda: len(gpus),
        "nvmlDeviceGetHandleByIndex": lambda i: gpus[i],
        "nvmlDeviceGetUUID": lambda g: g.uuid,
        "nvmlDeviceGetName": lambda g: g.name.encode(),  # old pynvml returns bytes
        "nvmlDeviceGetClockInfo": clock,
        "nvmlDeviceGetMaxClockInfo": max_clock,
        "nvmlDeviceGetPowerUsage": power,
        "nvmlDeviceGetEnforcedPowerLimit": lambda g: g.limit_mw,
        "nvmlDeviceGetPowerManagementDefaultLimit": lambda g: g.default_mw,
        "nvmlDeviceGetTemperature": lambda g, s: g.temp,
        "nvmlDeviceGetTemperatureThreshold": lambda g, t: g.slowdown_c,
        "nvmlDeviceGetUtilizationRates": util,
        "nvmlDeviceGetCurrentClocksEventReasons": reasons,
        "nvmlDeviceGetPersistenceMode": lambda g: g.persistence,
        "nvmlDeviceGetMigMode": lambda g: list(g.mig),
        "nvmlDeviceGetEccMode": lambda g: list(g.ecc),
        "nvmlDeviceGetComputeRunningProcesses": lambda g: list(g.procs),
        "nvmlDeviceGetGraphicsRunningProcesses": lambda g: [],
    }
    for name, fn in fns.items():
        setattr(m, name, fn)
    return m


UUIDS = [f"GPU-{c * 8}-1111-2222-3333-444444444444" for c in "abcd"]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Install a fake pynvml with four GPUs; returns a function to replace it."""

    def install(gpus: list[FakeGpu] | None = None, **kw: Any) -> types.ModuleType:
        m = make_fake_nvml(gpus if gpus is not None else [FakeGpu(u) for u in UUIDS], **kw)
        monkeypatch.setitem(sys.modules, "pynvml", m)
        return m

    return install


def raw_with_spans(t0: float, spans: list[tuple[float, float]]) -> RawMeasurement:
    return RawMeasurement(
        rounds=[1e-3] * len(spans),
        calls_per_round=1,
        warmup=[],
        trimmed=0,
        stability="steady",
        settled=True,
        warmup_s=0.0,
        wall_s=spans[-1][1] if spans else 0.0,
        spans=spans,
        t0=t0,
    )


def stream(n: int, dt: float, **fields: Any) -> list[Sample]:
    """``n`` samples ``dt`` apart; a field given as a callable gets the sample's index."""
    out = []
    for i in range(n):
        vals = {k: (v(i) if callable(v) else v) for k, v in fields.items()}
        out.append(Sample(t=i * dt, **vals))
    return out


# --- reason names ----------------------------------------------------------------------


def test_reasons_have_readable_names() -> None:
    assert decode(0x4) == ["SW power cap"]
    assert decode(0x1 | 0x4 | 0x40) == ["GPU idle", "SW power cap", "HW thermal slowdown"]
    assert decode(0) == []
    assert decode(0x10000) == ["unknown reason 0x10000"]


def test_every_bit_of_the_installed_pynvml_is_named() -> None:
    pynvml = pytest.importorskip("pynvml")
    names = reason_names(pynvml)
    for attr in dir(pynvml):
        if attr.startswith(("nvmlClocksEventReason", "nvmlClocksThrottleReason")):
            v = getattr(pynvml, attr)
            if isinstance(v, int) and v > 0 and v & (v - 1) == 0:
                assert v in names, attr
                assert not names[v].startswith("unknown")
    assert names[0x4] == "SW power cap"


def test_a_new_bit_gets_a_name_from_its_constant() -> None:
    names = reason_names(make_fake_nvml([]))
    assert names[0x800] == "HW fancy new limit"
    assert names[0x2] == KNOWN[0x2]  # aliases and known bits keep the readable name
    assert decode(0x804, names) == ["SW power cap", "HW fancy new limit"]


def test_slowdown_ignores_idle_and_user_clocks() -> None:
    assert slowdown(0x1 | 0x2 | 0x100) == 0
    assert slowdown(0x1 | 0x4) == 0x4
    assert slowdown(0x800) == 0x800  # an unknown bit counts as a slowdown


# --- summaries and shares --------------------------------------------------------------


def test_stats() -> None:
    assert stats([3.0, 1.0, 2.0, 10.0]) == {"min": 1.0, "median": 2.5, "max": 10.0}
    assert stats([]) is None


def test_weights_of_regular_samples_are_equal() -> None:
    w = weights([0.0, 1.0, 2.0, 3.0], -0.5, 3.5)
    assert w == pytest.approx([0.25] * 4)


def test_weights_follow_the_time_a_sample_stands_for() -> None:
    # samples at 0, 1 and 4: midpoints 0.5 and 2.5 -> 0.5, 2.0, 1.5 out of 4
    assert weights([0.0, 1.0, 4.0], 0.0, 4.0) == pytest.approx([0.125, 0.5, 0.375])


def test_throttle_share_is_the_share_of_time() -> None:
    # 100 samples 10 ms apart; SW power cap from sample 40 on: 60 % of the time
    s = stream(
        100,
        0.01,
        sm_clock_mhz=lambda i: 1980 if i < 40 else 1590,
        clock_events=lambda i: 0x1 if i < 40 else 0x4,
    )
    shares, throttled, seen = reason_shares(s, -0.005, 0.995)
    assert shares["SW power cap"] == pytest.approx(0.6)
    assert shares["GPU idle"] == pytest.approx(0.4)
    assert throttled == pytest.approx(0.6)
    assert seen == 0x5


def test_throttle_share_is_not_biased_by_irregular_sampling() -> None:
    # 0.5 s unthrottled sampled every 50 ms, then 0.5 s throttled sampled every 5 ms:
    # the truth is 50 %, a count of samples would say about 91 %
    times = [i * 0.05 for i in range(10)] + [0.5 + i * 0.005 for i in range(100)]
    s = [Sample(t, clock_events=0x4 if t >= 0.5 else 0) for t in times]
    _, throttled, _ = reason_shares(s, 0.0, 1.0)
    assert throttled == pytest.approx(0.5, abs=0.03)


def test_summarize_uses_the_measurement_window_only() -> None:
    s = stream(100, 0.01, sm_clock_mhz=lambda i: 345 if i < 50 else 1980, power_w=lambda i: i)
    out = summarize(s, 0.5, 0.99)
    assert out["sm_clock_mhz"] == {"min": 1980, "median": 1980, "max": 1980}
    assert out["power_w"]["min"] == 50
    assert out["samples"] == 50
    assert "temperature_c" not in out  # not reported -> no entry


def test_a_window_shorter_than_the_interval_uses_its_neighbours() -> None:
    s = stream(3, 0.01, sm_clock_mhz=lambda i: [1980, 1700, 1500][i])
    assert [x.t for x in covering(s, 0.012, 0.015)] == [0.01, 0.02]
    assert summarize(s, 0.012, 0.015)["sm_clock_mhz"]["min"] == 1500


def test_a_metric_read_every_few_samples_is_summarised_from_its_own_samples() -> None:
    # power every 5th sample only; a window between two power readings still gets them
    s = stream(20, 0.01, sm_clock_mhz=1980, power_w=lambda i: float(i) if i % 5 == 0 else None)
    out = summarize(s, 0.061, 0.089)
    assert out["samples"] == 2  # at 0.07 and 0.08 s
    assert out["power_w"] == {"min": 5.0, "median": 7.5, "max": 10.0}


def test_rounds_overlapping_throttled_samples_are_marked() -> None:
    # throttled between 0.30 s and 0.50 s; rounds of 0.1 s
    s = stream(100, 0.01, sm_clock_mhz=1980, clock_events=lambda i: 0x4 if 30 <= i <= 50 else 0)
    spans = [(k / 10, (k + 1) / 10 - 0.001) for k in range(10)]
    marks = mark_rounds(s, spans, sm_clock_max_mhz=1980)
    assert marks.throttled == [3, 4, 5]
    assert marks.machine == [] and marks.low_clock == []


def test_rounds_at_a_clock_far_below_the_max_are_marked() -> None:
    s = stream(100, 0.01, sm_clock_mhz=lambda i: 1000 if i >= 90 else 1980, clock_events=0)
    spans = [(k / 10, (k + 1) / 10 - 0.001) for k in range(10)]
    marks = mark_rounds(s, spans, sm_clock_max_mhz=1980)
    assert (marks.throttled, marks.low_clock) == ([], [9])
    assert mark_rounds(s, spans, sm_clock_max_mhz=None) == ([], [], [])


def test_short_rounds_between_samples_are_judged_by_both_neighbours() -> None:
    s = [Sample(0.0, 1980, clock_events=0), Sample(0.01, 1980, clock_events=0x4)]
    assert mark_rounds(s, [(0.002, 0.003)], sm_clock_max_mhz=1980).throttled == [0]


def test_each_round_gets_the_clock_it_ran_at() -> None:
    s = stream(100, 0.01, sm_clock_mhz=lambda i: 1980 if i < 50 else 1590)
    spans = [(k / 10, (k + 1) / 10 - 0.001) for k in range(10)]
    assert round_clocks(s, spans) == [1980.0] * 5 + [1590.0] * 5
    assert round_clocks([], spans[:1]) == [None]


def test_thermal_and_hardware_slowdowns_are_marked_as_the_machines() -> None:
    s = stream(100, 0.01, clock_events=lambda i: 0x4 if i < 50 else 0x4 | 0x20)
    spans = [(k / 10, (k + 1) / 10 - 0.001) for k in range(10)]
    marks = mark_rounds(s, spans, sm_clock_max_mhz=1980)
    assert marks.throttled == list(range(10))
    assert marks.machine == [5, 6, 7, 8, 9]


# --- notes -------------------------------------------------------------------------------


def test_notes_name_the_throttle_reason_and_the_remedy() -> None:
    t = {
        "available": True,
        "sm_clock_mhz": {"min": 1590, "median": 1590, "max": 1980},
        "sm_clock_max_mhz": 1980,
        "clock_events": {"GPU idle": 0.1, "SW power cap": 0.62},
        "throttled_share": 0.62,
        "throttled_rounds": list(range(20)),
        "rounds_checked": 30,
        "low_clock_rounds": [],
        "other_processes": [{"pid": 42, "name": "python", "used_memory_bytes": 2**31}],
    }
    out = notes(t)
    assert len(out) == 2
    assert out[0].startswith("clock limited: SW power cap 62 % of the measurement")
    assert "GPU idle" not in out[0]
    assert "SM clock 1590-1980 MHz" in out[0] and "20 of 30 rounds marked" in out[0]
    assert "same clock regime" in out[0]
    assert "pid 42 python, 2.0 GiB" in out[1] and "stop them" in out[1]
    t["clock_events"] = {"SW power cap": 0.62, "HW thermal slowdown": 0.3}
    out = notes(t)
    assert out[0].startswith("throttled by the machine: ")
    assert "HW thermal slowdown 30 %" in out[0]
    assert "cooling" in out[0]


def test_notes_are_quiet_when_telemetry_is_merely_unavailable() -> None:
    assert notes({"available": False, "reason": "no NVML"}) == []
    assert notes(None) == []
    failed = notes({"available": False, "failed": True, "reason": "GPU is lost"})
    assert failed == ["telemetry failed during the measurement: GPU is lost"]


# --- device selection ----------------------------------------------------------------------


def test_normalize_uuid() -> None:
    assert nvml_mod.normalize_uuid("GPU-ABCD-1") == nvml_mod.normalize_uuid("abcd-1")


def test_device_is_chosen_by_uuid_under_renumbering(fake: Any) -> None:
    m = fake()
    # CUDA_VISIBLE_DEVICES=2,3 makes NVML's GPU 2 CUDA's device 0; torch's UUID has no prefix
    torch_uuid = UUIDS[2].removeprefix("GPU-").upper()
    dev = nvml_mod.select_device(m, uuid=torch_uuid, cuda_index=0, visible="2,3")
    assert (dev.index, dev.selected_by, dev.uuid) == (2, "uuid", UUIDS[2])
    # the UUID wins even when CUDA_VISIBLE_DEVICES disagrees (e.g. CUDA_DEVICE_ORDER)
    dev = nvml_mod.select_device(m, uuid=UUIDS[3], cuda_index=0, visible="2,3")
    assert dev.index == 3
    assert dev.name == "NVIDIA H200" and dev.sm_clock_max_mhz == 1980
    assert dev.power_limit_w == 700


def test_without_a_uuid_the_index_goes_through_cuda_visible_devices(fake: Any) -> None:
    m = fake()
    assert nvml_mod.select_device(m, uuid=None, cuda_index=1, visible="2,3").index == 3
    assert nvml_mod.select_device(m, uuid=None, cuda_index=1, visible=None).index == 1
    dev = nvml_mod.select_device(m, uuid="no-such-uuid", cuda_index=0, visible="GPU-cccc")
    assert (dev.index, dev.selected_by) == (2, "index")
    with pytest.raises(nvml_mod.NvmlUnavailable, match="CUDA device 2"):
        nvml_mod.select_device(m, uuid=None, cuda_index=2, visible="2,3")


def test_unsupported_metrics_are_left_out(fake: Any) -> None:
    m = fake([FakeGpu(UUIDS[0], unsupported={"power"})])
    dev = nvml_mod.select_device(m, uuid=UUIDS[0], cuda_index=0, visible=None)
    assert dev.unsupported == ["power_w"]
    sample = nvml_mod.sample_reader(dev, time.perf_counter)()
    assert sample.power_w is None and sample.sm_clock_mhz == 1980


def test_slow_metrics_are_read_every_nth_sample(fake: Any) -> None:
    m = fake([FakeGpu(UUIDS[0])])
    dev = nvml_mod.select_device(m, uuid=UUIDS[0], cuda_index=0, visible=None)
    read = nvml_mod.sample_reader(dev, time.perf_counter, slow_every=3)
    samples = [read() for _ in range(7)]
    assert [s.power_w for s in samples] == [250, None, None, 250, None, None, 250]
    assert all(s.sm_clock_mhz == 1980 and s.clock_events == 0 for s in samples)
    assert samples[0].mem_clock_mhz == 3201 and samples[0].gpu_util_pct == 0


def test_xdist_siblings_are_told_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    assert nvml_mod.parent_pid(os.getpid()) == os.getppid()
    assert nvml_mod.parent_pid(2**22 + 12345) is None
    others = [{"pid": 1}, {"pid": 2}, {"pid": 3}]
    keep, siblings = nvml_mod.split_siblings(others, lambda pid: pid != 2)
    assert keep == [{"pid": 2}] and siblings == [1, 3]


def test_probe_lists_xdist_siblings_apart(fake: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import subprocess

    # a child of our parent: a sibling, as another xdist worker would be
    child = subprocess.Popen(["sleep", "5"])
    try:
        monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
        monkeypatch.setattr(os, "getppid", lambda: os.getpid())  # we play the controller
        fake([FakeGpu(UUIDS[0], procs=[Proc(1), Proc(child.pid), Proc(2**22 + 7)])])
        out = run_probe(NvmlTelemetry(interval_ms=5, identity=lambda: (0, UUIDS[0]), pid=1))
    finally:
        child.kill()
        child.wait()
    assert out["xdist_siblings"] == [child.pid]
    assert [p["pid"] for p in out["other_processes"]] == [2**22 + 7]


def test_foreign_processes() -> None:
    seen = {100: 2**30, 200: None}
    others, note = nvml_mod.foreign_processes(seen, own_pid=100, own_context=True)
    assert [p["pid"] for p in others] == [200] and note is None
    # in a container this process shows under a host pid: one pid listed is this process
    assert nvml_mod.foreign_processes({555: 1}, own_pid=7, own_context=True) == ([], None)
    others, note = nvml_mod.foreign_processes(seen, own_pid=7, own_context=True)
    assert len(others) == 2 and note and "PID namespace" in note
    # before this process has a CUDA context (the header), every listed process is foreign
    others, _ = nvml_mod.foreign_processes({555: 1}, own_pid=7, own_context=False)
    assert [p["pid"] for p in others] == [555]


# --- the probe -------------------------------------------------------------------------------


def run_probe(tel: NvmlTelemetry, seconds: float = 0.12, rounds: int = 6) -> dict[str, Any]:
    """Run the probe as the fixture does, around ``rounds`` rounds spread over ``seconds``."""
    clock = time.perf_counter
    with tel.probe(BenchId("t.py::test_x"), clock) as finish:
        t0 = clock()
        spans = []
        step = seconds / rounds
        for _ in range(rounds):
            a = clock() - t0
            time.sleep(step)
            spans.append((a, clock() - t0))
        return finish(raw_with_spans(t0, spans))


def test_probe_summarises_a_measurement(fake: Any) -> None:
    switch = time.perf_counter() + 10.0  # set below, once the measurement runs
    gpu = FakeGpu(
        UUIDS[1],
        sm=lambda now: 1980 if now < switch else 1590,
        reasons=lambda now: 0 if now < switch else 0x4,
        procs=[Proc(1), Proc(4242)],  # pid 1 is this process (pid=1 below)
        util=(97, 40),
    )
    m = fake([FakeGpu(UUIDS[0]), gpu])
    tel = NvmlTelemetry(interval_ms=2, identity=lambda: (0, UUIDS[1]), pid=1)
    clock = time.perf_counter
    with tel.probe(BenchId("t.py::test_x"), clock) as finish:
        t0 = clock()
        spans = []
        for k in range(8):
            if k == 4:
                switch = clock()  # the power cap hits in the middle
            a = clock() - t0
            time.sleep(0.02)
            spans.append((a, clock() - t0))
        out = finish(raw_with_spans(t0, spans))
    assert out["available"] is True
    assert out["device"] == {
        "index": 1,
        "uuid": UUIDS[1],
        "name": "NVIDIA H200",
        "selected_by": "uuid",
    }
    assert out["sm_clock_mhz"]["max"] == 1980 and out["sm_clock_mhz"]["min"] == 1590
    assert out["sm_clock_max_mhz"] == 1980 and out["power_w"]["median"] == 250
    assert out["gpu_util_pct"]["median"] == 97
    # the cap's share of the time is the share of the rounds' time after the switch, as the
    # clock saw it: on a loaded machine the sleeps overrun unevenly, so 4 of 8 is not half
    after = (spans[-1][1] - (switch - t0)) / (spans[-1][1] - spans[0][0])
    assert abs(out["clock_events"]["SW power cap"] - after) < 0.2, after
    assert 0.0 < out["clock_events"]["SW power cap"] < 1.0
    assert out["throttled_rounds"][-1] == 7 and 0 not in out["throttled_rounds"]
    assert set(range(4, 8)) <= set(out["throttled_rounds"]) and len(out["throttled_rounds"]) <= 5
    assert out["low_clock_rounds"] == []  # 1590 is 80 % of the max
    assert out["machine_throttled_rounds"] == []
    clocks = out["round_sm_clock_mhz"]
    assert len(clocks) == 8 and clocks[0] == 1980 and clocks[-1] == 1590
    assert out["rounds_checked"] == 8
    assert out["samples_total"] >= 20  # 160 ms every 2 ms (loosely: CI machines are slow)
    assert [p["pid"] for p in out["other_processes"]] == [4242]
    assert out["window"]["end_unix"] > out["window"]["start_unix"]
    assert "raw" not in out
    assert out["whole_run"]["sm_clock_mhz"]["min"] == 1590
    assert not [t for t in threading.enumerate() if t.name == "gpuperf-telemetry"]
    tel.close()
    assert m.calls == {"init": 1, "shutdown": 1}


def test_raw_stream_only_on_request(fake: Any) -> None:
    fake()
    tel = NvmlTelemetry(interval_ms=5, raw=True, identity=lambda: (0, None), visible="")
    out = run_probe(tel)
    raw = out["raw"]
    assert raw["fields"][0] == "t_s" and raw["fields"][-1] == "clock_events"
    assert len(raw["rows"]) == out["samples_total"] and raw["rows"][0][1] == 1980
    assert out["device"]["selected_by"] == "index"


def test_nvml_is_opened_once_per_session(fake: Any) -> None:
    m = fake()
    tel = NvmlTelemetry(interval_ms=5, identity=lambda: (0, UUIDS[0]))
    for _ in range(3):
        assert run_probe(tel, seconds=0.01, rounds=1)["available"]
    tel.close()
    assert m.calls == {"init": 1, "shutdown": 1}


def test_without_pynvml_telemetry_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    out = run_probe(NvmlTelemetry(identity=lambda: (0, None)))
    assert out["available"] is False
    assert "pip install nvidia-ml-py" in out["reason"]


def test_nvml_error_at_init_is_unavailable_with_its_reason(fake: Any) -> None:
    fake(init_error=NVMLError_LibraryNotFound())
    out = run_probe(NvmlTelemetry(identity=lambda: (0, None)))
    assert out == {
        "available": False,
        "reason": "NVML could not start: no NVIDIA driver library (libnvidia-ml.so.1): no "
        "NVIDIA GPU here, or a container started without the NVIDIA runtime "
        "[NVML Shared Library Not Found]",
    }


def test_nvml_error_mid_run_is_unavailable_and_nothing_raises(fake: Any) -> None:
    fake([FakeGpu(UUIDS[0], fail_after=5)])
    out = run_probe(NvmlTelemetry(interval_ms=2, identity=lambda: (0, UUIDS[0])))
    assert out["available"] is False and out["failed"] is True
    assert out["reason"].startswith("NVML error during the measurement, after ")
    assert "GPU is lost" in out["reason"]
    assert notes(out) == [f"telemetry failed during the measurement: {out['reason']}"]


def test_a_device_torch_cannot_name_is_unavailable(fake: Any) -> None:
    fake()

    def broken() -> tuple[int, str | None]:
        raise RuntimeError("CUDA driver initialization failed")

    out = run_probe(NvmlTelemetry(identity=broken))
    assert out["available"] is False
    assert "CUDA driver initialization failed" in out["reason"]


def test_a_failing_measurement_stops_the_sampler(fake: Any) -> None:
    fake()
    tel = NvmlTelemetry(interval_ms=1, identity=lambda: (0, UUIDS[0]))
    with pytest.raises(ZeroDivisionError), tel.probe(BenchId("t.py::x"), time.perf_counter):
        time.sleep(0.01)
        1 / 0  # noqa: B018
    time.sleep(0.01)
    assert not [t for t in threading.enumerate() if t.name == "gpuperf-telemetry"]


def test_off_reason(fake: Any) -> None:
    m = fake()
    out = run_probe(NvmlTelemetry(off_reason="turned off"))
    assert out == {"available": False, "reason": "turned off"}
    assert m.calls["init"] == 0


def test_the_sampler_keeps_its_interval() -> None:
    n = 0

    def read() -> Sample:
        nonlocal n
        n += 1
        return Sample(time.perf_counter(), 1980)

    s = nvml_mod.Sampler(read, interval_s=0.005)
    t0 = time.perf_counter()
    s.start()
    time.sleep(0.2)
    s.stop()
    ran = time.perf_counter() - t0  # on a loaded machine the sleep overruns: count by the clock
    assert s.error is None
    assert ran / 0.005 / 4 <= len(s.samples) <= ran / 0.005 + 5, (len(s.samples), ran)


# --- regimes and cycles --------------------------------------------------------------------


def tel(
    sm: float,
    *,
    mem: float = 3201,
    shares: dict[str, float] | None = None,
    others: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "available": True,
        "sm_clock_mhz": {"min": sm, "median": sm, "max": sm},
        "mem_clock_mhz": {"min": mem, "median": mem, "max": mem},
        "clock_events": shares or {},
        "other_processes": others or [],
    }


def test_same_regime_is_no_difference() -> None:
    base = [tel(1980), tel(1965), tel(1980)]
    assert regime_difference(base, tel(1975)) is None
    assert regime_difference(base, tel(1965 * 0.98)) is None  # within 3 %


def test_a_lower_clock_is_a_different_regime() -> None:
    why = regime_difference([tel(1980), tel(1965)], tel(1590))
    assert why is not None
    assert "median SM clock 1590 MHz, 19 % below the baseline's 1965-1980 MHz" in why


def test_a_higher_clock_and_another_memory_clock_are_different_regimes() -> None:
    why = regime_difference([tel(1590)], tel(1980, mem=2619))
    assert why is not None and "above" in why and "memory clock 2619 MHz" in why


def test_a_power_cap_the_baseline_did_not_have_is_a_different_regime() -> None:
    base = [tel(1700, shares={"GPU idle": 1.0}), tel(1700)]
    why = regime_difference(base, tel(1700, shares={"SW power cap": 0.9}))
    assert why is not None and "SW power cap active 90 %" in why and "at most 0 %" in why
    # equally capped on both sides: same regime
    capped = [tel(1590, shares={"SW power cap": 1.0})] * 3
    assert regime_difference(capped, tel(1590, shares={"SW power cap": 0.95})) is None
    # idle share differences never count
    assert regime_difference(base, tel(1700, shares={"GPU idle": 0.0})) is None


def test_other_processes_the_baseline_did_not_have() -> None:
    why = regime_difference([tel(1980)], tel(1980, others=[{"pid": 7}]))
    assert why is not None and "pid 7" in why


def test_no_telemetry_on_either_side_is_no_difference() -> None:
    assert regime_difference([], tel(1590)) is None
    assert regime_difference([None, {"available": False}], tel(1590)) is None
    assert regime_difference([tel(1980)], {"available": False, "reason": "x"}) is None
    assert regime_difference([tel(1980)], None) is None


def test_regime_summary_keeps_what_regime_difference_reads() -> None:
    full = {**tel(1590, shares={"SW power cap": 1.0}), "raw": {"rows": []}, "samples": 9}
    small = regime_summary(full)
    assert small is not None and "raw" not in small
    assert regime_difference([small], tel(1980)) == regime_difference([full], tel(1980))
    assert regime_summary({"available": False}) is None


def test_a_slowdown_the_clock_explains_is_not_confirmed_in_cycles() -> None:
    # the H200 case: 175 us at 1980 MHz, 196 us at 1590 MHz (+12 % time, -10 % cycles)
    check = confirm_in_cycles([(175e-6, tel(1980))], 196e-6, tel(1590), min_change=0.03)
    assert check.confirmed is False
    assert check.time_change == pytest.approx(0.12)
    assert check.cycles_change == pytest.approx(196 * 1590 / (175 * 1980) - 1)
    assert "clock difference explains" in check.explanation


def test_a_slowdown_at_equal_clocks_is_confirmed_in_cycles() -> None:
    base = [(175e-6, tel(1980)), (176e-6, tel(1975))]
    check = confirm_in_cycles(base, 196e-6, tel(1980), min_change=0.03)
    assert check.confirmed is True and "persists" in check.explanation


def test_cycles_without_clocks_cannot_tell() -> None:
    check = confirm_in_cycles([(1.0, None)], 1.2, tel(1980), min_change=0.03)
    assert check.confirmed is None and check.cycles_change is None
    assert "baseline" in check.explanation


# --- the session header -----------------------------------------------------------------------


def gpu_state(**kw: Any) -> dict[str, Any]:
    g = {
        "index": 0,
        "name": "NVIDIA H200",
        "sm_clock_mhz": 345,
        "sm_clock_max_mhz": 1980,
        "mem_clock_mhz": 3201,
        "mem_clock_max_mhz": 3201,
        "power_w": 75.0,
        "power_limit_w": 700.0,
        "power_default_limit_w": 700.0,
        "temperature_c": 30,
        "slowdown_temperature_c": 90,
        "gpu_util_pct": 0,
        "persistence": True,
        "mig": False,
        "ecc": True,
        "ecc_pending": True,
        "throttled": [],
        "other_processes": [],
    }
    g.update(kw)
    return {
        "available": True,
        "driver": "580.159.04",
        "cuda_driver": "13.0",
        "torch": "2.11.0",
        "gpu_count": 1,
        "cuda_visible_devices": None,
        "gpus": [g],
    }


def test_header_of_a_healthy_gpu() -> None:
    lines = render_header(gpu_state(), interval_ms=10)
    assert lines[0] == (
        "driver 580.159.04 (CUDA 13.0), torch 2.11.0, 1 of 1 GPU(s) visible, "
        "NVML telemetry every 10 ms"
    )
    assert lines[1] == (
        "GPU 0 NVIDIA H200: SM 345/1980 MHz, memory 3201/3201 MHz, power 75/700 W, 30 °C, "
        "persistence on, MIG off, ECC on, no other processes"
    )
    assert len(lines) == 2


def test_the_gpu_header_fits_120_columns() -> None:
    """On an H100 the NVML line was 152 columns and a busy GPU's warning 212 (GPU run of
    2026-12-07, part-hard): each is now wrapped within the header's 120."""
    from pytest_gpuperf.shell.header import shown

    busy = [{"pid": 4078, "name": "python3", "used_memory_mib": 700}]
    state = gpu_state(name="NVIDIA H100 80GB HBM3", other_processes=busy)
    text = "\n".join(shown(render_header(state, interval_ms=10)))
    assert max(len(line) for line in text.splitlines()) <= 120, text
    assert "persistence on, MIG off, ECC on" in " ".join(text.split())


@pytest.mark.parametrize(
    ("change", "what", "remedy"),
    [
        ({"other_processes": [{"pid": 9, "name": "python"}]}, "other process", "stop them"),
        ({"gpu_util_pct": 95}, "95 % busy", "stop that work"),
        ({"persistence": False}, "persistence mode is off", "nvidia-smi -i 0 -pm 1"),
        ({"throttled": ["HW thermal slowdown"]}, "already throttled", "cool"),
        ({"temperature_c": 87}, "slowdown temperature", "cool down"),
        ({"mig": True}, "MIG is enabled", "-mig 0"),
        ({"power_limit_w": 500.0}, "below the default 700 W", "nvidia-smi -i 0 -pl 700"),
        ({"ecc_pending": False}, "ECC mode change is pending", "reboot"),
    ],
)
def test_each_unreliable_condition_is_named_with_its_remedy(
    change: dict[str, Any], what: str, remedy: str
) -> None:
    found = conditions(gpu_state(**change))
    assert len(found) == 1
    assert what in found[0].what and remedy in found[0].remedy
    lines = render_header(gpu_state(**change))
    assert lines[-1] == "unreliable: " + found[0].line()
    assert lines[-1].startswith("unreliable: GPU 0: ")


def test_no_visible_gpu_is_a_condition() -> None:
    state = {**gpu_state(), "gpus": [], "cuda_visible_devices": ""}
    assert [c.what for c in conditions(state)] == ["CUDA_VISIBLE_DEVICES='' shows no GPU"]


def test_header_without_nvml_is_one_line() -> None:
    assert render_header({"available": False, "reason": "no driver"}) == [
        "telemetry unavailable: no driver"
    ]
    assert conditions({"available": False}) == []


def test_collect_gpu_state_reads_nvml(fake: Any) -> None:
    gpus = [FakeGpu(u) for u in UUIDS]
    gpus[2] = FakeGpu(UUIDS[2], persistence=0, reasons=0x1 | 0x4, procs=[Proc(4321)], sm=1590)
    m = fake(gpus)
    state = collect_gpu_state(visible="2,3", own_pid=1)
    assert state["available"] and state["driver"] == "580.159.04"
    assert state["cuda_driver"] == "13.0" and state["gpu_count"] == 4
    g = state["gpus"][0]
    assert [x["index"] for x in state["gpus"]] == [2, 3]
    assert g["name"] == "NVIDIA H200" and g["sm_clock_mhz"] == 1590
    assert g["throttled"] == ["SW power cap"] and g["clock_event_names"] == [
        "GPU idle",
        "SW power cap",
    ]
    assert g["persistence"] is False and g["mig"] is False and g["ecc"] is True
    assert [p["pid"] for p in g["other_processes"]] == [4321]
    whats = [c.what for c in conditions(state)]
    assert any("other process" in w for w in whats)
    assert any("persistence" in w for w in whats) and any("throttled" in w for w in whats)
    assert m.calls == {"init": 1, "shutdown": 1}


def test_collect_gpu_state_without_nvml(fake: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    fake(init_error=NVMLError_LibraryNotFound())
    state = collect_gpu_state()
    assert state["available"] is False and "libnvidia-ml.so.1" in state["reason"]
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert "nvidia-ml-py" in collect_gpu_state()["reason"]


def test_condition_line() -> None:
    assert Condition(None, "x", "y").line() == "x; remedy: y"


# --- NVTX ranges ----------------------------------------------------------------------------


class FakeNvtx(types.ModuleType):
    def __init__(self, fail: bool = False):
        super().__init__("nvtx")
        self.events: list[tuple[str, str | None, str | None]] = []
        self.fail = fail

    def push_range(self, message: str, domain: str | None = None) -> None:
        if self.fail:
            raise RuntimeError("nvtx broke")
        self.events.append(("push", message, domain))

    def pop_range(self, domain: str | None = None) -> None:
        self.events.append(("pop", None, domain))


def test_nvtx_ranges_nest_around_the_phases(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nvtx = FakeNvtx()
    monkeypatch.setitem(sys.modules, "nvtx", fake_nvtx)
    ranges = NvtxRanges()
    bid = BenchId("tests/t.py::test_mm[4096]", None, "cuda-graph")
    with ranges(bid, "benchmark"), ranges(bid, "warmup"):
        pass
    assert ranges.backend == "nvtx"
    assert fake_nvtx.events == [
        ("push", "gpuperf/tests/t.py::test_mm[4096]@cuda-graph", "gpuperf"),
        ("push", "gpuperf/tests/t.py::test_mm[4096]@cuda-graph/warmup", "gpuperf"),
        ("pop", None, "gpuperf"),
        ("pop", None, "gpuperf"),
    ]


def test_nvtx_ranges_are_a_no_op_without_nvtx_or_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "nvtx", None)
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("torch.cuda.nvtx works here")
    ranges = NvtxRanges()
    with ranges(BenchId("t.py::x"), "benchmark"):
        pass
    assert ranges.backend == "none"


def test_nvtx_off_imports_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nvtx = FakeNvtx()
    monkeypatch.setitem(sys.modules, "nvtx", fake_nvtx)
    ranges = NvtxRanges(enabled=False)
    with ranges(BenchId("t.py::x"), "benchmark"):
        pass
    assert ranges.backend == "off" and fake_nvtx.events == []


def test_a_failing_nvtx_turns_ranges_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "nvtx", FakeNvtx(fail=True))
    ranges = NvtxRanges()
    with ranges(BenchId("t.py::x"), "benchmark"), ranges(BenchId("t.py::x"), "warmup"):
        pass
    assert ranges.backend == "failed"


def test_range_name() -> None:
    assert range_name(BenchId("t.py::x", "fwd", "cuda-events"), "benchmark") == (
        "gpuperf/t.py::x::fwd@cuda-events"
    )
    assert range_name(BenchId("t.py::x", None, "cpu"), "measure") == "gpuperf/t.py::x@cpu/measure"
