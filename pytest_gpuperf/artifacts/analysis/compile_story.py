"""Compiler, layout and launch-config stories of a regression. Pure Python.

What the kernel diff alone answers badly: did the compiled code go, and why in dynamo's words
(the TORCH_TRACE log)? did the layout change? did a Triton kernel's launch config change?
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_gpuperf.artifacts.analysis.attribution import (
    EVERYTHING,
    Evidence,
    Finding,
    Ledger,
    names,
    timing,
)
from pytest_gpuperf.artifacts.analysis.inventory import (
    KernelChange,
    base_function,
    short_name,
)
from pytest_gpuperf.artifacts.analysis.timeline import COMPILED_MARKS

COMPILED_CODE_GONE = "compiled-code-gone"
GRAPH_BREAK = "graph-break"
RECOMPILE = "recompile"
FALLBACK = "fallback"
LAYOUT = "layout"
TRITON_CONFIG = "triton-config"
CAUSES = (COMPILED_CODE_GONE, RECOMPILE, GRAPH_BREAK, FALLBACK, LAYOUT, TRITON_CONFIG)

_CONVERSION = re.compile(
    r"nchwToNhwc|nhwcToNchw|nchw_?2_?nhwc|nhwc_?2_?nchw|nchw_?to_?nhwc|nhwc_?to_?nchw"
    r"|convert\w*layout|layout\w*convert|reorder|direct_copy_kernel|copy_kernel",
    re.I,
)
_CPU_CONVERSION_OPS = ("aten::contiguous", "aten::copy_", "aten::clone", "aten::_to_copy")
_CONV = re.compile(r"conv|fprop|dgrad|wgrad|winograd|implicit_gemm|mkldnn_convolution", re.I)
_LAYOUT_TOKEN = re.compile(r"_?(?:channels_last|nhwc\w*?|nchw\w*?|NHWC|NCHW)(?=_|$|<|\b)", re.I)
_VENDOR = re.compile(
    r"^(?:sm\d+_|nvjet|cutlass|ampere_|volta_|turing_|hopper_|cudnn|cublas|gemv|gemmk)", re.I
)


@dataclass
class CompiledCode:
    """What an inventory says about compiled code (``None``: the inventory does not say)."""

    regions_per_call: float | None
    triton_kernels: list[str]
    marked: bool | None

    @property
    def compiled(self) -> bool:
        return bool(self.marked or self.triton_kernels or (self.regions_per_call or 0) > 0)

    def describe(self) -> str:
        parts = []
        if self.regions_per_call:
            parts.append(f"{self.regions_per_call:g} compiled region(s) per call")
        if self.triton_kernels:
            parts.append(f"{len(self.triton_kernels)} Triton kernel(s)")
        return " and ".join(parts) or "compiled code"


def compiled_code(inv: Mapping[str, Any] | None) -> CompiledCode | None:
    """Compiled regions per call and Triton kernels of an inventory (old inventories too)."""
    if not inv:
        return None
    regions = inv.get("compiled_regions_per_call")
    regions = float(regions) if isinstance(regions, (int, float)) else None
    names = [str(k.get("name", "")) for k in inv.get("kernels") or [] if isinstance(k, Mapping)]
    marked = inv.get("compiled")
    if marked is None and any(n.startswith(COMPILED_MARKS) for n in names):
        marked = True
    triton = [n for n in names if n.startswith("triton_")]
    return CompiledCode(regions, triton, None if marked is None else bool(marked))


def trace_decision(
    baseline_inventories: Iterable[Mapping[str, Any] | None], current_compiled: bool | None
) -> tuple[bool, str]:
    """Whether the TORCH_TRACE child is worth running, and why (``current_compiled`` None:
    no profile)."""
    base = [c for c in (compiled_code(i) for i in baseline_inventories) if c is not None]
    base_compiled = next((c for c in base if c.compiled), None)
    if current_compiled and base_compiled is not None:
        return True, "compiled code in the profile and in the baseline"
    if current_compiled:
        return True, "compiled code in the profile"
    if base_compiled is not None:
        return True, (
            f"the compiled code is gone: the baseline ran {base_compiled.describe()}, "
            "the current profile none"
        )
    if current_compiled is None and not base:
        return False, "no profiler pass to tell whether the benchmark runs compiled code"
    return False, (
        "not compiled code (no torch.compile region or Triton kernel in the profile"
        + (" nor in the baseline's inventory)" if base else "; no baseline inventory)")
    )


def _loc(where: str | None, code: str | None = None) -> str:
    """`` at folder/file.py:3: `code``` (the path's last two parts)."""
    if not where:
        return ""
    return f" at {'/'.join(where.split('/')[-2:])}" + (f": `{code}`" if code else "")


@dataclass(frozen=True)
class _Regions:
    """What the compiled regions per call of both sides say."""

    base: CompiledCode | None
    text: str  # "1 -> 0 compiled regions per call"; "" when a side does not say
    gone: bool  # the baseline ran compiled code, the current profile none
    fell: bool  # fewer regions: part of the function runs eagerly
    rose: bool  # more regions: a new graph break
    counted: bool  # both sides say, and one ran some


def _regions(ev: Evidence) -> _Regions:
    base = compiled_code(ev.baseline_inventory)
    cur = compiled_code(ev.current_inventory)
    now = ev.analysis.compiled_regions if ev.analysis is not None else None
    c = cur.regions_per_call if cur is not None and cur.regions_per_call is not None else now
    b = base.regions_per_call if base else None
    gone = bool(base and base.compiled and cur is not None and not cur.compiled)
    if b is None or c is None:
        return _Regions(base, "", gone, False, False, False)
    text = f"{b:g} -> {c:g} compiled regions per call"
    return _Regions(
        base, text, gone, not gone and b >= 1 and c < b - 0.5, c > b + 0.5, max(b, c) > 0
    )


def compiler(ev: Evidence, led: Ledger) -> list[Finding]:
    """What the compiler did differently, in dynamo's words: code gone, breaks, recompiles."""
    comp = ev.compile or {}
    r = _regions(ev)
    out = _eager(comp, r)
    breaks = [g for g in comp.get("graph_breaks") or [] if isinstance(g, Mapping)]
    breaks = [g for g in breaks if not (out and g.get("eager"))]
    if breaks or r.rose:  # without regions to compare: the Triton kernels that came or went
        moved = [c.name for c in led.free("appeared", "vanished")]
        moved = [n for n in moved if base_function(n).startswith("triton_")]
        claims = r.rose if r.counted else frozenset(moved) or False
        out.append(_break(breaks, r.text if r.rose else "", claims))
    recompiles = [x for x in comp.get("recompile_details") or [] if isinstance(x, Mapping)]
    if recompiles and not any(f.cause == RECOMPILE for f in out):
        x = recompiles[-1]
        text = f"torch.compile recompiled {len(comp.get('recompiles') or [])} time(s): the guard "
        text += f"`{x.get('guard')}` failed" + _loc(x.get("where"), x.get("code"))
        out.append(Finding(RECOMPILE, text))
    if comp.get("fallbacks"):
        text = f"ops left to eager ATen (fallbacks): {', '.join(comp['fallbacks'][:4])}"
        out.append(Finding(FALLBACK, text))
    return out


def _eager(comp: Mapping[str, Any], r: _Regions) -> list[Finding]:
    """The recompile limit hit, or the compiled code gone: calls that run eagerly."""
    failures = [f for f in comp.get("frame_failures") or [] if isinstance(f, Mapping)]
    limit = next((f for f in failures if f.get("limit")), None)
    fell = r.gone or r.fell
    if limit is not None:
        recompiles = [x for x in comp.get("recompile_details") or [] if isinstance(x, Mapping)]
        n = len(comp.get("recompiles") or [])
        text = _limit_sentence(limit, recompiles, n, r.text if fell else "")
        strong = fell or r.base is None  # the compiled code fell, or nothing says it did not
        return [Finding(RECOMPILE, text, EVERYTHING if strong else (), idle=strong)]
    if not fell:
        return []
    skipped = [f for f in failures if f.get("eager") and not f.get("limit")]
    text = (
        f"the compiled code is gone: the baseline ran {r.base.describe() if r.base else '?'}, "
        "the current code runs none, so the function runs eagerly"
        if r.gone
        else f"fewer compiled regions run: {r.text}, so part of the function runs eagerly"
    )
    return [Finding(COMPILED_CODE_GONE, text + _why_eager(comp, skipped), EVERYTHING, idle=True)]


def _limit_sentence(
    limit: Mapping[str, Any], recompiles: Sequence[Mapping[str, Any]], n: int, regions: str
) -> str:
    lim = limit["limit"]
    guard = recompiles[-1] if recompiles else {}
    # the log names the function on the first recompile's reasons only
    named = [r["function"] for r in recompiles if r.get("function")]
    fn = limit.get("function") or (named[0] if named else "?")
    value = f" = {lim['value']}" if lim.get("value") is not None else ""
    failed = (
        f"; the guard that failed: `{guard.get('guard')}`"
        + _loc(guard.get("where"), guard.get("code"))
        if guard.get("guard")
        else ""
    )
    return (
        f"torch.compile recompiled `{fn}` {max(n - 1, 0)} time(s) and hit the recompile limit "
        f"(torch._dynamo.config.{lim.get('name')}{value}), so the calls that miss the cache run "
        f"eagerly{f' ({regions})' if regions else ''}{failed}; a Python number that changes on "
        "every call is baked into the graph as a constant: pass it as a tensor, or mark it dynamic"
    )


def _why_eager(comp: Mapping[str, Any], skipped: Sequence[Mapping[str, Any]]) -> str:
    """``; dynamo gave up on ...`` or ``; dynamo reported: ...``: why code runs eagerly."""
    if skipped:
        f = skipped[0]
        code = next(
            (str(g["code"]) for g in comp.get("graph_breaks") or []
             if isinstance(g, Mapping) and g.get("where") == f.get("where") and g.get("code")),
            "",
        )  # fmt: skip
        said = f'"{f.get("reason")}"'
        if f.get("skip_reason"):
            why = f.get("skip_explanation", "").rstrip(".")
            said = f'"{f["skip_reason"]}" ({why}), after {said}'
        gave_up = f"; dynamo gave up on `{f.get('function') or '?'}` and runs it eagerly: "
        return gave_up + said + _loc(f.get("where"), code)
    gb = next((g for g in comp.get("graph_breaks") or [] if isinstance(g, Mapping)), None)
    if gb is not None:
        return f'; dynamo reported: "{gb.get("reason")}"' + _loc(gb.get("where"), gb.get("code"))
    return ""


def _break(
    breaks: Sequence[Mapping[str, Any]], regions: str, claims: frozenset[str] | bool
) -> Finding:
    """torch.compile broke the graph; ``claims``: True (a new break), its kernels, or False."""
    g = breaks[0] if breaks else {}
    text = (
        "torch.compile broke the graph"
        + (f" {len(breaks)} time(s)" if breaks else "")
        + (f': "{g.get("reason")}"' if g.get("reason") else "")
        + _loc(g.get("where"), g.get("code"))
        + (f"; {regions}" if regions else "")
        + "; the pieces compile apart, so fusions across the break are lost and each "
        "piece adds its own launch overhead"
    )
    kernels = EVERYTHING if claims is True else (claims or frozenset())
    return Finding(GRAPH_BREAK, text, kernels, idle=bool(claims))


def is_conversion(name: str, kind: str = "kernel") -> bool:
    """A layout conversion: cuDNN's NCHW<->NHWC transposes, reorders, ``.contiguous()`` copies."""
    op = kind == "op" and name.startswith(_CPU_CONVERSION_OPS)
    return op or bool(_CONVERSION.search(name))


def is_conv(name: str) -> bool:
    return bool(_CONV.search(name))


def conv_layout(name: str) -> str | None:
    m = re.findall(r"nhwc|nchw|channels_last", name.lower())
    return None if not m else "NCHW" if m[-1] == "nchw" else "NHWC"


def _strip_layout(name: str) -> str:
    return _LAYOUT_TOKEN.sub("", base_function(name))


def layout(ev: Evidence, led: Ledger) -> list[Finding]:
    """Conversions appeared while the convolutions changed variant, or while the probe saw
    their inputs leave the baseline's memory format: one layout cause."""
    free = led.free()
    conv = [c for c in free if is_conversion(c.name, c.kind) and c.cur_launches > c.base_launches]
    swapped = [
        c
        for c in led.free("appeared", "vanished")
        if not is_conversion(c.name, c.kind) and is_conv(c.name)
    ]
    new = next((c for c in swapped if c.status == "appeared"), None)
    old = next((c for c in swapped if c.status == "vanished"), None)
    was, now = (_conv_inputs(p) for p in probes(ev))
    moved = sorted(now - was) if was and now else []
    if not conv or (not moved and (new is None or old is None)):
        return []
    along = _along(free, conv + swapped)
    along += _devectorized(free, conv + swapped + along)
    members = conv + swapped + along
    if new is not None and old is not None:
        a, b = conv_layout(old.name), conv_layout(new.name)
        direction = f" ({a} -> {b})" if a and b and a != b else ""
        what = (
            f"the convolutions changed variant{direction}: {short_name(new.name, 60)} replaced "
            f"{short_name(old.name, 60)}"
        )
    else:
        what = f"convolution inputs are {', '.join(moved)} now, where all were {', '.join(was)}"
    appeared = [short_name(c.name, 40) for c in along if c.status == "appeared"][:2]
    text = (
        f"the memory layout changed: layout conversions appeared ({names(conv)}; "
        f"{sum(c.delta_us for c in conv):.1f} µs per call) and {what}"
        + (f"; with them {', '.join(appeared)}" if appeared else "")
        + f" ({timing(members)} together); channels_last is lost on the way: "
        "keep it end to end (model.to(memory_format=torch.channels_last) and the input "
        "x.to(memory_format=torch.channels_last))"
    )
    return [Finding(LAYOUT, text, members)]


def probes(ev: Evidence) -> tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]:
    """The baseline's and the current API probe, each None when it was skipped or not taken."""
    found = ((ev.baseline_inventory or {}).get("probe"), ev.current_probe)
    base, cur = (p if isinstance(p, Mapping) and not p.get("skipped") else None for p in found)
    return base, cur


