"""The measuring process's side of a capture: calls of the benchmarked function, profiled.

The fixture runs each hook of :func:`measure_hooks` after a benchmark's measurement, under
the GPU lock: :class:`ChildCapture` in a capture's child, :class:`InventoryHook` when a
baseline is saved. Neither may fail a benchmark: an error becomes a note.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.artifacts.analysis.layout import safe_name
from pytest_gpuperf.artifacts.collectors.algorithms import dynamo_counters
from pytest_gpuperf.artifacts.collectors.algorithms import probe as probe_algorithms
from pytest_gpuperf.artifacts.collectors.base import CaptureSettings
from pytest_gpuperf.measure.policy import MeasurePolicy

if TYPE_CHECKING:
    from pytest_gpuperf.model import BenchId

CAPTURE_ENV = "GPUPERF_CAPTURE"
STATUS_FILE = "child-status.json"
#: The NVTX range (default domain) around the calls nsys records, and the one ncu profiles.
NCU_RANGE = NSYS_RANGE = "gpuperf_capture"
WARM_CALLS = 2
#: Longest profiled window, seconds: calls are fewer for slow functions.
MAX_WINDOW_S = 2.0
#: Longest window of a capture child's profiled calls, seconds: 10 calls of a launch-bound
#: 85 ms call (8,000 kernels each) made a trace that took 39 s to write and read on the H200.
CAPTURE_WINDOW_S = 0.3
#: How a capture child measures before it profiles (its spec's ``measure``): "brief", a few
#: rounds, to see whether the slowdown reproduces there; "minimal" only warms the code up.
BRIEF, MINIMAL = "brief", "minimal"
#: A capture child's options: no NVML telemetry, no output fingerprint (start-up time), and
#: no pytest plugin of unraisable exceptions, whose garbage collections at the end took
#: seconds with torch loaded (the evidence is written by then; the session waits for them).
CHILD_ARGS = (
    "--gpuperf-telemetry=false", "--gpuperf-numerics=off", "-p", "no:unraisableexception",
)  # fmt: skip
#: (warm-up ms, rounds) at most, per ``measure``
_CHILD_POLICY = {BRIEF: (50.0, 5), MINIMAL: (0.0, 2)}

AfterMeasure = Callable[["BenchId", Callable[[], Any], float], "Mapping[str, Any] | None"]


def capture_env(tool: str, folder: Path, keys: Sequence[str], **spec: Any) -> dict[str, str]:
    """The environment of a child whose :class:`ChildCapture` runs ``tool`` on ``keys``."""
    return {CAPTURE_ENV: json.dumps({"tool": tool, "dir": str(folder), "keys": list(keys), **spec})}


def _spec() -> str | None:
    """This process's capture spec (JSON), where it is a capture child."""
    return os.environ.get(CAPTURE_ENV) if os.environ.get("GPUPERF_CHILD") == "1" else None


def capture_hooks(make: Callable[[Any], AfterMeasure]) -> list[AfterMeasure] | None:
    """In a capture child, ``[make(its spec)]`` (none for a bad spec); None elsewhere."""
    spec = _spec()
    if not spec:
        return None
    try:
        return [make(json.loads(spec))]
    except (ValueError, TypeError, KeyError) as e:
        print(f"gpuperf: ignoring a bad {CAPTURE_ENV} spec: {e}", file=sys.stderr)
        return []


def measure_hooks(
    settings: CaptureSettings | None, device: str, *, saving: bool = False
) -> list[AfterMeasure]:
    """The hooks the fixture runs after each measurement in this process (``saving``: this
    session saves a baseline, the inventory's ``auto``)."""
    hooks = capture_hooks(lambda spec: ChildCapture(spec, device))
    if hooks is not None:
        return hooks
    if settings is None or os.environ.get("GPUPERF_CHILD") == "1":
        return []
    mode = settings.inventory
    if mode == "always" or (mode == "auto" and saving):
        return [InventoryHook(device, calls=settings.calls)]
    return []


def capture_policy(measure: Any) -> Callable[[MeasurePolicy], MeasurePolicy] | None:
    """A capture child's change to a measurement policy (None: none): its warm-up and rounds
    cut to what the profile needs (``measure``); how it times stays."""
    if not isinstance(measure, str) or measure not in _CHILD_POLICY:
        return None
    warmup_ms, rounds = _CHILD_POLICY[measure]

    def adjust(policy: MeasurePolicy) -> MeasurePolicy:
        return dataclasses.replace(
            policy,
            warmup_ms=min(policy.warmup_ms, warmup_ms),
            min_warmup_ms=min(policy.min_warmup_ms, 0.0),
            rounds=min(policy.rounds, rounds),
        )

    return adjust


