"""Compiler, layout and launch-config stories of a regression. Pure Python.

Three questions the kernel diff alone answers badly:

* **Did the compiled code go?** The baseline's inventory says how many
  torch.compile regions ran per call and which Triton kernels; if they
  vanished, the function now runs eagerly, and the TORCH_TRACE log says why
  in dynamo's own words (a graph break in a loop skips the whole frame; the
  recompile limit sends every later call to eager). :func:`trace_decision`
  decides from both sides whether the compile log is worth a child process;
  :func:`compiler` tells the story, and claims every change of the kernels
  when the compiled code is gone (the eager kernels are its consequence).
* **Did the layout change?** Layout conversions (``nchwToNhwcKernel``,
  ``nhwcToNchwKernel``, ``.contiguous()`` copies) appearing while the
  convolutions or GEMMs change variant are one cause, with one fix
  (:func:`layout`).
* **Did a Triton kernel's launch config change?** Grid, block (so
  ``num_warps``) and, where the autotune log gives it, the chosen config
  (:func:`triton_configs`).

Each story is an :class:`~.attribution.Finding` that claims the terms of the slowdown its
cause explains (:mod:`.attribution`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_gpuperf.artifacts.analysis.attribution import (
    EVERYTHING,
    Evidence,
    Finding,
    Ledger,
    timing,
)
from pytest_gpuperf.artifacts.analysis.inventory import base_function, is_gemm, short_name

COMPILED_CODE_GONE = "compiled-code-gone"
GRAPH_BREAK = "graph-break"
RECOMPILE = "recompile"
FALLBACK = "fallback"
LAYOUT = "layout"
TRITON_CONFIG = "triton-config"
CAUSES = (COMPILED_CODE_GONE, RECOMPILE, GRAPH_BREAK, FALLBACK, LAYOUT, TRITON_CONFIG)

#: Operator or annotation names that mark compiled code in a profile.
COMPILED_MARKS = ("Torch-Compiled Region", "CompiledFunction", "## Call CompiledFxGraph")
_SKIPPED = re.compile(
    r"skipping (?:the )?(?:frame|function)|falling back to eager|frame skipped", re.I
)
_LIMIT = re.compile(r"recompile[ _]limit|cache[ _]size[ _]limit", re.I)
_LIMIT_VALUE = re.compile(
    r"\(currently set to (\d+)\)|\b(?:recompile_limit|cache_size_limit) \((\d+)\)"
)
_LIMIT_KIND = re.compile(r"Limit type: (\w+)")
_FILE_LINE = re.compile(r'File "([^"]+)", line (\d+)(?:, in (\S+))?')
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
_AUTOTUNE = re.compile(
    r"Triton autotuning for function (\w+)(.{0,2000}?)best config selected: ([^;\n]*)", re.S
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
    names = [str(k.get("name", "")) for k in inv.get("kernels") or [] if isinstance(k, Mapping)]
    triton = [n for n in names if n.startswith("triton_")]
    marked = inv.get("compiled")
    if marked is None and any(n.startswith(COMPILED_MARKS) for n in names):
        marked = True
    return CompiledCode(
        float(regions) if isinstance(regions, (int, float)) else None,
        triton,
        bool(marked) if marked is not None else None,
    )


def trace_decision(
    baseline_inventories: Iterable[Mapping[str, Any] | None], current_compiled: bool | None
) -> tuple[bool, str]:
    """Whether the TORCH_TRACE child is worth running, judged on both sides, and why (or why not).

    ``current_compiled`` is what the current profile says (``None``: no profile).
    """
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


# --- TORCH_TRACE facts ---------------------------------------------------------------


def _short_path(path: str) -> str:
    return "/".join(path.split("/")[-2:]) if path.count("/") > 1 else path


def source_line(text: str, filename: str | None = None, lineno: int | None = None) -> str:
    """The user's source text after the last ``File "...", line N`` frame (of that file:line)."""
    lines = text.splitlines()
    found = ""
    for i, ln in enumerate(lines):
        m = _FILE_LINE.search(ln)
        if not m or "/torch/" in m.group(1) or i + 1 >= len(lines):
            continue
        if filename is not None and (m.group(1) != filename or int(m.group(2)) != lineno):
            continue
        nxt = lines[i + 1].strip()
        if nxt and not nxt.startswith(("File ", "^")):
            found = nxt
    return found


