"""Kernel inventories and their diff: names that match across runs, shares of a slowdown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gpuperf.artifacts.analysis.inventory import (
    base_function,
    combine,
    diff_inventories,
    inventory_from_trace,
    is_gemm,
    normalize,
    short_name,
)
from pytest_gpuperf.artifacts.analysis.timeline import load_trace, parse_trace
from tests.unit.kineto import gpu_bound

DATA = Path(__file__).parent.parent / "data" / "artifacts"
#: One kernel as torch.profiler (Kineto), nsys and ncu print it on the same H200.
KINETO = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)"
)
NSYS = (
    "void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<float>, "
    "std::array<char *, (unsigned long)3>>(int, T2, T3)"
)
NCU = "void at::vectorized_elementwise_kernel<4, at::CUDAFunctor_add<float>, std::array<char *, 3>>(int, T2, T3)"


def test_names_normalise_to_one_key_per_kernel() -> None:
    assert normalize(KINETO) == normalize(NSYS)
    assert base_function(KINETO) == base_function(NSYS) == base_function(NCU)
    assert base_function(KINETO) == "vectorized_elementwise_kernel"
    assert short_name(KINETO) == "vectorized_elementwise_kernel<CUDAFunctor_add>"
    gemm = "nvjet_sm90_tst_128x64_64x8_1x2_h_bz_NNT"
    assert normalize(gemm) == base_function(gemm) == short_name(gemm) == gemm
    assert base_function("triton_poi_fused_add_mul_0") == "triton_poi_fused_add_mul_0"
    assert short_name("aten::add") == "aten::add"
    # float32 GEMMs on the H200 (torch 2.11): cutlass names its kernel by a template argument
    cutlass = (
        "void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>"
        "(cutlass_80_simt_sgemm_256x128_8x4_nn_align1::Params)"
    )
    assert base_function(cutlass) == "Kernel2"  # what ncu's --kernel-name-base function matches
    assert short_name(cutlass) == "Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>"
    assert is_gemm(cutlass) and is_gemm("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT")
    assert is_gemm("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize32x32x8_stage3_warpsize1x2x1")


def test_inventory_of_a_real_trace() -> None:
    inv = inventory_from_trace(parse_trace(load_trace(DATA / "kineto_h200_sync_h2d.json")))
    json.dumps(inv)  # JSON-safe
    assert inv["calls"] == 3 and inv["device"] == "cuda" and inv["device_name"] == "NVIDIA H200"
    names = [k["name"] for k in inv["kernels"]]
    assert names[0] == "Memcpy HtoD (Pageable -> Device)"  # the copy dominates
    gemm = next(k for k in inv["kernels"] if k["name"].startswith("nvjet"))
    assert gemm["launches"] == 1.0 and gemm["grid"] == [2, 64, 1] and gemm["registers"] == 168
    assert inv["syncs_per_call"] == 2.0 and inv["h2d_per_call"] == 1.0
    assert inv["h2d_bytes_per_call"] == pytest.approx(4 * 2**20, rel=1e-3)
    assert sum(k["launches"] for k in inv["kernels"] if k["kind"] == "kernel") == 4


def _inv(kernels: dict[str, float], **kw: float) -> dict[str, object]:
    t = gpu_bound(calls=2, kernels=tuple(kernels.items()))
    inv = inventory_from_trace(parse_trace(t.doc()))
    inv.update(kw)
    return inv


def test_a_swapped_gemm_is_a_variant_and_explains_the_slowdown() -> None:
    base = _inv({"nvjet_sm90_tst_256x128_bf16": 30.0, "elementwise_b": 5.0})
    cur = _inv({"sm90_xmma_gemm_f32f32_f32": 300.0, "elementwise_b": 5.0})
    d = diff_inventories(base, cur, slowdown_s=270e-6)
    assert d.variants == [("nvjet_sm90_tst_256x128_bf16", "sm90_xmma_gemm_f32f32_f32")]
    by = {c.name: c for c in d.changes}
    assert by["sm90_xmma_gemm_f32f32_f32"].status == "appeared"
    assert by["nvjet_sm90_tst_256x128_bf16"].status == "vanished"
    assert by["elementwise_b"].status == "same"
    assert d.explained == pytest.approx(1.0)
    assert any("replaced" in line for line in d.lines())


def test_slower_and_new_kernels() -> None:
    base = _inv({"gemm_a": 100.0, "elementwise_b": 20.0})
    cur = _inv({"gemm_a": 130.0, "elementwise_b": 20.0, "copy_kernel": 10.0})
    d = diff_inventories(base, cur, slowdown_s=50e-6)
    by = {c.name: c for c in d.changes}
    assert by["gemm_a"].status == "slower" and by["gemm_a"].delta_us == pytest.approx(30.0)
    assert by["copy_kernel"].status == "appeared" and by["copy_kernel"].delta_us == 10.0
    assert d.explained == pytest.approx(0.8)  # the rest: idle time
    assert d.changes[0].name == "gemm_a"  # largest change first


def test_small_changes_within_the_baseline_spread_are_not_news() -> None:
    runs = [_inv({"gemm_a": t}) for t in (100.0, 108.0, 104.0)]
    base = combine(runs)
    assert base is not None and base["runs"] == 3
    (k,) = base["kernels"]
    assert k["us_per_call"] == 104.0 and k["spread"] == pytest.approx(8 / 104, rel=1e-3)
    same = diff_inventories(base, _inv({"gemm_a": 111.0}), slowdown_s=7e-6)
    assert same.changes[0].status == "same"
    slower = diff_inventories(base, _inv({"gemm_a": 125.0}), slowdown_s=21e-6)
    assert slower.changes[0].status == "slower"


def test_more_launches_of_the_same_kernel() -> None:
    base = _inv({"k": 10.0})
    cur = inventory_from_trace(
        parse_trace(gpu_bound(calls=2, kernels=(("k", 10.0), ("k", 10.0))).doc())
    )
    d = diff_inventories(base, cur, slowdown_s=10e-6)
    (c,) = d.changes
    assert (c.base_launches, c.cur_launches) == (1.0, 2.0) and c.status == "slower"
    assert "launches 1 -> 2 per call" in c.describe()


def test_combine_ignores_runs_without_an_inventory() -> None:
    assert combine([]) is None
    inv = _inv({"k": 1.0})
    assert combine([{}, inv]) == inv


def test_profiles_that_disagree_with_the_measurement_are_not_attributed() -> None:
    base = _inv({"gemm_a": 100.0})
    cur = _inv({"gemm_a": 900.0})
    d = diff_inventories(base, cur, slowdown_s=5e-6)
    assert d.explained is None and d.slowdown_us is None
    assert "shares are of what the profiles show" in d.lines()[-1]
    assert diff_inventories(base, cur, slowdown_s=-1e-6).explained is None


def test_kernels_that_grew_more_than_the_measurement_share_their_growth() -> None:
    from pytest_gpuperf.artifacts.analysis.attribution import Evidence, Finding, Ledger, rank

    base = _inv({"gemm_a": 100.0, "b": 10.0})
    cur = _inv({"gemm_a": 250.0, "b": 60.0})  # +200 µs profiled, +150 µs measured
    ev = Evidence(key="k", baseline_s=110e-6, current_s=260e-6, baseline_inventory=base,
                  current_inventory=cur)  # fmt: skip
    led = Ledger(ev.kernel_diff, None, 150.0)
    found = [led.claim(Finding("x", "a", frozenset({"gemm_a"}))),
             led.claim(Finding("y", "b", frozenset({"b"})))]  # fmt: skip
    a, b = rank([f for f in found if f is not None], led)
    assert (a.share, b.share) == (pytest.approx(0.75), pytest.approx(0.25))
