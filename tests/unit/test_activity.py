"""GPU activity (NVML GPM) without a GPU: a fake pynvml with GPM, the missing-GPM paths, and the
pure rules on the H200's measured figures (bf16 GEMM, memory-bound mul, H2D copies)."""

from __future__ import annotations

import itertools
import sys
import time
import types
from typing import Any

import pytest

from pytest_gpuperf.measure import peaks
from pytest_gpuperf.model import BenchId, Result, Run
from pytest_gpuperf.reporting.activity import activity_line
from pytest_gpuperf.shell.fixture import plain_window
from pytest_gpuperf.telemetry import activity as act
from pytest_gpuperf.telemetry.header import collect_gpu_state, render_header
from pytest_gpuperf.telemetry.probe import NvmlTelemetry
from tests.unit.test_telemetry import (
    UUIDS,
    FakeGpu,
    FakeNVMLError,
    NVMLError_GpuIsLost,
    NVMLError_NotSupported,
    make_fake_nvml,
)

#: pynvml's metric ids (nvidia-ml-py), as the real module defines them.
METRIC_IDS = {
    "NVML_GPM_METRIC_SM_UTIL": 2,
    "NVML_GPM_METRIC_SM_OCCUPANCY": 3,
    "NVML_GPM_METRIC_INTEGER_UTIL": 4,
    "NVML_GPM_METRIC_ANY_TENSOR_UTIL": 5,
    "NVML_GPM_METRIC_DFMA_TENSOR_UTIL": 6,
    "NVML_GPM_METRIC_HMMA_TENSOR_UTIL": 7,
    "NVML_GPM_METRIC_IMMA_TENSOR_UTIL": 9,
    "NVML_GPM_METRIC_DRAM_BW_UTIL": 10,
    "NVML_GPM_METRIC_FP64_UTIL": 11,
    "NVML_GPM_METRIC_FP32_UTIL": 12,
    "NVML_GPM_METRIC_FP16_UTIL": 13,
    "NVML_GPM_METRIC_PCIE_TX_PER_SEC": 20,
    "NVML_GPM_METRIC_PCIE_RX_PER_SEC": 21,
    "NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC": 60,
    "NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC": 61,
}
#: Measured on the H200 over a 0.5 s window (two GPM samples): metric id -> value.
BF16_GEMM = {2: 71.0, 3: 10.5, 5: 68.9, 7: 68.9, 10: 13.0, 21: 11.0}
FP32_MUL = {2: 95.0, 3: 77.0, 5: 6.3, 10: 77.0, 12: 30.0, 21: 20.0}
H2D_COPIES = {2: 7.5, 3: 6.4, 5: 0.0, 10: 7.7, 21: 51944.0}


class NVMLError_NoPermission(FakeNVMLError):
    def __init__(self) -> None:
        super().__init__(4, "Insufficient Permissions")


class _Metric:
    def __init__(self) -> None:
        self.metricId = 0
        self.nvmlReturn = 0
        self.value = 0.0


class _MetricsGet:
    """Stands for pynvml's ``c_nvmlGpmMetricsGet_t`` (ctypes there, attributes here)."""

    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: Any = None
        self.sample2: Any = None
        self.metrics = [_Metric() for _ in range(64)]


class _Sample:
    def __init__(self) -> None:
        self.gpu: Any = None
        self.freed = False


