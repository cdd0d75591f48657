"""Nsight Systems: the regressed test re-run under ``nsys profile``, with summaries.

nsys records only the window of calls the child brackets with ``cudaProfilerStart/Stop``
(the whole child if it never opened it); CPU sampling stays off (a short program wrote
2 GB with it). ``nsys stats`` and ``nsys analyze`` are read while ncu uses the GPU.
"""

from __future__ import annotations

import csv
import io
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_gpuperf.artifacts.analysis.inventory import short_name
from pytest_gpuperf.artifacts.collectors.base import (
    OK,
    CaptureContext,
    CollectorResult,
    CudaToolCollector,
)
from pytest_gpuperf.artifacts.collectors.child import (
    CAPTURE_WINDOW_S,
    CHILD_ARGS,
    MINIMAL,
    capture_env,
    read_status,
)
from pytest_gpuperf.artifacts.collectors.process import run_process

PROFILE_ARGS = ("profile", "-t", "cuda,nvtx", "--sample=none", "--cpuctxsw=none")
#: The environment of an Nsight child: Inductor compiles in the process (a pool of compile
#: workers would be traced too, for nothing).
NSIGHT_ENV = {"TORCHINDUCTOR_COMPILE_THREADS": "1"}
RANGE_ARGS = ("--capture-range=cudaProfilerApi", "--capture-range-end=stop")
STATS_REPORTS = ("cuda_gpu_kern_sum", "cuda_gpu_mem_time_sum", "cuda_api_sum", "nvtx_sum")
#: What each ``nsys analyze`` rule's rows mean, for the summary.
RULES = {
    "cuda_api_sync": "synchronising CUDA API call(s)",
    "cuda_memcpy_async": "async memcpy(s) with pageable host memory (they run synchronously)",
    "cuda_memcpy_sync": "synchronous memcpy(s)",
    "cuda_memset_sync": "synchronous memset(s)",
    "gpu_gaps": "GPU gap(s) with no work",
    "gpu_time_util": "stretch(es) of low GPU utilisation",
}
SYNC_NAMES = ("Synchronize", "cudaMemcpy_", "cudaMemcpy ")


def profile_command(output: Path, *, ranged: bool = True) -> list[str]:
    """The ``nsys profile ...`` prefix put before the child's ``python -m pytest``."""
    return ["nsys", *PROFILE_ARGS, *(RANGE_ARGS if ranged else ()), "-o", str(output), "-f", "true"]


def read_csv(text: str) -> list[dict[str, str]]:
    """Rows of an nsys CSV report (its header line first; blank or notice lines skipped)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    start = next((i for i, ln in enumerate(lines) if "," in ln), None)
    if start is None:
        return []
    return list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))


def _read_outputs(
    folder: Path, prefix: str, names: Iterable[str], files: list[Path]
) -> dict[str, list[dict[str, str]]]:
    """The ``<prefix>_<name>.csv`` files nsys wrote, parsed; each found file joins ``files``."""
    out = {}
    for name in names:
        p = folder / f"{prefix}_{name}.csv"
        if p.exists():
            files.append(p)
            out[name] = read_csv(p.read_text(errors="replace"))
    return out


def number(v: str | None) -> float | None:
    """A report's number ("1,234.5"); None where blank, "n/a" or not finite."""
    try:
        x = float(str(v).replace(",", ""))
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def _num(v: str | None) -> float:
    return number(v) or 0.0


def summarize_stats(reports: Mapping[str, Sequence[Mapping[str, str]]]) -> dict[str, Any]:
    """The top kernels, memory operations and CUDA API calls of ``nsys stats`` CSVs."""
    out: dict[str, Any] = {}
    kern = reports.get("cuda_gpu_kern_sum") or []
    out["kernels"] = [
        {
            "name": r.get("Name", ""),
            "share_pct": _num(r.get("Time (%)")),
            "total_ns": _num(r.get("Total Time (ns)")),
            "instances": int(_num(r.get("Instances"))),
            "avg_ns": _num(r.get("Avg (ns)")),
        }
        for r in kern[:10]
    ]
    mem = reports.get("cuda_gpu_mem_time_sum") or []
    out["memory"] = [
        {
            "operation": r.get("Operation", ""),
            "count": int(_num(r.get("Count"))),
            "total_ns": _num(r.get("Total Time (ns)")),
        }
        for r in mem
    ]
    api = reports.get("cuda_api_sum") or []
    out["api"] = [
        {
            "name": r.get("Name", ""),
            "calls": int(_num(r.get("Num Calls"))),
            "total_ns": _num(r.get("Total Time (ns)")),
        }
        for r in api[:10]
    ]
    out["syncs"] = [a for a in out["api"] if any(s in a["name"] + " " for s in SYNC_NAMES)]
    nvtx = reports.get("nvtx_sum") or []
    out["ranges"] = [
        {"range": r.get("Range", ""), "instances": int(_num(r.get("Instances"))),
         "total_ns": _num(r.get("Total Time (ns)"))}
        for r in nvtx[:10]
    ]  # fmt: skip
    return out


