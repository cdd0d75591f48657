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
    OK,
    SKIPPED,
    CaptureContext,
    CaptureSettings,
    ChildRunner,
    Collector,
    CollectorResult,
    CudaToolCollector,
)
from pytest_gpuperf.artifacts.collectors.process import SparePython
from pytest_gpuperf.model import thawed
from pytest_gpuperf.reporting.explain import change_text
from pytest_gpuperf.shell.locks import device_key, device_lock
from pytest_gpuperf.shell.rerun import CHILD_ENV, is_child, run_child

if TYPE_CHECKING:
    import pytest

    from pytest_gpuperf.model import Result
    from pytest_gpuperf.outcome import Comparison
    from pytest_gpuperf.shell.settings import RunContext

NEVER, ON_FAILURE, ALWAYS = "never", "on-failure", "always"
#: The reason of a tool that the capture budget left no time for (a leftover).
NO_TIME = "no time left in the capture budget"
#: Where a capture's profiles are taken, as the diagnosis says it.
PROFILED_IN = "a fresh process of the current code"


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
    if config is not None:
        hook = getattr(config.hook, "pytest_gpuperf_collectors", None)
        if hook is not None:
            for extra in hook(config=config):
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
                out.append(f"{d.key}:")
                out.extend(f"  {line}" for line in d.details)
                out.append("")
        out.append(f"evidence ({self.wall_s:.0f} s) in {self.directory}:")
        for c in self.collectors:
            out.append(f"  {c.line()}")
            for f in c.files[:6]:
                out.append(f"    {_rel(f, self.directory)}")
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
            d = self.diagnoses.get(r.id.key)
            if d is not None:
                r.diagnosis = d

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


def _rel(p: Path, base: Path) -> str:
    try:
        return str(p.relative_to(base))
    except ValueError:
        return str(p)


def _get(obj: Any, name: str) -> Any:
    """``obj``'s ``name`` (a key, or a run's field) as plain lists and dicts."""
    if obj is None:
        return None
    return thawed(obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None))


