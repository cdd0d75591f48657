"""What decides which algorithm a library picks: one call of the benchmark, watched at the API.

A profile's kernel names say *what* ran; this probe says *why* (dtypes, shapes, autocast,
fp32 matmul precision, the SDPA backend of matmuls, convolutions and SDPA), through a
``TorchFunctionMode``. Skipped for compiled code: a function mode would make Dynamo trace again.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Callable
from typing import Any

#: API functions the probe records (the ``__name__`` of the function a mode sees).
MATMULS = frozenset({"linear", "matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "einsum"})
CONVS = frozenset({"conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d"})
SDPA = "scaled_dot_product_attention"
#: SDPBackend values (torch.nn.attention.SDPBackend) -> our names.
BACKENDS = {0: "math", 1: "flash", 2: "mem-efficient", 3: "cudnn", 4: "overrideable"}
_SDPA_ARGS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal")
#: How many distinct signatures of one function are kept.
MAX_SIGNATURES = 4


def _dtype(t: Any) -> str:
    return str(t.dtype).removeprefix("torch.")


def _layout(t: Any) -> str:
    import torch

    if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last):
        return "channels_last" if not t.is_contiguous() else "contiguous"
    return "contiguous" if t.is_contiguous() else "strided"


def _sdpa_facts(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    import torch

    given = {**dict(zip(_SDPA_ARGS, args, strict=False)), **kwargs}
    q, k, v, mask = (given.get(name) for name in _SDPA_ARGS[:4])
    dropout = float(given.get("dropout_p") or 0.0)
    causal = bool(given.get("is_causal", False))
    facts: dict[str, Any] = {
        "mask": mask is not None,
        "is_causal": causal,
        "dropout_p": dropout,
        "head_dim": int(q.shape[-1]) if isinstance(q, torch.Tensor) else None,
    }
    if isinstance(mask, torch.Tensor):
        facts["mask_dtype"] = _dtype(mask)
        facts["mask_shape"] = list(mask.shape)
    if isinstance(q, torch.Tensor) and q.is_cuda:
        device = q.device.type
        cast = torch.is_autocast_enabled(device) and q.dtype == torch.float32
        if not cast:  # under autocast the inputs would be cast first: no cheap exact answer
            try:
                choice = int(torch._fused_sdp_choice(q, k, v, mask, dropout, causal))
                facts["backend"] = BACKENDS.get(choice, str(choice))
            except Exception as e:
                facts["backend_error"] = f"{type(e).__name__}: {e}"[:200]
    return facts


def _record(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The facts of one API call that decide its kernel."""
    import torch

    ts = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    device = ts[0].device.type if ts else "cpu"
    entry: dict[str, Any] = {
        "dtypes": [_dtype(t) for t in ts[:3]],
        "shapes": [list(t.shape) for t in ts[:2]],
        "autocast": (
            str(torch.get_autocast_dtype(device)).removeprefix("torch.")
            if device in ("cuda", "cpu") and torch.is_autocast_enabled(device)
            else None
        ),
    }
    if name in MATMULS:
        entry["fp32_precision"] = torch.get_float32_matmul_precision()
    elif name in CONVS and ts:
        entry["layout"] = _layout(ts[0])
    elif name == SDPA:
        entry.update(_sdpa_facts(args, kwargs))
    return entry


def _flags() -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {"float32_matmul_precision": torch.get_float32_matmul_precision()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out["matmul_allow_tf32"] = bool(torch.backends.cuda.matmul.allow_tf32)
        out["cudnn_allow_tf32"] = bool(torch.backends.cudnn.allow_tf32)
        out["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
        cuda = torch.backends.cuda
        out["sdpa_enabled"] = {
            "flash": bool(cuda.flash_sdp_enabled()),
            "mem-efficient": bool(cuda.mem_efficient_sdp_enabled()),
            "cudnn": bool(getattr(cuda, "cudnn_sdp_enabled", lambda: False)()),
            "math": bool(cuda.math_sdp_enabled()),
        }
    return out


def dynamo_counters() -> dict[str, dict[str, int]] | None:
    """torch._dynamo's counters (graph breaks, unique graphs, ...), if dynamo ran here."""
    if "torch._dynamo" not in sys.modules:
        return None
    from torch._dynamo.utils import counters  # imported with torch._dynamo

    return {str(k): {str(kk): int(vv) for kk, vv in v.items()} for k, v in counters.items() if v}


def compiled_here() -> bool:
    """Whether torch.compile ran in this process (Dynamo counted a frame or a graph): a
    function mode would then make it trace again, and compile what it had skipped."""
    counted = dynamo_counters() or {}
    return any(k in counted for k in ("frames", "stats", "graph_break", "unique_graphs"))


def probe(call: Callable[[], Any]) -> dict[str, Any]:
    """One call of ``call`` watched at the torch API: ``{"ops": {name: [signature, ...]},
    "flags": {...}}``, or ``{"skipped": why}``. Never raises."""
    try:
        import torch
        from torch.overrides import TorchFunctionMode
    except Exception as e:
        return {"skipped": f"torch is not usable: {e}"}
    if compiled_here():
        return {"skipped": "compiled code: a function mode would make torch.compile trace again"}
    #: name -> signature -> its facts and calls (the first MAX_SIGNATURES signatures)
    seen: dict[str, dict[str, dict[str, Any]]] = {}
    wanted = MATMULS | CONVS | {SDPA}

    class _Watch(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            kwargs = kwargs or {}
            name = getattr(func, "__name__", "")
            with contextlib.suppress(Exception):  # the probe never changes what the call does
                if name in wanted:
                    entry = _record(name, tuple(args), kwargs)
                    key = repr(sorted(entry.items()))
                    sigs = seen.setdefault(name, {})
                    if key in sigs:
                        sigs[key]["calls"] += 1
                    elif len(sigs) < MAX_SIGNATURES:
                        sigs[key] = {**entry, "calls": 1}
            return func(*args, **kwargs)

    prepare = getattr(call, "prepare", None)
    try:
        if callable(prepare):
            prepare()
        with _Watch():
            call()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
    except Exception as e:
        return {"skipped": f"the probed call raised {type(e).__name__}: {e}"[:300]}
    ops = {name: list(sigs.values()) for name, sigs in seen.items()}
    try:
        flags = _flags()
    except Exception as e:
        flags = {"error": f"{type(e).__name__}: {e}"[:200]}
    return {"ops": ops, "flags": flags}
