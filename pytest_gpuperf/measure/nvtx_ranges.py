"""NVTX ranges around each benchmark and its phases, for Nsight Systems timelines.

Ranges ``gpuperf/<key>`` and ``gpuperf/<key>/<phase>`` go to the NVTX domain ``gpuperf``
through the ``nvtx`` package, else to ``torch.cuda.nvtx``; without either (a CPU build of
torch) they are no-ops. A range costs a few microseconds per phase, never per call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

DOMAIN = "gpuperf"
#: The phase the fixture opens around a whole benchmark.
BENCHMARK_PHASE = "benchmark"


def range_name(bench_id: Any, phase: str) -> str:
    """``gpuperf/<key>`` for the benchmark, ``gpuperf/<key>/<phase>`` for its phases."""
    key = getattr(bench_id, "key", None) or str(bench_id)
    return f"{DOMAIN}/{key}" if phase == BENCHMARK_PHASE else f"{DOMAIN}/{key}/{phase}"


def _backend() -> tuple[str, Callable[[str], Any], Callable[[], Any]] | None:
    """(name, push, pop) of the ``nvtx`` package, else of ``torch.cuda.nvtx`` where it works."""
    try:
        import nvtx
    except ImportError:
        pass
    else:
        return (
            "nvtx",
            lambda name: nvtx.push_range(name, domain=DOMAIN),
            lambda: nvtx.pop_range(domain=DOMAIN),
        )
    try:
        import torch.cuda.nvtx as tnvtx

        tnvtx.range_push("gpuperf/probe")  # type: ignore[no-untyped-call]  # no CUDA: raises
        tnvtx.range_pop()  # type: ignore[no-untyped-call]
    except Exception:
        return None
    return "torch.cuda.nvtx", tnvtx.range_push, tnvtx.range_pop


class NvtxRanges:
    """A fixture ``PhaseRange``: ``ranges(bench_id, phase)`` is a context manager. The backend
    is chosen on the first range; a failing NVTX call turns ranges off, not the benchmark."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.backend: str | None = None if enabled else "off"
        self._push: Callable[[str], Any] | None = None
        self._pop: Callable[[], Any] | None = None

    def __call__(self, bench_id: Any, phase: str) -> AbstractContextManager[object]:
        if self.backend is None:
            self.backend, self._push, self._pop = _backend() or ("none", None, None)
        if self._push is None:
            return contextlib.nullcontext()
        return self._range(range_name(bench_id, phase))

    @contextlib.contextmanager
    def _range(self, name: str) -> Iterator[None]:
        pushed = self._call(self._push, name)
        try:
            yield
        finally:
            if pushed:
                self._call(self._pop)

    def _call(self, fn: Callable[..., Any] | None, *args: Any) -> bool:
        """``fn(*args)``, False when there was none or it failed (which turns ranges off)."""
        if fn is None:
            return False
        try:
            fn(*args)
        except Exception:
            self.backend = "failed"
            self._push = self._pop = None
            return False
        return True