def baseline_inventory(runs: Any) -> dict[str, Any] | None:
    """The combined inventory of baseline runs (``Run``s, their ``extra``s, inventories)."""
    if runs is None:
        return None
    if isinstance(runs, Mapping):
        runs = [runs]
    invs = []
    for r in runs:
        extra = _get(r, "extra") if not isinstance(r, Mapping) or "schema" not in r else None
        if extra is not None:
            inv = _get(extra, "kernels")
        elif isinstance(r, Mapping) and "kernels" in r and isinstance(r["kernels"], Mapping):
            inv = r["kernels"]
        else:
            inv = r
        if isinstance(inv, Mapping) and inv.get("schema"):
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
    lock) is held for the whole capture. ``None`` in a child process.
    """
    if run is not None and is_child(run.config):
        return None
    t0 = time.monotonic()
    try:
        return _capture(
            run, nodeid, results, comparisons, device=device, run_id=run_id,
            baselines=baselines, keys=keys, collectors=collectors, run_child=run_child,
            artifacts_dir=artifacts_dir, lock=lock, progress=progress, t0=t0,
            settings=settings or (run.settings.capture if run is not None else CaptureSettings()),
            plan=plan or PassPlan(),
        )  # fmt: skip
    except Exception as e:  # never turn a verdict into an error
        why = f"the capture failed: {type(e).__name__}: {e}"
        failed = CollectorResult("capture", FAILED, reason=why)
        return CaptureReport(
            nodeid, Path(artifacts_dir or "."), [failed], {}, time.monotonic() - t0
        )


def _capture(
    run: RunContext | None,
    nodeid: str,
    results: Sequence[Result],
    comparisons: Mapping[str, Comparison] | None,
    *,
    device: str,
    run_id: str,
    baselines: Mapping[str, Any] | None,
    keys: Sequence[str] | None,
    collectors: Sequence[Collector] | None,
    run_child: ChildRunner | None,
    artifacts_dir: Path | str | None,
    lock: Callable[[], AbstractContextManager[object]] | None,
    progress: Any,
    t0: float,
    settings: CaptureSettings,
    plan: PassPlan,
) -> CaptureReport:
    config = run.config if run is not None else None
    comparisons = _comparisons_of(results, comparisons)
    if keys is None:
        keys = _regressed_keys(results, comparisons)
    directory = Layout(artifacts_root(run, settings, artifacts_dir), run_id).prepare(nodeid)
    if run_child is None and run is not None:
        run_child = _child_runner(run, nodeid, device, plan.spares)
    ctx = CaptureContext(
        nodeid=nodeid,
        directory=directory,
        device=device,
        keys=list(keys),
        results=list(results),
        comparisons=comparisons,
        config=config,
        timeout_s=settings.timeout_s,
        deadline=min(t0 + settings.budget_s, plan.deadline),
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
    diagnoses, evidence = _diagnose_all(ctx, config, results, comparisons, baselines, ab=ab)
    if evidence:
        (directory / "evidence.json").write_text(json.dumps(evidence, indent=1, default=str))
    timing = _pass_timing(timing, plan, done, t0)
    wall = sum(float(p["wall_s"]) for p in timing["passes"])
    report = CaptureReport(
        nodeid, directory, _merged(earlier, done), diagnoses, wall, timing=timing,
    )  # fmt: skip
    d = report.to_dict()
    with contextlib.suppress(OSError):  # the report stands without its manifest
        report.manifest = write_manifest(
            directory,
            nodeid=nodeid,
            run_id=run_id,
            device=device,
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
    earlier = [_result_from(c, ctx.directory) for c in doc.get("collectors") or ()]
    profiles = saved_profiles(ctx.directory / "torch_profiler")
    if profiles:
        ctx.state["profiles"] = profiles
        note_profiles(ctx)
    for c in earlier:
        if c.name == "torch_trace" and c.ok:
            ctx.state["compile"] = dict(c.summary)
    return earlier, dict(doc.get("timing") or {})


def _result_from(d: Mapping[str, Any], directory: Path) -> CollectorResult:
    return CollectorResult(
        name=str(d.get("name")),
        status=str(d.get("status") or OK),
        files=[directory / str(f) for f in d.get("files") or ()],
        summary=dict(d.get("summary") or {}),
        reason=d.get("reason"),
        wall_s=float(d.get("wall_s") or 0.0),
    )


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


def _comparisons_of(
    results: Sequence[Result], comparisons: Mapping[str, Comparison] | None
) -> dict[str, Comparison]:
    out = dict(comparisons or {})
    for r in results:
        if r.id.key not in out and r.comparison is not None:
            out[r.id.key] = r.comparison
    return out


def _regressed_keys(results: Sequence[Result], comparisons: Mapping[str, Comparison]) -> list[str]:
    """The benchmarks whose verdict is a regression, else all of the test's."""
    keys = [k for k, c in comparisons.items() if c.kind == "regression"]
    return keys or [r.id.key for r in results]


def _device_lock(device: str, budget_s: float) -> AbstractContextManager[object]:
    """The device's lock, its key read only when it is taken: a pass that runs no tool now
    touches no device, and a key that cannot be read skips the tools, as a busy GPU does."""
    return device_lock(device_key(device), timeout_s=budget_s)


def _run_collectors(
    ctx: CaptureContext,
    todo: Sequence[Collector],
    settings: CaptureSettings,
    lock: Callable[[], AbstractContextManager[object]] | None,
    progress: Any,
    plan: PassPlan,
) -> list[CollectorResult]:
    """Run each collector under the device lock; those of ``plan.defer`` wait instead."""
    skip = skipped(settings)
    ctx.skip = frozenset(skip)
    now, later = _split(ctx, todo, plan)
    done: list[CollectorResult] = []
    label = f"capturing evidence for {ctx.nodeid.rsplit('::', 1)[-1]}{plan.label}"
    task_cm = progress.task(label) if progress is not None and now else contextlib.nullcontext()
    try:
        with (
            task_cm as task,
            lock() if lock is not None and now else contextlib.nullcontext(),
        ):
            if lock is not None and ctx.run_child is not None:
                ctx.run_child = _children_hold_the_lock(ctx.run_child)
            _run_each(ctx, now, skip, settings.budget_s, task, done)
            ctx.settle()  # what the collectors left running (nsys's summaries)
    except Exception as e:  # the lock could not be had: capture nothing, fail nothing
        why = f"the GPU stayed busy: {type(e).__name__}: {e}"
        done += [CollectorResult.skipped(collector_name(c), why) for c in now[len(done) :]]
    ran, waits = iter(done), iter(later)  # in the order of ``todo``
    return [next(ran) if any(col is c for c in now) else next(waits) for col in todo]


