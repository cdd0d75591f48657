"""Nsight Compute: the hotspot kernels of the profiler pass, one steady-state launch each.

The filter is the kernels' real names, and ncu profiles only launches inside the NVTX range
``gpuperf_capture`` (one call after warm-up): no pattern or ``--launch-skip`` is guessed.
``--clock-control none``: the GPU runs at the clocks the benchmark saw.
"""

from __future__ import annotations

import csv
import io
import math
import re
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pytest_gpuperf.artifacts.analysis.diagnose import ncu_line
from pytest_gpuperf.artifacts.analysis.inventory import base_function, short_name
from pytest_gpuperf.artifacts.collectors.base import (
    FAILED,
    OK,
    CaptureContext,
    CollectorResult,
    CudaToolCollector,
)
from pytest_gpuperf.artifacts.collectors.child import CHILD_ARGS, MINIMAL, NCU_RANGE, capture_env
from pytest_gpuperf.artifacts.collectors.nsys import NSIGHT_ENV, number
from pytest_gpuperf.artifacts.collectors.process import run_process

SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "MemoryWorkloadAnalysis", "WarpStateStats")
STALL_METRICS = r"regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
_STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio")
#: Raw metric -> summary field.
METRICS = {
    "gpu__time_duration.sum": "duration",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_pct",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": "mem_pct",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": "dram_pct",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "occupancy_pct",
    "sm__maximum_warps_per_active_cycle_pct": "theoretical_occupancy_pct",
    "launch__registers_per_thread": "registers",
    "launch__waves_per_multiprocessor": "waves",
    "launch__shared_mem_per_block": "shared_mem_per_block",
}
#: A throughput this high (% of peak) makes a kernel bound by that unit.
BOUND_PCT = 60.0
_TIME_UNITS = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3,
               "s": 1e6, "second": 1e6}  # fmt: skip


def kernel_filter(names: Sequence[str]) -> str:
    """``regex:^(a|b)$`` over the kernels' function names (``--kernel-name-base function``)."""
    bases = sorted({base_function(n) for n in names})
    return "regex:^(" + "|".join(re.escape(b) for b in bases) + ")$"


def profile_command(output: str, names: Sequence[str], launch_count: int) -> list[str]:
    cmd = ["ncu", "--clock-control", "none", "--target-processes", "all"]
    cmd += ["--nvtx", "--nvtx-include", f"{NCU_RANGE}/", "--kernel-name-base", "function"]
    cmd += ["-k", kernel_filter(names), "--launch-count", str(launch_count)]
    for s in SECTIONS:
        cmd += ["--section", s]
    return [*cmd, "--metrics", STALL_METRICS, "-o", output, "-f"]


def parse_raw(text: str) -> list[dict[str, Any]]:
    """Kernels of ``ncu --csv --page raw``: a header row, a units row, one row per launch."""
    rows = list(csv.reader(io.StringIO(text)))
    start = next((i for i, r in enumerate(rows) if r and r[0] == "ID"), None)
    if start is None or len(rows) < start + 2:
        return []
    header, units = rows[start], rows[start + 1]
    out = []
    for r in rows[start + 2 :]:
        if len(r) != len(header):
            continue
        d = dict(zip(header, r, strict=True))
        u = dict(zip(header, units, strict=False))
        k: dict[str, Any] = {
            "id": d.get("ID"),
            "name": d.get("Kernel Name", ""),
            "grid": d.get("Grid Size"),
            "block": d.get("Block Size"),
        }
        stalls = []
        for col, val in d.items():
            field, x, stall = METRICS.get(col), number(val), _STALL.fullmatch(col)
            if x is None:
                continue
            if field == "duration":
                k["duration_us"] = x * _TIME_UNITS.get(u.get(col, "ns").strip(), 1e-3)
            elif field is not None and field not in k:
                k[field] = int(x) if field == "registers" else x
            elif stall and stall.group(1) != "selected" and x:
                stalls.append((stall.group(1).replace("_", " "), x))
        k["stalls"] = sorted(stalls, key=lambda s: -s[1])[:3]
        k["bottleneck"] = bottleneck(k)
        out.append(k)
    return out


def parse_rules(text: str) -> dict[str, list[str]]:
    """Rule advice of ``ncu --csv --page details`` by kernel ID (optimisation hints first)."""
    out: dict[str, list[tuple[int, str]]] = {}
    for r in csv.DictReader(io.StringIO(text)):
        desc = (r.get("Rule Description") or "").strip()
        kind = (r.get("Rule Type") or "").strip()
        if not desc or kind not in ("OPT", "WRN") or "could not be found" in desc:
            continue
        items = out.setdefault(r.get("ID", ""), [])
        if desc not in [d for _, d in items]:
            items.append((0 if kind == "OPT" else 1, desc))
    return {k: [d for _, d in sorted(v, key=lambda t: t[0])] for k, v in out.items()}


