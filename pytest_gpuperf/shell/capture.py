"""Capture the evidence of one regressed test and say where the time went.

:func:`capture` is what the verdict step calls. It lays out the test's
folder, runs the collectors in order (each within its time budget; a missing
tool is skipped with the reason, any failure becomes that collector's
reason), diffs the kernel inventories, diagnoses each regressed benchmark,
writes ``manifest.json`` and returns a :class:`CaptureReport`. It never
raises for a problem of a collector, and it does nothing in a child process
(``--gpuperf-child``), so re-runs cannot recurse.
"""

from __future__ import annotations

import contextlib
import json
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.artifacts.analysis.diagnose import Diagnosis, Evidence, diagnose
from pytest_gpuperf.artifacts.analysis.inventory import combine, diff_inventories
from pytest_gpuperf.artifacts.analysis.layout import Layout, write_manifest
from pytest_gpuperf.artifacts.collectors.base import (
    FAILED,
    SKIPPED,
    CaptureContext,
    CaptureSettings,
    ChildRun,
    ChildRunner,
    Collector,
    CollectorResult,
)

if TYPE_CHECKING:
    import pytest

    from pytest_gpuperf.model import Result
    from pytest_gpuperf.shell.settings import RunContext
    from pytest_gpuperf.verdict.comparison import Comparison

NEVER, ON_FAILURE, ALWAYS = "never", "on-failure", "always"
POLICIES = (NEVER, ON_FAILURE, ALWAYS)


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
    kernel_diffs: dict[str, Any] = field(default_factory=dict)

    @property
    def diagnosis(self) -> str:
        """The paragraph(s) that open the failure message."""
        return "\n\n".join(d.paragraph for d in self.diagnoses.values())

    def message(self) -> str:
        """Diagnosis first, then details, then what was captured and where."""
        return self.diagnosis + "\n\n" + self.details()

    def details(self) -> str:
        """Everything after the diagnosis: the evidence per benchmark, collectors and paths."""
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
            out.append(
                {
                    "collector": c.name,
                    "status": c.status,
                    "reason": c.reason,
                    "files": [str(f) for f in c.files],
                }
            )
        if self.manifest is not None:
            out.append({"collector": "manifest", "status": "ok", "files": [str(self.manifest)]})
        return out

    def apply(self, results: Sequence[Result]) -> None:
        """Put the evidence on the test's results for the JSON and the CI reports.

        Each result gets the capture's entries in ``Result.artifacts``; a
        diagnosed one also gets its ``Result.diagnosis``, which
        :mod:`pytest_gpuperf.reporting` renders.
        """
        entries = self.artifacts()
        for r in results:
            r.artifacts = [*r.artifacts, *entries]
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
        }


def _rel(p: Path, base: Path) -> str:
    try:
        return str(p.relative_to(base))
    except ValueError:
        return str(p)


