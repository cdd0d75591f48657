"""The probe of one call at the torch API (artifacts/collectors/algorithms.py), on the CPU with
real torch: what it records, that it changes nothing, and when it stands aside."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from pytest_gpuperf.artifacts.analysis.algorithm_story import probe_precision  # noqa: E402
from pytest_gpuperf.artifacts.collectors import algorithms  # noqa: E402
from pytest_gpuperf.artifacts.collectors.child import InventoryHook  # noqa: E402
from pytest_gpuperf.measure.backend import Invocation  # noqa: E402
from pytest_gpuperf.model import BenchId  # noqa: E402


def _mlp() -> tuple[Any, Any]:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 16)), (
        torch.randn(4, 16)
    )


def test_autocast_and_the_fp32_precision_are_read_at_each_matmul() -> None:
    mlp, x = _mlp()

    def with_autocast() -> Any:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return mlp(x)

    def without() -> Any:
        old = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("high")  # set inside the call, as the zoo case does
        try:
            return mlp(x)
        finally:
            torch.set_float32_matmul_precision(old)

    on = algorithms.probe(with_autocast)
    (lin,) = on["ops"]["linear"][:1]
    assert lin["autocast"] == "bfloat16" and lin["dtypes"][0] == "float32"
    assert sum(e["calls"] for e in on["ops"]["linear"]) == 2
    assert probe_precision(on) == "bf16"
    off = algorithms.probe(without)
    assert {e["autocast"] for e in off["ops"]["linear"]} == {None}
    assert {e["fp32_precision"] for e in off["ops"]["linear"]} == {"high"}  # at the op, not after
    assert probe_precision(off) == "tf32"
    assert off["flags"]["float32_matmul_precision"] == torch.get_float32_matmul_precision()
    assert set(off["flags"]["sdpa_enabled"]) == {"flash", "mem-efficient", "cudnn", "math"}


def test_the_attention_mask_is_on_record_and_the_call_unchanged() -> None:
    q = torch.randn(1, 2, 8, 16)
    mask = torch.zeros(8, 8)

    def masked() -> Any:
        return F.scaled_dot_product_attention(q, q, q, attn_mask=mask)

    expected = masked()
    got: list[Any] = []
    out = algorithms.probe(lambda: got.append(masked()))
    (e,) = out["ops"]["scaled_dot_product_attention"]
    assert e["mask"] is True and e["is_causal"] is False and e["mask_shape"] == [8, 8]
    assert e["head_dim"] == 16
    assert "backend" not in e  # SDPA's choice is asked on CUDA tensors only
    assert torch.equal(got[0], expected)
    causal = algorithms.probe(lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True))
    (e,) = causal["ops"]["scaled_dot_product_attention"]
    assert e["mask"] is False and e["is_causal"] is True


def test_a_convolutions_layout_is_recorded() -> None:
    conv = torch.nn.Conv2d(3, 4, 3)
    x = torch.randn(2, 3, 8, 8)
    last = algorithms.probe(lambda: conv(x.to(memory_format=torch.channels_last)))
    assert last["ops"]["conv2d"][0]["layout"] == "channels_last"
    first = algorithms.probe(lambda: conv(x))
    assert first["ops"]["conv2d"][0]["layout"] == "contiguous"


def test_a_call_that_raises_is_a_reason_not_an_error() -> None:
    def broken() -> None:
        raise ValueError("boom")

    assert algorithms.probe(broken) == {"skipped": "the probed call raised ValueError: boom"}


def test_compiled_code_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(algorithms, "compiled_here", lambda: True)
    calls: list[int] = []
    out = algorithms.probe(lambda: calls.append(1))
    assert "compiled code" in out["skipped"] and calls == []


def test_the_baselines_inventory_carries_the_probe() -> None:
    mlp, x = _mlp()
    hook = InventoryHook("cpu", calls=3)
    extra = hook(BenchId("t.py::test_mlp"), Invocation(mlp, (x,)), 1e-4)
    assert extra is not None
    probe = extra["kernels"]["probe"]
    assert {e["dtypes"][0] for e in probe["ops"]["linear"]} == {"float32"}
