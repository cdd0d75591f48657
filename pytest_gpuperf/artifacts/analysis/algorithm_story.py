"""Which algorithm a library chose, and why that changed. Pure Python.

The SDPA backend, the GEMMs' precision, cuBLAS's kernel at equal precision, cuDNN's
convolution algorithm, each told with what usually moves it. Kernel names say most of it; the
probe of one call (collectors/algorithms.py) the rest: cuBLAS's ``nvjet_sm90_...`` kernels do
not name their dtype.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_gpuperf.artifacts.analysis import inventory
from pytest_gpuperf.artifacts.analysis.attribution import (
    Evidence,
    Finding,
    Ledger,
    is_cast,
    is_elementwise,
    timing,
)
from pytest_gpuperf.artifacts.analysis.compile_story import (
    conv_layout,
    is_conv,
    is_conversion,
    probes,
)
from pytest_gpuperf.artifacts.analysis.inventory import KernelChange, short_name

SDPA_BACKEND = "sdpa-backend"
GEMM_PRECISION = "gemm-precision"
CONV_ALGORITHM = "conv-algorithm"
GEMM_HEURISTIC = "gemm-heuristic"
CAUSES = (SDPA_BACKEND, GEMM_PRECISION, CONV_ALGORITHM, GEMM_HEURISTIC)

#: (backend, pattern on the lower-case name), first match wins: cuDNN's names hold "flash".
_SDPA = (
    ("cudnn", re.compile(r"cudnn.*(sdpa|fmha|flash_[fb]prop|attention)")),
    ("mem-efficient", re.compile(r"fmha_cutlass|memeffattention|mem_eff|attentionkernel")),
    ("flash", re.compile(r"pytorch_flash|flash_fwd|flash_bwd|flash::")),
)
_SOFTMAX = re.compile(r"softmax", re.I)
#: (precision, pattern on the lower-case name), first match wins.
_PRECISION = (
    ("fp8", re.compile(r"e4m3|e5m2|fp8|f8f8")),
    ("tf32", re.compile(r"tf32")),
    ("bf16", re.compile(r"bf16|bfloat16")),
    ("fp16", re.compile(r"f16f16|fp16|half|hgemm|h1688|h16816|h884|_f16_")),
    ("fp64", re.compile(r"dgemm|f64f64|fp64|double")),
    (
        "fp32",
        re.compile(r"sgemm|f32f32_f32f32|ffma|gemv\w*<int, int, float|gemvx\S*<int, int, float"),
    ),
)
_TILE = re.compile(
    r"tilesize(\d+x\d+)(?:x\d+)?|nvjet_sm\d+_\w+?_(\d+x\d+)_\d+x\d+|_(\d+x\d+)_\d+x\d+_", re.I
)
_SPLIT = re.compile(r"split_?k|splitkreduce|stream_?k", re.I)
_LOW = ("bf16", "fp16", "fp8")
_NAMES = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "tf32": "fp32", "fp32": "fp32"}
_PRECISION_TEXT = {
    "tf32": "fp32 on TF32 tensor cores",
    "fp32": "fp32 on CUDA cores (no tensor cores)",
    "bf16/fp16": "bf16/fp16 (autocast)",
}


def sdpa_backend(name: str) -> str | None:
    """``flash``, ``mem-efficient`` or ``cudnn`` for a fused attention kernel, else None."""
    return next((backend for backend, p in _SDPA if p.search(name.lower())), None)


def is_gemm(name: str) -> bool:
    """A GEMM kernel, not an attention or a convolution kernel (which run GEMMs inside)."""
    return inventory.is_gemm(name) and sdpa_backend(name) is None and not is_conv(name)


def gemm_precision(name: str) -> str | None:
    """What a GEMM kernel's name says of its math (None: ``nvjet_*`` and others)."""
    return next((precision for precision, p in _PRECISION if p.search(name.lower())), None)


def tile(name: str) -> str | None:
    m = _TILE.search(name)
    return next((g for g in m.groups() if g), None) if m else None


def _ops(probe: Mapping[str, Any] | None, *names: str) -> list[Mapping[str, Any]]:
    ops = (probe or {}).get("ops") or {}
    return [e for n in names for e in ops.get(n) or [] if isinstance(e, Mapping)]


