"""torch.profiler pass: the regressed test re-run in a child, a few steady-state calls profiled.

A child, because the verdict may be decided where the callable no longer exists (the xdist
controller), and a fresh process is the unit in which the regression was seen. Per
benchmark: the trace (``<key>.trace.json``), the kernel table (``<key>.kernels.txt``) and
the analysis (``<key>.analysis.json``).
"""

from __future__ import annotations

import importlib.util
import json
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_gpuperf.artifacts.analysis.inventory import inventory_from_trace, short_name
from pytest_gpuperf.artifacts.analysis.layout import safe_name
from pytest_gpuperf.artifacts.analysis.timeline import (
    ProfileAnalysis,
    analyze,
    load_trace,
    parse_trace,
)
from pytest_gpuperf.artifacts.collectors.base import (
    FAILED,
    OK,
    TIMEOUT,
    CaptureContext,
    CollectorResult,
)
from pytest_gpuperf.artifacts.collectors.child import (
    BRIEF,
    CAPTURE_WINDOW_S,
    CHILD_ARGS,
    capture_env,
    read_status,
)

#: The collector that reads the compile log the profiler's child writes.
TRACE_TOOL = "torch_trace"
_AUTOTUNE = re.compile(
    r"Triton autotuning for function (\w+)(.{0,2000}?)best config selected: ([^;\n]*)", re.S
)


def kernel_table(inventory: Mapping[str, Any], limit: int = 25) -> str:
    """The hotspots: kernels (and copies) ranked by GPU time per call."""
    kernels = list(inventory.get("kernels", []))
    other = float(inventory.get("other_us_per_call") or 0.0)
    total = sum(float(k["us_per_call"]) for k in kernels) + other
    head = (
        f"{'#':>3} {'µs/call':>10} {'share':>6} {'launches':>8} {'µs/launch':>10} "
        f"{'grid':>14} {'block':>12}  name"
    )
    lines = [head]
    for i, k in enumerate(kernels[:limit], 1):
        us = float(k["us_per_call"])
        grid = "x".join(str(x) for x in k.get("grid", [])) or "-"
        block = "x".join(str(x) for x in k.get("block", [])) or "-"
        lines.append(
            f"{i:>3} {us:>10.2f} {100 * us / total if total else 0:>5.1f}% "
            f"{float(k['launches']):>8g} {float(k['us_per_launch']):>10.2f} "
            f"{grid:>14} {block:>12}  {k['name']}"
        )
    if other:
        lines.append(f"    {other:>10.2f}  (other kernels)")
    return "\n".join(lines) + "\n"


def hotspot_kernels(inventories: Sequence[Mapping[str, Any]], n: int) -> list[dict[str, Any]]:
    """The ``n`` GPU kernels with the most time per call over the given inventories."""
    best: dict[str, dict[str, Any]] = {}
    for inv in inventories:
        for k in inv.get("kernels", []):
            if k.get("kind") != "kernel":
                continue
            cur = best.get(k["name"])
            if cur is None or float(k["us_per_call"]) > float(cur["us_per_call"]):
                best[k["name"]] = dict(k)
    return sorted(best.values(), key=lambda k: -float(k["us_per_call"]))[:n]


class TorchProfilerCollector:
    name = "torch_profiler"

    def available(self) -> str | None:
        if importlib.util.find_spec("torch") is None:
            return "torch is not installed"
        return None

    def collect(self, ctx: CaptureContext) -> CollectorResult:
        folder = ctx.folder(self.name)
        if ctx.run_child is None:
            return CollectorResult.skipped(self.name, "no way to re-run the test here")
        env = capture_env(
            self.name, folder, ctx.keys, calls=ctx.calls, measure=BRIEF,
            window_s=CAPTURE_WINDOW_S, spawned_at=time.time(),
        )  # fmt: skip
        env["TRITON_PRINT_AUTOTUNING"] = "1"  # each autotuned kernel's config: a change's "after"
        if TRACE_TOOL not in ctx.skip:
            # the same child writes the compile log (the Inductor caches left on: no re-compile)
            log_dir = ctx.directory / TRACE_TOOL / "log"
            env["TORCH_TRACE"] = str(log_dir)
            ctx.state["torch_trace_log"] = str(log_dir)
        run = ctx.run_child(
            env=env, timeout_s=ctx.budget(), log_path=folder / "child.log", extra_args=CHILD_ARGS
        )
        t0 = time.monotonic()
        profiles, files, summary, errors = read_profiles(folder, run.results)
        ctx.state.setdefault("profiles", {}).update(profiles)
        note_profiles(ctx)
        summary["child_wall_s"] = round(run.wall_s, 2)
        summary["parse_s"] = round(time.monotonic() - t0, 3)
        result = CollectorResult(self.name, OK, files=[f for f in files if f.exists()])
        result.summary = summary
        result.wall_s = run.wall_s + summary["parse_s"]
        if not profiles:
            result.status = TIMEOUT if run.returncode == -9 else FAILED
            why = "; ".join(errors) if errors else _child_problem(run)
            result.reason = f"no profile of {', '.join(ctx.keys)}: {why}"
        elif errors:
            summary["errors"] = errors
        return result


