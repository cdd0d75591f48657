"""CUDA backends: event-timed rounds (with L2 flush) and CUDA-graph replay.

torch is imported inside functions only: this module is loaded when a
benchmark runs on CUDA, never when the plugin loads.
"""

from __future__ import annotations

import contextlib
import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

from pytest_gpuperf.errors import GraphCaptureError
from pytest_gpuperf.measure.invocation import Invocation

#: Fallback when the device does not report its L2 size.
_DEFAULT_L2_BYTES = 64 * 1024 * 1024


def _sync() -> None:
    import torch

    torch.cuda.synchronize()


def l2_flush_bytes(device: Any = None) -> int:
    """Bytes written to evict the L2: twice its size, at least 64 MiB."""
    import torch

    props = torch.cuda.get_device_properties(
        device if device is not None else torch.cuda.current_device()
    )
    l2 = int(getattr(props, "L2_cache_size", 0) or _DEFAULT_L2_BYTES)
    return max(2 * l2, 64 * 1024 * 1024)


class _CudaTimerBase:
    def __init__(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        setup: Callable[[], Any] | None = None,
    ):
        import torch

        self._torch = torch
        self._fn = fn
        #: with setup=: fresh arguments before each call (prepare() outside the timed region)
        self._inv = Invocation(fn, args, kwargs, setup)
        self._call = (lambda: fn(*args, **kwargs)) if setup is None else self._inv
        self._events: tuple[list[Any], list[Any]] = ([], [])
        self._reserved = 0  # bytes we allocated ourselves, left out of peak memory

    def first_call(self) -> tuple[float, Any]:
        self._inv.prepare()
        _sync()
        t = time.perf_counter()
        out = self._call()
        _sync()
        return time.perf_counter() - t, out

    def _event_pairs(self, n: int) -> tuple[list[Any], list[Any]]:
        starts, ends = self._events
        while len(starts) < n:
            starts.append(self._torch.cuda.Event(enable_timing=True))
            ends.append(self._torch.cuda.Event(enable_timing=True))
        return starts, ends

    def reset_peak_memory(self) -> None:
        self._torch.cuda.reset_peak_memory_stats()

    def peak_memory(self) -> int | None:
        return max(0, int(self._torch.cuda.max_memory_allocated()) - self._reserved)

    def close(self) -> None:
        self._events = ([], [])