#: The CPU profile's matmul operators (its inventory lists operators, not kernels).
_MATMUL_OPS = ("linear", "matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "einsum")
_CPU_MATMUL = re.compile(rf"aten::({'|'.join(_MATMUL_OPS)})\b")


def probe_precision(probe: Mapping[str, Any] | None) -> str | None:
    """The math most of the probe's matmul calls ran in (autocast and TF32 included)."""
    votes: dict[str, int] = {}
    for e in _ops(probe, *_MATMUL_OPS):
        dtypes = e.get("dtypes") or []
        dtype = str(dtypes[0]) if dtypes else ""
        if e.get("autocast") and dtype == "float32":
            dtype = str(e["autocast"])
        prec = {"bfloat16": "bf16", "float16": "fp16", "float64": "fp64"}.get(dtype)
        if dtype == "float32":
            prec = "fp32" if e.get("fp32_precision") == "highest" else "tf32"
        if prec is not None:
            votes[prec] = votes.get(prec, 0) + int(e.get("calls") or 1)
    return max(votes, key=lambda k: votes[k]) if votes else None


def _autocast(probe: Mapping[str, Any] | None) -> str | bool | None:
    """Autocast's dtype at the probe's matmuls; False when it was off for all; None: unknown."""
    entries = _ops(probe, *_MATMUL_OPS)
    on = [str(e["autocast"]) for e in entries if e.get("autocast")]
    return (on[0] if on else False) if entries else None


def _sdpa_facts(probe: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    return next(iter(_ops(probe, "scaled_dot_product_attention")), None)


@dataclass
class _Side:
    """The kernels of one side (baseline or current) by what they do, with their time."""

    sdpa: dict[str, float]  # backend -> µs per call
    softmax_us: float
    gemms: dict[str, float]  # precision (or "?") -> µs per call
    casts_us: float


def _side(changes: Iterable[KernelChange], current: bool) -> _Side:
    s = _Side({}, 0.0, {}, 0.0)
    for c in changes:
        us = c.cur_us if current else c.base_us
        if us <= 0 or c.kind != "kernel":
            continue
        if backend := sdpa_backend(c.name):
            s.sdpa[backend] = s.sdpa.get(backend, 0.0) + us
        elif _SOFTMAX.search(c.name):
            s.softmax_us += us
        elif is_cast(c.name):
            s.casts_us += us
        elif is_gemm(c.name):
            prec = gemm_precision(c.name) or "?"
            s.gemms[prec] = s.gemms.get(prec, 0.0) + us
    return s


def _sides(led: Ledger) -> tuple[_Side, _Side]:
    changes = led.kd.changes if led.kd is not None else []
    return _side(changes, False), _side(changes, True)


def _names(members: Sequence[KernelChange], status: str) -> str:
    return ", ".join([short_name(c.name, 60) for c in members if c.status == status][:2])


def _backend(side: _Side, probe: Mapping[str, Any] | None, other: _Side) -> str | None:
    facts = _sdpa_facts(probe)
    if facts and facts.get("backend"):
        return str(facts["backend"])
    if side.sdpa:
        return max(side.sdpa, key=lambda b: side.sdpa[b])
    if other.sdpa and side.softmax_us > 0:
        return "math"  # the fused kernel is gone; a softmax and GEMMs do its work
    return None


def _sdpa_head(was: str | None, now: str | None, ev: Evidence) -> str | None:
    """What changed in the attention: its backend, or a mask where is_causal=True was."""
    base_probe, cur_probe = probes(ev)
    b, c = _sdpa_facts(base_probe) or {}, _sdpa_facts(cur_probe) or {}
    if was and now and was != now:
        why = _sdpa_why(was, b, c, (cur_probe or {}).get("flags"))
        if cur_probe is not None and not c:  # the probe watched the call and saw no SDPA
            causal = ", is_causal=True" if b.get("is_causal") else ""
            why = (
                "no scaled_dot_product_attention call runs now: the attention is written out "
                "(q @ k.transpose(-2, -1), a mask, softmax, @ v), each step a kernel over the "
                f"whole score matrix; call F.scaled_dot_product_attention(q, k, v{causal})"
            )
        return f"the attention now runs the {now} backend instead of {was} ({why})"
    if not (c.get("mask") and b and not b.get("mask")):
        return None
    shape = f" of shape {c['mask_shape']}" if c.get("mask_shape") else ""
    return (
        f"the attention still runs the {now or was} backend, but with an explicit attn_mask"
        f"{shape} where is_causal=True was before: it reads the mask and computes the blocks a "
        "causal call skips; pass is_causal=True and no mask"
    )  # fmt: skip


def _sdpa_why(
    was: str, base: Mapping[str, Any] | None, cur: Mapping[str, Any] | None, flags: Any
) -> str:
    """Why SDPA left backend ``was``: the arguments that changed, else what decides it."""
    cur = cur or {}
    if cur.get("mask") and not (base or {}).get("mask"):
        before = "is_causal=True was" if (base or {}).get("is_causal") else "none was"
        return (
            f"an attn_mask is passed where {before} before; for a causal mask pass "
            f"is_causal=True and no mask, which keeps {was}"
        )
    dtypes = cur.get("dtypes") or []
    if dtypes and dtypes[0] == "float32" and was in ("flash", "cudnn"):
        return f"q, k and v are float32 now: {was} attention needs fp16 or bf16 (autocast off?)"
    if float(cur.get("dropout_p") or 0) > 0 and not float((base or {}).get("dropout_p") or 0):
        return "dropout_p > 0 now (model.train()?): not every backend supports dropout"
    enabled = (flags or {}).get("sdpa_enabled") or {}
    if enabled.get(was) is False:
        return (
            f"the {was} backend is disabled (torch.backends.cuda.enable_*_sdp or an "
            "sdpa_kernel(...) context)"
        )
    return (
        "a mask, dropout, the dtype, the head size or non-contiguous inputs decide it; "
        "torch.nn.attention.sdpa_kernel(<the backend>) runs only that one and says why not"
    )


def sdpa(ev: Evidence, led: Ledger) -> list[Finding]:
    """The attention's backend changed, or kept its backend but gained an explicit mask."""
    base_probe, cur_probe = probes(ev)
    base, cur = _sides(led)
    was, now = _backend(base, base_probe, cur), _backend(cur, cur_probe, base)
    head = _sdpa_head(was, now, ev)
    if head is None:
        return []
    # the math backend's attention: the GEMMs, the softmax and the steps over the score
    # matrix (its scale, mask and dropout, an out-of-place masked_fill's copy) that appeared
    math = [
        k
        for k in led.free("appeared")
        if _SOFTMAX.search(k.name) or is_gemm(k.name) or is_elementwise(k.name)
        or k.name.startswith("Memcpy DtoD")
    ]  # fmt: skip
    members = [k for k in led.free() if sdpa_backend(k.name) or (now == "math" and k in math)]
    kernels = [k for k in members if sdpa_backend(k.name)]
    new = _names(kernels, "appeared") or _names(kernels, "slower")
    old = _names(kernels, "vanished")
    named = f"{new} replaced {old}" if new and old else new or (old and f"{old} gone")
    text = f"{head}: {named or 'kernels changed'} ({timing(members)})"
    return [Finding(SDPA_BACKEND, text, members)]


def _precision(side: _Side, probe: Mapping[str, Any] | None) -> str | None:
    """A side's GEMM precision: from the names, else the probe, else autocast's casts."""
    named = max((k for k in side.gemms if k != "?"), key=side.gemms.__getitem__, default=None)
    if named is not None and side.gemms.get(named, 0) >= side.gemms.get("?", 0):
        return named
    probed = probe_precision(probe)
    if probed is not None:
        return probed
    if side.gemms.get("?") and side.casts_us > 0:
        return "bf16/fp16"
    return named


def _precision_why(was: str, now: str, ev: Evidence) -> tuple[str, str]:
    """(the setting that usually causes the move, where fp32 GEMMs now run or "")."""
    if (was in _LOW or was == "bf16/fp16") and now in ("tf32", "fp32"):
        b_auto, c_auto = (_autocast(p) for p in probes(ev))
        if c_auto is False and b_auto is not False:
            why = "autocast is off"
        elif c_auto is False:
            why = "the inputs and weights are float32 and no autocast covers them"
        else:
            why = "usually autocast is off, or the weights became float32"
        where = (
            "on TF32 tensor cores (TF32 is allowed: float32 matmul precision 'high')"
            if now == "tf32"
            else "on CUDA cores: TF32 is not allowed either (float32 matmul precision 'highest')"
        )
        return why, where
    if was == "tf32" and now == "fp32":
        return (
            "TF32 is off now: torch.backends.cuda.matmul.allow_tf32 = False or "
            "torch.set_float32_matmul_precision('highest'), where it was 'high'",
            "",
        )
    if was in ("tf32", "fp32") and now in _LOW:
        return "autocast or a .to(dtype) now covers them", ""
    return "the inputs' dtype or the autocast dtype changed", ""


def precision(ev: Evidence, led: Ledger) -> list[Finding]:
    """The GEMMs run in another precision: the precision first, the setting, then kernels."""
    base_probe, cur_probe = probes(ev)
    base, cur = _sides(led)
    was, now = _precision(base, base_probe), _precision(cur, cur_probe)
    if was is None or now is None or was == now or (was == "bf16/fp16" and now in _LOW):
        return []
    members = _precision_members(led.free())
    gemms = [c for c in members if is_gemm(c.name)]
    swapped = any(c.status in ("appeared", "vanished") for c in gemms)
    if not swapped and None in (probe_precision(base_probe), probe_precision(cur_probe)):
        return []  # no kernel was swapped, and only both probes could tell
    was_name, now_name = _NAMES.get(was, was), _NAMES.get(now, now)
    why, where = _precision_why(was, now, ev)
    if members and members[0].kind == "op" and was_name != now_name:
        ops = ", ".join(sorted({c.name for c in members})[:3])
        text = f"the matmuls now run in {now_name} instead of {was_name} ({why}): {ops}"
    else:
        old, new = _PRECISION_TEXT.get(was, was), _PRECISION_TEXT.get(now, now)
        if was_name != now_name:
            old, new = was_name, now_name
        where = f", {where}" if where and was_name != now_name else ""
        text = f"the GEMMs now run in {new} instead of {old} ({why}){where}"
        came, went = _names(gemms, "appeared"), _names(gemms, "vanished")
        text += (f": {came}" + (f" replaced {went}" if went else "")) if came else ""
    text += f" ({timing(members)})"
    return [Finding(GEMM_PRECISION, text, members)]


def _precision_members(free: Sequence[KernelChange]) -> list[KernelChange]:
    """The GEMMs, casts and retyped elementwise kernels of a precision change (CPU: matmuls)."""
    out = [c for c in free if c.kind == "kernel" and (is_gemm(c.name) or is_cast(c.name))]
    twins = [c for c in free if c.status in ("appeared", "vanished") and is_elementwise(c.name)]
    if {c.status for c in twins} == {"appeared", "vanished"}:
        out += twins
    return out or [c for c in free if c.kind == "op" and _CPU_MATMUL.match(c.name)]


_CONV_ALGOS = (
    ("Winograd", re.compile(r"winograd", re.I)),
    ("FFT", re.compile(r"fft", re.I)),
    ("implicit GEMM", re.compile(r"implicit_?gemm|implicit_precomp|precomputed", re.I)),
    ("direct", re.compile(r"direct|depthwise|dgrad|conv2d_grouped", re.I)),
)


def conv_algorithm(name: str) -> str | None:
    return next((label for label, p in _CONV_ALGOS if p.search(name)), None)


def _conv_desc(c: KernelChange) -> str:
    parts = [p for p in (conv_algorithm(c.name), conv_layout(c.name), gemm_precision(c.name)) if p]
    return " in ".join(parts[:2]) + (f" ({parts[2]})" if len(parts) > 2 else "") if parts else "?"


def _swap(changes: Sequence[KernelChange]) -> tuple[KernelChange, KernelChange] | None:
    """The largest kernel that vanished and the largest that appeared, if both did."""
    old = max((c for c in changes if c.status == "vanished"), key=lambda c: c.base_us, default=None)
    new = max((c for c in changes if c.status == "appeared"), key=lambda c: c.cur_us, default=None)
    return (old, new) if old is not None and new is not None else None


def conv(ev: Evidence, led: Ledger) -> list[Finding]:
    """cuDNN runs the convolutions with another algorithm or layout."""
    convs = [c for c in led.free("appeared", "vanished") if c.kind == "kernel" and is_conv(c.name)]
    convs = [c for c in convs if not is_conversion(c.name)]
    swap = _swap(convs)
    if swap is None:
        return []
    old, new = swap
    text = (
        f"cuDNN now runs the convolutions as {_conv_desc(new)} instead of {_conv_desc(old)} "
        f"({_conv_why(old, new, ev)}): {short_name(new.name, 60)} replaced "
        f"{short_name(old.name, 60)} ({timing(convs)})"
    )
    return [Finding(CONV_ALGORITHM, text, convs)]


def _conv_why(a: KernelChange, b: KernelChange, ev: Evidence) -> str:
    why = "cuDNN's heuristic chose another algorithm for these shapes and dtypes"
    if conv_layout(a.name) and conv_layout(b.name) and conv_layout(a.name) != conv_layout(b.name):
        why = (
            "the layout changed: keep the model and its input in channels_last "
            "(.to(memory_format=torch.channels_last)) end to end"
        )
    elif gemm_precision(a.name) != gemm_precision(b.name):
        why = "the inputs' dtype changed (autocast or a .to(dtype))"
    bench = [((p or {}).get("flags") or {}).get("cudnn_benchmark") for p in probes(ev)]
    if bench == [True, False]:
        why += "; torch.backends.cudnn.benchmark is off now (it was on): cuDNN no longer times them"
    return why


def heuristic(ev: Evidence, led: Ledger) -> list[Finding]:
    """cuBLAS picked other GEMM kernels at the same precision: tile, split-K, stream-K."""
    base_probe, cur_probe = probes(ev)
    free = led.free()
    gemms = [c for c in free if c.kind == "kernel" and is_gemm(c.name)]
    swap = _swap(gemms)
    if swap is None or probe_precision(base_probe) != probe_precision(cur_probe):
        return []
    old, new = swap
    if gemm_precision(old.name) != gemm_precision(new.name):
        return []
    reduce = [c for c in free if c.status == "appeared" and _SPLIT.search(c.name)]
    members = list({c.name: c for c in [*gemms, *reduce]}.values())
    changes = _heuristic_changes(old.name, new.name, reduce)
    sb, sc = ([e.get("shapes") for e in _ops(p, *_MATMUL_OPS)] for p in (base_probe, cur_probe))
    why = (
        f"the matmul shapes changed ({sb[0]} -> {sc[0]})"
        if sb and sc and sb != sc
        else "its heuristic follows the shapes, the strides and alignment (a size not a multiple "
        "of 16, a non-contiguous input) and the workspace (CUBLAS_WORKSPACE_CONFIG)"
    )
    pa = gemm_precision(old.name)
    text = (
        f"cuBLAS picked another GEMM kernel at the same precision{f' ({pa})' if pa else ''}"
        + (f": {', '.join(changes)}" if changes else "")
        + f"; {why}: {short_name(new.name, 60)} replaced {short_name(old.name, 60)} "
        f"({timing(members)})"
    )
    return [Finding(GEMM_HEURISTIC, text, members)]


def _heuristic_changes(a: str, b: str, reduce: Sequence[KernelChange]) -> list[str]:
    """What changed between GEMM kernels ``a`` and ``b``: the tile, split-K."""
    out = [f"tile {tile(a)} -> {tile(b)}"] if tile(a) and tile(b) and tile(a) != tile(b) else []
    if (_SPLIT.search(b) or reduce) and not _SPLIT.search(a):
        out.append("now split-K" + (f" with {short_name(reduce[0].name, 40)}" if reduce else ""))
    elif _SPLIT.search(a) and not _SPLIT.search(b):
        out.append("no longer split-K")
    return out
