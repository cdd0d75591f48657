"""Capture the evidence of one regressed test and say where the time went.

:func:`capture` runs the collectors in order (each within its time budget; a missing tool is
skipped with the reason), diagnoses each regressed benchmark and writes ``manifest.json``.
It never raises for a collector's problem, and does nothing in a child process
(``--gpuperf-child``), so re-runs cannot recurse.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import time
import traceback
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.artifacts.analysis.diagnose import Diagnosis, Evidence, diagnose
from pytest_gpuperf.artifacts.analysis.inventory import combine
from pytest_gpuperf.artifacts.analysis.layout import Layout, read_manifest, write_manifest
from pytest_gpuperf.artifacts.collectors.base import (
    DEFERRED,
    FAILED,
    SKIPPED,
    CaptureContext,
    CaptureSettings,
    ChildRunner,
    Collector,
    CollectorResult,
    CudaToolCollector,
    relative,
)
from pytest_gpuperf.artifacts.collectors.process import SparePython
from pytest_gpuperf.model import thawed
from pytest_gpuperf.reporting.explain import change_text
from pytest_gpuperf.shell.locks import device_key, device_lock
from pytest_gpuperf.shell.rerun import child_environ, is_child, run_child

if TYPE_CHECKING:
    import pytest

    from pytest_gpuperf.model import Result
    from pytest_gpuperf.outcome import Comparison
    from pytest_gpuperf.shell.settings import RunContext

ON_FAILURE, ALWAYS = "on-failure", "always"
#: The reason of a tool that the capture budget left no time for (a leftover).
NO_TIME = "no time left in the capture budget"


@dataclass(frozen=True)
class PassPlan:
    """One pass of a test's capture spread over two (:mod:`.capture_budget`)."""

    #: tools that wait for a later pass (their result says so, with ``defer_reason``)
    defer: frozenset[str] = frozenset()
    defer_reason: str = ""
    #: ``time.monotonic()`` by which the pass ends (the session's capture budget)
    deadline: float = math.inf
    #: continue the capture in the test's folder, from the profiles of its earlier pass
    resume: bool = False
    #: ``time.time()`` of the test's verdict: the first diagnosis is timed from it
    verdict_at: float | None = None
    #: added to the progress line ("after the verdicts")
    label: str = ""
    spares: SparePool | None = None


def should_capture(policy: str, failed: bool) -> bool:
    """Whether a test with this outcome is captured under ``policy``."""
    return policy == ALWAYS or (policy == ON_FAILURE and failed)


def default_collectors() -> list[Collector]:
    """The built-in collectors, in the order they run (later ones use earlier findings)."""
    from pytest_gpuperf.artifacts.collectors.ncu import NcuCollector
    from pytest_gpuperf.artifacts.collectors.nsys import NsysCollector
    from pytest_gpuperf.artifacts.collectors.torch_profiler import TorchProfilerCollector
    from pytest_gpuperf.artifacts.collectors.torch_trace import TorchTraceCollector

    return [TorchProfilerCollector(), TorchTraceCollector(), NsysCollector(), NcuCollector()]


def collectors_for(config: pytest.Config | None) -> list[Collector]:
    """The built-in collectors plus those of ``pytest_gpuperf_collectors`` hooks."""
    out = default_collectors()
    for extra in config.hook.pytest_gpuperf_collectors(config=config) if config else ():
        out.extend(extra or [])
    return out