def add_gpm(
    m: types.ModuleType,
    values: dict[int, float] | None = None,
    *,
    supported: bool = True,
    query_error: Exception | None = None,
    sample_error: Exception | None = None,
    missing: tuple[str, ...] = (),
) -> types.ModuleType:
    """Give a fake pynvml the GPM interface; ``values`` are what nvmlGpmMetricsGet returns
    (a metric id without a value is reported as not supported)."""
    values = dict(BF16_GEMM if values is None else values)
    for name, mid in METRIC_IDS.items():
        setattr(m, name, mid)
    m.NVML_GPM_METRICS_GET_VERSION = 1  # type: ignore[attr-defined]
    m.samples = []  # type: ignore[attr-defined]

    def query(h: Any) -> Any:
        if query_error is not None:
            raise query_error
        return types.SimpleNamespace(version=1, isSupportedDevice=int(supported))

    def alloc() -> _Sample:
        s = _Sample()
        m.samples.append(s)  # type: ignore[attr-defined]
        return s

    def sample_get(h: Any, s: _Sample) -> _Sample:
        if sample_error is not None:
            raise sample_error
        s.gpu = h
        return s

    def free(s: _Sample) -> None:
        s.freed = True

    def metrics_get(req: _MetricsGet) -> _MetricsGet:
        assert req.version == 1 and req.sample1 is not req.sample2
        assert req.sample1.gpu is not None and req.sample2.gpu is not None
        for metric in req.metrics[: req.numMetrics]:
            if metric.metricId in values:
                metric.value = values[metric.metricId]
            else:
                metric.nvmlReturn = 3  # NVML_ERROR_NOT_SUPPORTED
        return req

    fns = {
        "nvmlGpmQueryDeviceSupport": query,
        "nvmlGpmSampleAlloc": alloc,
        "nvmlGpmSampleGet": sample_get,
        "nvmlGpmSampleFree": free,
        "nvmlGpmMetricsGet": metrics_get,
        "c_nvmlGpmMetricsGet_t": _MetricsGet,
    }
    for name, fn in fns.items():
        if name not in missing:
            setattr(m, name, fn)
    return m


@pytest.fixture
def fake_gpm(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(gpus: list[FakeGpu] | None = None, **kw: Any) -> types.ModuleType:
        m = add_gpm(make_fake_nvml(gpus or [FakeGpu(u) for u in UUIDS]), **kw)
        monkeypatch.setitem(sys.modules, "pynvml", m)
        return m

    return install


def _window(identity: tuple[int, str | None] = (0, UUIDS[0])) -> tuple[NvmlTelemetry, Any]:
    tel = NvmlTelemetry(identity=lambda: identity, visible=None, pid=1)
    return tel, tel.activity_window()


# --- the fake NVML: where GPM works, and every way it does not ----------------------------


def test_a_gpm_window_gives_the_figures_between_its_two_samples(fake_gpm: Any) -> None:
    m = fake_gpm(values=FP32_MUL)
    tel, w = _window()
    assert w.wanted
    w.start()
    a = w.stop(window_s=0.12, calls=235)
    assert a["available"] and a["source"] == "nvml-gpm"
    assert (a["window_s"], a["calls"]) == (0.12, 235)
    assert a["dram_bw_util_pct"] == 77.0 and a["sm_occupancy_pct"] == 77.0
    assert a["fp32_util_pct"] == 30.0 and a["pcie_rx_mib_s"] == 20.0
    # metrics this GPU does not report are listed, not invented
    assert "tensor_hmma_pct" in a["unsupported"] and "tensor_hmma_pct" not in a
    # one reader per device: a second window reuses its sample buffers
    tel.activity_window()
    assert len(m.samples) == 2
    tel.close()
    assert all(s.freed for s in m.samples)


@pytest.mark.parametrize(
    ("kw", "gpus", "expect"),
    [
        ({"supported": False}, None, "needs a Hopper or newer"),
        ({"query_error": NVMLError_NoPermission()}, None, "NVreg_RestrictProfilingToAdminUsers"),
        ({"query_error": NVMLError_NotSupported()}, None, "not supported by this GPU or driver"),
        ({"missing": ("nvmlGpmMetricsGet",)}, None, "pip install -U nvidia-ml-py"),
        ({}, [FakeGpu(UUIDS[0], mig=(1, 1))], "MIG is enabled"),
    ],
    ids=["pre-hopper", "no-permission", "not-supported", "old-pynvml", "mig"],
)
def test_missing_gpm_is_one_clear_reason(
    fake_gpm: Any, kw: dict[str, Any], gpus: list[FakeGpu] | None, expect: str
) -> None:
    fake_gpm(gpus, **kw)
    _, w = _window()
    assert not w.wanted  # the caller keeps its window short: the allocator's figures only
    w.start()
    a = w.stop(window_s=0.02, calls=20)
    assert a["available"] is False and expect in a["reason"], a["reason"]
    assert set(a) == {"available", "reason"}


def test_gpm_failing_during_the_window_is_a_reason_not_an_error(fake_gpm: Any) -> None:
    fake_gpm(sample_error=NVMLError_GpuIsLost())
    _, w = _window()
    assert w.wanted
    w.start()
    a = w.stop(window_s=0.12, calls=10)
    assert a["available"] is False
    assert "could not read a GPM sample" in a["reason"] and "fallen off the bus" in a["reason"]


def test_without_nvml_the_window_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    _, w = _window()
    assert not w.wanted
    a = w.stop()
    assert a["available"] is False and "nvidia-ml-py" in a["reason"]


def test_the_header_says_once_why_a_gpu_has_no_activity(fake_gpm: Any) -> None:
    fake_gpm([FakeGpu(UUIDS[0]), FakeGpu(UUIDS[1], name="NVIDIA A100-SXM4-80GB")], supported=True)
    state = collect_gpu_state(visible=None, own_pid=1, use_env=False)
    assert [g["gpm_unavailable"] for g in state["gpus"]] == [None, None]
    assert "GPM activity" in render_header(state, interval_ms=10, activity=True)[0]
    fake_gpm([FakeGpu(UUIDS[0], name="NVIDIA A100-SXM4-80GB")], supported=False)
    state = collect_gpu_state(visible=None, own_pid=1, use_env=False)
    lines = render_header(state, interval_ms=10, activity=True)
    missing = [ln for ln in lines if ln.startswith("activity unavailable")]
    assert len(missing) == 1 and "GPU 0" in missing[0] and "Hopper" in missing[0]
    assert "GPM activity" not in lines[0]
    # --gpuperf-activity=false: nothing said about GPM at all
    assert not any("activity" in ln for ln in render_header(state, interval_ms=10))


# --- the window of plain calls ----------------------------------------------------------


def test_the_plain_window_lasts_its_target_whatever_the_estimate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[int] = []
    clock = [0.0]  # a fake clock: each call takes 100 µs whatever the machine's load

    def plain(n: int) -> int:
        made.append(n)
        clock[0] += n * 1e-4
        return n

    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])
    # an estimate 10x too small still ends after the target, in a few batches
    calls, seconds = plain_window(plain, 1e-5, 0.05, 10**6)
    assert seconds >= 0.05 and calls == sum(made) and len(made) <= 6
    made.clear()
    calls, _ = plain_window(plain, 1e-4, 10.0, 30)  # the call cap ends it first
    assert calls == 30
    # an estimate 1000x too small: a small first batch, then growth of at most 8x a batch
    made.clear()
    plain_window(plain, 1e-7, 0.02, 10**6)
    assert made[0] <= 16 and all(b <= 8 * a for a, b in itertools.pairwise(made))