def _conv_inputs(probe: Mapping[str, Any] | None) -> set[str]:
    """The memory formats of the convolutions' inputs the probe saw."""
    ops = (probe or {}).get("ops") or {}
    calls = [e for n, v in ops.items() if n.startswith("conv") for e in v or []]
    return {str(e["layout"]) for e in calls if isinstance(e, Mapping) and e.get("layout")}


def _devectorized(
    free: Sequence[KernelChange], taken: Sequence[KernelChange]
) -> list[KernelChange]:
    """Elementwise kernels that run another variant of the same functor: mixed memory formats
    take ATen's strided path instead of its vectorized one."""
    gone = {_functor(c.name): c for c in free if c.status == "vanished" and c not in taken}
    out: list[KernelChange] = []
    for c in free:
        mine = c.status == "appeared" and c not in taken
        twin = gone.pop(_functor(c.name) or "-", None) if mine else None
        out += [c, twin] if twin is not None else []
    return out


def _functor(name: str) -> str:
    """``CUDAFunctor_add`` of ``vectorized_elementwise_kernel<CUDAFunctor_add>``."""
    m = re.search(r"elementwise_kernel<(\w+)>$", short_name(name))
    return m.group(1) if m else ""


def _along(free: Sequence[KernelChange], taken: Sequence[KernelChange]) -> list[KernelChange]:
    """Kernels that appeared with a layout in their name, or as a vanished one's layout twin."""
    gone = {_strip_layout(c.name): c for c in free if c.status == "vanished" and c not in taken}
    out: list[KernelChange] = []
    for c in free:
        twin = gone.get(_strip_layout(c.name))
        if c.status == "appeared" and c not in taken and (twin or conv_layout(c.name)):
            out += [c, twin] if twin else [c]
    return out


