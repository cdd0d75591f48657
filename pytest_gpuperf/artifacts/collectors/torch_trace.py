"""TORCH_TRACE: how torch.compile treated the benchmark (graph breaks, recompiles, generated code).

The log comes from the profiler's child, run with ``TORCH_TRACE`` and the user's Inductor
caches (nothing re-compiled, every frame still traced); only when it wrote none is the test
re-run here. The log is read (:func:`parse_log`) and given to tlparse when on PATH.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_gpuperf.artifacts.analysis.compile_story import trace_decision
from pytest_gpuperf.artifacts.analysis.inventory import base_function
from pytest_gpuperf.artifacts.collectors.base import OK, CaptureContext, CollectorResult
from pytest_gpuperf.artifacts.collectors.child import CHILD_ARGS, MINIMAL, capture_env
from pytest_gpuperf.artifacts.collectors.process import run_process

_HEADER = re.compile(r"^[VIWEF]\d{4} [\d:.]+\s+\d+ [^\]]*\] (\{.*\})\s*$")
_TRITON_DEF = re.compile(
    r"^\w+ = async_compile\.triton\('(\w+)', '''(.*?)''', device_str=", re.M | re.S
)
_FALLBACK = re.compile(r"torch\.ops\.aten\.(\w+)\.(?:default|\w+)\(")
_EXTERN = re.compile(r"extern_kernels\.(\w+)\(")
_SKIPPED = re.compile(
    r"skipping (?:the )?(?:frame|function)|falling back to eager|frame skipped", re.I
)
_LIMIT = re.compile(r"recompile[ _]limit|cache[ _]size[ _]limit", re.I)
_LIMIT_VALUE = re.compile(
    r"\(currently set to (\d+)\)|\b(?:recompile_limit|cache_size_limit) \((\d+)\)"
)
_LIMIT_KIND = re.compile(r"Limit type: (\w+)")
_FILE_LINE = re.compile(r'File "([^"]+)", line (\d+)(?:, in (\S+))?')
#: tlparse's HTML report is an extra: it never holds the diagnosis up for long.
TLPARSE_TIMEOUT_S = 20.0


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


def frame_failure(metrics: Mapping[str, Any]) -> dict[str, Any] | None:
    """A frame dynamo gave up on, from its ``compilation_metrics`` (``None`` if it compiled):
    ``eager`` whether it now runs eagerly, ``limit`` the recompile limit it hit, if one."""
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
    limit = _limit(reason, metrics)
    if limit is not None:
        out["limit"], out["eager"] = limit, True
    return out


def _limit(reason: str, metrics: Mapping[str, Any]) -> dict[str, Any] | None:
    """The recompile limit a failure reason says was hit, with its value, or None."""
    low = reason.lower()
    if not _LIMIT.search(reason) or not any(w in low for w in ("exceed", "limit hit", "reached")):
        return None
    kind = _LIMIT_KIND.search(reason)
    name = (
        kind.group(1) if kind else "cache_size_limit" if "cache_size" in low else "recompile_limit"
    )
    m = _LIMIT_VALUE.search(reason)
    if m:
        return {"name": name, "value": int(next(g for g in m.groups() if g))}
    value = None  # else the one of the dynamo_config the metrics carry (a JSON string)
    with contextlib.suppress(ValueError, AttributeError):
        cfg = json.loads(str(metrics.get("dynamo_config") or "{}"))
        value = cfg.get(name, cfg.get("recompile_limit", cfg.get("cache_size_limit")))
    return {"name": name, "value": int(value) if isinstance(value, (int, float)) else None}


def trace_env(log_dir: Path) -> dict[str, str]:
    """The environment of a child whose compile log goes to ``log_dir`` (caches as they are)."""
    return {"TORCH_TRACE": str(log_dir)}


@dataclass
class Event:
    kind: str
    meta: dict[str, Any]
    payload: str

    @property
    def compile_id(self) -> str:
        m = self.meta
        cid = f"{m.get('frame_id', '?')}/{m.get('frame_compile_id', '?')}"
        return cid + (f"_{m['attempt']}" if m.get("attempt") else "")


def iter_events(text: str) -> Iterator[Event]:
    """The events of a TORCH_TRACE log, with their payloads."""
    current: Event | None = None
    payload: list[str] = []
    for line in [*text.splitlines(), ""]:  # the blank line ends the last event
        if line.startswith("\t"):
            if current is not None:
                payload.append(line[1:])
            continue
        m = _HEADER.match(line)
        if current is not None:
            current.payload = "\n".join(payload)
            yield current
            current, payload = None, []
        if not m:
            continue
        try:
            meta = json.loads(m.group(1))
        except ValueError:
            continue
        kind = next(iter(meta), "")
        if kind == "artifact" and isinstance(meta.get("artifact"), dict):
            kind = "artifact:" + str(meta["artifact"].get("name"))
        current = Event(kind, meta, "")


@dataclass
class CompileReport:
    graph_breaks: list[dict[str, Any]] = field(default_factory=list)
    recompiles: list[str] = field(default_factory=list)
    compiles: int = 0
    failures: list[str] = field(default_factory=list)
    fallbacks: Counter[str] = field(default_factory=Counter)
    library_calls: Counter[str] = field(default_factory=Counter)
    triton: dict[str, str] = field(default_factory=dict)
    compile_time_s: float = 0.0
    #: per recompile: the guard that failed first, where, and the user's source line
    recompile_details: list[dict[str, str]] = field(default_factory=list)
    #: frames dynamo gave up on (skipped to eager, or the recompile limit hit)
    frame_failures: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "graphs": self.compiles,
            "graph_break_count": len(self.graph_breaks),
            "graph_breaks": self.graph_breaks,
            "recompiles": self.recompiles,
            "recompile_details": self.recompile_details,
            "frame_failures": self.frame_failures,
            "failures": self.failures,
            "fallbacks": [f"aten.{k} x{v}" for k, v in sorted(self.fallbacks.items())],
            "library_calls": dict(self.library_calls),
            "triton_kernels": sorted(self.triton),
            "compile_time_s": round(self.compile_time_s, 2),
            "source": "TORCH_TRACE",
        }

    def lines(self) -> list[str]:
        out = [
            f"{self.compiles} compiled graph(s) in {self.compile_time_s:.1f} s, "
            f"{len(self.graph_breaks)} graph break(s), {len(self.recompiles)} recompile(s)"
        ]
        out += [f"graph break: {g['reason']} at {g['where']}" for g in self.graph_breaks[:3]]
        out += [f"recompile: {r}" for r in self.recompiles[:3]]
        for f in self.frame_failures[:2]:
            if f.get("limit"):
                lim = f["limit"]
                out.append(f"recompile limit hit: {lim.get('name')} = {lim.get('value')}")
            elif f.get("eager"):
                out.append(
                    f"frame skipped (runs eagerly): {f.get('function')} at {f.get('where')}: "
                    f"{f.get('skip_reason') or f.get('reason')}"
                )
        out += [f"compile failure: {f}" for f in self.failures[:2]]
        if self.fallbacks:
            out.append("fallbacks to ATen: " + ", ".join(self.to_dict()["fallbacks"][:6]))
        return out


def _graph_break(payload: str) -> dict[str, Any]:
    lines = [ln.strip() for ln in payload.splitlines()]
    where = reason = ""
    for s in lines:
        if s.startswith("Graph break in user code at "):
            where = s[len("Graph break in user code at ") :]
        elif not reason and s and not s.startswith(("Graph Break Reason:", "Graph break")):
            reason = s
        if where and reason:
            break
    if not reason:
        reason = next((s for s in lines if s), "unknown")
        reason = reason.replace("Graph Break Reason: ", "")
    if not where:
        frames = re.findall(r'File "([^"]+)", line (\d+)', payload)
        user = [f for f in frames if "/torch/" not in f[0] and "site-packages" not in f[0]]
        if user:
            where = f"{user[-1][0]}:{user[-1][1]}"
    out: dict[str, Any] = {"reason": reason, "where": where}
    file, _, line = where.rpartition(":")
    code = source_line(payload, file, int(line)) if line.isdigit() else ""
    if code:
        out["code"] = code
    if "falling back to eager" in payload.lower():
        out["eager"] = True
    return out


def parse_log(text: str, rep: CompileReport | None = None) -> CompileReport:
    """Graph breaks, recompiles, failures, fallbacks and Triton sources of one TORCH_TRACE log,
    added to ``rep`` (the logs of a test's other processes) if given."""
    rep = rep or CompileReport()
    seen_breaks: set[tuple[str, str]] = set()
    for ev in iter_events(text):
        if ev.kind == "artifact:dynamo_graph_break_reason":
            gb = _graph_break(ev.payload)
            key = (gb["reason"], gb["where"])
            if key not in seen_breaks:
                seen_breaks.add(key)
                gb["compile_id"] = ev.compile_id
                rep.graph_breaks.append(gb)
        elif ev.kind == "artifact:recompile_reasons":
            # one event per recompile; it lists the failed guard of every cache entry,
            # newest first: that first one is the recompile's reason
            payload = ev.payload.strip()  # one reason, or a JSON list of them
            reasons = [payload] if payload else []
            if payload.startswith("["):
                with contextlib.suppress(ValueError):
                    reasons = [str(x) for x in json.loads(payload)]
            if reasons:
                detail = recompile_reason(reasons[0])
                detail["compile_id"] = ev.compile_id
                rep.recompile_details.append(detail)
                rep.recompiles.append(f"{detail['entry']}: {detail['guard']}".lstrip(": "))
        elif ev.kind == "compilation_metrics":
            cm = ev.meta.get("compilation_metrics") or {}
            rep.compiles += 1
            t = cm.get("entire_frame_compile_time_s")
            if isinstance(t, (int, float)):
                rep.compile_time_s += t
            if cm.get("fail_type"):
                rep.failures.append(f"{cm.get('fail_type')}: {cm.get('fail_reason')}")
                failure = frame_failure(cm)
                if failure is not None:
                    rep.frame_failures.append(failure)
        elif ev.kind == "inductor_output_code":
            for name, body in _TRITON_DEF.findall(ev.payload):
                rep.triton[name] = body.strip("\n") + "\n"
            call = ev.payload[ev.payload.find("def call(") :] if "def call(" in ev.payload else ""
            rep.fallbacks.update(_FALLBACK.findall(call))
            rep.library_calls.update(_EXTERN.findall(call))
    return rep


class TorchTraceCollector:
    name = "torch_trace"

    def available(self) -> str | None:
        return None

    def collect(self, ctx: CaptureContext) -> CollectorResult:
        run_it, why_trace = trace_decision(
            ctx.baseline_inventories.values(), ctx.state.get("compiled")
        )
        if not run_it:
            return CollectorResult.skipped(self.name, why_trace)
        folder = ctx.folder(self.name)
        end = time.monotonic() + ctx.budget()
        # the compile logs: the profiler's child's, else those of a child run here
        log_dir = Path(ctx.state.get("torch_trace_log") or folder / "log")
        logs = sorted(log_dir.glob("*.log"))
        files, wall = list(logs), 0.0
        if not logs:
            if ctx.run_child is None:
                return CollectorResult.skipped(self.name, "no way to re-run the test here")
            log_dir = folder / "log"
            run = ctx.run_child(
                env={
                    **trace_env(log_dir),
                    **capture_env(self.name, folder, ctx.keys, measure=MINIMAL),
                },
                timeout_s=max(ctx.budget() * 0.75, 1.0),
                log_path=folder / "child.log",
                extra_args=CHILD_ARGS,
            )
            logs = sorted(log_dir.glob("*.log"))
            files, wall = [folder / "child.log", *logs], run.wall_s
            if not logs:
                why = "no TORCH_TRACE log written"
                return CollectorResult.child_failed(self.name, run, why, files, tail=False)
        rep = CompileReport()
        for log in logs:
            parse_log(log.read_text(errors="replace"), rep)
        files += self._triton_sources(ctx, rep, folder)
        summary = {**rep.to_dict(), "why": why_trace, "lines": rep.lines()}
        ctx.state["compile"] = rep.to_dict()
        wall += self._tlparse(logs[-1], folder, end, files, summary)
        return CollectorResult(self.name, OK, [f for f in files if f.exists()], summary, None, wall)

    def _triton_sources(self, ctx: CaptureContext, rep: CompileReport, folder: Path) -> list[Path]:
        """The generated source of the hotspots and the top Triton kernels, a file each."""
        names = [base_function(h["name"]) for h in ctx.state.get("hotspots") or []]
        for p in (ctx.state.get("profiles") or {}).values():
            for k in p["inventory"].get("kernels", [])[:8]:
                if k.get("kind") == "kernel" and base_function(k["name"]).startswith("triton_"):
                    names.append(base_function(k["name"]))
        files = []
        tdir = folder / "triton"
        for name in dict.fromkeys(names):
            src = rep.triton.get(name)
            if src:
                tdir.mkdir(exist_ok=True)
                path = tdir / f"{name}.py"
                path.write_text(src)
                files.append(path)
        return files

    @staticmethod
    def _tlparse(
        log: Path, folder: Path, end: float, files: list[Path], summary: dict[str, Any]
    ) -> float:
        """tlparse's HTML report of ``log``, when tlparse is on PATH; returns its seconds."""
        if not shutil.which("tlparse"):
            summary["tlparse"] = "skipped: tlparse not found on PATH"
            return 0.0
        out = folder / "tlparse"
        cmd = ["tlparse", str(log), "-o", str(out), "--overwrite", "--no-browser"]
        budget = min(max(end - time.monotonic(), 1.0), TLPARSE_TIMEOUT_S)
        tl = run_process(cmd, timeout_s=budget, log_path=folder / "tlparse.log")
        if not tl.ok and "--no-browser" in tl.output:
            tl = run_process(cmd[:-1], timeout_s=budget)
        summary["tlparse_s"] = round(tl.wall_s, 2)
        if (out / "index.html").exists():
            files.append(out / "index.html")
        else:
            summary["tlparse_error"] = tl.describe_failure("tlparse")
        return tl.wall_s