# --- the pure rules on the H200's figures -------------------------------------------------


def _activity(values: dict[int, float]) -> dict[str, Any]:
    by_id = {
        mid: key for key, const, _, _ in act.METRICS for c, mid in METRIC_IDS.items() if c == const
    }
    return {"available": True, **{by_id[k]: v for k, v in values.items()}}


def test_what_bounds_the_work_from_gpm_alone() -> None:
    mul = act.bound(_activity(FP32_MUL))
    assert mul is not None and mul.label == "memory-bound"
    assert mul.sentence == "DRAM bandwidth at 77 % of peak: memory-bound"
    gemm = act.bound(_activity(BF16_GEMM))
    assert gemm is not None and gemm.label == "tensor-bound"
    copies = act.bound(_activity(H2D_COPIES))
    assert copies is not None and copies.label == "under-used"
    assert act.bound({"available": False, "reason": "x"}) is None
    assert activity_line(_activity(FP32_MUL)).endswith(": memory-bound")
    assert "PCIe RX 50.7 GiB/s" in activity_line(_activity(H2D_COPIES))


def test_the_figures_that_moved_are_chosen_from_the_data() -> None:
    base = [_activity({**BF16_GEMM, 12: 1.0}), _activity({**BF16_GEMM, 5: 67.0, 2: 70.0, 12: 2.0})]
    fp32 = _activity({2: 93.0, 3: 12.0, 5: 6.0, 7: 6.0, 10: 14.0, 12: 71.0})
    moves = act.moved(base, fp32)
    keys = [m.key for m in moves]
    assert keys == ["fp32_util_pct", "tensor_hmma_pct", "tensor_pct", "sm_util_pct"], keys
    assert "dram_bw_util_pct" not in keys  # 13 -> 14 did not move
    assert act.left_tensor_cores(moves)
    tensor = next(m for m in moves if m.key == "tensor_pct")
    assert tensor.text() == "tensor activity fell 68 % -> 6.0 %"
    # a figure that stays within the baseline's range widened by 3 points did not move
    same = _activity({**BF16_GEMM, 5: 66.0})
    assert [m.key for m in act.moved(base, same)] == []
    # TF32-like: tensor activity still high, so no claim that the GEMMs left the tensor cores
    tf32 = _activity({**BF16_GEMM, 5: 52.0, 7: 52.0})
    moves = act.moved(base, tf32)
    assert moves and not act.left_tensor_cores(moves)
    # rates move by a factor, not by points
    assert act.moved([_activity(FP32_MUL)], _activity({**FP32_MUL, 21: 400.0})) == []
    rx = act.moved([_activity(FP32_MUL)], _activity({**FP32_MUL, 21: 9000.0}))
    assert [m.key for m in rx] == ["pcie_rx_mib_s"]