def summarize_analyze(rules: Mapping[str, Sequence[Mapping[str, str]]]) -> list[str]:
    """One line per ``nsys analyze`` rule that found something."""
    lines = []
    for rule, rows in rules.items():
        if not rows:
            continue
        what = RULES.get(rule, "finding(s)")
        line = f"{rule}: {len(rows)} {what}"
        if rule == "cuda_api_sync":
            names = sorted({r.get("API Name", "").split("_v")[0] for r in rows} - {""})
            if names:
                line += f" ({', '.join(names)})"
        elif rule == "cuda_memcpy_async":
            mb = sum(_num(r.get("Bytes (MB)")) for r in rows)
            line += f" ({mb:.3g} MB)"
        elif rule == "gpu_time_util":
            low = min(_num(r.get("In-Use (%)")) for r in rows)  # rows: one at least
            line += f" (lowest {low:.0f} % in use)"
        lines.append(line)
    return lines


def stats_lines(s: Mapping[str, Any], calls: int | None) -> list[str]:
    per = f" per {calls} calls" if calls else ""
    top = [
        f"{short_name(k['name'], 48)} {k['share_pct']:.0f} % ({k['instances']}x)"
        for k in s.get("kernels", [])[:3]
    ]
    out = ["top kernels: " + "; ".join(top)] if top else []
    for m in s.get("memory", []):
        out.append(f"{m['operation']}: {m['count']}x{per}, {m['total_ns'] / 1e3:.1f} µs")
    if s.get("syncs"):
        out.append(
            "host syncs: " + ", ".join(f"{a['name']} x{a['calls']}" for a in s["syncs"]) + per
        )
    return out


def _left(end: float, share: float = 1.0) -> float:
    """A share of the seconds left until ``end`` (at least one)."""
    return max((end - time.monotonic()) * share, 1.0)


class NsysCollector(CudaToolCollector):
    name = "nsys"

    def _collect(self, ctx: CaptureContext) -> CollectorResult:
        if ctx.run_child is None:
            return CollectorResult.skipped(self.name, "no way to re-run the test here")
        folder = ctx.folder(self.name)
        report = folder / "report"
        rep = folder / "report.nsys-rep"
        env = capture_env(
            self.name, folder, ctx.keys, calls=ctx.calls, measure=MINIMAL,
            window_s=CAPTURE_WINDOW_S, spawned_at=time.time(),
        )  # fmt: skip
        env.update(NSIGHT_ENV)
        end = time.monotonic() + ctx.budget()
        run = ctx.run_child(
            env=env, prefix=profile_command(report), timeout_s=_left(end, 0.65),
            log_path=folder / "profile.log", extra_args=CHILD_ARGS,
        )  # fmt: skip
        summary: dict[str, Any] = {"capture": "cudaProfilerApi window of steady-state calls"}
        if not rep.exists() and run.returncode != -9 and not read_status(folder):
            # The window was never reached: record the whole child instead.
            run = ctx.run_child(
                env=env, prefix=profile_command(report, ranged=False),
                timeout_s=_left(end, 0.65), log_path=folder / "profile-whole.log",
                extra_args=CHILD_ARGS,
            )  # fmt: skip
            summary["capture"] = "whole child process (no capture range was opened)"
        files = [p for p in (folder / "profile.log", folder / "profile-whole.log") if p.exists()]
        if not rep.exists():
            return CollectorResult.child_failed(self.name, run, "no report written", files)
        files.insert(0, rep)
        summary["timing"] = {"profile_s": round(run.wall_s, 2)}
        result = CollectorResult(self.name, OK, files=files, summary=summary, wall_s=run.wall_s)
        # the report's summaries are CPU work: they run while the next tool profiles
        ctx.later(lambda: _summarize(ctx, folder, rep, result, end))
        return result


def _summarize(
    ctx: CaptureContext, folder: Path, rep: Path, result: CollectorResult, end: float
) -> None:
    """``nsys stats`` and ``nsys analyze`` of the report, into ``result`` and the state."""
    summary, files = result.summary, result.files
    calls = next(
        (int(b.get("calls") or 0) for b in read_status(folder).get("benchmarks", [])), None
    )
    stats = run_process(
        ["nsys", "stats", "-r", ",".join(STATS_REPORTS), "-f", "csv",
         "-o", str(folder / "stats"), "--force-export=true", str(rep)],
        timeout_s=_left(end, 0.6), log_path=folder / "stats.log",
    )  # fmt: skip
    reports = _read_outputs(folder, "stats", STATS_REPORTS, files)
    if reports:
        s = summarize_stats(reports)
        summary["stats"] = s
        summary["lines"] = stats_lines(s, calls)
    else:
        summary["stats_error"] = stats.describe_failure("nsys stats")
    analyze = run_process(
        ["nsys", "analyze", "-f", "csv", "-o", str(folder / "analyze"), str(rep)],
        timeout_s=_left(end), log_path=folder / "analyze.log",
    )  # fmt: skip
    rules = _read_outputs(folder, "analyze", RULES, files)
    if rules:
        summary["findings"] = summarize_analyze(rules)
    elif not analyze.ok:
        summary["analyze_error"] = analyze.describe_failure("nsys analyze")
    (folder / "report.sqlite").unlink(missing_ok=True)  # rebuilt from the .nsys-rep on demand
    ctx.state["nsys_findings"] = list(summary.get("lines", [])) + list(summary.get("findings", []))
    result.wall_s += stats.wall_s + analyze.wall_s
    summary["timing"].update(stats_s=round(stats.wall_s, 2), analyze_s=round(analyze.wall_s, 2))