@dataclass
class CaptureReport:
    """What :func:`capture` did: per-collector results, diagnoses, the folder and manifest."""

    nodeid: str
    directory: Path
    collectors: list[CollectorResult]
    diagnoses: dict[str, Diagnosis]
    wall_s: float
    manifest: Path | None = None
    #: the verdict's time, the first diagnosis' delay, each pass's tools and seconds
    timing: dict[str, Any] = field(default_factory=dict)

    @property
    def diagnosis(self) -> str:
        """The paragraph(s) that open the failure message."""
        return "\n\n".join(d.paragraph for d in self.diagnoses.values())

    def message(self) -> str:
        return self.diagnosis + "\n\n" + self.details()

    def details(self) -> str:
        """Everything after the diagnosis: evidence per benchmark, collectors, paths."""
        out = []
        for d in self.diagnoses.values():
            if d.details:
                out += [f"{d.key}:", *(f"  {line}" for line in d.details), ""]
        out.append(f"evidence ({self.wall_s:.0f} s) in {self.directory}:")
        for c in self.collectors:
            out.append(f"  {c.line()}")
            out += [f"    {relative(f, self.directory)}" for f in c.files[:6]]
            if len(c.files) > 6:
                out.append(f"    ... {len(c.files) - 6} more file(s)")
        if self.manifest is not None:
            out.append(f"  manifest: {self.manifest}")
        return "\n".join(out).rstrip() + "\n"

    def artifacts(self) -> list[dict[str, Any]]:
        """JSON-safe entries for ``Result.artifacts`` and the results JSON."""
        out: list[dict[str, Any]] = []
        for c in self.collectors:
            entry = {
                "collector": c.name,
                "status": c.status,
                "reason": c.reason,
                "files": [str(f) for f in c.files],
                "wall_s": round(c.wall_s, 3),
            }
            if c.status == DEFERRED:  # what the pass after the verdicts needs to know
                entry["verdict_at"] = self.timing.get("verdict_at")
            out.append(entry)
        if self.manifest is not None:
            out.append(
                {"collector": "manifest", "status": "ok", "files": [str(self.manifest)],
                 "timing": self.timing}
            )  # fmt: skip
        return out

    def apply(self, results: Sequence[Result]) -> None:
        """Put the entries (and each diagnosis) on the test's results for the reports."""
        entries = self.artifacts()
        names = {e["collector"] for e in entries}
        for r in results:  # a later pass's entries replace the earlier pass's
            kept = [
                a
                for a in r.artifacts
                if not isinstance(a, Mapping) or a.get("collector") not in names
            ]
            r.artifacts = [*kept, *entries]
            r.diagnosis = self.diagnoses.get(r.id.key, r.diagnosis)

    def to_dict(self) -> dict[str, Any]:
        return {
            "nodeid": self.nodeid,
            "directory": str(self.directory),
            "manifest": str(self.manifest) if self.manifest else None,
            "wall_s": round(self.wall_s, 3),
            "collectors": [c.to_dict(self.directory) for c in self.collectors],
            "diagnoses": {k: d.to_dict() for k, d in self.diagnoses.items()},
            "timing": self.timing,
        }


def _get(obj: Any, name: str) -> Any:
    """``obj``'s ``name`` (a key, or a run's field) as plain lists and dicts; None's is None."""
    return thawed(obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None))


def baseline_inventory(runs: Any) -> dict[str, Any] | None:
    """The combined inventory of baseline runs (``Run``s, their ``extra``s, inventories)."""
    invs = []
    for r in [runs] if isinstance(runs, Mapping) else runs or ():
        inv = r if isinstance(r, Mapping) and "schema" in r else _get(_get(r, "extra"), "kernels")
        if isinstance(inv, Mapping):
            invs.append(inv)
    return combine(invs)


