"""Compiler, layout and launch-config stories on real CPU TORCH_TRACE logs and H200 names."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_gpuperf.artifacts.analysis import compile_story as cs
from pytest_gpuperf.artifacts.analysis import diagnose as dg
from pytest_gpuperf.artifacts.analysis.inventory import diff_inventories
from pytest_gpuperf.artifacts.collectors.torch_profiler import parse_autotune_log
from pytest_gpuperf.artifacts.collectors.torch_trace import parse_log

DATA = Path(__file__).parent.parent / "data" / "artifacts"


def _inv(kernels: list[tuple], **kw: object) -> dict:
    """An inventory: (name, µs per call, launches[, grid, block[, config]]) per kernel."""
    out = []
    for k in kernels:
        e: dict = {"name": k[0], "kind": k[5] if len(k) > 5 else "kernel",
                   "us_per_call": k[1], "launches": k[2], "us_per_launch": k[1] / k[2]}  # fmt: skip
        if len(k) > 3 and k[3]:
            e["grid"] = k[3]
        if len(k) > 4 and k[4]:
            e["block"] = k[4]
        out.append(e)
    return {"schema": 1, "device": "cuda", "kernels": out, "other_us_per_call": 0.0, **kw}


def _ev(base: dict, cur: dict, b_us: float, c_us: float, **kw: object) -> dg.Evidence:
    return dg.Evidence(
        key="t.py::test_x@cuda-events", display="test_x", baseline_s=b_us * 1e-6,
        current_s=c_us * 1e-6, baseline_inventory=base, current_inventory=cur,
        kernel_diff=diff_inventories(base, cur, (c_us - b_us) * 1e-6), **kw,  # type: ignore[arg-type]
    )  # fmt: skip


# --- TORCH_TRACE logs produced on the CPU (torch 2.13.0+cpu, Inductor's C++ backend) -------


def test_a_graph_break_in_a_loop_skips_the_frame_in_dynamos_words() -> None:
    rep = parse_log((DATA / "torch_trace_cpu_graph_break_in_loop.log").read_text())
    (f,) = rep.frame_failures
    assert f["eager"] and f["function"] == "f" and f["where"] == "/tmp/tt/gb.py:5"
    assert f["reason"] == "Unsupported Tensor.item() call with capture_scalar_outputs=False"
    assert f["skip_reason"] == "graph break in loop"
    assert "Skipping the frame and falling back to eager" in f["skip_explanation"]
    assert "capture_scalar_outputs = True" in f["hint"]
    (gb,) = rep.graph_breaks
    assert gb["code"] == "if x.sum().item() > 1e9:  # data-dependent" and gb["eager"]
    assert rep.recompiles == [] and "limit" not in f


def test_recompiles_to_the_limit_counted_once_each_with_the_guard() -> None:
    rep = parse_log((DATA / "torch_trace_cpu_recompile_limit.log").read_text())
    # 8 recompile events (7 recompiles and the one refused), not the 36 guard lines they list
    assert len(rep.recompiles) == 8
    assert rep.recompiles[0] == "0/0: scale == 1.001"
    last = rep.recompile_details[-1]
    assert last["guard"].startswith("scale == 1.007") and last["function"] == "g"
    assert last["where"] == "/tmp/tt/rc2.py:3" and last["code"] == "return torch.sin(x) * scale + 1"
    (f,) = rep.frame_failures
    assert f["limit"] == {"name": "recompile_limit", "value": 8} and f["eager"]


def test_the_2_11_log_keeps_its_recompiles() -> None:
    rep = parse_log((DATA / "torch_trace_graph_break.log").read_text())
    assert rep.recompiles[0] == "1/0: n == 1"
    assert rep.recompile_details[0]["code"].startswith("y=x*2;torch._dynamo.graph_break()")
    assert rep.frame_failures == []


def _cpu_inv(regions: float, ops: list[tuple[str, float]]) -> dict:
    inv = _inv([(n, us, 1.0, None, None, "op") for n, us in ops])
    inv.update(device="cpu", compiled_regions_per_call=regions, compiled=regions > 0)
    return inv


COMPILED = _cpu_inv(1.0, [("Torch-Compiled Region: 0/0", 50.0), ("TorchDynamo Cache Lookup", 2.0)])
EAGER = _cpu_inv(0.0, [("aten::sin", 300.0), ("aten::mul", 60.0), ("aten::sum", 20.0), ("aten::item", 5.0)])  # fmt: skip


def _compiled_then_eager(log: str | None = None) -> tuple[dg.Diagnosis, str]:
    """The diagnosis of COMPILED (52 µs) turned EAGER (385 µs), told the compile story of
    the TORCH_TRACE log ``log`` where one is named; and the cause its first sentence names."""
    comp = parse_log((DATA / log).read_text()).to_dict() if log else None
    d = dg.diagnose(_ev(COMPILED, EAGER, 52.0, 385.0, compile=comp))
    return d, dg.lead(d.paragraph)


def test_compiled_code_gone_comes_first_with_the_reason_and_the_line() -> None:
    d, likely = _compiled_then_eager("torch_trace_cpu_graph_break_in_loop.log")
    assert d.cause == dg.COMPILED_CODE_GONE
    assert likely.startswith(
        "the compiled code is gone: the baseline ran 1 compiled region(s) per call, the current "
        "code runs none, so the function runs eagerly; dynamo gave up on `f` and runs it eagerly: "
        '"graph break in loop" (torch.compile detected a graph break in a for/while loop.'
    )
    assert 'after "Unsupported Tensor.item() call with capture_scalar_outputs=False" at tt/gb.py:5: `if x.sum().item() > 1e9:' in likely  # fmt: skip
    # the eager ops are its consequence: it claims them, so they are not told as causes
    assert d.causes == [dg.COMPILED_CODE_GONE] and "100 % of the slowdown" in d.paragraph


def test_without_the_log_the_inventories_alone_say_the_compiled_code_is_gone() -> None:
    d, likely = _compiled_then_eager()
    assert d.cause == dg.COMPILED_CODE_GONE
    assert likely.startswith("the compiled code is gone")


def test_recompile_limit_comes_first_with_the_guard() -> None:
    d, likely = _compiled_then_eager("torch_trace_cpu_recompile_limit.log")
    assert d.cause == dg.RECOMPILE
    assert likely.startswith(
        "torch.compile recompiled `g` 7 time(s) and hit the recompile limit "
        "(torch._dynamo.config.recompile_limit = 8), so the calls that miss the cache run "
        "eagerly (1 -> 0 compiled regions per call); the guard that failed: `scale == 1.007"
    )
    assert "at tt/rc2.py:3: `return torch.sin(x) * scale + 1`" in likely


@pytest.mark.parametrize(
    ("log", "cause"),
    [
        ("torch_trace_cpu_graph_break_in_loop.log", dg.COMPILED_CODE_GONE),
        ("torch_trace_cpu_recompile_limit.log", dg.RECOMPILE),
    ],
)
def test_a_lost_compile_leads_unshared_where_the_profiles_see_little_of_the_slowdown(
    log: str, cause: str
) -> None:
    # a slowdown the profiles cannot see (planted on a virtual clock): 333 µs of 3600 µs
    comp = parse_log((DATA / log).read_text()).to_dict()
    d = dg.diagnose(_ev(COMPILED, EAGER, 400.0, 4000.0, compile=comp))
    assert d.cause == cause and " per call); likely cause: " in d.paragraph, d.paragraph
    assert (
        ". The profiles show 9 % of the slowdown (+333.0 of +3600.0 µs per call): the rest is "
        "time they do not measure" in d.paragraph
    )
    # a change the profiles measure at 9 % of the slowdown still does not lead
    gemm = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
    d = dg.diagnose(_ev(_inv([(gemm, 200.0, 1.0)]), _inv([(gemm, 533.0, 1.0)]), 400.0, 4000.0))
    assert dg.LEAD not in d.paragraph and "The profiles show" not in d.paragraph, d.paragraph
    assert "No change in the profiles explains much of it; the largest: " in d.paragraph


def test_recompiles_that_leave_the_compiled_code_are_not_first() -> None:
    comp = parse_log((DATA / "torch_trace_graph_break.log").read_text()).to_dict()
    same = _cpu_inv(
        2.0, [("Torch-Compiled Region: 0/0", 50.0), ("Torch-Compiled Region: 1/0", 30.0)]
    )
    slower = _cpu_inv(2.0, [("Torch-Compiled Region: 0/0", 50.0), ("Torch-Compiled Region: 1/0", 90.0)])  # fmt: skip
    d = dg.diagnose(_ev(same, slower, 80.0, 140.0, compile=comp))
    assert d.cause == dg.KERNEL_SLOWER, d.paragraph
    # the recompiles explain none of the slowdown: the details list them, no sentence does
    assert dg.RECOMPILE not in d.causes and dg.COMPILED_CODE_GONE not in d.causes
    assert "compile: 5 graph(s), 1 graph break(s), 3 recompile(s)" in d.details


@pytest.mark.parametrize(
    ("base", "current", "run", "why"),
    [
        (COMPILED, False, True, "the compiled code is gone: the baseline ran 1 compiled region(s)"),
        (_inv([("triton_poi_fused_add_0", 8.0, 1.0)]), False, True, "the compiled code is gone"),
        (EAGER, True, True, "compiled code in the profile"),
        (EAGER, False, False, "not compiled code"),
        (None, None, False, "no profiler pass"),
        # an inventory saved before ``compiled`` existed: the compiled region's name says it
        ({k: v for k, v in COMPILED.items() if k not in ("compiled", "compiled_regions_per_call")},
         False, True, "the compiled code is gone"),
    ],
)  # fmt: skip
def test_the_trace_is_taken_when_either_side_compiled(
    base: dict | None, current: bool | None, run: bool, why: str
) -> None:
    got_run, got_why = cs.trace_decision([base], current)
    assert got_run == run and got_why.startswith(why), got_why


# --- layout: kernel names from H200 profiles -------------------------------------------

NCHW_TO_NHWC = (
    "void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, true, "
    "(cudnnKernelDataType_t)2>(cudnn::engines_precompiled::nchw2nhwc_params_t<float>, "
    "float const*, float*)"
)
NHWC_TO_NCHW = (
    "void cudnn::engines_precompiled::nhwcToNchwKernel<float, float, float, true, false, "
    "(cudnnKernelDataType_t)0>(cudnn::engines_precompiled::nhwc2nchw_params_t<float>, "
    "float const*, float*)"
)
CONV_NHWC = "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cudnn"  # fmt: skip
CONV_NCHW = "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nchwkcrs_nchw_tilesize64x64x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cudnn"  # fmt: skip
BN_CL = "void at::native::batch_norm_transform_input_channels_last_kernel<float, float, float, 4>(float const*, float const*, float const*, float const*, float const*, float*, int, int, bool)"  # fmt: skip
BN = "void at::native::batch_norm_transform_input_kernel<float, float, float, int>(at::GenericPackedTensorAccessor<float const, 4ul, at::RestrictPtrTraits, int>)"  # fmt: skip


def test_lost_channels_last_is_one_layout_cause_with_the_fix() -> None:
    base = _inv([(CONV_NHWC, 120.0, 2.0), (BN_CL, 30.0, 8.0)])
    cur = _inv([(CONV_NCHW, 150.0, 2.0), (NCHW_TO_NHWC, 20.0, 2.0), (NHWC_TO_NCHW, 18.0, 2.0),
                (BN, 42.0, 8.0)])  # fmt: skip
    d = dg.diagnose(_ev(base, cur, 160.0, 240.0))
    assert d.cause == dg.LAYOUT, d.paragraph
    likely = dg.lead(d.paragraph)
    assert likely.startswith("the memory layout changed: layout conversions appeared (")
    assert "nchwToNhwcKernel" in likely and "nhwcToNchwKernel" in likely
    assert (
        "changed variant (NHWC -> NCHW)" in likely and "batch_norm_transform_input_kernel" in likely
    )
    assert "memory_format=torch.channels_last" in likely
    # told once: no separate variant, new-kernel or copy findings for the same kernels
    assert d.causes.count(dg.LAYOUT) == 1
    assert not {dg.KERNEL_VARIANT, dg.MORE_KERNELS, dg.EXTRA_COPY} & set(d.causes), d.paragraph


#: a cuDNN kernel that reads NHWC (``nhwckrsc``: activations NHWC, filters KRSC) and writes NCHW
CONV_NHWC_IN_NCHW_OUT = CONV_NHWC.replace("_nhwckrsc_nhwc_", "_nhwckrsc_nchw_")
CONV_NCHW_IN_NHWC_OUT = CONV_NCHW.replace("_nchwkcrs_nchw_", "_nchwkcrs_nhwc_")


@pytest.mark.parametrize(
    ("name", "layout"),
    [(CONV_NHWC, "NHWC"), (CONV_NCHW, "NCHW"), (CONV_NHWC_IN_NCHW_OUT, "NCHW"),
     (CONV_NCHW_IN_NHWC_OUT, "NHWC"), (NCHW_TO_NHWC, "NHWC"), (NHWC_TO_NCHW, "NCHW"),
     (BN_CL, "NHWC"), (BN, None)],
)  # fmt: skip
def test_a_kernel_layout_is_the_one_it_writes(name: str, layout: str | None) -> None:
    # the last layout token of a name wins: a conversion's target, a convolution's output
    assert cs.conv_layout(name) == layout


@pytest.mark.parametrize(
    ("old", "new", "direction"),
    [(CONV_NHWC, CONV_NHWC_IN_NCHW_OUT, "(NHWC -> NCHW)"),
     (CONV_NCHW, CONV_NCHW_IN_NHWC_OUT, "(NCHW -> NHWC)")],
)  # fmt: skip
def test_a_conv_that_now_writes_the_other_layout_is_told_in_that_direction(
    old: str, new: str, direction: str
) -> None:
    base = _inv([(old, 120.0, 2.0)])
    cur = _inv([(new, 150.0, 2.0), (NCHW_TO_NHWC, 20.0, 2.0), (NHWC_TO_NCHW, 18.0, 2.0)])
    d = dg.diagnose(_ev(base, cur, 120.0, 190.0))
    assert d.cause == dg.LAYOUT, d.paragraph
    assert f"changed variant {direction}: " in dg.lead(d.paragraph), d.paragraph


def test_conversions_without_a_conv_change_are_not_a_layout_story() -> None:
    base = _inv([(CONV_NHWC, 120.0, 2.0)])
    cur = _inv([(CONV_NHWC, 120.0, 2.0), (NCHW_TO_NHWC, 40.0, 2.0)])
    d = dg.diagnose(_ev(base, cur, 120.0, 160.0))
    assert dg.LAYOUT not in d.causes and d.cause == dg.MORE_KERNELS, d.paragraph


def test_a_conv_variant_change_without_conversions_is_the_conv_algorithm_story() -> None:
    # no conversion kernels: not the layout story, but cuDNN's choice, told before the names
    base = _inv([(CONV_NHWC, 120.0, 2.0)])
    cur = _inv([(CONV_NCHW, 160.0, 2.0)])
    d = dg.diagnose(_ev(base, cur, 120.0, 160.0))
    assert dg.LAYOUT not in d.causes and d.cause == dg.CONV_ALGORITHM, d.paragraph
    likely = dg.lead(d.paragraph)
    assert likely.startswith(
        "cuDNN now runs the convolutions as implicit GEMM in NCHW (tf32) instead of implicit "
        "GEMM in NHWC (tf32) (the layout changed: keep the model and its input in channels_last"
    ), likely
    assert dg.KERNEL_VARIANT not in d.causes


def test_on_the_cpu_contiguous_copies_and_a_conv_change_are_a_layout_story() -> None:
    base = _cpu_inv(0.0, [("aten::mkldnn_convolution", 900.0)])
    cur = _cpu_inv(0.0, [("aten::thnn_conv2d", 1300.0), ("aten::contiguous", 200.0)])
    d = dg.diagnose(_ev(base, cur, 900.0, 1500.0))
    assert d.cause == cs.LAYOUT and "aten::contiguous" in dg.lead(d.paragraph)


# --- Triton launch configs ----------------------------------------------------------------


def test_a_triton_config_change_names_before_and_after() -> None:
    base = _inv([("matmul_kernel", 30.0, 1.0, [512, 1, 1], [256, 1, 1]), ("nvjet_x", 5.0, 1.0)])
    cur = _inv([("matmul_kernel", 55.0, 1.0, [2048, 1, 1], [128, 1, 1]), ("nvjet_x", 5.0, 1.0)])
    log = (
        "Triton autotuning for function matmul_kernel,\nwith key as (4096, 4096, 4096),\n"
        "finished after 1.52s,\nbest config selected: BLOCK_SIZE_M: 64, BLOCK_SIZE_N: 64, "
        "BLOCK_SIZE_K: 32, GROUP_SIZE_M: 8, num_warps: 4, num_ctas: 1, num_stages: 4, "
        "maxnreg: None;\n"
    )
    cfgs = parse_autotune_log(log)
    assert cfgs["matmul_kernel"]["num_stages"] == "4" and "maxnreg" not in cfgs["matmul_kernel"]
    d = dg.diagnose(_ev(base, cur, 35.0, 60.0, triton_configs=cfgs))
    assert d.cause == dg.TRITON_CONFIG, d.paragraph
    likely = dg.lead(d.paragraph)
    assert likely.startswith(
        "the Triton kernel matmul_kernel runs with another launch config: before grid 512x1x1, "
        "num_warps=8, now grid 2048x1x1, BLOCK_SIZE_M=64, BLOCK_SIZE_N=64, BLOCK_SIZE_K=32, "
        "GROUP_SIZE_M=8, num_warps=4, num_ctas=1, num_stages=4; 30.0 -> 55.0 µs per call"
    )
    assert dg.KERNEL_SLOWER not in d.causes  # the same kernel is not told twice


def test_an_inductor_kernel_with_the_same_config_is_only_slower() -> None:
    name = "triton_poi_fused_add_mul_0"
    base = _inv([(name, 30.0, 1.0, [1024, 1, 1], [128, 1, 1])])
    cur = _inv([(name, 50.0, 1.0, [1024, 1, 1], [128, 1, 1])])
    d = dg.diagnose(_ev(base, cur, 30.0, 50.0))
    assert d.cause == dg.KERNEL_SLOWER and dg.TRITON_CONFIG not in d.causes


def test_library_kernels_are_not_triton() -> None:
    assert cs.is_triton("triton_poi_fused_add_0") and cs.is_triton("matmul_kernel")
    assert not cs.is_triton("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32")
    assert not cs.is_triton("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT")
    assert not cs.is_triton("cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>")


def test_the_limit_story_names_the_function_the_log_names_once() -> None:
    # torch 2.13's log names the function on the first recompile's reasons only
    recompiles = [
        {"guard": "t == 0.01", "function": "bad_fn", "where": "m.py:3", "code": "f(t)"},
        {"guard": "t == 0.02", "function": None, "where": "m.py:3", "code": "f(t)"},
    ]
    limit = {"limit": {"name": "recompile_limit", "value": 8}}
    sentence = cs._limit_sentence(limit, recompiles, 9, "")
    assert sentence.startswith("torch.compile recompiled `bad_fn` 8 time(s)")
    assert "the guard that failed: `t == 0.02`" in sentence