def recompile_reason(reason: str) -> dict[str, str]:
    """``0/7: scale == 1.008  # code  # file:3 in g`` (and its stack) to guard, where, code."""
    text = reason.strip()
    first = text.splitlines()[0] if text else ""
    guard, _, comment = first.partition("  #")
    guard = guard.strip()
    m = re.match(r"\d+/\d+:\s*(.*)$", guard)
    out = {"entry": guard.split(":", 1)[0] if m else "", "guard": m.group(1) if m else guard}
    frames = _FILE_LINE.findall(text)
    if frames:
        f, line, fn = frames[-1]
        out["where"] = f"{f}:{line}"
        out["function"] = fn
        out["code"] = source_line(text)
    elif comment:
        parts = [p.strip() for p in comment.split("  #")]
        out["code"] = parts[0].lstrip("# ").strip()
        if len(parts) > 1:
            out["where"] = parts[-1]
    return out


def recompile_reasons(payload: str) -> list[str]:
    """The reasons of one ``recompile_reasons`` artifact: raw text (one) or a JSON list."""
    text = payload.strip()
    if text.startswith("["):
        try:
            return [str(x) for x in json.loads(text)]
        except ValueError:
            pass
    return [text] if text else []


def frame_failure(metrics: Mapping[str, Any]) -> dict[str, Any] | None:
    """A frame dynamo gave up on, from its ``compilation_metrics`` (``None`` if it compiled).

    ``eager`` says whether the frame now runs eagerly (skipped, or the recompile
    limit hit); ``limit`` names the limit and its value when that was the reason.
    """
    ftype, reason = metrics.get("fail_type"), str(metrics.get("fail_reason") or "")
    if not ftype:
        return None
    blocks = [b.strip() for b in reason.split("*** While handling this graph break") if b.strip()]
    first = blocks[0].splitlines()[0].strip() if blocks else str(ftype)
    out: dict[str, Any] = {
        "function": metrics.get("co_name"),
        "compile_id": metrics.get("compile_id"),
        "type": str(ftype),
        "reason": first,
        "eager": bool(_SKIPPED.search(reason)),
    }
    explanations = re.findall(r"Explanation: (.*)", reason)
    if len(blocks) > 1:  # dynamo's own account of why the frame was skipped
        skip = blocks[-1].split("***", 1)[-1].strip().splitlines()
        out["skip_reason"] = skip[0].strip() if skip else ""
        if explanations:
            out["skip_explanation"] = explanations[-1].strip()
    elif explanations:
        out["explanation"] = explanations[0].strip()
    hint = re.search(r"Hint: (.*)", reason)
    if hint:
        out["hint"] = hint.group(1).strip()
    fname, line = metrics.get("fail_user_frame_filename"), metrics.get("fail_user_frame_lineno")
    if fname and line:
        out["where"] = f"{fname}:{line}"
    elif metrics.get("co_filename") and metrics.get("co_firstlineno"):
        out["where"] = f"{metrics['co_filename']}:{metrics['co_firstlineno']}"
    low = reason.lower()
    if _LIMIT.search(reason) and ("exceed" in low or "limit hit" in low or "reached" in low):
        m = _LIMIT_VALUE.search(reason)
        kind = _LIMIT_KIND.search(reason)
        name = (
            kind.group(1)
            if kind
            else ("cache_size_limit" if "cache_size" in low else "recompile_limit")
        )
        value = int(next(g for g in m.groups() if g)) if m else _config_value(metrics, name)
        out["limit"] = {"name": name, "value": value}
        out["eager"] = True
    return out