def capture(
    run: RunContext | None,
    nodeid: str,
    results: Sequence[Result],
    comparisons: Mapping[str, Comparison] | None = None,
    *,
    device: str,
    run_id: str,
    baselines: Mapping[str, Any] | None = None,
    keys: Sequence[str] | None = None,
    collectors: Sequence[Collector] | None = None,
    run_child: ChildRunner | None = None,
    artifacts_dir: Path | str | None = None,
    lock: Callable[[], AbstractContextManager[object]] | None = None,
    progress: Any = None,
    settings: CaptureSettings | None = None,
    plan: PassPlan | None = None,
) -> CaptureReport | None:
    """Capture evidence for the test ``nodeid`` and diagnose its regressed benchmarks.

    ``keys`` default to the regressions, else all; ``lock`` (default: the session's per-GPU
    lock) is held for the whole capture. ``None`` in a child process; never raises.
    """
    if run is not None and is_child(run.config):
        return None
    t0 = time.monotonic()
    settings = settings or (run.settings.capture if run is not None else CaptureSettings())
    plan = plan or PassPlan()
    config = run.config if run is not None else None
    try:
        comparisons = dict(comparisons or {})
        for r in results:
            if r.comparison is not None:
                comparisons.setdefault(r.id.key, r.comparison)
        if keys is None:  # the regressions, else all of the test's benchmarks
            keys = [k for k, c in comparisons.items() if c.kind == "regression"]
            keys = keys or [r.id.key for r in results]
        keys = list(keys)
        directory = Layout(artifacts_root(run, settings, artifacts_dir), run_id).prepare(nodeid)
        if run_child is None and run is not None:
            run_child = _child_runner(run, nodeid, device, plan.spares)
        ctx = CaptureContext(
            nodeid=nodeid,
            directory=directory,
            device=device,
            keys=keys,
            results=list(results),
            comparisons=comparisons,
            config=config,
            timeout_s=settings.timeout_s,
            calls=settings.calls,
            ncu_kernels=settings.ncu_kernels,
            run_child=run_child,
            baseline_inventories={
                k: inv
                for k in keys
                if (inv := baseline_inventory((baselines or {}).get(k))) is not None
            },
        )
        earlier, timing = _resume(ctx) if plan.resume else ([], {})
        spent = sum(float(p.get("wall_s") or 0.0) for p in timing.get("passes", ()))
        ctx.deadline = min(t0 + settings.budget_s - spent, plan.deadline)
        if lock is None and run is not None:
            lock = functools.partial(_device_lock, device, settings.budget_s)
        todo = list(collectors if collectors is not None else collectors_for(config))
        done = _run_collectors(ctx, todo, settings, lock, progress, plan)
        ab = bool(run is not None and (run.settings.session.ab or run.settings.session.bisect))
        diagnoses, evidence = _diagnose_all(ctx, baselines, ab)
        if evidence:
            (directory / "evidence.json").write_text(json.dumps(evidence, indent=1, default=str))
        timing = _pass_timing(timing, plan, done, t0)
        return _report(ctx, _merged(earlier, done), diagnoses, timing, run_id)
    except Exception as e:  # never turn a verdict into an error
        why = f"the capture failed: {type(e).__name__}: {e}"
        failed = CollectorResult("capture", FAILED, reason=why)
        return CaptureReport(
            nodeid, Path(artifacts_dir or "."), [failed], {}, time.monotonic() - t0
        )


def _report(
    ctx: CaptureContext,
    collected: list[CollectorResult],
    diagnoses: dict[str, Diagnosis],
    timing: dict[str, Any],
    run_id: str,
) -> CaptureReport:
    """The capture's report, its manifest written beside its files where it can be."""
    wall = sum(float(p["wall_s"]) for p in timing["passes"])
    report = CaptureReport(
        ctx.nodeid, ctx.directory, collected, dict(diagnoses), wall, timing=timing
    )
    d = report.to_dict()
    with contextlib.suppress(OSError):  # the report stands without its manifest
        report.manifest = write_manifest(
            ctx.directory,
            nodeid=ctx.nodeid,
            run_id=run_id,
            device=ctx.device,
            benchmarks=ctx.keys,
            collectors=d["collectors"],
            diagnosis=d["diagnoses"],
            wall_s=wall,
            timing=timing,
        )
    return report


def artifacts_root(
    run: RunContext | None, settings: CaptureSettings, given: Path | str | None = None
) -> Path:
    """The folder of the session's captures (``--gpuperf-artifacts-dir``, under the rootdir)."""
    root = Path(given or settings.artifacts_dir)
    if run is not None and not root.is_absolute():
        root = run.rootpath / root
    return root


def _resume(ctx: CaptureContext) -> tuple[list[CollectorResult], dict[str, Any]]:
    """An earlier pass's results and timing; its profiles and compile log into ``ctx.state``."""
    from pytest_gpuperf.artifacts.collectors.torch_profiler import note_profiles, saved_profiles

    try:
        doc = read_manifest(ctx.directory)
    except (OSError, ValueError):
        return [], {}
    earlier = [CollectorResult.from_dict(c, ctx.directory) for c in doc.get("collectors") or ()]
    profiles = saved_profiles(ctx.directory / "torch_profiler")
    if profiles:
        ctx.state["profiles"] = profiles
        note_profiles(ctx)
    for c in earlier:
        if c.name == "torch_trace" and c.ok:
            ctx.state["compile"] = dict(c.summary)
    return earlier, dict(doc.get("timing") or {})


