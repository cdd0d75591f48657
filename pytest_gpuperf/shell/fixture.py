"""The ``gpu_bench`` fixture's object: measure a callable, hand each
:class:`~pytest_gpuperf.model.Result` to ``record``, return the callable's result."""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import statistics
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import pytest

from pytest_gpuperf.artifacts.collectors.child import (
    child_policy,
    measure_hooks,
)
from pytest_gpuperf.errors import BenchOutOfMemory, DeviceBusy, GpuPerfError
from pytest_gpuperf.measure import allocation, backend, engine
from pytest_gpuperf.measure.contention import ContentionWindow
from pytest_gpuperf.measure.distributed import argument_bytes
from pytest_gpuperf.measure.environment import collect_environment
from pytest_gpuperf.measure.flags import flag_notes
from pytest_gpuperf.measure.memory import (
    allocator_counters,
    allocator_reason,
    first_line,
    is_oom,
    release_memory,
)
from pytest_gpuperf.measure.numerics import fingerprint_output as fingerprint
from pytest_gpuperf.measure.policy import MeasurePolicy
from pytest_gpuperf.measure.summary import median
from pytest_gpuperf.measure.tracing import active_tracer, torch_profiler_active, tracer_note
from pytest_gpuperf.model import BenchId, Result, Run, printable
from pytest_gpuperf.shell.config import GpuPerfConfig, Setting
from pytest_gpuperf.shell.markers import format_param
from pytest_gpuperf.shell.options import CALL_ONLY, PER_TEST_OPTIONS
from pytest_gpuperf.shell.progress import silent
from pytest_gpuperf.shell.settings import PerTest, Settings
from pytest_gpuperf.telemetry.probe import gather

if TYPE_CHECKING:
    from pytest_gpuperf.verdict.policy import VerdictSettings

#: probe(bench_id, clock) -> context manager yielding finish(raw) -> telemetry dict | None
Probe = Callable[[BenchId, Callable[[], float]], AbstractContextManager[Any]]
#: phase(bench_id, phase_name) -> context manager (NVTX ranges)
PhaseRange = Callable[[BenchId, str], AbstractContextManager[object]]
#: after_measure(bench_id, call, per_call_s) -> data for Result.extra, or None (under the lock)
AfterMeasure = Callable[[BenchId, Callable[[], Any], float], "Mapping[str, Any] | None"]


#: Seconds of plain calls the activity is read over (NVML's GPM counters refresh every 100 ms),
#: after LEAD_S of them (a sample can be one refresh old: an H200 read 40 % SM util for 98 %),
#: at most WINDOW_MAX_CALLS calls (a function of nanoseconds would take millions).
WINDOW_S = 0.12
LEAD_S = 0.1
WINDOW_MAX_CALLS = 200_000


def plain_window(
    plain: Callable[[int], int], per_call_s: float, target_s: float, most: int
) -> tuple[int, float]:
    """Call ``plain(n)`` in batches until ``target_s`` or ``most`` calls: (calls, seconds). A
    batch is sized from the rate seen, at most 8 times the last (a wrong estimate costs little)."""
    t0 = time.perf_counter()
    done = 0
    batch = max(1, min(16, most, int(target_s / max(per_call_s, 1e-7) / 8)))
    while True:
        done += plain(batch)
        elapsed = time.perf_counter() - t0
        if elapsed >= target_s or done >= most:
            return done, elapsed
        rate = elapsed / max(done, 1)
        want = math.ceil(1.05 * (target_s - elapsed) / max(rate, 1e-9))
        batch = max(1, min(most - done, want, 8 * batch))


def _per_call(rounds: list[float], e2e_rounds: list[float]) -> float | None:
    """One plain call's time: the device's median or the slowest end-to-end round."""
    return max(median(rounds), max(e2e_rounds, default=0.0)) if rounds else None


#: what a Run keeps of the engine's RawMeasurement as it is
_FROM_RAW = (
    "rounds", "e2e_rounds", "calls_per_round", "warmup", "trimmed", "stability", "warmup_s",
)  # fmt: skip