def child_policy() -> Callable[[MeasurePolicy], MeasurePolicy] | None:
    """The policy change of this process when it is a capture child (None otherwise)."""
    try:
        return capture_policy(json.loads(_spec() or "{}").get("measure"))
    except (ValueError, AttributeError):
        return None


def window_calls(calls: int, per_call_s: float, max_s: float = MAX_WINDOW_S) -> int:
    """How many calls to profile: ``calls``, fewer when they would take over ``max_s``."""
    if per_call_s > 0 and math.isfinite(per_call_s):
        calls = min(calls, int(max_s / per_call_s + 1e-9))  # 0.3 / 0.1 is 3 calls, not 2
    return max(2, calls)


def _warm_up(call: Callable[[], Any], calls: int, device: str) -> Callable[[], None]:
    """``calls`` calls, each after ``call.prepare`` (the benchmark's ``setup=``, run outside
    the profiled range) if it has one, then a synchronize; returns that, or a no-op."""
    import torch

    prepare = getattr(call, "prepare", None)
    prepare = prepare if callable(prepare) else (lambda: None)
    for _ in range(calls):
        prepare()
        call()
    if device == "cuda":
        torch.cuda.synchronize()
    return prepare


def profile_calls(
    call: Callable[[], Any],
    *,
    device: str,
    calls: int,
    trace_path: Path,
    warm_calls: int = WARM_CALLS,
    record_shapes: bool = False,
) -> dict[str, Any]:
    """Profile ``calls`` calls after ``warm_calls`` into a Chrome trace, each call in the
    timeline's range (``record_shapes``: a collective's message size too)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from pytest_gpuperf.artifacts.analysis.timeline import CALL_PREFIX

    prepare = _warm_up(call, warm_calls, device)
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if device == "cuda" else [])]
    t0 = time.perf_counter()
    with profile(activities=activities, record_shapes=record_shapes, with_stack=False) as prof:
        for i in range(calls):
            prepare()  # setup= of the benchmark, outside the call's range
            with record_function(f"{CALL_PREFIX}{i}"):
                call()
        if device == "cuda":
            torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    t1 = time.perf_counter()
    prof.export_chrome_trace(str(trace_path))
    return {
        "calls": calls,
        "warm_calls": warm_calls,
        "window_s": wall,
        "export_s": round(time.perf_counter() - t1, 3),
        "torch": str(torch.__version__),
        "device_name": torch.cuda.get_device_name() if device == "cuda" else None,
        "trace": trace_path.name,
    }


class ChildCapture:
    """The hook of a capture child: what ``spec["tool"]`` needs from each regressed benchmark."""

    def __init__(self, spec: Mapping[str, Any], device: str):
        self.tool = str(spec["tool"])
        self.dir = Path(spec["dir"])
        self.keys = set(spec["keys"]) if spec.get("keys") else None
        self.calls = int(spec.get("calls") or CaptureSettings.calls)
        self.warm_calls = int(spec.get("warm_calls") or WARM_CALLS)
        self.window_s = float(spec.get("window_s") or MAX_WINDOW_S)  # the longest window
        self.device = device
        self.done: set[str] = set()
        #: when the parent started this child, and when the hook was made (epoch seconds)
        spawned = spec.get("spawned_at")
        self.spawned_at = float(spawned) if isinstance(spawned, (int, float)) else None
        self.created = time.time()

    def claim(self, key: str) -> bool:
        """Whether this hook captures benchmark ``key`` now (asked for, and not yet done)."""
        if (self.keys is not None and key not in self.keys) or key in self.done:
            return False
        self.done.add(key)
        return True

    def __call__(
        self, bench_id: BenchId, call: Callable[[], Any], per_call_s: float
    ) -> Mapping[str, Any] | None:
        key = bench_id.key
        if not self.claim(key):
            return None
        entry: dict[str, Any] = {"key": key}
        begun = time.time()
        try:
            if self.tool == "torch_profiler":
                n = window_calls(self.calls, per_call_s, self.window_s)
                trace = self.dir / f"{safe_name(key)}.trace.json"
                entry.update(
                    profile_calls(
                        call, device=self.device, calls=n, trace_path=trace,
                        warm_calls=self.warm_calls,
                    ), per_call_s=per_call_s, mode=bench_id.mode,
                )  # fmt: skip
                entry["dynamo"] = dynamo_counters()  # before the probe's call
                entry["probe"] = probe_algorithms(call)
            elif self.tool == "nsys":
                calls = window_calls(self.calls, per_call_s, self.window_s)
                entry.update(self._nvtx_window(call, calls, nsys=True))
            elif self.tool == "ncu":
                entry.update(self._nvtx_window(call, 1, nsys=False))
            entry.setdefault("dynamo", dynamo_counters())
        except Exception as e:
            entry["error"] = f"{type(e).__name__}: {e}"
            entry["traceback"] = traceback.format_exc(limit=8)
        entry["timing"] = self._timing(begun)
        self._record(entry)
        return None

    def _timing(self, begun: float) -> dict[str, float]:
        """Where this child's time went, seconds (torch_profiler.py splits its start-up)."""
        now = time.time()
        out = {"test_s": round(begun - self.created, 3), "hook_s": round(now - begun, 3)}
        if self.spawned_at is not None:
            out["startup_s"] = round(self.created - self.spawned_at, 3)
            out["since_spawn_s"] = round(now - self.spawned_at, 3)
        return out

    def _nvtx_window(self, call: Callable[[], Any], calls: int, nsys: bool) -> dict[str, Any]:
        """``calls`` calls in the NVTX range the tool records (nsys: each in its own too)."""
        import torch

        prepare = _warm_up(call, self.warm_calls, "cuda")
        if nsys:
            torch.cuda.profiler.start()
        else:
            prepare()  # outside the range: ncu profiles every kernel in it
        torch.cuda.nvtx.range_push(NSYS_RANGE if nsys else NCU_RANGE)
        try:
            for i in range(calls):
                if nsys:
                    prepare()
                    torch.cuda.nvtx.range_push(f"call#{i}")
                call()
                if nsys:
                    torch.cuda.nvtx.range_pop()
            torch.cuda.synchronize()
        finally:
            torch.cuda.nvtx.range_pop()
            if nsys:
                torch.cuda.profiler.stop()
        return {"calls": calls, "range": NSYS_RANGE if nsys else NCU_RANGE}

    def _record(self, entry: Mapping[str, Any]) -> None:
        doc = read_status(self.dir) or {"tool": self.tool}
        doc.setdefault("benchmarks", []).append(dict(entry))
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / STATUS_FILE).write_text(json.dumps(doc, indent=1, default=str))