def _merged(
    earlier: Sequence[CollectorResult], done: Sequence[CollectorResult]
) -> list[CollectorResult]:
    """The earlier pass's results, each replaced by this pass's of the same tool."""
    now = {c.name: c for c in done}
    out = [now.pop(c.name, c) for c in earlier]
    return out + [c for c in done if c.name in now]


def _pass_timing(
    timing: Mapping[str, Any], plan: PassPlan, done: Sequence[CollectorResult], t0: float
) -> dict[str, Any]:
    """The timing with this pass added (the first diagnosis timed from the verdict)."""
    out = dict(timing)
    if plan.verdict_at is not None and out.get("verdict_at") is None:
        out["verdict_at"] = plan.verdict_at
    ran = {c.name: round(c.wall_s, 3) for c in done if c.status not in (DEFERRED, SKIPPED)}
    out["passes"] = [
        *out.get("passes", ()),
        {"at": round(time.time(), 3), "wall_s": round(time.monotonic() - t0, 3), "tools": ran},
    ]
    profiled = any(c.name == "torch_profiler" and c.ok for c in done)
    if profiled and out.get("first_diagnosis_s") is None and out.get("verdict_at") is not None:
        out["first_diagnosis_s"] = round(time.time() - float(out["verdict_at"]), 3)
    return out


def _device_lock(device: str, budget_s: float) -> AbstractContextManager[object]:
    """The device's lock, its key read when taken (one that cannot be read skips the tools)."""
    return device_lock(device_key(device), timeout_s=budget_s)


def _run_collectors(
    ctx: CaptureContext,
    todo: Sequence[Collector],
    settings: CaptureSettings,
    lock: Callable[[], AbstractContextManager[object]] | None,
    progress: Any,
    plan: PassPlan,
) -> list[CollectorResult]:
    """Run each collector under the device lock, in order, but those ``plan.defer`` names."""
    ctx.skip = frozenset(skipped(settings))
    done = {
        i: CollectorResult(collector_name(col), DEFERRED, reason=plan.defer_reason or "later")
        for i, col in enumerate(todo)
        if collector_name(col) in plan.defer and could_run(col, ctx.device, ctx.skip)
    }
    now = [(i, col) for i, col in enumerate(todo) if i not in done]
    label = f"capturing evidence for {ctx.nodeid.rsplit('::', 1)[-1]}{plan.label}"
    task_cm = progress.task(label) if progress is not None and now else contextlib.nullcontext()
    group = any((r.run.extra or {}).get("group") for r in ctx.results)
    try:
        with (
            task_cm as task,
            lock() if lock is not None and now else contextlib.nullcontext(),
        ):
            if lock is not None and ctx.run_child is not None:
                ctx.run_child = _children_hold_the_lock(ctx.run_child)
            for n, (i, col) in enumerate(now, 1):
                if task is not None:
                    task.update(f"{getattr(col, 'name', col)}, tool {n} of {len(now)}")
                done[i] = _run_collector(col, ctx, settings.budget_s, group)
            ctx.settle()  # what the collectors left running (nsys's summaries)
    except Exception as e:  # the lock could not be had: capture nothing, fail nothing
        why = f"the GPU stayed busy: {type(e).__name__}: {e}"
        for i, col in now:
            done.setdefault(i, CollectorResult.skipped(collector_name(col), why))
    return [done[i] for i in range(len(todo))]


def skipped(settings: CaptureSettings) -> set[str]:
    """The tools left out: ``--gpuperf-capture-skip``, and ncu with no kernels to profile."""
    return set(settings.skip or ()) | ({"ncu"} if settings.ncu_kernels <= 0 else set())


def collector_name(col: Collector) -> str:
    return str(getattr(col, "name", type(col).__name__))


def could_run(col: Collector, device: str, skip: Collection[str] = ()) -> bool:
    """Whether ``col`` would capture anything on ``device``: not skipped, its tool there."""
    try:
        why = col.available()
    except Exception:
        return False
    cuda_only = isinstance(col, CudaToolCollector) and device != "cuda"
    return not (why or cuda_only or str(getattr(col, "name", "")).lower() in skip)


