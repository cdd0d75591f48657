"""The diagnosis names the cause that the evidence shows, and says it first."""

from __future__ import annotations

from pathlib import Path

from pytest_gpuperf.artifacts.analysis import diagnose as dg
from pytest_gpuperf.artifacts.analysis.inventory import inventory_from_trace
from pytest_gpuperf.artifacts.analysis.timeline import analyze, load_trace, parse_trace
from tests.unit.kineto import FakeTrace, gpu_bound, launch_bound, with_syncs

DATA = Path(__file__).parent.parent / "data" / "artifacts"


def _evidence(
    base_doc: dict, cur_doc: dict, base_s: float, cur_s: float, **kw: object
) -> dg.Evidence:
    return dg.Evidence(
        key="t.py::test_x@cuda-events",
        display="test_x",
        baseline_s=base_s,
        current_s=cur_s,
        analysis=analyze(parse_trace(cur_doc)),
        baseline_inventory=inventory_from_trace(parse_trace(base_doc)),
        current_inventory=inventory_from_trace(parse_trace(cur_doc)),
        **kw,  # type: ignore[arg-type]
    )


def _plain_chain(calls: int = 4, kernels: int = 8, kdur: float = 10.0) -> FakeTrace:
    t = FakeTrace()
    host = gpu = 1000.0
    for i in range(calls):
        start = host
        for _ in range(kernels):
            t.op("aten::mul", host, 4.0)
            t.kernel(
                "vectorized_elementwise_kernel<MulFunctor>", host + 1, max(gpu, host + 5), kdur
            )
            gpu = max(gpu, host + 5) + kdur
            host += 4.0
        t.call(i, start, host - start)
    return t


def test_a_host_sync_in_the_loop() -> None:
    ev = _evidence(_plain_chain().doc(), with_syncs().doc(), 80e-6, 300e-6)
    d = dg.diagnose(ev)
    assert d.cause == dg.HOST_SYNC
    assert "synchronises with the host 8 time(s) per call (none in the baseline)" in d.paragraph
    assert "aten::_local_scalar_dense" in d.paragraph
    # the idle time the syncs leave is the slowdown: the sync explains it, in its first sentence
    assert d.paragraph.startswith(
        "test_x is slower than its baseline: 3.75x time (80.00 µs -> 300.0 µs per call); likely "
        "cause, 94 % of the slowdown: the benchmarked function synchronises with the host"
    ), d.paragraph


def test_a_pageable_host_to_device_copy_on_the_real_trace() -> None:
    cur = load_trace(DATA / "kineto_h200_sync_h2d.json")
    # the same work without the copy and its sync: kernels only
    base = dict(cur)
    base["traceEvents"] = [
        e
        for e in cur["traceEvents"]
        if e.get("cat") != "gpu_memcpy" and e.get("name") != "cudaStreamSynchronize"
    ]
    # the same calls' host time in both: the copies (449 µs per call) are what changed
    ev = _evidence(base, cur, 1.8e-3, 2.3e-3)
    d = dg.diagnose(ev)
    assert d.cause == dg.H2D_COPY, d.paragraph
    assert dg.lead(d.paragraph).startswith(
        "a host-to-device copy inside the benchmarked function from pageable memory (none in the "
        "baseline): 1 per call, 4.0 MiB, 449.0 µs per call plus the host sync it forces"
    ), d.paragraph


def test_the_copy_own_sync_does_not_count_as_a_separate_cause() -> None:
    t = FakeTrace()
    for i in range(2):
        ts = 1000.0 + 200 * i
        t.call(i, ts, 150.0)
        t.op("aten::copy_", ts, 60.0)
        t.memcpy("Memcpy HtoD (Pageable -> Device)", ts + 1, ts + 5, 40.0, 2**20)
        t.api("cudaStreamSynchronize", ts + 10, 40.0)
        t.kernel("gemm_a", ts + 70, ts + 75, 50.0)
    d = dg.diagnose(
        _evidence(gpu_bound(calls=2, kernels=(("gemm_a", 50.0),)).doc(), t.doc(), 60e-6, 150e-6)
    )
    assert d.cause == dg.H2D_COPY and dg.HOST_SYNC not in d.causes
    assert "plus the host sync it forces" in d.paragraph