def note_profiles(ctx: CaptureContext) -> None:
    """What the profiles tell the later collectors: the hotspot kernels (for ncu) and whether
    compiled code ran (for TORCH_TRACE)."""
    profiles = ctx.state.get("profiles") or {}
    ctx.state["hotspots"] = hotspot_kernels(
        [p["inventory"] for p in profiles.values()], max(ctx.ncu_kernels, 0)
    )
    ctx.state["compiled"] = any(
        p["analysis"].compiled or ((p.get("dynamo") or {}).get("stats") or {}).get("unique_graphs")
        for p in profiles.values()
    )


def read_profiles(
    folder: Path, remeasured: Sequence[Any] = ()
) -> tuple[dict[str, dict[str, Any]], list[Path], dict[str, Any], list[str]]:
    """The profiles a capture child wrote into ``folder`` (``ctx.state``'s "profiles", by key),
    the files written, a summary per key, and the errors."""
    status = read_status(folder)
    files: list[Path] = [folder / "child.log"]
    configs = _autotune_configs(folder / "child.log")
    summary: dict[str, Any] = {}
    profiles: dict[str, dict[str, Any]] = {}
    errors = []
    for entry in status.get("benchmarks", []):
        key = entry["key"]
        if entry.get("error"):
            errors.append(f"{key}: {entry['error']}")
            continue
        trace_path = folder / str(entry.get("trace"))
        try:
            trace = parse_trace(load_trace(trace_path))
            analysis = analyze(trace)
            inv = inventory_from_trace(trace, analysis=analysis)
        except (OSError, ValueError, KeyError, TypeError) as e:
            errors.append(f"{key}: cannot read the trace {trace_path.name}: {e}")
            continue
        again = [r for r in remeasured if r.id.key == key]
        info = {
            "key": key,
            "calls": entry.get("calls"),
            "mode": entry.get("mode"),
            "per_call_s_measured": entry.get("per_call_s"),
            "analysis": analysis.to_dict(),
            "inventory": inv,
            "dynamo": entry.get("dynamo"),
            "child_median_s": again[0].run.median if again else None,
            "child_rounds": len(again[0].run.rounds) if again else None,
            "triton_configs": configs,
            "timing": entry.get("timing"),
            "probe": entry.get("probe"),
        }
        if entry.get("group"):  # a distributed benchmark: every rank's trace, the group's
            info["group"] = entry["group"]
            files += [folder / str(t) for t in entry.get("traces") or [] if t != entry["trace"]]
            files += sorted(folder.glob("nccl.rank*.log"))
        base = safe_name(key)
        table = folder / f"{base}.kernels.txt"
        table.write_text(kernel_table(inv))
        out = folder / f"{base}.analysis.json"
        out.write_text(json.dumps(info, indent=1, default=str))
        files += [trace_path, table, out]
        profiles[key] = _profile(info, analysis)
        summary[key] = {**_summary(analysis, inv), "timing": entry.get("timing")}
    return profiles, files, summary, errors


def _profile(info: Mapping[str, Any], analysis: ProfileAnalysis) -> dict[str, Any]:
    return {
        "analysis": analysis,
        "inventory": info["inventory"],
        "dynamo": info.get("dynamo"),
        "child_median_s": info.get("child_median_s"),
        "child_rounds": info.get("child_rounds"),
        "triton_configs": info.get("triton_configs") or {},
        "probe": info.get("probe"),
        "group": info.get("group"),
    }


def saved_profiles(folder: Path) -> dict[str, dict[str, Any]]:
    """The profiles of an earlier pass, read back from its ``<key>.analysis.json`` files (the
    Nsight passes that run after the session's verdicts start from them)."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(folder.glob("*.analysis.json")):
        try:
            info = json.loads(path.read_text())
            analysis = ProfileAnalysis.from_dict(info["analysis"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if info.get("key"):
            out[str(info["key"])] = _profile(info, analysis)
    return out


def _summary(analysis: ProfileAnalysis, inv: Mapping[str, Any]) -> dict[str, Any]:
    """One benchmark's line in the collector's summary: busy time, syncs, copies, top kernels."""
    return {
        "busy_fraction": analysis.busy_fraction,
        "per_call_us": round(analysis.per_call_us, 2),
        "syncs_per_call": analysis.syncs_per_call,
        "h2d_per_call": analysis.copies_per_call("HtoD")[0],
        "kernels_per_call": analysis.kernels / max(analysis.calls, 1),
        "top": [
            f"{short_name(k['name'])}: {float(k['us_per_call']):.1f} µs/call"
            for k in inv["kernels"][:5]
        ],
    }


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


def _autotune_configs(log: Path) -> dict[str, dict[str, str]]:
    try:
        return parse_autotune_log(log.read_text(errors="replace"))
    except OSError:
        return {}


def _child_problem(run: Any) -> str:
    if run.returncode == -9:
        return f"the re-run was killed after {run.wall_s:.0f} s (its time budget)"
    tail = [ln for ln in (run.log_tail or "").splitlines() if ln.strip()][-3:]
    where = " | ".join(s.strip()[:160] for s in tail)
    return f"the re-run exited with status {run.returncode} before profiling" + (
        f": {where}" if where else ""
    )