def _diagnose_all(
    ctx: CaptureContext, baselines: Mapping[str, Any] | None, ab: bool
) -> tuple[dict[str, Diagnosis], dict[str, Any]]:
    """The diagnosis of each captured benchmark, and the evidence it read as JSON."""
    diagnoses: dict[str, Diagnosis] = {}
    evidence: dict[str, Any] = {}
    by_key = {r.id.key: r for r in ctx.results}
    for key in ctx.keys:
        try:
            ev = _evidence(ctx, key, by_key.get(key), (baselines or {}).get(key), ab)
            evidence[key] = ev.to_record()
            diagnoses[key] = diagnose(ev, _hook_lines(ctx.config, by_key.get(key), ev))
        except Exception as e:  # the diagnosis must never turn a verdict into an error
            diagnoses[key] = Diagnosis(
                key, f"{key}: the diagnosis failed ({type(e).__name__}: {e}).", [],
                [traceback.format_exc(limit=5)],
            )  # fmt: skip
    return diagnoses, evidence


def _children_hold_the_lock(run_child: ChildRunner) -> ChildRunner:
    """Children measure under the parent's lock: they must not wait for it."""

    def run(*, env: Mapping[str, str] | None = None, **kw: Any) -> Any:
        return run_child(env={**(env or {}), "GPUPERF_NO_LOCK": "1"}, **kw)

    return run


def _run_collector(
    col: Collector, ctx: CaptureContext, budget: float, group: bool
) -> CollectorResult:
    name = collector_name(col)
    if group and name == "ncu":
        replay = "not run on a distributed test (its kernel replay deadlocks collectives)"
        return CollectorResult.skipped("ncu", replay)
    if name.lower() in ctx.skip:
        return CollectorResult.skipped(name, "turned off (--gpuperf-capture-skip)")
    start = time.monotonic()
    try:
        why = col.available()
        if why:
            return CollectorResult.skipped(name, why)
        if ctx.budget() < 1.0:
            return CollectorResult.skipped(
                name, f"{NO_TIME} (--gpuperf-capture-budget={budget:g} s for one test, "
                "--gpuperf-capture-session-budget for the session)",
            )  # fmt: skip
        res = col.collect(ctx)
        if not isinstance(res, CollectorResult):
            raise TypeError(f"collect() returned {type(res).__name__}, not a CollectorResult")
    except Exception as e:
        res = CollectorResult(name, FAILED, reason=f"{type(e).__name__}: {e}")
    if not res.wall_s:
        res.wall_s = time.monotonic() - start
    if res.status == SKIPPED and not res.reason:
        res.reason = "skipped"
    return res


def _evidence(
    ctx: CaptureContext, key: str, result: Result | None, baseline_runs: Any, ab: bool
) -> Evidence:
    comparison = ctx.comparisons.get(key)
    prof = (ctx.state.get("profiles") or {}).get(key) or {}
    runs = [baseline_runs] if isinstance(baseline_runs, Mapping) else list(baseline_runs or [])
    mode = result.id.mode if result is not None else None
    c_s = comparison.current_s if comparison is not None else None
    if c_s is None and result is not None and result.run.rounds:
        c_s = result.run.median
    return Evidence(
        key=key,
        display=result.id.display if result is not None else key,
        baseline_s=comparison.baseline_s if comparison is not None else None,
        current_s=c_s,
        change=change_text(comparison, mode) if comparison is not None else "",
        verdict=comparison.kind if comparison is not None else "",
        analysis=prof.get("analysis"),
        baseline_inventory=ctx.baseline_inventories.get(key),
        ncu=list((ctx.state.get("ncu") or {}).values()),
        compile=ctx.state.get("compile") or _compile_from_counters(prof.get("dynamo")),
        nsys=list(ctx.state.get("nsys_findings") or []),
        child_median_s=prof.get("child_median_s"),
        child_rounds=prof.get("child_rounds"),
        profiled_in="a fresh process of the current code" if prof else None,
        current_inventory=prof.get("inventory"),
        triton_configs=prof.get("triton_configs") or {},
        current_probe=prof.get("probe"),
        current_activity=_get(result.run.telemetry or {}, "activity") if result else None,
        baseline_activity=[(_get(r, "telemetry") or {}).get("activity") for r in runs],
        current_memory=thawed(result.run.memory) if result is not None else None,
        baseline_memory=[_get(r, "memory") for r in runs],
        group=_current_group(prof, result),
        baseline_group=_baseline_group(baseline_runs),
        ab=ab,
    )


