"""The first sentence names the cause and its share: on recorded evidence, and on the patterns
that led the old diagnosis to a symptom.

``tests/data/diagnosis/*.json`` hold what captures of the zoo's bad variants read (their
``evidence.json``, gathered by ``bench/diag_replay.py --export``): on the H200, the H100 and
the CPU. Each case of ``bench/zoo/cases.py`` says which cause its first sentence must name.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf.artifacts.analysis import diagnose as dg
from pytest_gpuperf.artifacts.analysis.attribution import MIN_LEAD

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "diagnosis"
_spec = importlib.util.spec_from_file_location("zoo_cases", ROOT / "bench" / "zoo" / "cases.py")
assert _spec is not None and _spec.loader is not None
cases = sys.modules["zoo_cases"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cases)


def _want(rec: dict[str, Any]) -> str:
    case = cases.BY_NAME[rec["case"]]
    return str(case.cpu_cause if rec["analysis"]["device"] == "cpu" else case.cause)


RECORDED = [
    pytest.param(rec, id=f"{path.stem}:{rec['case']}")
    for path in sorted(DATA.glob("*.json"))
    for rec in json.loads(path.read_text())["records"]
    if _want(rec)
]


def test_every_zoo_case_names_the_cause_its_bad_variant_must_get() -> None:
    causes = {c.cause for c in cases.CASES if c.kind in ("realistic", "synthetic")}
    assert "" not in causes and causes <= set(dg.CAUSES), causes - set(dg.CAUSES)
    assert {c.cpu_cause for c in cases.CASES} - {""} <= set(dg.CAUSES)
    assert len(RECORDED) >= 31  # the H200's, the H100's and the CPU's records


@pytest.mark.parametrize("rec", RECORDED)
def test_the_first_sentence_names_the_cause_on_recorded_evidence(rec: dict[str, Any]) -> None:
    d = dg.diagnose(dg.Evidence.from_record(rec))
    assert d.cause == _want(rec), d.paragraph
    # the share is of the slowdown, or of what the profiles show when they disagree with it
    first = d.paragraph.split(". ", 1)[0]
    assert re.search(r"; likely cause, \d+ % of (the slowdown|what the profiles show): ", first), (
        first
    )


# --- the patterns: the cause, not the allocations that come with it -------------------
#
# Kernel names and figures of an H100 run of 13 realistic cases: each slowed down
# with more allocations per call, which the old diagnosis named first with the advice to
# preallocate a buffer, whatever the cause.

ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::{}<c10::BFloat16>, std::array<char*, {}>>(int, at::native::{}<c10::BFloat16>, std::array<char*, {}>)"  # fmt: skip
REDUCE = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::BFloat16, at::native::MeanOps<float, float, float, float>, unsigned int, c10::BFloat16, 4>>(at::native::ReduceOp<c10::BFloat16, at::native::MeanOps<float, float, float, float>, unsigned int, c10::BFloat16, 4>)"  # fmt: skip
LAYER_NORM = "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float, false>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)"  # fmt: skip
NVJET = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
NVJET_TN = "nvjet_sm90_tst_128x256_64x4_2x1_v_bz_TNN"
FUSED_ADAM = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, float*, double, double, double, double, double, bool, float*, float*>(at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, float*, double, double, double, double, double, bool, float*, float*)"  # fmt: skip


def _ew(functor: str) -> str:
    return ELEMENTWISE.format(functor, 3, functor, 3)


def _inv(kernels: list[tuple[str, float, float]], per_call: float, busy: float) -> dict:
    return {"schema": 1, "device": "cuda", "per_call_us": per_call, "busy_fraction": busy,
            "other_us_per_call": 0.0, "syncs_per_call": 0.0,
            "kernels": [{"name": n, "kind": "memcpy" if n.startswith("Memcpy") else "kernel",
                         "us_per_call": us, "launches": k, "us_per_launch": us / k}
                        for n, us, k in kernels]}  # fmt: skip


def _memory(allocs: float, mib: float) -> dict:
    return {"available": True, "allocations_per_call": allocs,
            "allocated_bytes_per_call": mib * 2**20, "device_allocs_per_call": 0.0,
            "alloc_retries": 0}  # fmt: skip


def _diagnose(
    base: dict, cur: dict, b_us: float, c_us: float, allocs: tuple[float, float]
) -> dg.Diagnosis:
    ev = dg.Evidence(
        key="cases.py::test_case@cuda-events", display="test_case", baseline_s=b_us * 1e-6,
        current_s=c_us * 1e-6, baseline_inventory=base, current_inventory=cur,
        baseline_memory=[_memory(allocs[0], 16.0)], current_memory=_memory(allocs[1], 96.0),
    )  # fmt: skip
    return dg.diagnose(ev)


def _record(file: str, case: str) -> dict[str, Any]:
    (rec,) = [r for r in json.loads((DATA / file).read_text())["records"] if r["case"] == case]
    return dict(rec)


def _first_and_allocations(d: dg.Diagnosis) -> tuple[str, str]:
    first, _, rest = d.paragraph.partition(". ")
    return first, rest


def test_a_hand_written_layer_norm_is_unfused_ops_not_a_buffer_per_call() -> None:
    base = _inv([(NVJET, 300.0, 2.0), (LAYER_NORM, 40.0, 1.0)], 360.0, 0.95)
    ops = [(REDUCE, 60.0, 2.0), (_ew("CUDAFunctor_sub"), 40.0, 2.0), (_ew("pow_tensor_scalar_kernel"), 20.0, 1.0),
           (_ew("AUnaryFunctor_add"), 40.0, 2.0), (_ew("sqrt_kernel_cuda"), 20.0, 1.0),
           (_ew("BinaryFunctor_div"), 20.0, 1.0), (_ew("CUDAFunctor_mul"), 20.0, 1.0)]  # fmt: skip
    cur = _inv([(NVJET, 300.0, 2.0), *ops], 560.0, 0.93)
    d = _diagnose(base, cur, 360.0, 560.0, (4.0, 12.0))
    first, rest = _first_and_allocations(d)
    assert d.cause == dg.UNFUSED and dg.ALLOCATION_CHURN not in d.causes, d.paragraph
    assert (
        "ops that ran fused now run one kernel each: LayerNorm (vectorized_layer_norm_kernel"
        in first
    )
    assert "F.layer_norm (nn.LayerNorm)" in first and "torch.compile" in first
    assert "preallocated" not in d.paragraph
    # the allocations are said, as what the unfused ops bring
    assert "With it: 4 -> 12 allocations per call" in rest and "not a cause of their own" in rest


def test_checkpointing_recomputes_the_forwards_gemms_and_says_so() -> None:
    gelu = _ew("GeluCUDAKernelImpl")
    base = _inv([(NVJET, 900.0, 6.0), (NVJET_TN, 600.0, 6.0), (gelu, 60.0, 4.0)], 1600.0, 0.97)
    cur = _inv([(NVJET, 1200.0, 8.0), (NVJET_TN, 600.0, 6.0), (gelu, 90.0, 6.0)], 1950.0, 0.97)
    d = _diagnose(base, cur, 1600.0, 1950.0, (30.0, 22.0))
    first, _ = _first_and_allocations(d)
    assert d.cause == dg.RECOMPUTE, d.paragraph
    assert "work is recomputed: the same GEMMs run 6 -> 8 times per call" in first
    assert "torch.utils.checkpoint" in first and "checkpoint fewer layers" in first
    assert "preallocated" not in d.paragraph


def test_waiting_that_grows_with_recomputed_work_is_its_consequence_not_the_cause() -> None:
    # the H100's checkpoint_recompute: the GPU idles far more (busy 84 % -> 30 %) while the
    # checkpointed forward runs again; that waiting is the host issuing the recomputed work
    rec = _record("h100-2026-12-07-call3.json", "checkpoint_recompute")
    d = dg.diagnose(dg.Evidence.from_record(rec))
    first, rest = _first_and_allocations(d)
    assert d.causes == [dg.RECOMPUTE], d.paragraph
    assert re.search(
        r"likely cause, (9\d|100) % of the slowdown: work is recomputed: the same", first
    )
    assert "With it: the GPU waits for the host (busy 30 % of the profiled calls, 84 %" in rest
    # the same record without the recomputed launches: the waiting is the cause it was
    base = {k["name"]: k for k in rec["baseline_inventory"]["kernels"]}
    for k in rec["current_inventory"]["kernels"]:
        k.update(launches=base[k["name"]]["launches"], us_per_call=base[k["name"]]["us_per_call"])
    d = dg.diagnose(dg.Evidence.from_record(rec))
    assert d.cause == dg.ws.GPU_IDLE and dg.RECOMPUTE not in d.causes, d.paragraph


def test_per_tensor_optimizer_kernels_name_foreach_and_fused() -> None:
    base = _inv([(NVJET, 500.0, 3.0), (FUSED_ADAM, 120.0, 2.0)], 640.0, 0.95)
    per = [(_ew("CUDAFunctorOnSelf_add"), 150.0, 96.0), (_ew("CUDAFunctor_mul"), 140.0, 96.0),
           (_ew("lerp_kernel_scalar"), 80.0, 48.0), (_ew("addcmul_cuda_kernel"), 80.0, 48.0),
           (_ew("sqrt_kernel_cuda"), 60.0, 48.0), (_ew("BinaryFunctor_div"), 70.0, 48.0)]  # fmt: skip
    cur = _inv([(NVJET, 500.0, 3.0), *per], 1900.0, 0.62)
    d = _diagnose(base, cur, 640.0, 1900.0, (2.0, 98.0))
    first, _ = _first_and_allocations(d)
    assert d.cause == dg.PER_TENSOR, d.paragraph
    assert (
        "per-tensor kernels replaced the multi-tensor ones: multi_tensor_apply_kernel gone" in first
    )
    assert "foreach=True or fused=True" in first and "preallocated" not in d.paragraph


def test_a_hand_written_rms_norm_names_rms_norm_not_layer_norm() -> None:
    # on CUDA, F.rms_norm runs the LayerNorm kernel with its template flag rms_norm on
    base = _inv([(NVJET, 300.0, 2.0), (LAYER_NORM.replace("float, false>", "float, true>"), 30.0, 1.0)],
                340.0, 0.95)  # fmt: skip
    ops = [(_ew("CastFunctor"), 40.0, 2.0), (_ew("pow_tensor_scalar_kernel"), 30.0, 1.0),
           (REDUCE, 30.0, 1.0), (_ew("AUnaryFunctor_add"), 10.0, 1.0),
           (_ew("rsqrt_kernel_cuda"), 10.0, 1.0), (_ew("CUDAFunctor_mul"), 60.0, 2.0)]  # fmt: skip
    cur = _inv([(NVJET, 300.0, 2.0), *ops], 490.0, 0.93)
    d = _diagnose(base, cur, 340.0, 490.0, (3.0, 9.0))
    first, _ = _first_and_allocations(d)
    assert d.cause == dg.UNFUSED, d.paragraph
    assert "one kernel each: RMSNorm (vectorized_layer_norm_kernel" in first
    assert "F.rms_norm (nn.RMSNorm)" in first and "F.layer_norm" not in d.paragraph


def test_gradients_zeroed_one_by_one_name_set_to_none() -> None:
    # zero_grad(set_to_none=False) with SGD's foreach step: a fill per parameter, and backward
    # adds into each gradient instead of handing its result over
    sgd = FUSED_ADAM.replace("FusedAdamMathFunctor", "PointwiseOpScalarFunctor")
    add = _ew("CUDAFunctor_add")
    base = _inv([(NVJET, 900.0, 36.0), (sgd, 60.0, 3.0), (add, 40.0, 24.0)], 1100.0, 0.9)
    cur = _inv([(NVJET, 900.0, 36.0), (sgd, 60.0, 3.0), (add, 120.0, 72.0),
                (_ew("FillFunctor"), 100.0, 48.0)], 1320.0, 0.85)  # fmt: skip
    d = _diagnose(base, cur, 1100.0, 1320.0, (60.0, 12.0))
    first, _ = _first_and_allocations(d)
    assert d.cause == dg.PER_TENSOR, d.paragraph
    assert "tensors are zeroed one kernel each: 48 more fill launches per call" in first
    assert "set_to_none=True" in first and "preallocated" not in d.paragraph


def test_a_sync_of_an_op_sized_by_the_data_says_to_keep_the_shape_fixed() -> None:
    # the H200's decode_item_sync, its syncs moved into a nonzero (loss[mask], masked_select)
    rec = _record("h200-2026-12-04.json", "decode_item_sync")
    d = dg.diagnose(dg.Evidence.from_record(rec))
    assert d.cause == dg.HOST_SYNC and ".item()" in d.paragraph and "mask" not in d.paragraph
    for sync in rec["analysis"]["syncs"]:
        sync["ops"] = ["aten::nonzero"]
    d = dg.diagnose(dg.Evidence.from_record(rec))
    first, _ = _first_and_allocations(d)
    assert d.cause == dg.HOST_SYNC, d.paragraph
    assert "from aten::nonzero; an op whose output's size depends on the data" in first
    assert "torch.where" in first and ".item()" not in first


def test_launch_gaps_the_measurement_hid_do_not_outrank_the_kernels() -> None:
    # the H100's channels_last_lost, judged on device time (the host hidden): the profile's
    # idle time grows by 159 µs per call, the measured slowdown is 58 µs and the kernels
    # explain 55 of them; the probe saw a convolution's input leave channels_last
    rec = _record("h100-2026-12-07-e-diag2.json", "channels_last_lost")
    d = dg.diagnose(dg.Evidence.from_record(rec))
    first, _ = _first_and_allocations(d)
    assert d.cause == dg.LAYOUT and dg.LAUNCH_BOUND not in d.causes, d.paragraph
    assert "convolution inputs are contiguous now, where all were channels_last" in first
    assert "with them elementwise_kernel<CUDAFunctor_add>" in first


def test_a_faster_gemm_variant_beside_a_new_copy_leaves_the_copy_as_the_cause() -> None:
    # the H100's key_transpose_contiguous: k.transpose(-2, -1).contiguous() adds a copy, and
    # cuBLAS runs its NN variant instead of TN, 3 µs faster: a variant, not a new kernel
    rec = _record("h100-2026-12-07-e-diag2.json", "key_transpose_contiguous")
    d = dg.diagnose(dg.Evidence.from_record(rec))
    assert d.causes == [dg.EXTRA_COPY], d.paragraph
    assert "memory layout" not in d.paragraph and "new kernel nvjet" not in d.paragraph


def test_hand_written_attention_claims_the_steps_over_the_score_matrix() -> None:
    # the H100's attention_handwritten: the scale, the mask's fill and its copy are the math
    # attention's own steps, not a buffer to preallocate
    rec = _record("h100-2026-12-07-e-diag.json", "attention_handwritten")
    d = dg.diagnose(dg.Evidence.from_record(rec))
    first, _ = _first_and_allocations(d)
    assert d.causes == [dg.SDPA_BACKEND], d.paragraph
    assert re.search(r"likely cause, 9\d % of the slowdown: the attention now runs the math", first)
    assert "preallocated" not in d.paragraph


def test_a_copy_from_pageable_memory_is_told_as_such_not_as_a_kernel_variant() -> None:
    # the issue's words: "a different kernel variant runs: Memcpy HtoD replaced Memcpy HtoD
    # (702.6 -> 3587.0 µs per call, 104 % of the slowdown)"
    base = _inv([("Memcpy HtoD (Pinned -> Device)", 702.6, 1.0), (NVJET, 400.0, 2.0)], 1200.0, 0.95)
    cur = _inv(
        [("Memcpy HtoD (Pageable -> Device)", 3587.0, 1.0), (NVJET, 400.0, 2.0)], 4100.0, 0.97
    )
    d = _diagnose(base, cur, 1150.0, 3930.0, (2.0, 3.0))
    first, _ = _first_and_allocations(d)
    assert d.cause == dg.H2D_COPY and dg.KERNEL_VARIANT not in d.causes, d.paragraph
    assert "the host-to-device copy now reads pageable memory instead of pinned" in first
    assert "702.6 -> 3587.0 µs per call" in first
    assert "pin_memory()" in first and "non_blocking=True" in first
    assert "replaced Memcpy" not in d.paragraph


def test_a_finding_that_explains_little_never_leads() -> None:
    # a new kernel of 3 % of the slowdown, however unusual, and a GEMM 90 % slower
    odd = "void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, true>(int)"
    base = _inv([(NVJET, 200.0, 1.0)], 220.0, 0.95)
    cur = _inv([(NVJET, 380.0, 1.0), (odd, 6.0, 1.0)], 410.0, 0.95)
    d = _diagnose(base, cur, 200.0, 400.0, (1.0, 1.0))
    assert d.cause == dg.KERNEL_SLOWER and d.causes == [dg.KERNEL_SLOWER], d.paragraph
    small = dg.Evidence(key="k", display="k", baseline_s=200e-6, current_s=400e-6,
                        baseline_inventory=base, current_inventory=_inv([(NVJET, 205.0, 1.0), (odd, 40.0, 1.0)], 260.0, 0.9))  # fmt: skip
    d = dg.diagnose(small)  # it explains 20 % of the slowdown, under MIN_LEAD
    assert MIN_LEAD > 0.2 and dg.LEAD not in d.paragraph, d.paragraph
    assert (
        "No change in the profiles explains much of it; the largest: new kernel nchwToNhwcKernel"
        in d.paragraph
    )
    assert "(20 %)" in d.paragraph


def test_against_a_base_tree_never_profiled_the_headline_does_not_blame_python() -> None:
    # newcomer review 3, problem 6: --gpuperf-ab, the base tree was not profiled
    from pytest_gpuperf.artifacts.analysis.timeline import analyze, parse_trace
    from tests.unit.kineto import FakeTrace

    t = FakeTrace()
    for i in range(3):
        t.call(i, 1000.0 + 300 * i, 200.0)
        for j in range(3):
            t.op("aten::mm", 1000.0 + 300 * i + 60 * j, 55.0)
    ev = dg.Evidence(key="k", display="test_bench", baseline_s=60e-6, current_s=185e-6,
                     analysis=analyze(parse_trace(t.doc())), ab=True,
                     current_inventory={"device": "cpu", "kernels": [
                         {"name": "aten::mm", "kind": "op", "us_per_call": 165.0, "launches": 3.0}]})  # fmt: skip
    d = dg.diagnose(ev)
    assert "Python" not in d.paragraph and "cProfile" not in d.paragraph, d.paragraph
    assert "the base tree was not profiled" in d.paragraph
    assert "the heaviest ops now: aten::mm (165.0 µs per call, 3x)" in d.paragraph


def test_no_slowdown_no_causes_and_no_kernels_called_slower() -> None:
    # newcomer review 3, problem 12: a numerics-gated failure under a no-change time verdict
    base = _inv([("aten::cumsum", 116.6, 1.0)], 130.0, 0.9)
    cur = _inv([("aten::cumsum", 193.7, 1.0)], 200.0, 0.9)
    ev = dg.Evidence(key="k", display="test_scaled_sum", baseline_s=130e-6, current_s=119e-6,
                     change="-8.4 % time", verdict="no-change", baseline_inventory=base,
                     current_inventory=cur)  # fmt: skip
    d = dg.diagnose(ev)
    assert d.causes == [] and "slower" not in d.paragraph and "cause" not in d.paragraph
    assert d.paragraph.startswith("test_scaled_sum: no slowdown to explain (-8.4 % time")
    assert not any("slower:" in x for x in d.details), d.details