def test_a_different_gemm_variant() -> None:
    base = gpu_bound(kernels=(("nvjet_sm90_tst_256x128_64x4_2x1_v_bz_TNT", 25.0),)).doc()
    cur = gpu_bound(
        kernels=(("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32", 280.0),)
    ).doc()
    ncu = [
        {"name": "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32",
         "bottleneck": "compute-bound", "sm_pct": 91.0, "mem_pct": 30.0, "occupancy_pct": 12.0,
         "registers": 210, "stalls": [("math pipe throttle", 4.2)], "duration_us": 280.0}
    ]  # fmt: skip
    d = dg.diagnose(_evidence(base, cur, 40e-6, 295e-6, ncu=ncu))
    assert d.cause == dg.KERNEL_VARIANT
    assert "replaced nvjet_sm90_tst_256x128_64x4_2x1_v_bz_TNT" in d.paragraph
    assert "Nsight Compute on sm90_xmma_gemm" in d.paragraph and "compute-bound" in d.paragraph
    assert "The GPU was idle" not in d.paragraph


def test_an_extra_copy_kernel() -> None:
    base = gpu_bound(kernels=(("gemm_a", 100.0),)).doc()
    copy = "void at::native::elementwise_kernel<128, 2, direct_copy_kernel_cuda>(int, Func)"
    cur = gpu_bound(kernels=((copy, 40.0), ("gemm_a", 100.0))).doc()
    d = dg.diagnose(_evidence(base, cur, 110e-6, 155e-6))
    assert d.cause == dg.EXTRA_COPY and "an extra copy appeared" in d.paragraph


def test_a_graph_break_in_compiled_code() -> None:
    base = gpu_bound(kernels=(("triton_per_fused_add_native_layer_norm_0", 20.0),)).doc()
    cur = gpu_bound(
        kernels=(("triton_per_fused_native_layer_norm_0", 18.0), ("triton_poi_fused_add_0", 8.0))
    ).doc()
    comp = {"graphs": 2, "graph_break_count": 1,
            "graph_breaks": [{"reason": "Call to `torch._dynamo.graph_break()`", "where": "m.py:30"}],
            "recompiles": [], "fallbacks": []}  # fmt: skip
    d = dg.diagnose(_evidence(base, cur, 60e-6, 90e-6, compile=comp))
    assert d.cause == dg.GRAPH_BREAK
    assert (
        'torch.compile broke the graph 1 time(s): "Call to `torch._dynamo.graph_break()`" at m.py:30'
        in d.paragraph
    )
    assert any(line.startswith("compile: 2 graph(s), 1 graph break(s)") for line in d.details)


def test_more_compiled_regions_per_call_is_a_graph_break() -> None:
    def compiled(regions: int, kernels: tuple[tuple[str, float], ...]) -> dict:
        t = gpu_bound(calls=2, kernels=kernels)
        for start, _ in parse_trace(t.doc()).calls:
            for r in range(regions):
                t.op(f"Torch-Compiled Region: {r}/0", start + 0.1 + r, 1.0)
        return t.doc()

    base = compiled(1, (("triton_per_fused_add_native_layer_norm_0", 20.0),))
    cur = compiled(
        2, (("triton_per_fused_native_layer_norm_0", 30.0), ("triton_poi_fused_add_0", 8.0))
    )
    ev = _evidence(base, cur, 60e-6, 90e-6)  # no TORCH_TRACE: the profiles alone
    assert ev.baseline_inventory is not None
    assert ev.baseline_inventory["compiled_regions_per_call"] == 1.0
    d = dg.diagnose(ev)
    assert d.cause == dg.GRAPH_BREAK and "1 -> 2 compiled regions per call" in d.paragraph
    # a graph break the baseline had too is not the news
    same = _evidence(compiled(2, (("k", 20.0),)), compiled(2, (("k", 40.0),)), 60e-6, 80e-6,
                     compile={"graph_break_count": 1, "graph_breaks": [{"reason": "r", "where": "w"}]})  # fmt: skip
    assert dg.diagnose(same).cause == dg.KERNEL_SLOWER


def test_launch_bound_work() -> None:
    analysis = analyze(parse_trace(launch_bound().doc()))
    ev = dg.Evidence(key="k", baseline_s=200e-6, current_s=320e-6, analysis=analysis)
    d = dg.diagnose(ev)
    assert d.cause == dg.LAUNCH_BOUND and "CUDA graphs" in d.paragraph