def _config_value(metrics: Mapping[str, Any], name: str) -> int | None:
    """A limit from the ``dynamo_config`` that compilation metrics carry (a JSON string)."""
    try:
        cfg = json.loads(str(metrics.get("dynamo_config") or "{}"))
        v = cfg.get(name, cfg.get("recompile_limit", cfg.get("cache_size_limit")))
        return int(v) if isinstance(v, (int, float)) else None
    except (ValueError, AttributeError):
        return None


# --- the stories ---------------------------------------------------------------------


def _loc(where: str | None, code: str | None = None) -> str:
    if not where:
        return ""
    return f" at {_short_path(where)}" + (f": `{code}`" if code else "")


def _regions(ev: Evidence) -> tuple[CompiledCode | None, float | None, float | None, bool]:
    """The baseline's compiled code, both sides' compiled regions per call, and whether the
    compiled code is gone (the baseline ran some, the current profile none)."""
    base = compiled_code(ev.baseline_inventory)
    cur = compiled_code(ev.current_inventory)
    now = ev.analysis.compiled_regions if ev.analysis is not None else None
    if cur is not None and cur.regions_per_call is None:
        cur.regions_per_call = now
    gone = bool(base and base.compiled and cur is not None and not cur.compiled)
    b = base.regions_per_call if base else None
    return base, b, cur.regions_per_call if cur else now, gone


def compiler(ev: Evidence, led: Ledger) -> list[Finding]:
    """What the compiler did differently, in dynamo's words: the compiled code gone (or the
    recompile limit sending calls to eager) claims every change of the kernels and the idle
    time; a new graph break the kernels it moved; recompiles and fallbacks claim nothing."""
    comp = ev.compile or {}
    base, before, now, gone = _regions(ev)
    known = before is not None and now is not None
    b, c = before or 0.0, now or 0.0
    fell = not gone and known and b >= 1 and c < b - 0.5
    rose = known and c > b + 0.5
    regions = f"{b:g} -> {c:g} compiled regions per call" if known else ""
    failures = [f for f in comp.get("frame_failures") or [] if isinstance(f, Mapping)]
    limit = next((f for f in failures if f.get("limit")), None)
    recompiles = [r for r in comp.get("recompile_details") or [] if isinstance(r, Mapping)]
    out = []
    if limit is not None:
        strong = gone or fell or base is None
        text = _limit_sentence(limit, recompiles, len(comp.get("recompiles") or []),
                               regions if gone or fell else "")  # fmt: skip
        out.append(Finding(RECOMPILE, text, EVERYTHING if strong else frozenset(), idle=strong))
    elif gone or fell:
        head = (
            f"the compiled code is gone: the baseline ran {base.describe() if base else '?'}, "
            "the current code runs none, so the function runs eagerly"
            if gone
            else f"fewer compiled regions run: {regions}, so part of the function runs eagerly"
        )
        skipped = [f for f in failures if f.get("eager") and not f.get("limit")]
        out.append(Finding(COMPILED_CODE_GONE, head + _why_eager(comp, skipped), EVERYTHING, True))
    breaks = [g for g in comp.get("graph_breaks") or [] if isinstance(g, Mapping)]
    breaks = [g for g in breaks if not g.get("eager")] if out else breaks
    if breaks or rose:
        counted = known and max(b, c) > 0
        out.append(_break(breaks, regions if rose else "", rose if counted else _moved(led)))
    if recompiles and limit is None:
        r = recompiles[-1]
        text = (
            f"torch.compile recompiled {len(comp.get('recompiles') or [])} time(s): the guard "
            f"`{r.get('guard')}` failed" + _loc(r.get("where"), r.get("code"))
        )
        out.append(Finding(RECOMPILE, text))
    fallbacks = comp.get("fallbacks") or []
    if fallbacks:
        text = f"ops left to eager ATen (fallbacks): {', '.join(fallbacks[:4])}"
        out.append(Finding(FALLBACK, text))
    return out