@dataclass
class BenchContext:
    """What the plugin tells the fixture about the running test."""

    nodeid: str
    config: GpuPerfConfig  # a benchmark's marker and call resolve over it
    device: str  # "cuda" or "cpu"
    record: Callable[[Result], None]
    marker: Mapping[str, Any] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)
    disabled: bool = False
    probes: list[Probe] = field(default_factory=list)
    phase_range: PhaseRange = lambda bench_id, name: contextlib.nullcontext()
    test_name: str = ""
    #: held while one benchmark is measured (one measurement per device at a time)
    lock: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext
    #: run after each measurement; None: this process's (child.measure_hooks), found once
    after_measure: list[AfterMeasure] | None = None
    #: Progress.task: progress(label, ticker=...) -> a context yielding a task
    progress: Callable[..., AbstractContextManager[Any]] = field(
        default_factory=lambda: silent().task
    )
    #: the session's typed settings (None: built from ``config``)
    settings: Settings | None = None
    #: activity() -> a GPM window, read after each CUDA measurement (None: no allocator figures)
    activity: Callable[[], Any] | None = None
    #: this rank's process group (measure.distributed.Group) in a world_size= test
    group: Any = None
    run_id: str | None = None
    #: the session's timing modes (pytest_gpuperf.registry); None: the built-in ones
    modes: backend.Modes | None = None


@dataclass
class _FirstCall:
    """A benchmark's first call, made once for all its modes."""

    seconds: float | None = None
    output: Any = None
    numerics: Any = None  # fingerprint_output's list, or None


class _Plan(NamedTuple):
    """What measuring one benchmark needs, resolved once from its settings."""

    policy: MeasurePolicy
    verdict: VerdictSettings
    #: the Run's fields alike in every mode
    run: dict[str, Any]
    modes: list[backend.Mode]
    collective: str | None = None


