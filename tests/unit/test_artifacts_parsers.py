"""Parsers of the tools' outputs, on files the tools wrote on the H200 machine.

tests/data/artifacts/ holds what nsys 2025.3.1 (``stats`` and ``analyze``,
CSV), ncu 2025.3.1 (``--csv --page raw`` / ``details``) and torch 2.11's
TORCH_TRACE wrote for small programs there (the TORCH_TRACE log trimmed to
the events read here).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_gpuperf.artifacts.analysis.inventory import inventory_from_trace
from pytest_gpuperf.artifacts.analysis.timeline import load_trace, parse_trace
from pytest_gpuperf.artifacts.collectors import ncu, nsys, torch_trace

DATA = Path(__file__).parent.parent / "data" / "artifacts"


def _csv(name: str) -> list[dict[str, str]]:
    return nsys.read_csv((DATA / name).read_text())


def test_nsys_stats_summary() -> None:
    s = nsys.summarize_stats(
        {
            "cuda_gpu_kern_sum": _csv("nsys_st_cuda_gpu_kern_sum.csv"),
            "cuda_gpu_mem_time_sum": _csv("nsys_st_cuda_gpu_mem_time_sum.csv"),
            "cuda_api_sum": _csv("nsys_st_cuda_api_sum.csv"),
            "nvtx_sum": _csv("nsys_st_nvtx_sum.csv"),
        }
    )
    assert s["kernels"][0]["name"] == "nvjet_sm90_tst_128x64_64x8_1x2_h_bz_NNT"
    assert s["kernels"][0]["share_pct"] == 43.5 and s["kernels"][0]["instances"] == 1
    assert [m["operation"] for m in s["memory"]] == [
        "[CUDA memcpy Host-to-Device]",
        "[CUDA memcpy Device-to-Host]",
    ]
    assert {a["name"] for a in s["syncs"]} == {"cudaStreamSynchronize", "cudaDeviceSynchronize"}
    assert s["ranges"][0]["range"] == ":gpuperf_capture"
    lines = nsys.stats_lines(s, calls=1)
    assert lines[0].startswith("top kernels: nvjet_sm90_tst_128x64_64x8_1x2_h_bz_NNT 44 %")
    assert any(line.startswith("host syncs: cudaStreamSynchronize x2") for line in lines)


def test_nsys_analyze_findings() -> None:
    lines = nsys.summarize_analyze(
        {
            "cuda_api_sync": _csv("nsys_an_cuda_api_sync.csv"),
            "cuda_memcpy_async": _csv("nsys_an_cuda_memcpy_async.csv"),
            "gpu_time_util": _csv("nsys_an_gpu_time_util.csv"),
            "gpu_gaps": [],
        }
    )
    assert lines == [
        "cuda_api_sync: 3 synchronising CUDA API call(s) (cudaDeviceSynchronize, cudaStreamSynchronize)",
        "cuda_memcpy_async: 1 async memcpy(s) with pageable host memory (they run synchronously) (4.19 MB)",
        "gpu_time_util: 2 stretch(es) of low GPU utilisation (lowest 2 % in use)",
    ]


def test_nsys_csv_with_notices_and_empty_files() -> None:
    assert nsys.read_csv("") == []
    text = "NOTICE: something\n\nTime (%),Name\n50.0,k\n"
    assert nsys.read_csv(text) == [{"Time (%)": "50.0", "Name": "k"}]


def test_nsys_profile_command_limits_capture_to_the_window() -> None:
    cmd = nsys.profile_command(Path("/o/report"))
    assert cmd[:6] == [
        "nsys",
        "profile",
        "-t",
        "cuda,nvtx",
        "--sample=none",
        "--cpuctxsw=none",
    ]
    assert "--capture-range=cudaProfilerApi" in cmd and "--capture-range-end=stop" in cmd
    assert "--capture-range=cudaProfilerApi" not in nsys.profile_command(Path("/o/r"), ranged=False)


def test_ncu_raw_page() -> None:
    kernels = ncu.parse_raw((DATA / "ncu_raw.csv").read_text())
    assert len(kernels) == 4
    gemm = kernels[0]
    assert gemm["name"] == "nvjet_sm90_tst_128x64_64x8_1x2_h_bz_NNT"
    assert gemm["grid"] == "(2, 64, 1)" and gemm["block"] == "(384, 1, 1)"
    assert gemm["registers"] == 168
    assert gemm["duration_us"] == pytest.approx(7.104)
    assert gemm["sm_pct"] == pytest.approx(31.554607) and gemm["mem_pct"] == pytest.approx(
        33.114859
    )
    assert gemm["stalls"][0] == ("long scoreboard", pytest.approx(5.589766))
    assert gemm["bottleneck"].startswith("under-filled grid")  # 2x64 blocks on 132 SMs
    assert all(k["stalls"] and k["bottleneck"] != "unknown" for k in kernels)


@pytest.mark.parametrize(
    ("metrics", "expected"),
    [
        ({"sm_pct": 85.0, "mem_pct": 40.0}, "compute-bound"),
        ({"sm_pct": 30.0, "mem_pct": 88.0}, "memory-bound"),
        ({"sm_pct": 20.0, "mem_pct": 20.0, "waves": 0.4}, "under-filled grid (0.40 waves)"),
        (
            {"sm_pct": 20.0, "mem_pct": 20.0, "occupancy_pct": 12.0},
            "latency-bound (achieved occupancy 12 %)",
        ),
        ({"sm_pct": 20.0, "mem_pct": 20.0, "occupancy_pct": 60.0}, "latency-bound"),
        ({}, "unknown"),
    ],
)
def test_ncu_bottleneck(metrics: dict[str, float], expected: str) -> None:
    assert ncu.bottleneck(metrics) == expected


def test_ncu_rules_by_kernel() -> None:
    rules = ncu.parse_rules((DATA / "ncu_details.csv").read_text())
    assert set(rules) == {"0", "1", "2", "3"}
    assert rules["0"][0].startswith("This kernel grid is too small to fill the available resources")
    assert not any("could not be found" in r for rs in rules.values() for r in rs)


def test_ncu_filter_from_profiler_names_matches_what_ncu_reports() -> None:
    inv = inventory_from_trace(parse_trace(load_trace(DATA / "kineto_h200_sync_h2d.json")))
    hotspots = [k for k in inv["kernels"] if k["kind"] == "kernel"]
    pattern = ncu.kernel_filter([h["name"] for h in hotspots])
    assert (
        pattern == "regex:^(nvjet_sm90_tst_128x64_64x8_1x2_h_bz_NNT|vectorized_elementwise_kernel)$"
    )
    regex = re.compile(pattern[len("regex:") :])
    # ncu prints "Profiling "<function name>"" for each profiled launch
    for name in ("nvjet_sm90_tst_128x64_64x8_1x2_h_bz_NNT", "vectorized_elementwise_kernel"):
        assert regex.fullmatch(name)
    matched = ncu.match_hotspots(hotspots, ncu.parse_raw((DATA / "ncu_raw.csv").read_text()))
    assert set(matched) == {h["name"] for h in hotspots}
    gemm = matched["nvjet_sm90_tst_128x64_64x8_1x2_h_bz_NNT"]
    assert gemm["registers"] == 168
    cmd = ncu.profile_command("/o/report", [h["name"] for h in hotspots], 4)
    assert cmd[:3] == ["ncu", "--clock-control", "none"]
    assert cmd[5:8] == ["--nvtx", "--nvtx-include", "gpuperf_capture/"]
    for section in (
        "SpeedOfLight",
        "Occupancy",
        "LaunchStats",
        "MemoryWorkloadAnalysis",
        "WarpStateStats",
    ):
        assert section in cmd
    assert cmd[cmd.index("--launch-count") + 1] == "4"


def test_torch_trace_log() -> None:
    rep = torch_trace.parse_log((DATA / "torch_trace_graph_break.log").read_text())
    assert rep.compiles == 5
    (gb,) = rep.graph_breaks  # logged twice (a recompile), reported once
    assert gb["reason"] == "Call to `torch._dynamo.graph_break()`"
    assert gb["where"].endswith("c.py:3")
    assert rep.recompiles[0] == "1/0: n == 1"
    assert any("size mismatch" in r for r in rep.recompiles)
    assert sorted(rep.triton) == ["triton_poi_fused_add_relu_0", "triton_poi_fused_mul_0"]
    src = rep.triton["triton_poi_fused_mul_0"]
    assert "def triton_poi_fused_mul_0(" in src and "@triton.jit" in src
    d = rep.to_dict()
    assert d["graph_break_count"] == 1 and d["fallbacks"] == []
    assert rep.lines()[0].startswith("5 compiled graph(s)")


def test_torch_trace_env_keeps_the_compile_caches(tmp_path: Path) -> None:
    # a graph the measuring process compiled is loaded from the Inductor cache, not rebuilt:
    # Dynamo still traces every frame, which is what the log is read for
    env = torch_trace.trace_env(tmp_path / "log")
    assert env == {"TORCH_TRACE": str(tmp_path / "log")}


def test_torch_trace_fallbacks_and_library_calls() -> None:
    log = (
        'V1129 20:17:04.838000 900 torch/_inductor/graph.py:2575] {"inductor_output_code": '
        '{"filename": "/tmp/x.py"}, "frame_id": 0, "frame_compile_id": 0, "attempt": 0}\n'
        "\tdef call(args):\n"
        "\t    buf0 = extern_kernels.mm(arg0_1, arg1_1)\n"
        "\t    buf1 = torch.ops.aten.nonzero.default(buf0)\n"
        "\t    return (buf1, )\n"
    )
    rep = torch_trace.parse_log(log)
    assert rep.fallbacks == {"nonzero": 1} and rep.library_calls == {"mm": 1}


def test_ncu_raw_page_with_every_section_and_compiled_code() -> None:
    # ncu 2025.3.1 on the H200: bf16 and fp32 GEMMs and an Inductor kernel, one steady-state
    # call inside the NVTX range, --kernel-name-base function, all five sections
    kernels = {
        k["name"][:30]: k for k in ncu.parse_raw((DATA / "ncu_raw_all_sections.csv").read_text())
    }
    gemm = kernels["nvjet_sm90_tst_256x128_64x4_1x"]
    assert gemm["bottleneck"] == "compute-bound" and gemm["sm_pct"] > 60
    assert gemm["occupancy_pct"] == pytest.approx(14.128993) and gemm["registers"] == 168
    assert gemm["waves"] == pytest.approx(0.97) and gemm["duration_us"] == pytest.approx(25.632)
    assert gemm["stalls"][0][0] == "barrier"
    triton = kernels["triton_per_fused_add_gelu_nati"]
    assert triton["bottleneck"] == "under-filled grid (0.24 waves)"
