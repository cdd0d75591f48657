"""CPU backend: host wall time with ``perf_counter_ns`` (torch CPU work is synchronous)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


class CpuTimer:
    mode = "cpu"

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]):
        self._call = lambda: fn(*args, **kwargs)

    def first_call(self) -> tuple[float, Any]:
        t = time.perf_counter_ns()
        out = self._call()
        return (time.perf_counter_ns() - t) / 1e9, out

    def prepare(self) -> None:
        pass

    def time_round(self, calls: int) -> tuple[float, float, int]:
        call = self._call
        t = time.perf_counter_ns()
        for _ in range(calls):
            call()
        dt = (time.perf_counter_ns() - t) / 1e9
        return dt / calls, dt, calls

    def peak_memory(self) -> int | None:
        return None

    def close(self) -> None:
        pass