def _moved(led: Ledger) -> frozenset[str] | bool:
    """Without compiled regions to compare: the Triton kernels that appeared or vanished."""
    moved = frozenset(
        c.name
        for c in led.free("appeared", "vanished")
        if base_function(c.name).startswith("triton_")
    )
    return moved or False


def _limit_sentence(
    limit: Mapping[str, Any], recompiles: Sequence[Mapping[str, Any]], n: int, regions: str
) -> str:
    """The recompile limit was hit: which function, which guard failed, and the remedy."""
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
        code = _code_of(comp, f.get("where"))
        return (
            f"; dynamo gave up on `{f.get('function') or '?'}` and runs it eagerly: "
            + (
                f'"{f["skip_reason"]}" ({f.get("skip_explanation", "").rstrip(".")}), '
                f'after "{f.get("reason")}"'
                if f.get("skip_reason")
                else f'"{f.get("reason")}"'
            )
            + _loc(f.get("where"), code)
        )
    gb = next((g for g in comp.get("graph_breaks") or [] if isinstance(g, Mapping)), None)
    if gb is not None:
        return f'; dynamo reported: "{gb.get("reason")}"' + _loc(gb.get("where"), gb.get("code"))
    return ""


def _break(
    breaks: Sequence[Mapping[str, Any]], regions: str, claims: frozenset[str] | bool
) -> Finding:
    """torch.compile broke the graph: how often, the first reason and where, and what it costs
    (``regions``: the compiled regions per call, when they rose). ``claims``: True when the
    break is new (every change is its doing), the kernels it moved, or False (not new)."""
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


def _code_of(comp: Mapping[str, Any], where: str | None) -> str:
    for g in comp.get("graph_breaks") or []:
        if isinstance(g, Mapping) and g.get("where") == where and g.get("code"):
            return str(g["code"])
    return ""


def is_conversion(name: str, kind: str = "kernel") -> bool:
    """A layout conversion: cuDNN's NCHW<->NHWC transposes, reorders, ``.contiguous()`` copies."""
    if kind == "op":
        return name.startswith(_CPU_CONVERSION_OPS) or bool(_CONVERSION.search(name))
    return bool(_CONVERSION.search(name))


def is_conv(name: str) -> bool:
    return bool(_CONV.search(name))


def _layout_of(name: str) -> str | None:
    low = name.lower()
    if "nhwc" in low or "channels_last" in low:
        return "NHWC"
    if "nchw" in low:
        return "NCHW"
    return None


def _strip_layout(name: str) -> str:
    return _LAYOUT_TOKEN.sub("", base_function(name))


def layout(ev: Evidence, led: Ledger) -> list[Finding]:
    """Conversions appeared while convolutions/GEMMs changed variant: one layout cause, with
    the kernels that change with the layout (batch norm's channels-last and NCHW variants)."""
    free = led.free()
    conv = [
        c
        for c in free
        if is_conversion(c.name, c.kind) and c.cur_launches > c.base_launches and c.delta_us > 0
    ]
    swapped = [
        c
        for c in free
        if c.status in ("appeared", "vanished")
        and not is_conversion(c.name, c.kind)
        and (is_conv(c.name) or is_gemm(c.name))
    ]
    new = next((c for c in swapped if c.status == "appeared"), None)
    old = next((c for c in swapped if c.status == "vanished"), None)
    if not conv or new is None or old is None:
        return []
    gone = {_strip_layout(c.name): c for c in free if c.status == "vanished"}
    along = [
        c
        for c in free
        if c.status == "appeared"
        and c not in swapped
        and c not in conv
        and (_layout_of(c.name) or _strip_layout(c.name) in gone)
    ]
    members = (
        conv
        + swapped
        + along
        + [gone[_strip_layout(c.name)] for c in along if _strip_layout(c.name) in gone]
    )
    was, now = _layout_of(old.name), _layout_of(new.name)
    direction = f" ({was} -> {now})" if was and now and was != now else ""
    convs = ", ".join(f"{short_name(c.name, 48)} {c.cur_launches:g}x per call" for c in conv[:3])
    with_them = (
        "; with them " + ", ".join(short_name(c.name, 40) for c in along[:2]) if along else ""
    )
    text = (
        f"the memory layout changed: layout conversions appeared ({convs}; "
        f"{sum(c.delta_us for c in conv):.1f} µs per call) and the convolutions/GEMMs changed "
        f"variant{direction}: {short_name(new.name, 60)} replaced {short_name(old.name, 60)}"
        f"{with_them} ({timing(members)} together); channels_last is lost on the way: keep it "
        "end to end (model.to(memory_format=torch.channels_last) and the input "
        "x.to(memory_format=torch.channels_last))"
    )
    return [Finding(LAYOUT, text, frozenset(c.name for c in members))]


