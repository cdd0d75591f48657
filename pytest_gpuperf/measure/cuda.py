"""CUDA backends: event-timed rounds (with L2 flush) and CUDA-graph replay.

torch is imported inside functions only: this module is loaded when a
benchmark runs on CUDA, never when the plugin loads.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

from pytest_gpuperf.errors import GpuPerfError, GraphCaptureError
from pytest_gpuperf.measure.backend import Invocation, Timer
from pytest_gpuperf.measure.engine import Round, gc_paused
from pytest_gpuperf.measure.memory import first_line
from pytest_gpuperf.measure.policy import MeasurePolicy


def _sync() -> None:
    import torch

    torch.cuda.synchronize()


def _synced(call: Callable[[], Any], n: int = 1) -> tuple[float, Any]:
    """Seconds per call of ``n`` calls between two synchronizes, and the last one's output."""
    _sync()
    t = time.perf_counter()
    for _ in range(n):
        out = call()
    _sync()
    return (time.perf_counter() - t) / n, out


def timed_calls(
    events: tuple[list[Any], list[Any]],
    call: Callable[[], Any],
    prepare: Callable[[], None],
    calls: int,
    pairs: bool,
    flush: Any = None,
) -> tuple[list[float], float, float]:
    """Enqueue ``calls`` calls, each after ``prepare()`` (and ``flush.zero_()``), in an event
    pair each (``pairs``) or one around them all (``events``: the pairs, grown as needed); wait
    for the last. Each pair's ms, the host seconds to enqueue, and until the last ended."""
    starts, ends = events
    n = calls if pairs else 1
    if len(starts) < n:
        import torch

        for _ in range(n - len(starts)):
            starts.append(torch.cuda.Event(enable_timing=True))
            ends.append(torch.cuda.Event(enable_timing=True))
    t = time.perf_counter()
    if pairs:
        for i in range(calls):
            prepare()
            if flush is not None:
                flush.zero_()
            starts[i].record()
            call()
            ends[i].record()
    else:
        starts[0].record()
        for _ in range(calls):
            call()
        ends[0].record()
    enqueue = time.perf_counter() - t
    ends[n - 1].synchronize()
    wall = time.perf_counter() - t
    return [starts[i].elapsed_time(ends[i]) for i in range(n)], enqueue, wall


class _CudaTimerBase(Timer):
    def __init__(self, call: Invocation):
        import torch

        self._torch = torch
        fn, args, kwargs = call.fn, call.args, call.kwargs
        #: with setup=: fresh arguments before each call (prepare() outside the timed region)
        self._inv = call
        self._call = call if call.has_setup else (lambda: fn(*args, **kwargs))
        self._events: tuple[list[Any], list[Any]] = ([], [])
        self._reserved = 0  # bytes we allocated ourselves, left out of peak memory

    def first_call(self) -> tuple[float, Any]:
        self._inv.prepare()
        return _synced(self._call)

    def reset_peak_memory(self) -> None:
        self._torch.cuda.reset_peak_memory_stats()

    def plain_calls(self, calls: int) -> int:
        """``calls`` calls back to back (each after its setup), no flush, no spin, then a
        synchronize: the window the activity and allocator figures are read over."""
        call = self._call  # with setup=, the Invocation: each call prepares its arguments
        for _ in range(calls):
            call()
        _sync()
        return calls

    def peak_memory(self) -> int | None:
        return max(0, int(self._torch.cuda.max_memory_allocated()) - self._reserved)

    def close(self) -> None:
        self._events = ([], [])