def _get(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def baseline_inventory(runs: Any) -> dict[str, Any] | None:
    """The combined inventory of a benchmark's baseline runs.

    ``runs`` is a sequence of baseline runs (``RunRecord``), of their
    ``extra`` dicts, or of inventories, or one inventory.
    """
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
) -> CaptureReport | None:
    """Capture evidence for the test ``nodeid`` and diagnose its regressed benchmarks.

    ``run`` is the session (its capture settings, hooks and child processes; ``None``:
    no session). ``settings``: the capture settings when there is no session (default:
    the session's, else the defaults). ``results`` are the test's results;
    ``comparisons`` maps a benchmark key to its verdict (``Result.comparison`` is used when
    absent); ``baselines`` maps a key to its baseline runs
    (``RunRecord`` objects or their ``extra`` dicts) for the kernel diff.
    ``keys`` are the benchmarks to capture (default: those whose verdict is
    ``regression``, else all of the test's). ``lock`` is the device lock,
    held for the whole capture so that no other benchmark is measured on the
    GPU meanwhile (the children are told the lock is theirs); by default the
    session's per-GPU lock when ``run`` is given. Returns ``None`` in a
    child process. ``progress`` (a :class:`pytest_gpuperf.shell.progress.Progress`)
    shows which tool runs while the capture lasts. Never raises for a
    collector's problem.
    """
    if run is not None:
        from pytest_gpuperf.shell.rerun import is_child

        if is_child(run.config):
            return None
    t0 = time.monotonic()
    try:
        return _capture(
            run, nodeid, results, comparisons, device=device, run_id=run_id,
            baselines=baselines, keys=keys, collectors=collectors, run_child=run_child,
            artifacts_dir=artifacts_dir, lock=lock, progress=progress, t0=t0,
            settings=settings or (run.settings.capture if run is not None else CaptureSettings()),
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
) -> CaptureReport:
    config = run.config if run is not None else None
    comparisons = _comparisons_of(results, comparisons)
    if keys is None:
        keys = _regressed_keys(results, comparisons)
    root = Path(artifacts_dir or settings.artifacts_dir)
    if run is not None and not root.is_absolute():
        root = run.rootpath / root
    directory = Layout(root, run_id).prepare(nodeid)
    if run_child is None and run is not None:
        run_child = _child_runner(run, nodeid, device)
    ctx = CaptureContext(
        nodeid=nodeid,
        directory=directory,
        device=device,
        keys=list(keys),
        results=list(results),
        comparisons=comparisons,
        config=config,
        timeout_s=settings.timeout_s,
        deadline=t0 + settings.budget_s,
        calls=settings.calls,
        ncu_kernels=settings.ncu_kernels,
        run_child=run_child,
        baseline_inventories=_baseline_inventories(keys, baselines),
    )
    if lock is None and run is not None:
        lock = _session_lock(device, settings.budget_s)
    todo = list(collectors if collectors is not None else collectors_for(config))
    done = _run_collectors(ctx, todo, settings, lock, progress)
    diagnoses, diffs = _diagnose_all(ctx, config, results, comparisons, baselines)
    if diffs:
        (directory / "kernel_diff.json").write_text(json.dumps(diffs, indent=1, default=str))
    wall = time.monotonic() - t0
    report = CaptureReport(nodeid, directory, done, diagnoses, wall, kernel_diffs=diffs)
    report.manifest = _write_manifest(report, ctx, run_id)
    return report


def _comparisons_of(
    results: Sequence[Result], comparisons: Mapping[str, Comparison] | None
) -> dict[str, Comparison]:
    """The verdict of each benchmark: those given, else the result's own."""
    out = dict(comparisons or {})
    for r in results:
        if r.id.key not in out and r.comparison is not None:
            out[r.id.key] = r.comparison
    return out


def _regressed_keys(results: Sequence[Result], comparisons: Mapping[str, Comparison]) -> list[str]:
    """The benchmarks whose verdict is a regression, else all of the test's."""
    keys = [k for k, c in comparisons.items() if c.kind == "regression"]
    return keys or [r.id.key for r in results]


def _baseline_inventories(
    keys: Sequence[str], baselines: Mapping[str, Any] | None
) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for key in keys:
        inv = baseline_inventory((baselines or {}).get(key))
        if inv is not None:
            out[key] = inv
    return out


