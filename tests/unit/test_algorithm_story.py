"""The algorithm and precision story, on kernel lists recorded on the H200.

The baseline sides are the zoo's good variants as a baseline saved them on the H200
(tests/data/artifacts/h200_zoo_inventories.json). Their bad variants were never profiled
there; the current sides use H200 kernel names seen elsewhere: the fp32 SIMT GEMM of a
planted variant (bench/results/h200-2026-11-29/capture-variant.txt), the TF32 GEMM of
the tf32 case's good variant, cuBLASLt's split-K reduction and the 64x64 nvjet tile of
two other zoo cases, and the flash and memory-efficient attention kernels as PyTorch
names them (pytorch_flash::flash_fwd_kernel, fmha_cutlassF_*). bench/gpu/part-activity.sh
records the bad variants' lists, so these rules can be re-checked on them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf.artifacts.analysis import algorithm_story as als
from pytest_gpuperf.artifacts.analysis import diagnose as dg
from pytest_gpuperf.artifacts.analysis.inventory import diff_inventories, normalize

DATA = Path(__file__).parent.parent / "data" / "artifacts"
REC = json.loads((DATA / "h200_zoo_inventories.json").read_text())["inventories"]

NVJET_BIAS = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT"
NVJET_4096 = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
NVJET_64 = "nvjet_sm90_tst_64x64_64x13_2x1_v_bz_NNT"
TF32 = "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x256x32_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas"  # fmt: skip
SIMT = "cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>"
FFMA = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas"  # fmt: skip
SPLITK = "cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, false, float, float, float, true, false, false, false>"  # fmt: skip
CUDNN_SDPA = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0"  # fmt: skip
FLASH = normalize(
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<(int)64, (int)128, (int)128, "
    "(int)4, (bool)0, (bool)0, cutlass::bfloat16_t, Flash_kernel_traits<(int)64, (int)128, "
    "(int)128, (int)4, cutlass::bfloat16_t>>, (bool)0, (bool)1, (bool)0, (bool)0, (bool)0, "
    "(bool)1, (bool)0, (bool)0>(pytorch_flash::Flash_fwd_params)"
)
MEM_EFF = normalize(
    "fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel"
    "<cutlass::bfloat16_t, cutlass::arch::Sm80, true, 64, 128, 128, true, true>::Params)"
)
SOFTMAX = "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 11, false, false>(c10::BFloat16*, c10::BFloat16 const*, int, int, int, bool const*, int, bool)"  # fmt: skip
GELU_FP32 = "at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}, std::array<char*, 2>>"  # fmt: skip
CAT = "at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueType<2>, unsigned int, 4, 64, 64>"  # fmt: skip


def rec(case: str) -> dict[str, Any]:
    return json.loads(json.dumps(REC[case]))


def inv(kernels: list[tuple[str, float, float]], probe: dict[str, Any] | None = None) -> dict:
    out = {"schema": 1, "device": "cuda", "other_us_per_call": 0.0, "kernels": [
        {"name": n, "kind": "kernel", "us_per_call": us, "launches": k, "us_per_launch": us / k}
        for n, us, k in kernels
    ]}  # fmt: skip
    if probe is not None:
        out["probe"] = probe
    return out


def mm_probe(dtype: str, autocast: str | None, precision: str = "high", calls: int = 2) -> dict:
    return {
        "ops": {"linear": [{"dtypes": [dtype, dtype, dtype], "shapes": [[2048, 4096], [16384, 4096]],
                            "autocast": autocast, "fp32_precision": precision, "calls": calls}]},
        "flags": {"float32_matmul_precision": precision},
    }  # fmt: skip


def sdpa_probe(backend: str, *, mask: bool, causal: bool) -> dict:
    entry = {"dtypes": ["bfloat16"] * 3, "mask": mask, "is_causal": causal, "dropout_p": 0.0,
             "head_dim": 64, "backend": backend, "calls": 1}  # fmt: skip
    if mask:
        entry.update(mask_shape=[8, 1, 2048, 2048], mask_dtype="bfloat16")
    return {"ops": {"scaled_dot_product_attention": [entry]}, "flags": {}}


def diagnose(
    base: dict, cur: dict, b_us: float, c_us: float, **kw: Any
) -> tuple[dg.Diagnosis, str]:
    probe = cur.pop("probe", None)
    ev = dg.Evidence(
        key="test_zoo.py::test_zoo[x]@cuda-events", display="test_zoo[x]",
        baseline_s=b_us * 1e-6, current_s=c_us * 1e-6, baseline_inventory=base,
        current_inventory=cur, current_probe=probe,
        kernel_diff=diff_inventories(base, cur, (c_us - b_us) * 1e-6), **kw,
    )  # fmt: skip
    d = dg.diagnose(ev)
    return d, dg.lead(d.paragraph)


# --- what the names say -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "precision"),
    [(NVJET_BIAS, None), (NVJET_64, None), (TF32, "tf32"), (SIMT, "fp32"), (FFMA, "fp32"),
     (REC["channels_last_lost"]["kernels"][0]["name"], "bf16"),
     (REC["item_per_layer"]["kernels"][0]["name"], None),
     ("gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, true>", "fp32"),
     ("sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64", "fp16"),
     ("sm90_xmma_gemm_e4m3e4m3_bf16f32_f32_tn_n_tilesize128x128x128", "fp8")],
)  # fmt: skip
def test_the_precision_a_gemm_kernel_names(name: str, precision: str | None) -> None:
    # nvjet names carry no dtype: their "h" and "v" are no precision (both run bf16 GEMMs)
    assert als.gemm_precision(name) == precision


def test_the_backend_an_attention_kernel_names() -> None:
    assert als.sdpa_backend(CUDNN_SDPA) == "cudnn"  # its name holds "flash" too
    assert als.sdpa_backend(FLASH) == "flash"
    assert als.sdpa_backend(MEM_EFF) == "mem-efficient"
    assert als.sdpa_backend(SOFTMAX) is None and als.sdpa_backend(NVJET_64) is None
    assert not als.is_gemm(MEM_EFF) and not als.is_gemm(CUDNN_SDPA) and als.is_gemm(NVJET_64)
    assert als.tile(NVJET_4096) == "256x128" and als.tile(TF32) == "128x256"
    assert als.tile(SIMT) == "256x128"


# --- GEMM precision: the lost autocast, TF32 --------------------------------------------------


def _autocast_dropped(current_gemm: str, us: float, *, probes: bool) -> tuple[dg.Diagnosis, str]:
    base = rec("autocast_dropped")
    if probes:
        base["probe"] = mm_probe("float32", "bfloat16")
    cur = inv([(current_gemm, us, 2.0), (GELU_FP32, 93.0, 1.0)],
              mm_probe("float32", None, "high" if "tf32" in current_gemm else "highest")
              if probes else None)  # fmt: skip
    return diagnose(base, cur, 1174.0, 1174.0 + (us - 682.5) + 93.0 - 246.0)


def test_a_lost_autocast_with_tf32_allowed_opens_with_the_precision_sentence() -> None:
    d, likely = _autocast_dropped(TF32, 1365.0, probes=True)
    assert d.cause == dg.GEMM_PRECISION, d.paragraph
    assert likely.startswith(
        "the GEMMs now run in fp32 instead of bf16 (autocast is off), on TF32 tensor cores "
        "(TF32 is allowed: float32 matmul precision 'high'): sm90_xmma_gemm_f32f32_tf32f32"
    ), likely
    assert f"replaced {NVJET_BIAS}" in likely
    # the GEMMs and autocast's casts are one story: no variant or vanished-kernel finding
    assert not {dg.KERNEL_VARIANT, dg.MORE_KERNELS, dg.GEMM_HEURISTIC} & set(d.causes), d.causes


def test_a_lost_autocast_without_tf32_says_cuda_cores() -> None:
    d, likely = _autocast_dropped(SIMT, 5400.0, probes=True)
    assert d.cause == dg.GEMM_PRECISION
    assert likely.startswith(
        "the GEMMs now run in fp32 instead of bf16 (autocast is off), on CUDA cores: TF32 is "
        "not allowed either (float32 matmul precision 'highest'): Kernel2<cutlass_80_simt_sgemm"
    ), likely


def test_against_an_old_baseline_without_probe_the_casts_tell_the_precision() -> None:
    # a baseline saved before the probe existed: nvjet names no dtype, autocast's bf16 casts do
    d, likely = _autocast_dropped(TF32, 1365.0, probes=False)
    assert d.cause == dg.GEMM_PRECISION
    assert likely.startswith(
        "the GEMMs now run in fp32 instead of bf16/fp16 (usually autocast is off, or the "
        "weights became float32), on TF32 tensor cores"
    ), likely


def test_tf32_turned_off_names_the_setting() -> None:
    base = rec("tf32_off")
    base["probe"] = mm_probe("float32", None, "high", calls=1)
    cur = inv([(SIMT, 2900.0, 1.0)], mm_probe("float32", None, "highest", calls=1))
    d, likely = diagnose(base, cur, 596.8, 3150.0)
    assert d.cause == dg.GEMM_PRECISION
    assert likely.startswith(
        "the GEMMs now run in fp32 on CUDA cores (no tensor cores) instead of fp32 on TF32 "
        "tensor cores (TF32 is off now: torch.backends.cuda.matmul.allow_tf32 = False or "
        "torch.set_float32_matmul_precision('highest'), where it was 'high')"
    ), likely


def test_gpm_tells_the_figure_that_moved_with_the_precision_story() -> None:
    base = rec("autocast_dropped")
    cur = inv([(SIMT, 5400.0, 2.0)])
    b_act = {"available": True, "sm_util_pct": 71.0, "tensor_pct": 68.9, "dram_bw_util_pct": 13.0}
    c_act = {"available": True, "sm_util_pct": 95.0, "tensor_pct": 0.4, "fp32_util_pct": 80.0,
             "dram_bw_util_pct": 12.0}  # fmt: skip
    d, _ = diagnose(base, cur, 1174.0, 5900.0, baseline_activity=[b_act, b_act],
                    current_activity=c_act)  # fmt: skip
    assert d.cause == dg.GEMM_PRECISION
    assert (
        "GPU activity (NVML GPM): tensor activity fell 69 % -> 0.4 %, SM util rose 71 % -> 95 %: "
        "the GEMMs left the tensor cores." in d.paragraph
    ), d.paragraph
    assert any(
        x.startswith("activity (GPM, baseline -> now): SM util 71 % -> 95 %") for x in d.details
    )


# --- SDPA ------------------------------------------------------------------------------------


def test_an_explicit_mask_keeps_cudnn_but_is_named_before_the_kernel() -> None:
    # on the H200 both variants of the zoo case run cuDNN: the mask is the news
    base = rec("sdpa_mask_fallback")
    base["probe"] = sdpa_probe("cudnn", mask=False, causal=True)
    cur = inv([(CUDNN_SDPA, 402.0, 1.0)], sdpa_probe("cudnn", mask=True, causal=False))
    d, likely = diagnose(base, cur, 396.8, 620.0)
    assert d.cause == dg.SDPA_BACKEND, d.paragraph
    assert likely.startswith(
        "the attention still runs the cudnn backend, but with an explicit attn_mask of shape "
        "[8, 1, 2048, 2048] where is_causal=True was before: it reads the mask and computes the "
        "blocks a causal call skips; pass is_causal=True and no mask: cudnn_generated_fort_native"
    ), likely
    assert dg.KERNEL_SLOWER not in d.causes


def test_flash_to_math_after_a_mask_is_the_issues_sentence() -> None:
    base = inv([(FLASH, 180.0, 1.0)], sdpa_probe("flash", mask=False, causal=True))
    cur = inv([(NVJET_64, 300.0, 2.0), (SOFTMAX, 250.0, 1.0)],
              sdpa_probe("math", mask=True, causal=False))  # fmt: skip
    d, likely = diagnose(base, cur, 200.0, 780.0)
    assert d.cause == dg.SDPA_BACKEND
    assert likely.startswith(
        "the attention now runs the math backend instead of flash (an attn_mask is passed where "
        "is_causal=True was before; for a causal mask pass is_causal=True and no mask, which "
        "keeps flash)"
    ), likely
    assert not {dg.MORE_KERNELS, dg.KERNEL_VARIANT} & set(d.causes), d.causes


def test_a_backend_change_from_the_names_alone_hedges_the_why() -> None:
    base = rec("sdpa_mask_fallback")
    cur = inv([(MEM_EFF, 380.0, 1.0)])
    d, likely = diagnose(base, cur, 396.8, 600.0)
    assert d.cause == dg.SDPA_BACKEND
    assert likely.startswith(
        "the attention now runs the mem-efficient backend instead of cudnn (a mask, dropout, the "
        "dtype, the head size or non-contiguous inputs decide it; torch.nn.attention.sdpa_kernel"
    ), likely
    assert f"{MEM_EFF} replaced {CUDNN_SDPA[:50]}" in likely


def test_float32_attention_names_the_dtype() -> None:
    base = inv([(FLASH, 180.0, 1.0)], sdpa_probe("flash", mask=False, causal=True))
    fp32 = sdpa_probe("math", mask=False, causal=True)
    fp32["ops"]["scaled_dot_product_attention"][0]["dtypes"] = ["float32"] * 3
    cur = inv([(FFMA, 500.0, 2.0), (SOFTMAX, 300.0, 1.0)], fp32)
    _, likely = diagnose(base, cur, 200.0, 1000.0)
    assert likely.startswith(
        "the attention now runs the math backend instead of flash (q, k and v are float32 now: "
        "flash attention needs fp16 or bf16"
    ), likely


def test_attention_written_out_by_hand_names_the_fused_call() -> None:
    # nanoGPT's CausalSelfAttention without flash: q @ k^T, masked_fill, softmax, @ v; the
    # probe watched the call and saw batched matmuls, no scaled_dot_product_attention
    base = inv([(FLASH, 180.0, 1.0)], sdpa_probe("flash", mask=False, causal=True))
    by_hand = {"ops": {"matmul": [{"dtypes": ["bfloat16"] * 2, "shapes": [[8, 16, 2048, 64],
               [8, 16, 64, 2048]], "autocast": None, "fp32_precision": "highest", "calls": 2}]},
               "flags": {}}  # fmt: skip
    cur = inv([(NVJET_4096, 400.0, 2.0), (SOFTMAX, 300.0, 1.0)], by_hand)
    d, likely = diagnose(base, cur, 200.0, 1000.0)
    assert d.cause == dg.SDPA_BACKEND, d.paragraph
    assert likely.startswith(
        "the attention now runs the math backend instead of flash (no scaled_dot_product_attention"
        " call runs now: the attention is written out"
    ), likely
    assert "F.scaled_dot_product_attention(q, k, v, is_causal=True)" in likely
    assert (
        "sdpa_kernel" not in likely and "): flash_fwd_kernel<Flash_kernel_traits> gone (" in likely
    )
    # with no probe of the current side, what decides the backend is not known: hedged
    cur = inv([(NVJET_4096, 400.0, 2.0), (SOFTMAX, 300.0, 1.0)])
    _, likely = diagnose(base, cur, 200.0, 1000.0)
    assert "written out" not in likely and "sdpa_kernel" in likely


# --- cuBLAS at equal precision, convolutions ----------------------------------------------------


def test_another_tile_and_split_k_at_the_same_precision() -> None:
    base = rec("gemm_4096_plus5")
    base["probe"] = mm_probe("bfloat16", None)
    shapes = mm_probe("bfloat16", None)
    shapes["ops"]["linear"][0]["shapes"] = [[4096, 4100], [4100, 4096]]
    cur = inv([(NVJET_64, 260.0, 1.0), (SPLITK, 12.0, 1.0)], shapes)
    d, likely = diagnose(base, cur, 388.1, 470.0)
    assert d.cause == dg.GEMM_HEURISTIC, d.paragraph
    assert likely.startswith(
        "cuBLAS picked another GEMM kernel at the same precision: tile 256x128 -> 64x64, now "
        "split-K with splitKreduce_kernel<32>; the matmul shapes changed ([[2048, 4096], [16384, "
        "4096]] -> [[4096, 4100], [4100, 4096]]): nvjet_sm90_tst_64x64_64x13_2x1_v_bz_NNT replaced"
    ), likely
    assert dg.KERNEL_VARIANT not in d.causes


def test_cudnn_benchmark_turned_off_is_named_with_the_conv_algorithm() -> None:
    base = rec("channels_last_lost")
    conv = base["kernels"][0]["name"]
    base["probe"] = {"ops": {}, "flags": {"cudnn_benchmark": True}}
    winograd = conv.replace("implicit_gemm", "winograd")
    kernels = [(winograd if k["name"] == conv else k["name"], k["us_per_call"] * (1.6 if k["name"] == conv else 1),
                k["launches"]) for k in base["kernels"]]  # fmt: skip
    cur = inv(kernels, {"ops": {}, "flags": {"cudnn_benchmark": False}})
    d, likely = diagnose(base, cur, 533.1, 560.0)
    assert d.cause == dg.CONV_ALGORITHM, d.paragraph
    assert likely.startswith(
        "cuDNN now runs the convolutions as Winograd in NHWC (bf16) instead of implicit GEMM in "
        "NHWC (bf16) (cuDNN's heuristic chose another algorithm for these shapes and dtypes; "
        "torch.backends.cudnn.benchmark is off now (it was on)"
    ), likely


def test_the_same_kernels_slower_tell_no_algorithm_story() -> None:
    base = rec("gemm_4096_plus5")
    cur = inv([(NVJET_4096, 230.0, 1.0), ("Memset (Device)", 0.8, 1.0)])
    d, _ = diagnose(base, cur, 388.1, 440.0)
    assert not set(als.CAUSES) & set(d.causes) and d.cause == dg.KERNEL_SLOWER, d.paragraph


# --- what the allocator and GPM say -----------------------------------------------------------

_NO_ALLOC = {"available": True, "allocations_per_call": 0.0, "allocated_bytes_per_call": 0.0,
             "device_allocs_per_call": 0.0, "alloc_retries": 0}  # fmt: skip


def test_allocation_churn_is_named_from_the_allocators_figures() -> None:
    base = inv([(FLASH, 180.0, 1.0)])
    cur = inv([(FLASH, 180.0, 1.0), (CAT, 120.0, 1.0)])
    churn = {**_NO_ALLOC, "allocations_per_call": 1.0, "allocated_bytes_per_call": 64.0 * 2**20}
    d, likely = diagnose(base, cur, 200.0, 320.0, baseline_memory=[_NO_ALLOC] * 3,
                         current_memory=churn)  # fmt: skip
    assert d.cause == dg.ALLOCATION_CHURN, d.paragraph
    assert likely.startswith(
        "a buffer is allocated on every call: 0 -> 1 allocations per call, 0 B -> 64.0 MiB "
        "allocated per call (the caching allocator's counts)"
    ), likely
    assert "; with it CatArrayBatchedCopy" in likely and "1x per call" in likely
    assert dg.MORE_KERNELS not in d.causes  # the copy into the new buffer is the same story
    assert any(
        x.startswith("allocator (baseline -> now): allocations per call 0 -> 1") for x in d.details
    )


def test_cudamalloc_per_call_is_a_cache_not_reused() -> None:
    base, cur = inv([(FLASH, 180.0, 1.0)]), inv([(FLASH, 180.0, 1.0)])
    cur_mem = {**_NO_ALLOC, "device_allocs_per_call": 3.0}
    d, likely = diagnose(base, cur, 200.0, 500.0, baseline_memory=[_NO_ALLOC],
                         current_memory=cur_mem)  # fmt: skip
    assert d.cause == dg.ALLOCATION_CHURN
    assert likely.startswith(
        "0 -> 3 cudaMalloc calls per call: the allocator's cache is not reused"
    )


def test_a_memory_bound_kernel_is_called_so_from_gpm_alone() -> None:
    base = rec("mul_256M_plus5")
    mul = base["kernels"][0]["name"]
    cur = inv([(mul, 560.0, 1.0)])
    act = {"available": True, "sm_util_pct": 95.0, "sm_occupancy_pct": 77.0, "tensor_pct": 6.3,
           "dram_bw_util_pct": 77.0}  # fmt: skip
    d, _ = diagnose(base, cur, 717.0, 772.0, current_activity=act, baseline_activity=[act])
    assert d.cause == dg.KERNEL_SLOWER
    assert "GPM now: DRAM bandwidth at 77 % of peak: memory-bound." in d.paragraph
    assert "Nsight Compute" not in d.paragraph  # no ncu was run
    # no capture at all (no profile): GPM still speaks
    ev = dg.Evidence(key="k", display="k", baseline_s=717e-6, current_s=742e-6,
                     current_activity=act)  # fmt: skip
    assert "memory-bound" in dg.diagnose(ev).paragraph


def test_on_the_cpu_the_probes_tell_a_lost_autocast() -> None:
    # a CPU inventory lists operators, whose names say no dtype: the probes of both sides do
    def ops(us: float, probe: dict) -> dict:
        out = inv([], probe)
        out["device"] = "cpu"
        out["kernels"] = [{"name": "aten::linear", "kind": "op", "us_per_call": us,
                           "launches": 2.0, "us_per_launch": us / 2}]  # fmt: skip
        return out

    base = ops(350.0, mm_probe("float32", "bfloat16", "highest"))
    cur = ops(900.0, mm_probe("float32", None, "highest"))
    d, likely = diagnose(base, cur, 400.0, 950.0)
    assert d.cause == dg.GEMM_PRECISION
    assert likely == (
        "the matmuls now run in fp32 instead of bf16 (autocast is off): aten::linear "
        "(350.0 -> 900.0 µs per call)."
    )
    assert "; likely cause, 100 % of the slowdown: the matmuls" in d.paragraph
    # without the baseline's probe nothing says what the precision was
    base.pop("probe")
    d, _ = diagnose(base, ops(900.0, mm_probe("float32", None, "highest")), 400.0, 950.0)
    assert d.cause != dg.GEMM_PRECISION