class CudaEventsTimer(_CudaTimerBase):
    """Rounds of calls between CUDA events.

    With ``l2_flush`` each call gets its own event pair, preceded by a write
    of twice the L2 size outside the pair, and a round's value is the median
    call; without it one pair brackets the back-to-back calls of a round.
    With ``setup=`` each call gets its own pair too, with its setup (and the
    flush) enqueued before the pair: the setup's GPU work is not timed.
    One host synchronisation per round.
    """

    mode = "cuda-events"

    def __init__(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        l2_flush: bool = True,
        setup: Callable[[], Any] | None = None,
    ):
        super().__init__(fn, args, kwargs, setup)
        self.l2_flush = l2_flush
        self._flush_buf: Any = None

    def prepare(self) -> None:
        if self.l2_flush and self._flush_buf is None:
            n = l2_flush_bytes()
            self._flush_buf = self._torch.empty(n // 4, dtype=self._torch.int32, device="cuda")
            self._reserved = n

    def time_round(self, calls: int) -> tuple[float, float, int]:
        call = self._call
        t = time.perf_counter()
        if self.l2_flush or self._inv.has_setup:
            buf = self._flush_buf if self.l2_flush else None
            prepare = self._inv.prepare
            starts, ends = self._event_pairs(calls)
            for i in range(calls):
                prepare()
                if buf is not None:
                    buf.zero_()
                starts[i].record()
                call()
                ends[i].record()
            ends[calls - 1].synchronize()
            per_call_ms = statistics.median(starts[i].elapsed_time(ends[i]) for i in range(calls))
        else:
            starts, ends = self._event_pairs(1)
            starts[0].record()
            for _ in range(calls):
                call()
            ends[0].record()
            ends[0].synchronize()
            per_call_ms = starts[0].elapsed_time(ends[0]) / calls
        return per_call_ms / 1000.0, time.perf_counter() - t, calls

    def close(self) -> None:
        super().close()
        self._flush_buf = None


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

    found: list[str] = []

    def note(msg: str) -> None:
        if msg not in found:
            found.append(msg)

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
    return found[:5]


def _fn_name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


def _root_cause(e: BaseException) -> str:
    """The first line of the earliest error in the chain (capture_end masks the real one)."""
    seen = []
    cur: BaseException | None = e
    while cur is not None and cur not in seen:
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__
    lines = []
    for err in reversed(seen):
        text = str(err).strip()
        first = text.splitlines()[0] if text else type(err).__name__
        if first not in lines:
            lines.append(first)
    return "; then ".join(lines[:2])


GRAPH_RULES = (
    "A function measured with cuda_graph=True must issue only GPU work on its stream: "
    "no host synchronisation (.item(), .cpu(), printing a CUDA tensor, torch.cuda.synchronize()), "
    "no memory allocation outside PyTorch's caching allocator (cudaMalloc, pinned host memory), "
    "and no host-side work whose results the GPU needs."
)


class CudaGraphTimer(_CudaTimerBase):
    """Replays of a CUDA graph holding several calls, captured on a side stream.

    Gives the GPU time of the calls without the host's launch overhead. The
    L2 is not flushed between captured calls (data the calls share stays hot).
    """

    mode = "cuda-graph"

    def __init__(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        round_ms: float = 5.0,
        graph_calls: int = 1000,
    ):
        super().__init__(fn, args, kwargs)
        self.round_ms = round_ms
        self.graph_calls = graph_calls
        self.calls_per_graph = 0
        self._graph: Any = None

    def prepare(self) -> None:
        torch = self._torch
        hazards = graph_hazards(self._call)
        if hazards:
            raise GraphCaptureError(
                f"cuda_graph=True: {_fn_name(self._fn)} cannot be measured by CUDA-graph replay "
                "without being measured wrong:\n  - "
                + "\n  - ".join(hazards)
                + "\n"
                + GRAPH_RULES
                + " Remove these from the timed function, or measure it with cuda_graph=False."
            )
        # Eager cost per call sizes the graph so that one replay is about one round.
        _sync()
        t = time.perf_counter()
        for _ in range(3):
            self._call()
        _sync()
        eager = (time.perf_counter() - t) / 3
        n = max(1, min(self.graph_calls, int(self.round_ms / 1000.0 / max(eager, 1e-7))))
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        graph = torch.cuda.CUDAGraph()
        was_gc = gc.isenabled()
        gc.disable()
        try:
            with torch.cuda.stream(side):
                for _ in range(3):  # libraries (cuBLAS workspaces, ...) initialise outside capture
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
                f"cuda_graph=True: {_fn_name(self._fn)} could not be captured in a CUDA graph: "
                f"{_root_cause(e)}\n{GRAPH_RULES} Remove it from the timed function, or measure "
                "it with cuda_graph=False."
            ) from None
        finally:
            if was_gc:
                gc.enable()
        self._graph = graph
        self.calls_per_graph = n

    def time_round(self, calls: int) -> tuple[float, float, int]:
        graph = self._graph
        replays = max(1, round(calls / self.calls_per_graph))
        starts, ends = self._event_pairs(1)
        t = time.perf_counter()
        starts[0].record()
        for _ in range(replays):
            graph.replay()
        ends[0].record()
        ends[0].synchronize()
        done = replays * self.calls_per_graph
        per_call = starts[0].elapsed_time(ends[0]) / 1000.0 / done
        return per_call, time.perf_counter() - t, done

    def close(self) -> None:
        super().close()
        if self._graph is not None:
            self._graph.reset()
            self._graph = None