def is_triton(name: str, known: Iterable[str] = ()) -> bool:
    """An Inductor kernel (``triton_*``), one with a known Triton config, or a plain user kernel."""
    if name.startswith("triton_") or name in set(known):
        return True
    plain = re.fullmatch(r"[A-Za-z_]\w*", name) is not None
    return plain and not _VENDOR.match(name) and not name.startswith(("Memcpy", "Memset"))


def _config_text(k: Mapping[str, Any], cfg: Mapping[str, str] | None) -> str:
    parts = ["grid " + "x".join(str(x) for x in k["grid"])] if k.get("grid") else []
    threads = math.prod(int(b) for b in k["block"]) if k.get("block") else None
    if cfg:
        parts.append(", ".join(f"{a}={b}" for a, b in cfg.items()))
    elif threads:
        parts.append(f"num_warps={threads // 32}" if threads % 32 == 0 else f"{threads} threads")
    return ", ".join(parts) or "?"


def triton_configs(ev: Evidence, led: Ledger) -> list[Finding]:
    """Triton kernels whose launch config (grid, num_warps, autotuned config) changed."""
    cur_cfgs = dict(ev.triton_configs or {})
    base = {k.get("name"): k for k in (ev.baseline_inventory or {}).get("kernels") or []}
    cur = {k.get("name"): k for k in (ev.current_inventory or {}).get("kernels") or []}
    out = []
    for c in led.free("slower"):
        b, n = base.get(c.name), cur.get(c.name)
        fn = short_name(c.name, 200)
        if b is None or n is None or c.kind != "kernel" or not is_triton(fn, cur_cfgs):
            continue
        b_cfg, n_cfg = b.get("config"), n.get("config") or cur_cfgs.get(fn)
        cfg_moved = b_cfg is not None and n_cfg is not None and dict(b_cfg) != dict(n_cfg)
        if b.get("grid") == n.get("grid") and b.get("block") == n.get("block") and not cfg_moved:
            continue
        text = (
            f"the Triton kernel {fn} runs with another launch config: before "
            f"{_config_text(b, b_cfg)}, now {_config_text(n, n_cfg)}; {c.base_us:.1f} -> "
            f"{c.cur_us:.1f} µs per call; the autotuner chose another config (a cut config list, "
            "another autotune key or size hint): pin the config that ran before, or restore the "
            "configs"
        )
        out.append(Finding(TRITON_CONFIG, text, [c]))
    return out


def details(comp: Mapping[str, Any] | None) -> list[str]:
    """The compile log's lines under the diagnosis: frames dynamo gave up on, and the counts."""
    comp = comp or {}
    out = [
        f"compile: dynamo gave up on {f.get('function')} ({f.get('type')}): {f.get('reason')}"
        + (f" at {f.get('where')}" if f.get("where") else "")
        + (f"; hint: {f.get('hint')}" if f.get("hint") else "")
        for f in comp.get("frame_failures") or []
        if isinstance(f, Mapping) and (f.get("eager") or f.get("limit"))
    ]
    if comp.get("graphs") is not None:
        breaks = int(comp.get("graph_break_count") or len(comp.get("graph_breaks") or []))
        fallbacks = comp.get("fallbacks") or []
        out.append(
            f"compile: {comp.get('graphs')} graph(s), {breaks} graph break(s), "
            f"{len(comp.get('recompiles') or [])} recompile(s)"
            + (f", fallbacks {fallbacks}" if fallbacks else "")
        )
    return out