class CudaEventsTimer(_CudaTimerBase):
    """Two figures per round, from one warm-up: device time, and end-to-end time per call.

    Device time: a spin holds the GPU while the host enqueues the round, so the events
    time the GPU alone (:mod:`.host_hiding`); with ``l2_flush`` each call has its own
    event pair and the round's value is the median call. End-to-end (``Round.e2e``): the
    same calls with no flush and no spin, as a user's loop pays them. With ``setup=``
    every call of both figures has its own pair, the setup enqueued before it.
    """

    mode = "cuda-events"
    #: calls per device round at most, with a flush per call (each a median sample) or without
    DEVICE_CALLS_FLUSH = 64
    DEVICE_CALLS = 256
    #: tries of one device round whose host was not hidden
    TRIES = 3

    def __init__(self, call: Invocation, *, l2_flush: bool = True):
        from pytest_gpuperf.measure.host_hiding import HostHiding

        super().__init__(call)
        self.l2_flush = l2_flush
        self.hiding = HostHiding()
        #: per device round (calibration and warm-up included): was its host hidden?
        self.hidden: list[bool] = []
        #: per end-to-end round: host seconds to enqueue one call (the loop before its sync)
        self.host_per_call: list[float] = []
        self._flush_buf: Any = None
        self._spin_pair: tuple[Any, Any] | None = None

    def prepare(self) -> None:
        torch = self._torch
        if self.l2_flush and self._flush_buf is None:  # twice the L2, at least 64 MiB
            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            l2 = int(getattr(props, "L2_cache_size", 0) or 64 * 1024 * 1024)  # unknown: 64 MiB
            n = max(2 * l2, 64 * 1024 * 1024)
            self._flush_buf = torch.empty(n // 4, dtype=torch.int32, device="cuda")
            self._reserved = n
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        self._spin_pair = (a, b)
        cycles = 200_000
        # twice: a process's first launch loads the spin's kernel between the events, a rate
        # far too slow in a fresh process (the probe then missed functions that wait for it)
        for _ in range(2):
            a.record()
            torch.cuda._sleep(cycles)
            b.record()
            b.synchronize()
            self.hiding.observe_rate(cycles, a.elapsed_time(b) / 1000.0)
        self._probe_hiding()

    def _probe_hiding(self) -> None:
        """Ask once whether the function waits for the GPU (:meth:`HostHiding.probe`)."""
        torch = self._torch
        call = self._call
        prepare = self._inv.prepare  # setup=, outside the host time asked about
        prepare()
        one, _ = _synced(call)  # the call's host time, at most
        assert self.hiding.rate is not None
        host = math.inf
        for _ in range(2):  # the faster of two, so that one slow moment of the host is not it
            spin_s = min(2.0, max(0.02, 20 * one))
            prepare()
            torch.cuda._sleep(int(spin_s * self.hiding.rate))
            t = time.perf_counter()
            call()
            host = min(host, time.perf_counter() - t)
            torch.cuda.synchronize()
            if host < 0.5 * spin_s:
                break
        self.hiding.probe(host, spin_s)

    def host_time(self, last: int) -> float | None:
        """The host's time to issue one call, median of the ``last`` end-to-end rounds."""
        xs = self.host_per_call[-last:] if last > 0 else []
        return statistics.median_high(xs) if xs else None

    def host_hidden(self, last: int) -> bool | None:
        """Whether the device figure of the ``last`` rounds is device time alone: False when
        the function waits for the GPU, or under 80 % of them had their host hidden."""
        flags = self.hidden[-last:] if last > 0 else []
        return bool(self.hiding.hideable and flags and sum(flags) >= 0.8 * len(flags))

    def time_round(self, calls: int) -> Round:
        # End to end: the calls as a user's loop pays them (setup= included in the enqueue
        # time, which the spin must cover); then the device round, with flush and spin.
        ms, enqueue, wall = timed_calls(
            self._events, self._call, self._inv.prepare, calls, self._inv.has_setup
        )
        self.hiding.observe_enqueue(calls, enqueue)
        self.host_per_call.append(enqueue / calls)
        cap = self.DEVICE_CALLS_FLUSH if self.l2_flush else self.DEVICE_CALLS
        hidden = False
        per_call = math.nan
        for _ in range(self.TRIES):
            per_call, hidden = self._device_round(self.hiding.round_calls(calls, cap))
            if hidden or not self.hiding.hideable:
                break
        self.hidden.append(hidden)
        return Round(per_call, wall, calls, sum(ms) / calls / 1000.0)

    def _device_round(self, calls: int) -> tuple[float, bool]:
        assert self._spin_pair is not None, "prepare() first"
        cycles = self.hiding.spin_cycles(calls)
        spin_a, spin_b = self._spin_pair
        if cycles:
            spin_a.record()
            self._torch.cuda._sleep(cycles)
            spin_b.record()
        pairs = self.l2_flush or self._inv.has_setup
        flush = self._flush_buf if self.l2_flush else None
        ms, enqueue, _ = timed_calls(
            self._events, self._call, self._inv.prepare, calls, pairs, flush
        )
        spin_s = spin_a.elapsed_time(spin_b) / 1000.0 if cycles else 0.0
        hidden = self.hiding.observe(calls, cycles, spin_s, enqueue)
        return (statistics.median(ms) if pairs else ms[0] / calls) / 1000.0, hidden

    def close(self) -> None:
        super().close()
        self._flush_buf = None
        self._spin_pair = None


_SYNC_OPS = {
    "_local_scalar_dense": ".item(), float(t), bool(t) or .tolist() of a CUDA tensor",
    "nonzero": "torch.nonzero / indexing with a boolean mask",
    "masked_select": "torch.masked_select",
    "_unique2": "torch.unique",
    "unique_consecutive": "torch.unique_consecutive",
    "repeat_interleave": "repeat_interleave with tensor repeats",
}


def graph_hazards(call: Callable[[], Any]) -> list[str]:
    """Run ``call`` once, eagerly, and list what a CUDA graph would not replay faithfully."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    found: dict[str, None] = {}  # each hazard once, in the order first seen
    note = found.setdefault

    class _Spy(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            out = func(*args, **(kwargs or {}))
            name = func.__name__.split(".")[0]
            ins = [t for t in tree_flatten((args, kwargs or {}))[0] if isinstance(t, torch.Tensor)]
            outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
            op = f"aten.{name}"
            if name in _SYNC_OPS:
                note(f"{op} synchronizes the host with the GPU ({_SYNC_OPS[name]})")
            elif any(t.is_cuda for t in ins) and any(t.device.type == "cpu" for t in outs):
                note(f"{op} copies GPU data to the host, which synchronizes (.cpu(), print)")
            elif (
                name in {"_to_copy", "copy_", "copy"}
                and any(t.device.type == "cpu" for t in ins)
                and any(t.is_cuda for t in outs)
            ):
                note(
                    f"{op} copies host data to the GPU: a graph replays the copy of the same "
                    "host buffer, not the host work that filled it"
                )
            elif all(t.device.type == "cpu" for t in ins + outs) and any(
                t.numel() > 1 for t in ins + outs
            ):
                note(f"{op} runs on the CPU: a CUDA graph does not replay host work")
            return out

    with _Spy():
        call()
    return list(found)[:5]


def _fn_name(call: Invocation) -> str:
    fn = call.fn
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


def _root_cause(e: BaseException) -> str:
    """The first line of the earliest error in the chain (capture_end masks the real one)."""
    seen = []
    cur: BaseException | None = e
    while cur is not None and cur not in seen:
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__
    lines = dict.fromkeys(first_line(err) for err in reversed(seen))  # each once, in order
    return "; then ".join(list(lines)[:2])


GRAPH_RULES = (
    "A function measured with cuda_graph=True must issue only GPU work on its stream: "
    "no host synchronisation (.item(), .cpu(), printing a CUDA tensor, torch.cuda.synchronize()), "
    "no memory allocation outside PyTorch's caching allocator (cudaMalloc, pinned host memory), "
    "and no host-side work whose results the GPU needs."
)


class CudaGraphTimer(_CudaTimerBase):
    """Replays of a CUDA graph holding several calls, captured on a side stream: the GPU time
    without the host's launch overhead; no L2 flush between captured calls."""

    mode = "cuda-graph"

    def __init__(self, call: Invocation, *, round_ms: float = 5.0, graph_calls: int = 1000):
        if call.has_setup:  # GpuBench.measure refuses this first, with the remedy
            raise GpuPerfError("setup= cannot be measured with CUDA-graph replay")
        super().__init__(call)
        self.round_ms = round_ms
        self.graph_calls = graph_calls
        self.calls_per_graph = 0
        self._graph: Any = None

    def prepare(self) -> None:
        torch = self._torch
        hazards = graph_hazards(self._call)
        if hazards:
            raise GraphCaptureError(
                f"cuda_graph=True: {_fn_name(self._inv)} cannot be measured by CUDA-graph replay "
                "without being measured wrong:\n  - "
                + "\n  - ".join(hazards)
                + "\n"
                + GRAPH_RULES
                + " Remove these from the timed function, or measure it with cuda_graph=False."
            )
        # Eager cost per call sizes the graph so that one replay is about one round.
        eager, _ = _synced(self._call, 3)
        n = max(1, min(self.graph_calls, int(self.round_ms / 1000.0 / max(eager, 1e-7))))
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        graph = torch.cuda.CUDAGraph()
        with gc_paused():
            try:
                with torch.cuda.stream(side):
                    for _ in range(3):  # libraries (cuBLAS workspaces, ...) initialise first
                        self._call()
                torch.cuda.current_stream().wait_stream(side)
                _sync()
                with torch.cuda.graph(graph, stream=side, capture_error_mode="thread_local"):
                    for _ in range(n):
                        self._call()
                graph.replay()
                _sync()
            except RuntimeError as e:
                if isinstance(e, torch.cuda.OutOfMemoryError):
                    raise
                with contextlib.suppress(RuntimeError):
                    _sync()
                raise GraphCaptureError(
                    f"cuda_graph=True: {_fn_name(self._inv)} could not be captured in a CUDA "
                    f"graph: {_root_cause(e)}\n{GRAPH_RULES} Remove it from the timed function, "
                    "or measure it with cuda_graph=False."
                ) from None
        self._graph = graph
        self.calls_per_graph = n

    def time_round(self, calls: int) -> tuple[float, float, int]:
        replays = max(1, round(calls / self.calls_per_graph))
        ms, _, wall = timed_calls(
            self._events, self._graph.replay, self._inv.prepare, replays, False
        )
        done = replays * self.calls_per_graph
        return ms[0] / 1000.0 / done, wall, done

    def plain_calls(self, calls: int) -> int:
        """Graph replays covering about ``calls`` calls, then a synchronize; the calls made."""
        replays = max(1, round(calls / max(self.calls_per_graph, 1)))
        for _ in range(replays):
            self._graph.replay()
        _sync()
        return replays * self.calls_per_graph

    def close(self) -> None:
        super().close()
        if self._graph is not None:
            self._graph.reset()
            self._graph = None


def make_events_timer(call: Invocation, policy: MeasurePolicy) -> Timer:
    """The factory of the ``cuda-events`` mode (:class:`.backend.TimerFactory`)."""
    return CudaEventsTimer(call, l2_flush=policy.l2_flush)


def make_graph_timer(call: Invocation, policy: MeasurePolicy) -> Timer:
    """The factory of the ``cuda-graph`` mode (:class:`.backend.TimerFactory`)."""
    return CudaGraphTimer(call, round_ms=policy.round_ms, graph_calls=policy.graph_calls)
