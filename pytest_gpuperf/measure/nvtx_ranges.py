"""NVTX ranges around each benchmark and its phases, for Nsight Systems timelines.

A benchmark is the range ``gpuperf/<key>`` (``key`` = test id, measurement
name and timing mode, e.g. ``tests/test_mm.py::test_mm[4096]@cuda-graph``);
each phase inside it (``first-call``, ``prepare``, ``calibrate``, ``warmup``,
``measure``) is the nested range ``gpuperf/<key>/<phase>``. Ranges go to the
NVTX domain ``gpuperf`` through the ``nvtx`` package, or, without it, to the
default domain through ``torch.cuda.nvtx``; without either (a CPU build of
torch) they are no-ops. A range costs a few microseconds per benchmark phase,
never per call (docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any

DOMAIN = "gpuperf"
#: The phase the fixture opens around a whole benchmark.
BENCHMARK_PHASE = "benchmark"


def range_name(bench_id: Any, phase: str) -> str:
    """``gpuperf/<key>`` for the benchmark, ``gpuperf/<key>/<phase>`` for its phases."""
    key = getattr(bench_id, "key", None) or str(bench_id)
    return f"{DOMAIN}/{key}" if phase == BENCHMARK_PHASE else f"{DOMAIN}/{key}/{phase}"


class _Range:
    __slots__ = ("_name", "_owner", "_pushed")

    def __init__(self, owner: NvtxRanges, name: str):
        self._owner = owner
        self._name = name
        self._pushed = False

    def __enter__(self) -> None:
        self._pushed = self._owner._push(self._name)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._pushed:
            self._owner._pop()


class _NoRange:
    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NO_RANGE = _NoRange()


def _nvtx_backend() -> tuple[Callable[[str], Any], Callable[[], Any]] | None:
    try:
        import nvtx
    except ImportError:
        return None

    def push(name: str) -> None:
        nvtx.push_range(name, domain=DOMAIN)

    def pop() -> None:
        nvtx.pop_range(domain=DOMAIN)

    return push, pop


def _torch_backend() -> tuple[Callable[[str], Any], Callable[[], Any]] | None:
    try:
        import torch.cuda.nvtx as tnvtx

        tnvtx.range_push("gpuperf/probe")  # type: ignore[no-untyped-call]  # no CUDA: raises
        tnvtx.range_pop()  # type: ignore[no-untyped-call]
    except Exception:
        return None
    return tnvtx.range_push, tnvtx.range_pop


class NvtxRanges:
    """A fixture ``PhaseRange``: ``ranges(bench_id, phase)`` is a context manager.

    The backend is chosen on the first range (``nvtx`` package, then
    ``torch.cuda.nvtx``, then none), so creating this object imports nothing.
    A failing NVTX call turns ranges off instead of failing the benchmark.
    """

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.backend: str | None = None if enabled else "off"
        self._push_fn: Callable[[str], Any] | None = None
        self._pop_fn: Callable[[], Any] | None = None

    def _choose(self) -> None:
        for name, make in (("nvtx", _nvtx_backend), ("torch.cuda.nvtx", _torch_backend)):
            fns = make()
            if fns is not None:
                self.backend = name
                self._push_fn, self._pop_fn = fns
                return
        self.backend = "none"

    def _push(self, name: str) -> bool:
        if self._push_fn is None:
            return False
        try:
            self._push_fn(name)
        except Exception:
            self._off()
            return False
        return True

    def _pop(self) -> None:
        if self._pop_fn is None:
            return
        try:
            self._pop_fn()
        except Exception:
            self._off()

    def _off(self) -> None:
        self.backend = "failed"
        self._push_fn = self._pop_fn = None

    def __call__(self, bench_id: Any, phase: str) -> AbstractContextManager[object]:
        if self.backend is None:
            self._choose()
        if self._push_fn is None:
            return _NO_RANGE
        return _Range(self, range_name(bench_id, phase))