def is_triton(name: str, known: Iterable[str] = ()) -> bool:
    """An Inductor kernel (``triton_*``), one with a known Triton config, or a plain user kernel."""
    if name.startswith("triton_") or name in set(known):
        return True
    plain = re.fullmatch(r"[A-Za-z_]\w*", name) is not None
    return plain and not _VENDOR.match(name) and not name.startswith(("Memcpy", "Memset"))


def parse_autotune_log(text: str) -> dict[str, dict[str, str]]:
    """``TRITON_PRINT_AUTOTUNING=1`` output: the best config per kernel (the last one printed)."""
    out: dict[str, dict[str, str]] = {}
    for m in _AUTOTUNE.finditer(text):
        cfg: dict[str, str] = {}
        for part in m.group(3).split(","):
            k, sep, v = part.partition(":")
            if sep and v.strip() not in ("None", ""):
                cfg[k.strip()] = v.strip()
        out[m.group(1)] = cfg
    return out


def _threads(block: Sequence[int] | None) -> int | None:
    if not block:
        return None
    n = 1
    for b in block:
        n *= int(b)
    return n


def _config_text(k: Mapping[str, Any], cfg: Mapping[str, str] | None) -> str:
    parts = []
    if k.get("grid"):
        parts.append("grid " + "x".join(str(x) for x in k["grid"]))
    threads = _threads(k.get("block"))
    if cfg:
        parts.append(", ".join(f"{a}={b}" for a, b in cfg.items()))
    elif threads:
        parts.append(f"num_warps={threads // 32}" if threads % 32 == 0 else f"{threads} threads")
    return ", ".join(parts) or "?"


def triton_configs(ev: Evidence, led: Ledger) -> list[Finding]:
    """Triton kernels whose launch config (grid, num_warps, autotuned config) changed.

    Configs come from an inventory entry's ``config`` or, for the current run, from the
    autotune log (``ev.triton_configs``); without them the grid and the block (``num_warps``
    = threads / 32) are what both profiles give.
    """
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
        out.append(Finding(TRITON_CONFIG, text, frozenset((c.name,))))
    return out


def details(comp: Mapping[str, Any] | None) -> list[str]:
    """The compile log's lines under the diagnosis: frames dynamo gave up on, and the counts."""
    comp = comp or {}
    out = []
    for f in comp.get("frame_failures") or []:
        if isinstance(f, Mapping) and (f.get("eager") or f.get("limit")):
            out.append(
                f"compile: dynamo gave up on {f.get('function')} ({f.get('type')}): "
                f"{f.get('reason')}"
                + (f" at {f.get('where')}" if f.get("where") else "")
                + (f"; hint: {f.get('hint')}" if f.get("hint") else "")
            )
    if comp.get("graphs") is not None:
        breaks = int(comp.get("graph_break_count") or len(comp.get("graph_breaks") or []))
        fallbacks = comp.get("fallbacks") or []
        out.append(
            f"compile: {comp.get('graphs')} graph(s), {breaks} graph break(s), "
            f"{len(comp.get('recompiles') or [])} recompile(s)"
            + (f", fallbacks {fallbacks}" if fallbacks else "")
        )
    return out
