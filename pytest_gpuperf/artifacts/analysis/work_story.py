"""What the kernels and the device's waiting say: the stories of the work itself. Pure Python.

Copies, host syncs, per-tensor kernels, recomputed work, unfused ops, extra copies and casts,
each kernel left on its own, and the waiting nothing else explains.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_gpuperf.artifacts.analysis import attribution as at
from pytest_gpuperf.artifacts.analysis.algorithm_story import gemm_precision
from pytest_gpuperf.artifacts.analysis.attribution import Evidence, Finding, Ledger
from pytest_gpuperf.artifacts.analysis.inventory import (
    KernelChange,
    base_function,
    is_gemm,
    short_name,
)
from pytest_gpuperf.artifacts.analysis.timeline import ProfileAnalysis, copy_direction
from pytest_gpuperf.units import fmt_bytes

HOST_SYNC = "host-sync"
H2D_COPY = "h2d-copy"
D2H_COPY = "d2h-copy"
EXTRA_COPY = "extra-copy"
PER_TENSOR = "per-tensor-kernels"
RECOMPUTE = "recompute"
UNFUSED = "unfused-ops"
KERNEL_VARIANT = "kernel-variant"
KERNEL_SLOWER = "kernel-slower"
MORE_KERNELS = "more-kernels"
LAUNCH_BOUND = "launch-bound"
GPU_IDLE = "gpu-idle"
HOST_TIME = "host-time"
CAUSES = (H2D_COPY, D2H_COPY, HOST_SYNC, PER_TENSOR, RECOMPUTE, UNFUSED, EXTRA_COPY,
          KERNEL_VARIANT, KERNEL_SLOWER, MORE_KERNELS, LAUNCH_BOUND, GPU_IDLE,
          HOST_TIME)  # fmt: skip

#: Operators whose output's size depends on the data: they wait for the GPU to count it.
_SIZED_BY_DATA = frozenset(
    f"aten::{op}" for op in ("nonzero", "masked_select", "_unique2", "unique_dim", "argwhere",
                             "unique_consecutive", "repeat_interleave", "nonzero_numpy")
)  # fmt: skip
#: Operators whose host sync belongs to a copy, not to user code.
_COPY_OPS = ("aten::copy_", "aten::to", "aten::_to_copy", "aten::contiguous", "aten::clone")
#: per copy direction: the cause, its words, and what to do
_COPIES = {
    "HtoD": (H2D_COPY, "host-to-device", "keep the tensor on the GPU (move it once, outside the "
             "call), or copy from pinned memory (pin_memory()) with non_blocking=True"),
    "DtoH": (D2H_COPY, "device-to-host", ".cpu(), .item(), .tolist(), .numpy() or printing a "
             "tensor copies it to the host and waits for it: keep it on the GPU"),
    "DtoD": (EXTRA_COPY, "device-to-device", "clone(), copy_() or a torch.cat into a new tensor "
             "copies the data on every call: write in place, or reuse the buffer"),
}  # fmt: skip
_PAGEABLE = (
    "the driver stages a pageable source through a pinned buffer of its own, at a fraction of the "
    "bandwidth and without overlap; pin the source (tensor.pin_memory(), "
    "DataLoader(pin_memory=True)) and copy with non_blocking=True"
)
#: a tensor's fill with one value (zero_(), fill_(), torch.zeros): torch's kernel, and the CPU op
_FILL = re.compile(r"FillFunctor|^aten::(?:fill|zero)_$")
#: (pattern on a vanished kernel's name, the fused op it ran, how to keep it fused); torch's
#: CUDA RMSNorm runs the LayerNorm kernels with their last template flag (rms_norm) on
_FUSED = (
    (re.compile(r"rms_?norm|(layer_?norm|RowwiseMoments)\w*<[^<>]*\btrue>", re.I), "RMSNorm",
     "F.rms_norm (nn.RMSNorm)"),
    (re.compile(r"layer_?norm", re.I), "LayerNorm", "F.layer_norm (nn.LayerNorm)"),
    (re.compile(r"softmax", re.I), "softmax", "torch.softmax"),
    (re.compile(r"gelu", re.I), "GELU", "F.gelu (approximate='tanh' for the tanh form)"),
    (re.compile(r"silu|swish", re.I), "SiLU", "F.silu"),
    (re.compile(r"_bias_|bias_?act|^aten::addmm$", re.I), "a GEMM with its bias in the epilogue",
     "F.linear(x, weight, bias), which adds the bias inside the GEMM"),
)  # fmt: skip


def _syncs_grew(ev: Evidence) -> bool:
    base = float((ev.baseline_inventory or {}).get("syncs_per_call") or 0.0)
    return ev.analysis is not None and ev.analysis.syncs_per_call > base + 0.25


def host_sync(ev: Evidence, led: Ledger) -> list[Finding]:
    """New host syncs: the GPU drains and idles while the host waits (with the device-to-host
    copies the syncing ops read)."""
    a, base = ev.analysis, ev.baseline_inventory or {}
    grew = not base or _syncs_grew(ev)
    if a is None or a.device != "cuda" or a.syncs_per_call <= 0 or not grew:
        return []
    ops = sorted({op for s in a.syncs for op in s.ops})
    if ops and all(op.startswith(_COPY_OPS) for op in ops):
        return []  # a copy's own sync: the copy's story tells it
    d2h = [c for c in led.free() if c.kind == "memcpy" and copy_direction(c.name) == "DtoH"]
    calls = ", ".join(f"{s.name} x{s.count / a.calls:g}" for s in a.syncs)
    new = " (none in the baseline)" if base and not base.get("syncs_per_call") else ""
    where = " from " + ", ".join(ops[:3]) if ops else ""
    why = (
        "an op whose output's size depends on the data (x[mask], masked_select, nonzero, "
        "unique) copies that size to the host and waits for it: keep the shape fixed (multiply "
        "by the mask or torch.where, then sum() and divide by mask.sum())"
        if _SIZED_BY_DATA.intersection(ops)
        else "the GPU drains and idles while the host waits (.item(), .cpu(), printing or "
        "branching on a GPU value, torch.cuda.synchronize()): keep the value on the GPU, or "
        "read it once after the loop"
    )
    sentence = (
        f"the benchmarked function synchronises with the host {a.syncs_per_call:g} time(s) per "
        f"call{new}: {calls}{where}; {why}"
    )
    return [Finding(HOST_SYNC, sentence, d2h, idle=True)]


def _memory(name: str) -> str:
    m = re.search(r"\((\w+) -> (\w+)\)", name)
    host = (m.group(1) if m.group(1) != "Device" else m.group(2)) if m else ""
    return host.lower() if host in ("Pageable", "Pinned") else ""


def copies(ev: Evidence, led: Ledger) -> list[Finding]:
    """Copies between host and device (and on the device), by direction and host memory."""
    memcpy = [c for c in led.free() if c.kind == "memcpy"]
    groups = {d: [c for c in memcpy if copy_direction(c.name) == d] for d in _COPIES}
    return [_copy_finding(ev, d, g) for d, g in groups.items() if sum(c.delta_us for c in g) > 0]


def _copy_finding(ev: Evidence, direction: str, group: Sequence[KernelChange]) -> Finding:
    cause, what, fix = _COPIES[direction]
    n0, n1 = sum(c.base_launches for c in group), sum(c.cur_launches for c in group)
    was = {_memory(c.name) for c in group if c.base_launches > 0}
    now = {_memory(c.name) for c in group if c.cur_launches > 0}
    syncs = ev.analysis.syncs if ev.analysis is not None and direction == "HtoD" else []
    synced = any(op.startswith(_COPY_OPS) for s in syncs for op in s.ops)  # a pageable source's
    if was == {"pinned"} and now == {"pageable"}:
        text = f"the {what} copy now reads pageable memory instead of pinned ({_amount(ev, group)})"
        text += f": {_PAGEABLE}"
    else:
        src = " from pageable memory" if "pageable" in now else ""
        new = " (none in the baseline)" if n0 == 0 else f" (was {n0:g} per call)"
        sync = " plus the host sync it forces" if synced else ""
        noun = f"a {what} copy" if n1 == 1 else f"{what} copies"
        text = (
            f"{noun} inside the benchmarked function{src}{new}: {_amount(ev, group)}{sync}; {fix}"
        )
    idle = synced or "pageable" in now
    return Finding(cause, text, group, idle=idle)


def _amount(ev: Evidence, group: Sequence[KernelChange]) -> str:
    """``1 per call, 8.0 MiB, 623.2 µs per call``: the copies now, with their bytes."""
    inv = {k.get("name"): k for k in (ev.current_inventory or {}).get("kernels") or []}
    size = sum(
        c.cur_launches * float(inv.get(c.name, {}).get("bytes_per_launch") or 0) for c in group
    )
    new = all(c.base_launches == 0 for c in group)
    when = f"{sum(c.cur_us for c in group):.1f} µs per call" if new else at.timing(group)
    nbytes = f", {fmt_bytes(size)}" if size else ""
    return f"{sum(c.cur_launches for c in group):g} per call{nbytes}, {when}"


def _per_launch(c: KernelChange, current: bool) -> float:
    n = c.cur_launches if current else c.base_launches
    return (c.cur_us if current else c.base_us) / n if n else 0.0


def _more_launches(led: Ledger) -> list[KernelChange]:
    """Elementwise kernels launched more often per call, at more time."""
    return [c for c in led.free() if at.is_elementwise(c.name) and c.cur_launches > c.base_launches
            and c.delta_us > 0]  # fmt: skip


def multi_tensor(ev: Evidence, led: Ledger) -> list[Finding]:
    """Per-tensor kernels in place of multi-tensor (foreach, fused) ones: an optimizer or a
    gradient clipping with foreach=False, a hand-written loop over the tensors; or gradients
    zeroed one fill each (zero_grad(set_to_none=False))."""
    gone = [
        c for c in led.free() if at.is_multi_tensor(c.name) and c.cur_launches < c.base_launches
    ]
    more = _more_launches(led)
    n0, n1 = sum(c.base_launches for c in more), sum(c.cur_launches for c in more)
    fills = [c for c in led.free() if _FILL.search(c.name) and c.delta_us > 0]
    zeroed = sum(c.cur_launches - c.base_launches for c in fills)
    if not gone and zeroed >= 4:
        claimed = fills + [c for c in more if c not in fills]
        text = (
            f"tensors are zeroed one kernel each: {zeroed:g} more fill launches per call "
            f"({at.names(fills, 2)}; {n0:g} -> {n1:g} small kernel launches in all, "
            f"{at.timing(claimed)}): optimizer.zero_grad(set_to_none=False) or a loop "
            "of .zero_() fills every gradient, and backward then adds into it; use zero_grad() "
            "(set_to_none=True, the default), or torch._foreach_zero_ for a list of tensors"
        )
        return [Finding(PER_TENSOR, text, claimed, idle=not _syncs_grew(ev))]
    if not gone or (n1 - n0 < 4 and led.idle_free <= 0):
        return []
    launches = f", {n0:g} -> {n1:g} small kernel launches per call ({at.names(more)})"
    text = (
        f"per-tensor kernels replaced the multi-tensor ones: {_short(gone)} gone"
        f"{launches if n1 - n0 >= 4 else ''}: a loop over the tensors launches kernels for each "
        "one (an optimizer with foreach=False, clip_grad_norm_(foreach=False), a hand-written "
        "loop); pass foreach=True or fused=True, or use the torch._foreach_* ops"
    )
    return [Finding(PER_TENSOR, text, gone + more, idle=not _syncs_grew(ev))]


def split_launches(ev: Evidence, led: Ledger) -> list[Finding]:
    """One op's work split into a loop of launches: each smaller, or with its loop's body."""
    free = led.free()
    split = []
    for c in _more_launches(led):
        if c.cur_launches >= 2 * c.base_launches > 0:
            times = c.cur_launches / c.base_launches
            body = [
                k
                for k in free
                if abs(k.cur_launches - times * k.base_launches) <= 0.1 * k.cur_launches
            ]
            smaller = _per_launch(c, True) < 0.8 * _per_launch(c, False)
            if smaller or len(body) >= 3:
                split.append((c, body, smaller))
    if not split:
        return []
    c, body, smaller = max(split, key=lambda x: x[0].delta_us)
    each = f"{_per_launch(c, False):.1f} -> {_per_launch(c, True):.1f} µs each"
    text = (
        f"{short_name(c.name)} launches {c.base_launches:g} -> {c.cur_launches:g} per call, "
        + (f"each smaller ({each})" if smaller else f"with {len(body) - 1} other ops as often")
        + ": the work is split into a loop of small launches, each paying its launch cost; "
        "batch it (one op over a stacked tensor, torch._foreach_* for a list of tensors)"
    )
    claimed = [*body, *(x[0] for x in split)]
    return [Finding(PER_TENSOR, text, claimed, idle=not _syncs_grew(ev))]


def recompute(ev: Evidence, led: Ledger) -> list[Finding]:
    """The same GEMMs (and the kernels around them) run more often, each as long as before:
    work is done again, as activation checkpointing does in backward."""
    again = [
        c
        for c in led.free("slower", "count")
        if c.base_launches > 0
        and c.cur_launches >= c.base_launches + 0.5
        and abs(_per_launch(c, True) - _per_launch(c, False)) <= 0.35 * _per_launch(c, False)
    ]
    gemms = [c for c in again if is_gemm(c.name)]
    if not gemms:
        return []
    n0, n1 = sum(c.base_launches for c in gemms), sum(c.cur_launches for c in gemms)
    text = (
        f"work is recomputed: the same GEMMs run {n0:g} -> {n1:g} times per call at the same time "
        f"per launch ({_short(gemms)}; {at.timing(again)} with the kernels around them); "
        "activation checkpointing (torch.utils.checkpoint, gradient_checkpointing_enable()) "
        "runs each checkpointed forward again in backward: checkpoint fewer layers, or none "
        "where the memory allows (or a loop now runs more iterations)"
    )
    return [Finding(RECOMPUTE, text, again)]


def unfused(ev: Evidence, led: Ledger) -> list[Finding]:
    """A fused op (LayerNorm, softmax, GELU, a GEMM's bias epilogue, ...) gone, and elementwise
    kernels doing its work: ops that ran fused run one kernel each."""
    free = led.free()
    for old in (c for c in free if c.status == "vanished"):
        fused = next((f for f in _FUSED if f[0].search(old.name)), None)
        if fused is None:
            continue
        pattern, op, fix = fused
        parts = [c for c in _more_launches(led) if not pattern.search(c.name)]
        if not parts:
            continue
        twins = [c for c in free if c.status == "appeared" and is_gemm(c.name)]
        twins = [c for c in twins if gemm_precision(c.name) == gemm_precision(old.name)]
        swap = max(twins, key=lambda c: c.cur_us, default=None) if is_gemm(old.name) else None
        if is_gemm(old.name) and swap is None:
            continue  # a GEMM gone without one of its precision in its place: not an epilogue
        claimed = [old, *parts, *([swap] if swap else [])]
        n = sum(c.cur_launches - c.base_launches for c in parts)
        text = (
            f"ops that ran fused now run one kernel each: {op} ({short_name(old.name, 60)}, "
            f"{old.base_us:.1f} µs per call) is gone and {n:g} more elementwise kernels per "
            f"call do its work ({at.names(parts)}; {at.timing(claimed)} together), each reading "
            f"and writing the whole tensor; use {fix}, or torch.compile to fuse them"
        )
        return [Finding(UNFUSED, text, claimed, idle=not _syncs_grew(ev))]
    return []


def extra_copies(ev: Evidence, led: Ledger) -> list[Finding]:
    """Copy kernels that appeared or run more often: casts, or copies of non-contiguous data."""
    grown = [c for c in led.free("appeared", "count", "slower") if c.kind != "memcpy"]
    grown = [c for c in grown if at.is_copy_kernel(c.name) and c.delta_us > 0]
    casts = [c for c in grown if at.is_cast(c.name)]
    rest = [c for c in grown if c not in casts]
    kinds = (
        (casts, "dtype casts run on every call", ": tensors kept in one dtype are cast to another "
         "on each call (fp32 weights under autocast are cast to bf16 on every forward); keep "
         "them in the dtype the computation uses (model.to(torch.bfloat16))"),
        (rest, "an extra copy appeared", "; a non-contiguous or wrongly typed input is copied on "
         "every call (.contiguous(), .to(...), reshape() of a transposed view): pass the view "
         "on, or make it contiguous once, outside the call"),
    )  # fmt: skip
    return [
        Finding(EXTRA_COPY, f"{head}: {at.names(cs)} ({at.timing(cs)}){why}", cs)
        for cs, head, why in kinds
        if cs
    ]


def kernels(ev: Evidence, led: Ledger) -> list[Finding]:
    """The changes no story explained, each on its own."""
    out = []
    used: set[str] = set()
    for old, new in ev.kernel_diff.variants if ev.kernel_diff is not None else []:
        pair = [c for c in led.free() if c.name in (old, new)]
        used |= {old, new} if len(pair) == 2 else set()  # a faster variant is no cause
        if len(pair) == 2 and sum(c.delta_us for c in pair) > 0:
            why = (
                "an input's dtype, layout (contiguity, strides) or shape changed the library's "
                "choice"
                if is_gemm(new)
                else "the generated or chosen kernel changed (for Triton kernels: the fusion "
                "changed)"
            )
            text = (
                f"a different kernel variant runs: {short_name(new)} replaced {short_name(old)} "
                f"({at.timing(pair)}); {why}"
            )
            out.append(Finding(KERNEL_VARIANT, text, (old, new)))
    for c in led.free("slower", "appeared", "count"):
        if c.delta_us > 0 and c.name not in used:
            out.append(Finding(*_change(c), [c]))
    return out


def _change(c: KernelChange) -> tuple[str, str]:
    name = short_name(c.name)
    if c.status == "slower":
        text = f"{name} got slower: {c.base_us:.1f} -> {c.cur_us:.1f} µs per call{c.note}"
        return KERNEL_SLOWER, text
    if c.status == "appeared":
        text = f"new kernel {name}: {c.cur_launches:g}x per call, {c.cur_us:.1f} µs"
        if "dropout" in c.name.lower():
            text += "; dropout runs: the model is in training mode (call model.eval() to serve it)"
        return MORE_KERNELS, text
    return MORE_KERNELS, f"{name} launches {c.base_launches:g} -> {c.cur_launches:g} per call"


def idle(ev: Evidence, led: Ledger) -> list[Finding]:
    """The device's waiting that no story explained (the host's time to issue added work, a
    launch-bound GPU, a late host, time outside the CPU's operators)."""
    a, grew = ev.analysis, led.idle_free
    work = led.wait_for_added_work()
    if a is None:
        return []
    if a.device != "cuda":
        if led.idle_us is None or grew <= 0:
            return []
        text = f"the time between the profiled ops grew by {grew:.1f} µs per call"
        if work is not None:
            return [Finding(HOST_TIME, f"{text}: the host's time to issue that work", symptom=True)]
        text += (
            ": Python code between the ops (a loop, sorted(), tensors built on the host, ...), "
            "which torch.profiler does not break down; profile the function with cProfile"
        )
        return [Finding(HOST_TIME, text, idle=True)]
    if led.idle_us is not None and grew <= 0:
        return []
    busy = f"busy {100 * (a.busy_fraction or 0):.0f} % of the profiled calls"
    b_busy = (ev.baseline_inventory or {}).get("busy_fraction")
    if isinstance(b_busy, (int, float)):
        busy += f", {100 * b_busy:.0f} % in the baseline"
    gap = f"; the longest gap: {a.gaps[0].cause}" if a.gaps else ""
    if work is not None:
        text = f"the GPU waits for the host ({busy}{gap}): the host's time to issue that work"
        return [Finding(GPU_IDLE, text, symptom=True)]
    if a.launch_bound:
        text = (
            f"launch-bound: the GPU waits for the host ({busy}): {'; '.join(a.launch_notes)} (CUDA "
            "graphs or torch.compile(mode='reduce-overhead') remove the launch cost)"
        )
        return [Finding(LAUNCH_BOUND, text, idle=True)]
    if (a.busy_fraction or 0.0) >= 0.8 and led.idle_us is None:
        return []
    return [Finding(GPU_IDLE, f"the GPU waits for the host: {busy}{gap}", idle=True)]


def waiting_us(inv: Mapping[str, Any] | None, a: ProfileAnalysis | None = None) -> float | None:
    """µs per call the device waited: GPU idle time, or the CPU's time outside its ops."""
    if not inv and a is not None and a.device == "cuda" and a.calls:
        return (a.window_us - a.busy_us) / a.calls
    if not inv or not isinstance(inv.get("per_call_us"), (int, float)):
        return None
    per_call = float(inv["per_call_us"])
    if inv.get("device") == "cuda":
        busy = inv.get("busy_fraction")
        return per_call * (1.0 - float(busy)) if isinstance(busy, (int, float)) else None
    ops = sum(float(k.get("us_per_call") or 0) for k in inv.get("kernels") or [])
    return per_call - ops - float(inv.get("other_us_per_call") or 0.0)


def _short(changes: Sequence[KernelChange]) -> str:
    return ", ".join(sorted({base_function(c.name)[:48] for c in changes})[:3])