def _run_collectors(
    ctx: CaptureContext,
    todo: Sequence[Collector],
    settings: CaptureSettings,
    lock: Callable[[], AbstractContextManager[object]] | None,
    progress: Any,
) -> list[CollectorResult]:
    """Run each collector in turn under the device lock, with a progress line."""
    skip = set(settings.skip or ())
    if ctx.ncu_kernels <= 0:
        skip.add("ncu")
    not_here: dict[str, str] = {}
    if any((r.extra or {}).get("group") for r in ctx.results):
        # Nsight Compute replays each kernel alone: a collective would wait for its peers forever
        not_here["ncu"] = "not run on a distributed test (its kernel replay deadlocks collectives)"
    done: list[CollectorResult] = []
    label = f"capturing evidence for {ctx.nodeid.rsplit('::', 1)[-1]}"
    task_cm = progress.task(label) if progress is not None else contextlib.nullcontext()
    try:
        with task_cm as task, lock() if lock is not None else contextlib.nullcontext():
            if lock is not None and ctx.run_child is not None:
                ctx.run_child = _children_hold_the_lock(ctx.run_child)
            for i, col in enumerate(todo, 1):
                if task is not None:
                    task.update(f"{getattr(col, 'name', col)}, tool {i} of {len(todo)}")
                name = str(getattr(col, "name", col))
                if name in not_here:
                    done.append(CollectorResult.skipped(name, not_here[name]))
                    continue
                done.append(_run_collector(col, ctx, skip, settings.budget_s))
    except Exception as e:  # the lock could not be had: capture nothing, fail nothing
        why = f"the GPU stayed busy: {type(e).__name__}: {e}"
        done += [
            CollectorResult.skipped(str(getattr(c, "name", c)), why) for c in todo[len(done) :]
        ]
    return done


def _diagnose_all(
    ctx: CaptureContext,
    config: pytest.Config | None,
    results: Sequence[Result],
    comparisons: Mapping[str, Comparison],
    baselines: Mapping[str, Any] | None,
) -> tuple[dict[str, Diagnosis], dict[str, Any]]:
    """The diagnosis of each captured benchmark, and its kernel diff where there is one."""
    diagnoses: dict[str, Diagnosis] = {}
    diffs: dict[str, Any] = {}
    by_key = {r.id.key: r for r in results}
    for key in ctx.keys:
        try:
            ev = _evidence(
                ctx, key, by_key.get(key), comparisons.get(key), (baselines or {}).get(key)
            )
            if ev.kernel_diff is not None:
                diffs[key] = ev.kernel_diff.to_dict()
            extra = _hook_lines(config, by_key.get(key), ev)
            diagnoses[key] = diagnose(ev, extra)
        except Exception as e:  # the diagnosis must never turn a verdict into an error
            diagnoses[key] = Diagnosis(
                key, f"{key}: the diagnosis failed ({type(e).__name__}: {e}).", [],
                [traceback.format_exc(limit=5)],
            )  # fmt: skip
    return diagnoses, diffs


def _write_manifest(report: CaptureReport, ctx: CaptureContext, run_id: str) -> Path | None:
    try:
        return write_manifest(
            report.directory,
            nodeid=report.nodeid,
            run_id=run_id,
            device=ctx.device,
            benchmarks=ctx.keys,
            collectors=[c.to_dict(report.directory) for c in report.collectors],
            diagnosis={k: d.to_dict() for k, d in report.diagnoses.items()},
            wall_s=report.wall_s,
        )
    except OSError:
        return None


def _session_lock(device: str, timeout_s: float) -> Callable[[], AbstractContextManager[object]]:
    def lock() -> AbstractContextManager[object]:
        from pytest_gpuperf.shell.locks import device_key, device_lock

        return device_lock(device_key(device), timeout_s=timeout_s)

    return lock


def _children_hold_the_lock(run_child: ChildRunner) -> ChildRunner:
    """Children of a capture measure under the parent's lock: they must not wait for it."""

    def run(*, env: Mapping[str, str] | None = None, **kw: Any) -> Any:
        return run_child(env={**(env or {}), "GPUPERF_NO_LOCK": "1"}, **kw)

    return run