def _evaluate(value: Any, params: Mapping[str, Any], what: str, test: str) -> float | None:
    """A number, or a callable of the test's parameters it names (``flops=lambda shape: ...``)."""
    if value is None or not callable(value):
        return value
    try:
        sig = inspect.signature(value)
    except (TypeError, ValueError):
        return float(value(**params))
    accepts_all = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    names = [
        n for n, p in sig.parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    empty = inspect.Parameter.empty
    missing = [n for n in names if n not in params and sig.parameters[n].default is empty]
    if missing:
        raise GpuPerfError(
            f"{what}= of {test} is a callable of the test's parameters, but {test} has no "
            f"parameter {', '.join(repr(m) for m in missing)} (it has: "
            f"{', '.join(sorted(params)) or 'none'}). Name the callable's arguments after the "
            "test's parameters, e.g. flops=lambda shape: 2 * shape[0] * shape[1] * shape[2]."
        )
    return float(value(**(params if accepts_all else {n: params[n] for n in names if n in params})))


class GpuBench:
    """Measure the steady state of a callable: ``result = gpu_bench(fn, *args, **kwargs)``.

    Keywords named like a measurement option (``name``, ``setup``, ``rounds``, ...)
    configure the measurement; all others go to ``fn`` (:meth:`measure` passes them all).
    ``setup=make`` calls ``make()`` untimed before every call of ``fn`` (in-place ops): it
    resets the arguments in place or returns fresh ``(args, kwargs)``.
    """

    def __init__(self, ctx: BenchContext):
        self._ctx = ctx
        self._settings = ctx.settings or Settings.from_config(ctx.config)
        self._names: set[str | None] = set()
        self.results: list[Result] = []
        self._oom: BenchOutOfMemory | None = None
        self._after: list[AfterMeasure] | None = ctx.after_measure

    @property
    def device(self) -> str:
        """``"cuda"`` or ``"cpu"``: where the benchmark runs; allocate its inputs there."""
        return self._ctx.device

    @property
    def disabled(self) -> bool:
        return self._ctx.disabled

    def __call__(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        options = {
            k: kwargs.pop(k) for k in list(kwargs) if k in PER_TEST_OPTIONS or k in CALL_ONLY
        }
        return self.measure(fn, args=args, kwargs=kwargs, **options)

    def measure(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        name: str | None = None,
        setup: Callable[[], Any] | None = None,
        **options: Any,
    ) -> Any:
        """Like calling the fixture, with ``fn``'s arguments given explicitly."""
        __tracebackhide__ = True
        ctx = self._ctx
        self._check_call(fn, name, setup, options)
        self._names.add(name)
        call = backend.Invocation(fn, tuple(args), dict(kwargs or {}), setup, group=ctx.group)
        if ctx.disabled:
            call.prepare()
            return call()

        settings = ctx.config.resolve(
            ctx.marker,
            options,
            marker_where=f"the gpuperf marker of {ctx.test_name or ctx.nodeid}",
            call_where=f"gpu_bench(...) in {ctx.test_name or ctx.nodeid}",
        )
        if setup is not None and settings["cuda_graph"].value:
            where = {"call": "this gpu_bench(...) call", "marker": "the gpuperf marker"}.get(
                settings["cuda_graph"].source, "--gpuperf-cuda-graph"
            )
            raise GpuPerfError(
                f"gpu_bench(setup=...) in {ctx.test_name or ctx.nodeid} cannot be measured with "
                f"cuda_graph={settings['cuda_graph'].value!r} (from {where}): a CUDA graph replays "
                "the same input buffers on every call, so it cannot give each call fresh inputs "
                "without timing their copy too. Pass cuda_graph=False to this gpu_bench call "
                "(CUDA events: setup runs untimed before each call), or drop setup= if fn does not "
                "change its inputs."
            )
        return self._run(call, name, settings)

    def _check_call(
        self, fn: Any, name: str | None, setup: Any, options: Mapping[str, Any]
    ) -> None:
        __tracebackhide__ = True
        ctx = self._ctx
        if not callable(fn):
            raise TypeError(
                f"gpu_bench() needs a callable as its first argument, got {type(fn).__name__} "
                f"{fn!r:.80}; pass the function itself, e.g. gpu_bench(torch.mm, a, b)"
            )
        unknown = sorted(set(options) - PER_TEST_OPTIONS)
        if unknown:
            raise TypeError(f"gpu_bench.measure() got unknown option(s): {', '.join(unknown)}")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise TypeError(f"gpu_bench(name=...) must be a non-empty string, got {name!r}")
        if name in self._names:
            label = "without a name" if name is None else f"with name={name!r}"
            raise GpuPerfError(
                f"gpu_bench was called twice in {ctx.test_name or ctx.nodeid} {label}. Give each "
                "measurement of one test its own name: gpu_bench(fn, name='fwd'), "
                "gpu_bench(bwd, name='bwd')."
            )
        if setup is not None and not callable(setup):
            raise TypeError(
                f"gpu_bench(setup=...) needs a callable that makes fn's inputs, got "
                f"{type(setup).__name__} {setup!r:.80}; e.g. setup=lambda: ((x0.clone(),), {{}})"
            )

    def _run(
        self, call: backend.Invocation, name: str | None, settings: Mapping[str, Setting]
    ) -> Any:
        __tracebackhide__ = True
        ctx = self._ctx
        test = ctx.test_name or ctx.nodeid
        plan = self._plan(PerTest.resolve(settings, self._settings), test, call)

        oom: str | None = None
        out: Any = None
        try:
            out = self._measure_modes(call, name, plan)
        except Exception as e:
            if not is_oom(e):
                raise
            oom = first_line(e)
            traceback.clear_frames(e.__traceback__)
        if oom is not None:  # outside the except block: no reference to the frames survives
            release_memory()
            self._oom = BenchOutOfMemory(
                f"CUDA out of memory while benchmarking {test}"
                + (f" ({name})" if name else "")
                + f": {oom}\nThe memory this benchmark held has been released and the session "
                "goes on. Reduce the problem size of this test, free tensors the test keeps "
                "alive, or run it alone with fewer other processes on the GPU."
            )
            raise self._oom
        return out

    def _plan(self, mine: PerTest, test: str, call: backend.Invocation) -> _Plan:
        ctx = self._ctx
        nbytes = _evaluate(mine.work.bytes, ctx.params, "bytes", test)
        collective = mine.work.collective
        if collective is not None:
            if ctx.group is None:
                raise GpuPerfError(
                    f"collective={collective!r} in {test}: a collective's bus bandwidth depends "
                    "on the world size, and this test runs in one process; mark it "
                    "@pytest.mark.gpuperf(world_size=N), or drop collective="
                )
            if nbytes is None:
                nbytes = argument_bytes(call)
        adjust = child_policy()  # a capture child re-measures briefly before it profiles
        env = collect_environment(ctx.device)
        return _Plan(
            policy=adjust(mine.measure) if adjust is not None else mine.measure,
            verdict=mine.verdict,
            run=dict(
                device=ctx.device,
                flops=_evaluate(mine.work.flops, ctx.params, "flops", test),
                bytes=nbytes,
                environment=env,
                run_id=ctx.run_id,
                device_name=env.get("gpu_name") or env.get("cpu_model"),
            ),
            modes=(ctx.modes or backend.BUILTIN).for_benchmark(
                ctx.device, mine.measure, group=ctx.group is not None
            ),
            collective=collective,
        )

    def _measure_modes(self, call: backend.Invocation, name: str | None, plan: _Plan) -> Any:
        __tracebackhide__ = True
        ctx = self._ctx
        first = _FirstCall()
        policy = plan.policy
        for mode in plan.modes:
            shown = tuple((k, format_param(v)) for k, v in ctx.params.items())
            bid = BenchId(ctx.nodeid, name, mode.name, shown)
            record = mode.policy_record(policy)
            if ctx.group is not None:  # another world size or backend is not comparable
                record.update(world_size=ctx.group.world_size, backend=ctx.group.backend)
            l2_flush = bool(policy.l2_flush and mode.flushes_l2)
            fixed = dict(plan.run, policy=record, l2_flush=l2_flush)
            timer = mode.make_timer(call, policy)
            who = bid.display if len(plan.modes) == 1 else f"{bid.display} [{mode.name}]"
            run = self._measure_mode(timer, bid, who, plan, first, call, fixed)
            result = Result(run, gate=plan.verdict.gate_record())
            result.notes.extend(flag_notes(run, policy, setup=call.has_setup, mode=mode))
            if run.tracer:
                result.notes.append(tracer_note(run.tracer))
            self.results.append(result)
            ctx.record(result)
        return first.output

    def _with_group(
        self, raw: engine.RawMeasurement, extra: dict[str, Any], plan: _Plan
    ) -> dict[str, Any]:
        """``extra`` and, in a group, ``["group"]``: the group, each rank's kept rounds."""
        group = self._ctx.group
        if group is None:
            return extra
        by_rank = [list(r) for r in zip(*raw.rank_rounds, strict=True)]
        slowest = Counter(r.index(max(r)) for r in raw.rank_rounds)  # the first, at a tie
        record = {
            "world_size": group.world_size,
            "backend": group.backend,
            "collective": plan.collective,
            "rank_medians": [median(x) for x in by_rank],
            "slowest_counts": [slowest[rank] for rank in range(len(by_rank))],
            "rank_rounds": by_rank,
            **(extra.get("group") or {}),
        }
        return {**extra, "group": record}

    def _measure_mode(
        self,
        timer: backend.Timer,
        bid: BenchId,
        who: str,
        plan: _Plan,
        first: _FirstCall,
        call: backend.Invocation,
        fixed: dict[str, Any],
    ) -> Run:
        """One mode under the device lock: the first call (once), the loop inside the probes,
        the window of plain calls (GPM, the allocator), the hooks."""
        __tracebackhide__ = True
        ctx = self._ctx
        policy = plan.policy
        clock = time.perf_counter
        # a group's loop reads rank 0's clock, so that every rank decides alike
        loop_clock = ctx.group.clock if ctx.group is not None else clock
        on_gpu = ctx.device == "cuda"
        with contextlib.ExitStack() as stack:
            stack.callback(timer.close)
            t_start = time.perf_counter()
            busy = None
            try:
                stack.enter_context(ctx.lock())
            except DeviceBusy as e:
                busy = e
            if busy is not None:  # the text alone, as for "no verdict": no traceback
                pytest.fail(f"gpuperf: {busy}", pytrace=False)
            with ctx.phase_range(bid, "benchmark"):
                if first.seconds is None:  # once for all modes
                    with (
                        ctx.phase_range(bid, "first-call"),
                        ctx.progress(f"{who}: first call (compile, autotune, lazy init)"),
                    ):
                        first.seconds, first.output = timer.first_call()
                    if plan.verdict.numerics != "off":  # once, untimed: one call's output
                        first.numerics = fingerprint(first.output)
                with ctx.phase_range(bid, "prepare"):
                    timer.prepare()
                window = ContentionWindow()
                timer.reset_peak_memory()
                label = f"{who}: measuring (warm-up, then {policy.rounds} rounds)"
                found = [t for t in (active_tracer(), torch_profiler_active()) if t]
                tracer = printable("; ".join(found)) or None
                phase = window.phase(functools.partial(ctx.phase_range, bid))
                with ctx.progress(label, ticker=False) as task, contextlib.ExitStack() as probes:
                    finishers = [probes.enter_context(p(bid, clock)) for p in ctx.probes]
                    before = allocator_counters() if on_gpu else None
                    raw = engine.run(timer, policy, clock=loop_clock, phase=phase, tick=task.tick)
                    after = allocator_counters() if on_gpu else None
                    per_call = _per_call(raw.rounds, raw.e2e_rounds)
                    activity, memory = self._window(timer, per_call, before, after)
                    telemetry = gather(finishers, raw)
                if activity is not None:
                    telemetry = {**(telemetry or {}), "activity": activity}
                hidden = timer.host_hidden(len(raw.rounds))
                host = timer.host_time(len(raw.rounds))
            wall = time.perf_counter() - t_start
            peak = timer.peak_memory()
            extra = self._after_measure(bid, who, call, raw.rounds)
        return Run(
            bid, **fixed, extra=self._with_group(raw, extra, plan), first_call_s=first.seconds,
            telemetry=telemetry, host_hidden=hidden, host_s=host, wall_s=wall,
            peak_memory_bytes=peak, memory=memory,
            contention=window.record(getattr(timer, "clock", None)), tracer=tracer,
            numerics=first.numerics, **{k: getattr(raw, k) for k in _FROM_RAW},
        )  # fmt: skip

    def _window(
        self,
        timer: backend.Timer,
        per_call: float | None,
        before: Mapping[str, int] | None,
        after: Mapping[str, int] | None,
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """(activity, memory) over plain calls after the measurement (without GPM: a few)."""
        ctx = self._ctx
        if ctx.device != "cuda":
            return None, allocation.unavailable(allocation.CPU_REASON)
        plain = getattr(timer, "plain_calls", None)
        if ctx.activity is None or plain is None or per_call is None:
            return None, None
        window = ctx.activity()
        target, most = (WINDOW_S, WINDOW_MAX_CALLS) if window.wanted else (0.02, 20)
        if window.wanted:
            plain_window(plain, per_call, LEAD_S, most)
        w0 = allocator_counters()
        window.start()
        calls, seconds = plain_window(plain, per_call, target, most)
        activity = window.stop(window_s=round(seconds, 4), calls=calls)
        w1 = allocator_counters()
        if before is None or after is None or w0 is None or w1 is None:
            return activity, allocation.unavailable(allocator_reason())
        return activity, allocation.figures(before, after, w0, w1, calls)

    def _after_measure(
        self, bid: BenchId, who: str, call: backend.Invocation, rounds: list[float]
    ) -> dict[str, Any]:
        """Run the after-measure hooks (kernel inventory, capture child); never raise."""
        if self._after is None:
            save = bool(self._settings.session.save)
            self._after = measure_hooks(self._settings.capture, self._ctx.device, saving=save)
        if not self._after:
            return {}
        per_call = statistics.median_high(rounds) if rounds else float("nan")
        out: dict[str, Any] = {}
        with self._ctx.progress(f"{who}: profiling a few calls (kernel inventory)"):
            for hook in self._after:
                try:
                    extra = hook(bid, call, per_call)
                except Exception as e:
                    extra = {"after_measure_error": f"{type(e).__name__}: {first_line(e)}"}
                if extra:
                    out.update(extra)
        return out

    def teardown(self) -> None:
        """After the test: release the tensors an out-of-memory failure's frames keep alive."""
        if self._oom is None:
            return
        tracebacks = [self._oom.__traceback__, getattr(sys, "last_traceback", None)]
        last_exc = getattr(sys, "last_exc", None)
        tracebacks.append(getattr(last_exc, "__traceback__", None))
        for tb in tracebacks:
            if tb is not None:
                traceback.clear_frames(tb)
        self._oom = None
        release_memory()