def _run_each(
    ctx: CaptureContext,
    now: Sequence[Collector],
    skip: set[str],
    budget_s: float,
    task: Any,
    done: list[CollectorResult],
) -> None:
    """Run the collectors of ``now`` in turn, each result appended to ``done`` as it comes."""
    group = any((r.run.extra or {}).get("group") for r in ctx.results)
    for i, col in enumerate(now, 1):
        if task is not None:
            task.update(f"{getattr(col, 'name', col)}, tool {i} of {len(now)}")
        if group and collector_name(col) == "ncu":
            why = "not run on a distributed test (its kernel replay deadlocks collectives)"
            done.append(CollectorResult.skipped("ncu", why))
        else:
            done.append(_run_collector(col, ctx, skip, budget_s))


def _split(
    ctx: CaptureContext, todo: Sequence[Collector], plan: PassPlan
) -> tuple[list[Collector], list[CollectorResult]]:
    """The collectors to run now, and the results of those deferred (not one that cannot run)."""
    now: list[Collector] = []
    later: list[CollectorResult] = []
    for col in todo:
        name = collector_name(col)
        if name not in plan.defer or not could_run(col, ctx.device, ctx.skip):
            now.append(col)
        else:
            later.append(CollectorResult(name, DEFERRED, reason=plan.defer_reason or "later"))
    return now, later


def skipped(settings: CaptureSettings) -> set[str]:
    """The tools left out: ``--gpuperf-capture-skip``, and ncu with no kernels to profile."""
    return set(settings.skip or ()) | ({"ncu"} if settings.ncu_kernels <= 0 else set())


def collector_name(col: Collector) -> str:
    return str(getattr(col, "name", type(col).__name__))


def could_run(col: Collector, device: str, skip: Collection[str] = ()) -> bool:
    """Whether ``col`` would capture anything on ``device``: not skipped, its tool there."""
    if str(getattr(col, "name", "")).lower() in skip:
        return False
    try:
        if col.available():
            return False
    except Exception:
        return False
    return not (isinstance(col, CudaToolCollector) and device != "cuda")


def _diagnose_all(
    ctx: CaptureContext,
    config: pytest.Config | None,
    results: Sequence[Result],
    comparisons: Mapping[str, Comparison],
    baselines: Mapping[str, Any] | None,
    *,
    ab: bool = False,
) -> tuple[dict[str, Diagnosis], dict[str, Any]]:
    """The diagnosis of each captured benchmark, and the evidence it read as JSON."""
    diagnoses: dict[str, Diagnosis] = {}
    evidence: dict[str, Any] = {}
    by_key = {r.id.key: r for r in results}
    for key in ctx.keys:
        try:
            ev = _evidence(
                ctx, key, by_key.get(key), comparisons.get(key), (baselines or {}).get(key)
            )
            ev.ab = ab
            evidence[key] = ev.to_record()
            extra = _hook_lines(config, by_key.get(key), ev)
            diagnoses[key] = diagnose(ev, extra)
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
    col: Collector, ctx: CaptureContext, skip: set[str], budget: float
) -> CollectorResult:
    name = collector_name(col)
    if name.lower() in skip:
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
    ctx: CaptureContext,
    key: str,
    result: Result | None,
    comparison: Comparison | None,
    baseline_runs: Any,
) -> Evidence:
    prof = (ctx.state.get("profiles") or {}).get(key) or {}
    base_inv = ctx.baseline_inventories.get(key) or baseline_inventory(baseline_runs)
    b_s, c_s = _times(comparison, result)

    mode = result.id.mode if result is not None else None
    ev = Evidence(
        key=key,
        display=result.id.display if result is not None else key,
        baseline_s=b_s,
        current_s=c_s,
        change=change_text(comparison, mode) if comparison is not None else "",
        verdict=comparison.kind if comparison is not None else "",
        analysis=prof.get("analysis"),
        baseline_inventory=base_inv,
        child_median_s=prof.get("child_median_s"),
        child_rounds=prof.get("child_rounds"),
        profiled_in=PROFILED_IN if prof else None,
        current_inventory=prof.get("inventory"),
        triton_configs=prof.get("triton_configs") or {},
        current_probe=prof.get("probe"),
        group=_current_group(prof, result),
        baseline_group=_baseline_group(baseline_runs),
    )
    _resource_evidence(ev, result, baseline_runs)
    ev.ncu = list((ctx.state.get("ncu") or {}).values())
    ev.compile = ctx.state.get("compile") or _compile_from_counters(prof.get("dynamo"))
    ev.nsys = list(ctx.state.get("nsys_findings") or [])
    return ev