def _run_collector(
    col: Collector, ctx: CaptureContext, skip: set[str], budget: float
) -> CollectorResult:
    name = str(getattr(col, "name", type(col).__name__))
    if name.lower() in skip:
        return CollectorResult.skipped(name, "turned off (--gpuperf-capture-skip)")
    start = time.monotonic()
    try:
        why = col.available()
        if why:
            return CollectorResult.skipped(name, why)
        if ctx.budget() < 1.0:
            return CollectorResult.skipped(
                name,
                f"no time left in the capture budget ({budget:.0f} s, --gpuperf-capture-budget)",
            )
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
    b_s = comparison.baseline_s if comparison is not None else None
    c_s = comparison.current_s if comparison is not None else None
    if c_s is None and result is not None and result.rounds:
        c_s = result.median
    ev = Evidence(
        key=key,
        display=result.id.display if result is not None else key,
        baseline_s=b_s,
        current_s=c_s,
        analysis=prof.get("analysis"),
        baseline_inventory=base_inv,
        child_median_s=prof.get("child_median_s"),
        current_inventory=prof.get("inventory"),
        triton_configs=prof.get("triton_configs") or {},
        group=_current_group(prof, result),
        baseline_group=_baseline_group(baseline_runs),
    )
    cur_inv = prof.get("inventory")
    if base_inv and cur_inv:
        ev.kernel_diff = diff_inventories(base_inv, cur_inv, ev.slowdown_s)
    ev.ncu = list((ctx.state.get("ncu") or {}).values())
    ev.compile = ctx.state.get("compile") or _compile_from_counters(prof.get("dynamo"))
    ev.nsys = list(ctx.state.get("nsys_findings") or [])
    return ev


def _current_group(prof: Mapping[str, Any], result: Result | None) -> dict[str, Any] | None:
    """A distributed benchmark's group as the capture saw it (its collectives, its NCCL
    setup), with the NCCL setup of the measurement itself where the capture has none."""
    measured = dict(((result.extra or {}).get("group") or {}) if result is not None else {})
    captured = dict(prof.get("group") or {})
    if not measured and not captured:
        return None
    return {**measured, **{k: v for k, v in captured.items() if v}}


def _baseline_group(runs: Any) -> dict[str, Any] | None:
    """The newest baseline run's ``extra["group"]`` that holds a profile of its collectives
    (else the newest that has any)."""
    groups = []
    for r in runs if isinstance(runs, (list, tuple)) else []:
        extra = _get(r, "extra")
        g = _get(extra, "group") if extra is not None else None
        if isinstance(g, Mapping):
            groups.append(dict(g))
    profiled = [g for g in groups if g.get("comms")]
    return (profiled or groups)[-1] if groups else None


def _compile_from_counters(counters: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Compile findings from torch._dynamo's counters in the profiler child."""
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


def _child_runner(session: RunContext, nodeid: str, device: str) -> ChildRunner:
    from pytest_gpuperf.shell.rerun import run_child

    def run(
        *,
        env: Mapping[str, str] | None = None,
        prefix: Sequence[str] = (),
        timeout_s: float,
        log_path: Path | None = None,
        extra_args: Sequence[str] = (),
    ) -> Any:
        return run_child(
            session, nodeid, device=device, extra_args=extra_args, env=env, prefix=prefix,
            timeout_s=timeout_s, log_path=log_path,
        )  # fmt: skip

    return run


def standalone_runner(
    nodeid: str,
    *,
    rootdir: Path | str,
    device: str,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> ChildRunner:
    """A child runner without a pytest session (for scripts and tests of the collectors).

    It runs ``python -m pytest <nodeid> --gpuperf-child ...`` in ``rootdir``
    through :func:`pytest_gpuperf.shell.rerun.run_pytest_child`, with ``args`` added.
    """
    from pytest_gpuperf.shell.rerun import run_pytest_child

    base_env = dict(env or {})

    def run(
        *,
        env: Mapping[str, str] | None = None,
        prefix: Sequence[str] = (),
        timeout_s: float,
        log_path: Path | None = None,
        extra_args: Sequence[str] = (),
    ) -> ChildRun:
        return run_pytest_child(
            [nodeid],
            device=device,
            args=["-p", "no:cacheprovider", *args, *extra_args],
            env={**base_env, **(env or {})},
            drop_env=("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER"),
            prefix=prefix,
            timeout_s=timeout_s,
            cwd=rootdir,
            log_path=log_path,
        )

    return run