def test_a_baseline_keeps_the_activity_summary_and_drops_the_unavailable() -> None:
    a = {**_activity(FP32_MUL), "window_s": 0.12, "calls": 235, "unsupported": ["x"]}
    s = act.summary(a)
    assert s is not None and s["dram_bw_util_pct"] == 77.0 and "unsupported" not in s
    assert act.summary({"available": False, "reason": "no GPM"}) is None


# --- the peaks ----------------------------------------------------------------------------


def test_achieved_throughput_as_a_fraction_of_the_h200_peaks() -> None:
    # a 4096^3 bf16 GEMM at 176 µs (measured on the H200): 781 TFLOP/s of 989.5
    p = peaks.of_peak(
        device_name="NVIDIA H200",
        seconds=176e-6,
        flops=2 * 4096**3,
        nbytes=3 * 2 * 4096**2,
        params=(("dtype", "torch.bfloat16"),),
    )
    assert p is not None and p["gpu"] == "H200" and p["dtype"] == "bf16"
    assert p["flops_of_peak"] == pytest.approx(0.789, abs=0.002)
    assert p["bandwidth_of_peak"] == pytest.approx(0.119, abs=0.001)  # 101 MB in 176 µs
    text = peaks.describe(p)
    assert text.startswith("79 % of the H200's bf16 peak (989.5 TFLOP/s)")
    # a fp32 matmul: against the CUDA-core peak and TF32's
    p = peaks.of_peak(device_name="NVIDIA H200", seconds=1e-3, flops=67e9, nbytes=None,
                      params=(("dtype", "float32"),))  # fmt: skip
    assert p is not None and p["flops_of_peak"] == 1.0 and "flops_of_tf32_peak" in p
    # without a dtype: bandwidth only, and why
    p = peaks.of_peak(device_name="NVIDIA H200", seconds=1e-3, flops=1e9, nbytes=4.8e9)
    assert p is not None and p["bandwidth_of_peak"] == 1.0 and "flops_of_peak" not in p
    assert "names no dtype" in p["flops_peak_unknown"]
    assert peaks.of_peak(device_name="NVIDIA GeForce RTX 4090", seconds=1.0, flops=1.0,
                         nbytes=1.0) is None  # fmt: skip
    assert peaks.peak_for("NVIDIA H100 80GB HBM3").name == "H100 SXM"  # type: ignore[union-attr]
    assert peaks.peak_for("NVIDIA H100 PCIe").name == "H100 PCIe"  # type: ignore[union-attr]
    assert peaks.peak_for("NVIDIA A100-SXM4-80GB").name == "A100 80GB SXM"  # type: ignore[union-attr]


