"""torch.profiler pass: the regressed test re-run in a child, a few steady-state calls profiled.

A child, because the verdict may be decided where the callable no longer exists (the xdist
controller), and a fresh process is the unit in which the regression was seen. Per
benchmark: ``<key>.trace.json``, the kernel table ``<key>.kernels.txt``, ``<key>.analysis.json``.
"""

from __future__ import annotations

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
from pytest_gpuperf.artifacts.collectors.process import ProcessRun

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
    lines = [
        f"{'#':>3} {'µs/call':>10} {'share':>6} {'launches':>8} {'µs/launch':>10} "
        f"{'grid':>14} {'block':>12}  name"
    ]
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


class TorchProfilerCollector:
    name = "torch_profiler"

    def available(self) -> str | None:
        return None  # torch is the package's dependency

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
        files = [f for f in files if f.exists()]
        wall = run.wall_s + summary["parse_s"]
        result = CollectorResult(self.name, OK, files=files, summary=summary, wall_s=wall)
        if not profiles:
            killed = run.returncode == -9
            result.status = TIMEOUT if killed else FAILED
            child = ProcessRun(run.command, run.returncode, run.wall_s, killed, run.log_tail)
            why = "; ".join(errors) or child.describe_failure("the re-run")
            result.reason = f"no profile of {', '.join(ctx.keys)}: {why}"
        elif errors:
            summary["errors"] = errors
        return result


def note_profiles(ctx: CaptureContext) -> None:
    """For the later collectors: the ``ctx.ncu_kernels`` GPU kernels with the most time per
    call over the profiles (ncu), whether compiled code ran."""
    profiles = ctx.state.get("profiles") or {}
    best: dict[str, dict[str, Any]] = {}
    for p in profiles.values():
        for k in (k for k in p["inventory"].get("kernels", []) if k.get("kind") == "kernel"):
            if float(k["us_per_call"]) > float(best.get(k["name"], {}).get("us_per_call", -1.0)):
                best[k["name"]] = dict(k)
    hot = sorted(best.values(), key=lambda k: -float(k["us_per_call"]))
    ctx.state["hotspots"] = hot[: max(ctx.ncu_kernels, 0)]
    ctx.state["compiled"] = any(
        p["analysis"].compiled or ((p.get("dynamo") or {}).get("stats") or {}).get("unique_graphs")
        for p in profiles.values()
    )


def read_profiles(
    folder: Path, remeasured: Sequence[Any] = ()
) -> tuple[dict[str, dict[str, Any]], list[Path], dict[str, Any], list[str]]:
    """The profiles a capture child wrote into ``folder`` (``ctx.state``'s "profiles", by key),
    the files written, a summary per key, and the errors."""
    files: list[Path] = [folder / "child.log"]
    try:  # TRITON_PRINT_AUTOTUNING's lines
        configs = parse_autotune_log((folder / "child.log").read_text(errors="replace"))
    except OSError:
        configs = {}
    summary: dict[str, Any] = {}
    profiles: dict[str, dict[str, Any]] = {}
    errors = []
    for entry in read_status(folder).get("benchmarks", []):
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
        again = next((r.run for r in remeasured if r.id.key == key), None)
        info = {
            **{k: entry.get(k) for k in ("key", "calls", "mode", "dynamo", "probe", "group")},
            "per_call_s_measured": entry.get("per_call_s"),
            "analysis": analysis.to_dict(),
            "inventory": inv,
            "child_median_s": again.median if again else None,
            "child_rounds": len(again.rounds) if again else None,
            "triton_configs": configs,
            "timing": _timing(entry.get("timing"), again),
        }
        if entry.get("group"):  # a distributed benchmark: every rank's trace, the group's
            files += [folder / str(t) for t in entry.get("traces") or [] if t != entry["trace"]]
            files += sorted(folder.glob("nccl.rank*.log"))
        base = safe_name(key)
        table = folder / f"{base}.kernels.txt"
        table.write_text(kernel_table(inv))
        out = folder / f"{base}.analysis.json"
        out.write_text(json.dumps(info, indent=1, default=str))
        files += [trace_path, table, out]
        profiles[key] = _profile(info, analysis)
        top = [
            f"{short_name(k['name'])}: {k['us_per_call']:.1f} µs/call" for k in inv["kernels"][:5]
        ]
        summary[key] = {**{f: inv.get(f) for f in _SUMMARY}, "top": top, "timing": info["timing"]}
    return profiles, files, summary, errors


def _timing(timing: Mapping[str, Any] | None, run: Any) -> dict[str, Any] | None:
    """The child's timing (child.py), its start-up split from the first call and measuring
    of its test (``run``), which its hook follows."""
    out = dict(timing or {})
    if run is not None and "startup_s" in out:
        wall, first = round(run.wall_s, 3), round(run.first_call_s or 0.0, 3)
        out.update(startup_s=round(max(out["startup_s"] - wall, 0.0), 3), test_s=wall)
        out["first_call_s"] = first
    return out or None


#: A benchmark's figures in the collector's summary (its top kernels too)
_SUMMARY = ("per_call_us", "busy_fraction", "syncs_per_call", "h2d_per_call")


def _profile(info: Mapping[str, Any], analysis: ProfileAnalysis) -> dict[str, Any]:
    return {**info, "analysis": analysis, "triton_configs": info.get("triton_configs") or {}}


def saved_profiles(folder: Path) -> dict[str, dict[str, Any]]:
    """The profiles of an earlier pass (a later pass starts from them), from its analysis files."""
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