def test_without_a_profile_the_message_says_so() -> None:
    d = dg.diagnose(dg.Evidence(key="k", display="test_k", baseline_s=1e-3, current_s=1.2e-3))
    assert d.causes == [] and "No profile could be taken" in d.paragraph
    assert d.paragraph.startswith("test_k is slower than its baseline: +20.0 % time")


def test_extra_lines_from_hooks_are_appended() -> None:
    d = dg.diagnose(dg.Evidence(key="k"), ["Check the input pipeline"])
    assert d.paragraph.endswith("Check the input pipeline.")


def test_real_compiled_traces_with_and_without_a_graph_break() -> None:
    # torch 2.11 on the H200: Linear -> GELU -> LayerNorm (+ residual) compiled, with and
    # without torch._dynamo.graph_break() before the residual add; 2 profiled calls each
    ok = load_trace(DATA / "kineto_h200_compiled.json")
    gb = load_trace(DATA / "kineto_h200_compiled_graph_break.json")
    base_inv = inventory_from_trace(parse_trace(ok))
    cur_inv = inventory_from_trace(parse_trace(gb))
    assert (base_inv["compiled_regions_per_call"], cur_inv["compiled_regions_per_call"]) == (1, 2)
    ev = _evidence(ok, gb, base_inv["per_call_us"] * 1e-6, cur_inv["per_call_us"] * 1e-6)
    d = dg.diagnose(ev)
    assert d.cause == dg.GRAPH_BREAK and "1 -> 2 compiled regions per call" in d.paragraph
    assert "library's choice" not in d.paragraph
    kernels = "\n".join(d.details)
    assert "appeared: triton_poi_fused_add_0" in kernels
    assert "vanished: triton_per_fused_add_gelu_native_layer_norm_0" in kernels


def test_a_float32_gemm_replacing_bfloat16_is_a_variant() -> None:
    cutlass = "void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(Params)"
    base = gpu_bound(kernels=(("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", 25.0),)).doc()
    cur = gpu_bound(kernels=((cutlass, 290.0),)).doc()
    d = dg.diagnose(_evidence(base, cur, 30e-6, 295e-6))
    assert d.cause == dg.KERNEL_VARIANT
    assert "Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1> replaced nvjet_sm90" in d.paragraph
    assert "library's choice" in d.paragraph


def _cpu_ops(calls: int = 4, ops: tuple[tuple[str, float], ...] = (("aten::mm", 20.0),)) -> dict:
    """A CPU profile: aten ops inside each call, no GPU activity."""
    t = FakeTrace()
    host = 1000.0
    for i in range(calls):
        start = host
        for name, dur in ops:
            t.op(name, host, dur)
            host += dur + 1.0
        t.call(i, start, host - start)
    return t.doc()


def test_on_the_cpu_the_diagnosis_speaks_of_ops_not_kernels_or_the_gpu() -> None:
    base = _cpu_ops()
    more = _cpu_ops(ops=(("aten::mm", 20.0), ("aten::stack", 30.0)))
    d = dg.diagnose(_evidence(base, more, 21e-6, 52e-6))
    text = d.paragraph + "\n".join(d.details)
    assert "aten::stack" in text
    assert "kernel" not in text.lower() and "GPU" not in text and "launches" not in text
    # nothing in the profile changed: a pure-Python slowdown, said so with a CPU remedy
    same = dg.diagnose(_evidence(base, _cpu_ops(), 21e-6, 40e-6))
    assert "Python code between the ops" in same.paragraph and "cProfile" in same.paragraph
    assert "GPU" not in same.paragraph and "kernel" not in same.paragraph
    assert (
        dg.cpu_words("new kernel x: launches 1 -> 3, 2 kernels") == "new op x: calls 1 -> 3, 2 ops"
    )


def test_against_a_base_tree_there_is_no_advice_to_save_a_baseline() -> None:
    cur = _cpu_ops()
    ev = dg.Evidence(key="k", display="test_x", baseline_s=1e-5, current_s=2e-5,
                     analysis=analyze(parse_trace(cur)))  # fmt: skip
    assert any("save a baseline again" in x for x in dg.diagnose(ev).details)
    ev.ab = True
    details = dg.diagnose(ev).details
    assert not any("baseline" in x for x in details)
    assert any("the base tree was not profiled" in x for x in details)