def _current_group(prof: Mapping[str, Any], result: Result | None) -> dict[str, Any] | None:
    """A distributed benchmark's group as captured, else as measured."""
    measured = dict(_get(result.run.extra, "group") or {}) if result is not None else {}
    captured = dict(prof.get("group") or {})
    if not measured and not captured:
        return None
    return {**measured, **{k: v for k, v in captured.items() if v}}


def _baseline_group(runs: Any) -> dict[str, Any] | None:
    """The newest baseline ``extra["group"]`` with profiled collectives, else the newest."""
    groups = []
    for r in runs if isinstance(runs, (list, tuple)) else []:
        g = _get(_get(r, "extra"), "group")
        if isinstance(g, Mapping):
            groups.append(dict(g))
    profiled = [g for g in groups if g.get("comms")]
    return (profiled or groups)[-1] if groups else None


def _compile_from_counters(counters: Mapping[str, Any] | None) -> dict[str, Any] | None:
    breaks = (counters or {}).get("graph_break") or {}
    stats = (counters or {}).get("stats") or {}
    if not breaks and not stats.get("unique_graphs"):
        return None
    return {
        "graphs": stats.get("unique_graphs"),
        "graph_break_count": sum(int(v) for v in breaks.values()),
        "graph_breaks": [
            {"reason": str(r).strip().splitlines()[0], "count": int(n)} for r, n in breaks.items()
        ],
        "recompiles": [],
        "fallbacks": [],
        "source": "torch._dynamo counters",
    }


def _hook_lines(config: pytest.Config | None, result: Result | None, ev: Evidence) -> list[str]:
    if config is None:
        return []
    lines: list[str] = []
    try:
        for got in config.hook.pytest_gpuperf_diagnose(config=config, result=result, analysis=ev):
            lines.extend(str(x) for x in got or [])
    except Exception as e:
        lines.append(f"a pytest_gpuperf_diagnose hook failed: {type(e).__name__}: {e}")
    return lines


def _child_runner(
    session: RunContext, nodeid: str, device: str, spares: SparePool | None = None
) -> ChildRunner:
    """Re-runs ``nodeid``; a child without a tool's prefix takes the spare Python."""

    def run(*, prefix: Sequence[str] = (), **kw: Any) -> Any:
        spare = spares.take() if spares is not None and not prefix else None
        return run_child(session, nodeid, device=device, prefix=prefix, spare=spare, **kw)

    return run


#: torch.profiler's one-time start (Kineto's, with CUPTI where there is CUDA), which a
#: CPU-only session makes: a first profile on an H100 took 4.0-4.2 s without it, 0.0-0.2 s
#: after it (bench/results/h100-2026-12-07 call 3 against h100-2026-12-07-b).
PRELUDE = """
from torch.profiler import ProfilerActivity, profile
with profile(activities=[ProfilerActivity.CPU]):
    pass
"""


class SparePool:
    """The next capture child's Python (:class:`SparePython`), started ahead: at the session's
    start, then by each child without a tool's prefix, which takes it."""

    #: The first spare's start overlaps the session's collection: only with cores to spare.
    EARLY_CORES = 4
    prelude = PRELUDE
    _next: SparePython | None = None

    def start(self, prelude: str | None = None) -> None:
        if self._next is None:
            prelude = self.prelude if prelude is None else prelude
            self._next = SparePython(child_environ(None, ("PYTEST_ADDOPTS",)), prelude=prelude)

    def start_early(self) -> None:
        """The session's first spare, imports only: the first measurement waits for no
        profiler's start."""
        cores = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
        # each xdist worker starts its own: the cores to spare are shared by them all
        workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
        if (len(cores) if cores else os.cpu_count() or 1) >= self.EARLY_CORES * workers:
            self.start(prelude="")

    def take(self) -> SparePython | None:
        spare, self._next = self._next, None
        self.start()
        return spare if spare is not None and spare.usable else None

    def settle(self, timeout_s: float = 20.0) -> float:
        """Wait for the next spare's start (ended if not ready in time); the seconds waited."""
        t = time.monotonic()
        if self._next is not None and not self._next.wait_ready(timeout_s):
            self.close()
        return time.monotonic() - t

    def close(self) -> None:
        if self._next is not None:
            self._next.close()
            self._next = None