def read_status(directory: Path) -> dict[str, Any]:
    """What a capture child recorded (empty if it never reached a benchmark)."""
    try:
        return dict(json.loads((directory / STATUS_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return {}


def release_cupti_after_profiling() -> None:
    """``TEARDOWN_CUPTI=1`` unless set: CUPTI left attached slows later launches by 10-20 %
    (pytorch/pytorch#144455); from CUDA 12.6 on (before, teardown could crash graphs)."""
    try:
        import torch

        major, minor = (int(x) for x in str(torch.version.cuda or "0.0").split(".")[:2])
    except (ImportError, ValueError):
        return
    if (major, minor) >= (12, 6):
        os.environ.setdefault("TEARDOWN_CUPTI", "1")


class InventoryHook:
    """A short profiler pass after measuring, for the baseline's kernel inventory."""

    def __init__(self, device: str, calls: int = CaptureSettings.calls):
        self.device = device
        self.calls = calls
        if device == "cuda":
            release_cupti_after_profiling()

    def __call__(
        self, bench_id: BenchId, call: Callable[[], Any], per_call_s: float
    ) -> Mapping[str, Any] | None:
        from pytest_gpuperf.artifacts.analysis.inventory import inventory_from_trace
        from pytest_gpuperf.artifacts.analysis.timeline import load_trace, parse_trace

        # named after this process: a later session removes it if this one is killed
        with tempfile.TemporaryDirectory(prefix=f"gpuperf-inventory-{os.getpid()}-") as tmp:
            path = Path(tmp) / "trace.json"
            try:
                profile_calls(
                    call, device=self.device, calls=window_calls(self.calls, per_call_s, 1.0),
                    trace_path=path,
                )  # fmt: skip
                inv = inventory_from_trace(parse_trace(load_trace(path)))
            except Exception as e:
                return {"kernels_error": f"{type(e).__name__}: {e}"}
        inv["probe"] = probe_algorithms(call)  # what the library's choices depend on
        return {"kernels": inv}