def test_a_result_carries_its_peak_fractions_into_the_json() -> None:
    r = Result(
        Run(
            id=BenchId("t.py::test_mm[bf16]", None, "cuda-events", (("dtype", "bfloat16"),)),
            device="cuda",
            rounds=(176e-6,) * 6,
            calls_per_round=1,
            first_call_s=0.1,
            flops=2 * 4096**3,
            device_name="NVIDIA H200",
        )
    )
    assert r.to_dict()["of_peak"]["flops_of_peak"] == pytest.approx(0.789, abs=0.002)
    cpu = Result(Run(id=BenchId("t.py::t"), device="cpu", rounds=(1.0,), calls_per_round=1,
                     first_call_s=1.0, flops=1.0))  # fmt: skip
    assert cpu.to_dict()["of_peak"] is None


# --- the fixture's window, with a fake timer ---------------------------------------------


class _PlainTimer:
    def __init__(self) -> None:
        self.calls = 0

    def plain_calls(self, n: int) -> int:
        import time

        time.sleep(n * 2e-4)  # 200 µs per call
        self.calls += n
        return n


class _FakeWindow:
    def __init__(self, wanted: bool, timer: _PlainTimer | None = None) -> None:
        self.wanted = wanted
        self.started = False
        self.timer = timer
        #: the timer's calls when the window opened (the lead-in's)
        self.calls_before = 0

    def start(self) -> None:
        import time

        self.started = True
        self.calls_before = self.timer.calls if self.timer else 0
        self.opened_at = time.perf_counter()

    def stop(self, **facts: Any) -> dict[str, Any]:
        assert self.started
        return {"available": self.wanted, **facts}


def _bench(device: str, window: _FakeWindow | None) -> Any:
    from pytest_gpuperf.shell.config import GpuPerfConfig
    from pytest_gpuperf.shell.fixture import BenchContext, GpuBench

    cfg = GpuPerfConfig.from_values({}, {})
    activity = (lambda: window) if window is not None else None
    return GpuBench(BenchContext("t.py::t", cfg, device, record=lambda r: None,
                                 after_measure=[], activity=activity))  # fmt: skip


def test_the_window_reads_gpm_over_about_a_tenth_of_a_second_of_plain_calls() -> None:
    from pytest_gpuperf.shell.fixture import LEAD_S

    timer = _PlainTimer()
    window = _FakeWindow(wanted=True, timer=timer)
    t0 = time.perf_counter()
    activity, memory = _bench("cuda", window)._window(timer, 1e-3, None, None)
    # the GPU kept busy with the same calls for one GPM refresh before the window opens,
    # and the window counts only its own calls
    assert window.calls_before > 0 and window.opened_at - t0 >= LEAD_S
    assert activity is not None and activity["calls"] == timer.calls - window.calls_before > 0
    assert activity["window_s"] >= 0.12
    # no allocator counters here (no CUDA): the memory figure says why, it is not left blank
    assert memory is not None and memory["available"] is False and memory["reason"]


def test_without_gpm_the_window_is_a_few_calls_for_the_allocator() -> None:
    timer, window = _PlainTimer(), _FakeWindow(wanted=False)
    _bench("cuda", window)._window(timer, 1e-3, None, None)
    assert timer.calls <= 20


def test_a_cpu_benchmark_gets_no_window_and_says_why_memory_is_missing() -> None:
    from pytest_gpuperf.measure.allocation import CPU_REASON

    timer = _PlainTimer()
    activity, memory = _bench("cpu", _FakeWindow(wanted=True))._window(timer, 1e-3, None, None)
    assert activity is None and memory == {"available": False, "reason": CPU_REASON}
    assert timer.calls == 0
    # --gpuperf-activity=false: no window, nothing read
    activity, memory = _bench("cuda", None)._window(timer, 1e-3, None, None)
    assert (activity, memory, timer.calls) == (None, None, 0)
    # no round kept: no per-call time to size the window by, no window
    activity, memory = _bench("cuda", _FakeWindow(wanted=True))._window(timer, None, None, None)
    assert (activity, memory, timer.calls) == (None, None, 0)


def test_the_window_is_sized_by_the_longer_of_the_median_and_the_slowest_end_to_end_round():
    from pytest_gpuperf.shell.fixture import _per_call

    assert _per_call([], []) is None
    assert _per_call([1.0, 3.0, 2.0], []) == 2.0
    assert _per_call([1.0, 3.0, 2.0], [1.5, 2.5]) == 2.5