def _times(comparison: Comparison | None, result: Result | None) -> tuple[Any, Any]:
    b_s = comparison.baseline_s if comparison is not None else None
    c_s = comparison.current_s if comparison is not None else None
    if c_s is None and result is not None and result.run.rounds:
        c_s = result.run.median
    return b_s, c_s


def _resource_evidence(ev: Evidence, result: Result | None, baseline_runs: Any) -> None:
    runs = [baseline_runs] if isinstance(baseline_runs, Mapping) else list(baseline_runs or [])
    if result is not None:
        ev.current_activity = _get(result.run.telemetry or {}, "activity")
        ev.current_memory = thawed(result.run.memory)
    ev.baseline_activity = [(_get(r, "telemetry") or {}).get("activity") for r in runs]
    ev.baseline_memory = [_get(r, "memory") for r in runs]


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
        extra = _get(r, "extra")
        g = _get(extra, "group") if extra is not None else None
        if isinstance(g, Mapping):
            groups.append(dict(g))
    profiled = [g for g in groups if g.get("comms")]
    return (profiled or groups)[-1] if groups else None


def _compile_from_counters(counters: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not counters:
        return None
    breaks = counters.get("graph_break") or {}
    stats = counters.get("stats") or {}
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
    hook = getattr(config.hook, "pytest_gpuperf_diagnose", None)
    if hook is None:
        return []
    lines: list[str] = []
    try:
        for got in hook(config=config, result=result, analysis=ev):
            lines.extend(str(x) for x in got or [])
    except Exception as e:
        lines.append(f"a pytest_gpuperf_diagnose hook failed: {type(e).__name__}: {e}")
    return lines


def _child_runner(
    session: RunContext, nodeid: str, device: str, spares: SparePool | None = None
) -> ChildRunner:
    def run(
        *,
        env: Mapping[str, str] | None = None,
        prefix: Sequence[str] = (),
        timeout_s: float,
        log_path: Path | None = None,
        extra_args: Sequence[str] = (),
    ) -> Any:
        spare = spares.take() if spares is not None and not prefix else None
        return run_child(
            session, nodeid, device=device, extra_args=extra_args, env=env, prefix=prefix,
            timeout_s=timeout_s, log_path=log_path, spare=spare,
        )  # fmt: skip

    return run


#: A spare Python's CUPTI start (seconds: bench/gpu/profiler_warm.py), under the device lock.
CUDA_PRELUDE = """
import torch
if torch.cuda.is_available():
    from torch.profiler import ProfilerActivity, profile
    from pytest_gpuperf.shell.locks import device_key, device_lock
    _who = "a spare Python starting the profiler"
    with device_lock(device_key("cuda"), timeout_s=60.0, owner=_who):
        _x = torch.ones(1, device="cuda")
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
            _x.add_(1.0)
            torch.cuda.synchronize()
        del _x
"""
#: ... and on the CPU, torch.profiler's first session (seconds: its one-time start).
CPU_PRELUDE = """
from torch.profiler import ProfilerActivity, profile
with profile(activities=[ProfilerActivity.CPU]):
    pass
"""


class SparePool:
    """The next capture child's Python, started (and its profiler started) ahead: a child
    without a tool's prefix takes it and starts the one for the capture after."""

    def __init__(self, device: str = "cpu") -> None:
        self._next: SparePython | None = None
        self.used = 0
        self.prelude = CUDA_PRELUDE if device == "cuda" else CPU_PRELUDE

    def take(self) -> SparePython | None:
        spare, self._next = self._next, None
        env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
        self._next = SparePython({**env, CHILD_ENV: "1"}, prelude=self.prelude)
        if spare is not None and spare.usable:
            self.used += 1
            return spare
        return None

    def settle(self, timeout_s: float = 20.0) -> float:
        """Wait for the next spare's start, so none runs beside a measurement (one not ready
        within ``timeout_s`` is ended); the seconds waited."""
        spare = self._next
        if spare is None:
            return 0.0
        t = time.monotonic()
        if not spare.wait_ready(timeout_s):
            spare.close()
            self._next = None
        return time.monotonic() - t

    def close(self) -> None:
        if self._next is not None:
            self._next.close()
            self._next = None