def bottleneck(k: Mapping[str, Any]) -> str:
    """compute-bound / memory-bound / under-filled grid / latency-bound, from SOL and occupancy."""
    if k.get("sm_pct") is None and k.get("mem_pct") is None:
        return "unknown"
    sm, mem = k.get("sm_pct") or 0.0, k.get("mem_pct") or 0.0
    if max(sm, mem) >= BOUND_PCT:
        return "compute-bound" if sm >= mem else "memory-bound"
    waves = k.get("waves")
    if isinstance(waves, (int, float)) and waves < 1:
        return f"under-filled grid ({waves:.2f} waves)"
    occ = k.get("occupancy_pct")
    if isinstance(occ, (int, float)) and occ < 25:
        return f"latency-bound (achieved occupancy {occ:.0f} %)"
    return "latency-bound"


def _dims(v: Any) -> tuple[int, ...] | None:
    if isinstance(v, (list, tuple)):
        return tuple(int(x) for x in v)
    if isinstance(v, str):
        nums = re.findall(r"\d+", v)
        return tuple(int(x) for x in nums) if nums else None
    return None


def match_hotspots(
    hotspots: Sequence[Mapping[str, Any]], kernels: Sequence[Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    """ncu rows back to the profiler's kernel names: same function, then same grid and block."""
    out: dict[str, dict[str, Any]] = {}
    used: set[int] = set()
    for h in hotspots:
        base = base_function(h["name"])
        cands = [
            (i, k)
            for i, k in enumerate(kernels)
            if i not in used and base_function(k["name"]) == base
        ]
        if not cands:
            continue
        exact = [
            (i, k)
            for i, k in cands
            if _dims(k.get("grid")) == _dims(h.get("grid"))
            and _dims(k.get("block")) == _dims(h.get("block"))
        ]
        i, k = (exact or cands)[0]
        used.add(i)
        out[h["name"]] = {**k, "name": h["name"], "ncu_name": k["name"]}
    return out


class NcuCollector(CudaToolCollector):
    name = "ncu"

    def _collect(self, ctx: CaptureContext) -> CollectorResult:
        hotspots = list(ctx.state.get("hotspots") or [])[: ctx.ncu_kernels]
        if not hotspots:
            why = "no hotspot kernels: the profiler pass found none"
            if "profiles" not in ctx.state:
                why += " (it did not run or failed)"
            return CollectorResult.skipped(self.name, why)
        if ctx.run_child is None:
            return CollectorResult.skipped(self.name, "no way to re-run the test here")
        folder = ctx.folder(self.name)
        end = time.monotonic() + ctx.budget()
        bases = {base_function(h["name"]) for h in hotspots}
        launches = sum(
            float(k["launches"])
            for p in (ctx.state.get("profiles") or {}).values()
            for k in p["inventory"].get("kernels", [])
            if k.get("kind") == "kernel" and base_function(k["name"]) in bases
        )
        count = max(len(hotspots), min(math.ceil(launches), 3 * len(hotspots)))
        names = [h["name"] for h in hotspots]
        env = capture_env(self.name, folder, ctx.keys, measure=MINIMAL, spawned_at=time.time())
        run = ctx.run_child(
            env={**env, **NSIGHT_ENV},
            prefix=profile_command(str(folder / "report"), names, count),
            timeout_s=max((end - time.monotonic()) * 0.85, 1.0),
            log_path=folder / "profile.log",
            extra_args=CHILD_ARGS,
        )
        rep = folder / "report.ncu-rep"
        files = [folder / "profile.log"]
        summary: dict[str, Any] = {
            "filter": kernel_filter(names),
            "launch_count": count,
            "hotspots": [short_name(n) for n in names],
        }
        if not rep.exists():
            return CollectorResult.child_failed(self.name, run, "no kernel was profiled", files)
        files.insert(0, rep)
        left = max(end - time.monotonic(), 5.0)
        pages = [["ncu", "-i", str(rep), "--csv", "--page", p] for p in ("raw", "details")]
        with ThreadPoolExecutor(max_workers=2) as pool:  # side by side: each reads the whole report
            raw, details = pool.map(lambda cmd: run_process(cmd, timeout_s=left), pages)
        kernels = parse_raw(raw.output) if raw.ok else []
        rules = parse_rules(details.output) if details.ok else {}
        for path, proc in ((folder / "raw.csv", raw), (folder / "details.csv", details)):
            if proc.ok:
                path.write_text(proc.output)
                files.append(path)
        for k in kernels:
            k["advice"] = rules.get(str(k.get("id")), [])[:2]
        matched = match_hotspots(hotspots, kernels)
        ctx.state["ncu"] = matched
        summary["kernels"] = list(matched.values())
        summary["lines"] = [f"{short_name(n)}: {ncu_line(k)}" for n, k in matched.items()]
        status, reason = OK, None
        if not kernels:
            status = FAILED
            reason = (
                raw.describe_failure("ncu --import") if not raw.ok else "the report has no kernels"
            )
        elif not matched:
            reason = "none of the profiled kernels matched a hotspot name"
        imported = max(raw.wall_s, details.wall_s)
        summary["timing"] = {"profile_s": round(run.wall_s, 2), "import_s": round(imported, 2)}
        return CollectorResult(self.name, status, files, summary, reason, run.wall_s + imported)
