"""Build small Kineto (torch.profiler Chrome-trace) documents with a known truth.

The event shapes follow a real trace written by torch 2.11 on an H200
(``tests/data/artifacts/kineto_h200_sync_h2d.json``): ``user_annotation``
ranges ``gpuperf/call#<i>`` on the host thread, ``cuda_runtime`` /
``cuda_driver`` launches, and ``kernel`` / ``gpu_memcpy`` activities on the
stream, tied to their launch by ``args.correlation``.
"""

from __future__ import annotations

from typing import Any


class FakeTrace:
    def __init__(self, device_name: str = "NVIDIA H200"):
        self.events: list[dict[str, Any]] = []
        self.corr = 100
        self.device_name = device_name

    def call(self, i: int, ts: float, dur: float) -> None:
        self.events.append(
            {"ph": "X", "cat": "user_annotation", "name": f"gpuperf/call#{i}", "pid": 1,
             "tid": 1, "ts": ts, "dur": dur, "args": {}}
        )  # fmt: skip

    def op(self, name: str, ts: float, dur: float) -> None:
        self.events.append(
            {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}
        )

    def api(self, name: str, ts: float, dur: float, corr: int | None = None) -> int:
        c = corr if corr is not None else self._next()
        self.events.append(
            {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": 1, "ts": ts,
             "dur": dur, "args": {"correlation": c}}
        )  # fmt: skip
        return c

    def kernel(self, name: str, launch_ts: float, ts: float, dur: float, **args: Any) -> None:
        c = self.api("cudaLaunchKernel", launch_ts, 2.0)
        a = {"correlation": c, "stream": 7, "grid": [1024, 1, 1], "block": [128, 1, 1],
             "registers per thread": 32}  # fmt: skip
        a.update(args)
        self.events.append(
            {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
             "args": a}
        )  # fmt: skip

    def memcpy(self, name: str, launch_ts: float, ts: float, dur: float, nbytes: int) -> None:
        c = self.api("cudaMemcpyAsync", launch_ts, 3.0)
        self.events.append(
            {"ph": "X", "cat": "gpu_memcpy", "name": name, "pid": 0, "tid": 7, "ts": ts,
             "dur": dur, "args": {"correlation": c, "bytes": nbytes}}
        )  # fmt: skip

    def _next(self) -> int:
        self.corr += 1
        return self.corr

    def doc(self) -> dict[str, Any]:
        return {
            "schemaVersion": 1,
            "deviceProperties": [{"id": 0, "name": self.device_name}],
            "traceEvents": list(self.events),
        }


def gpu_bound(calls: int = 4, kernels: tuple[tuple[str, float], ...] = (("gemm_a", 100.0),
              ("elementwise_b", 20.0))) -> FakeTrace:  # fmt: skip
    """The host runs ahead; the GPU runs the kernels back to back."""
    t = FakeTrace()
    gpu = 1000.0
    host = 1000.0
    for i in range(calls):
        t.call(i, host, 10.0 * len(kernels))
        for name, dur in kernels:
            t.kernel(name, host + 1, max(gpu, host + 5), dur)
            gpu = max(gpu, host + 5) + dur
            host += 10.0
    return t


def launch_bound(calls: int = 3, launches: int = 40) -> FakeTrace:
    """Many tiny kernels: the host needs 8 µs per launch, the kernel 2 µs, so the GPU waits."""
    t = FakeTrace()
    host = 1000.0
    for i in range(calls):
        start = host
        for _ in range(launches):
            t.op("aten::add", host, 8.0)
            t.kernel("vectorized_elementwise_kernel<AddFunctor>", host + 2, host + 7, 2.0)
            host += 8.0
        t.call(i, start, host - start)
    return t


def with_syncs(calls: int = 4, kernels: int = 8, kdur: float = 10.0) -> FakeTrace:
    """After each kernel the host reads a value back: copy to host, then wait."""
    t = FakeTrace()
    host = 1000.0
    for i in range(calls):
        start = host
        for _ in range(kernels):
            t.op("aten::mul", host, 6.0)
            t.kernel("vectorized_elementwise_kernel<MulFunctor>", host + 1, host + 6, kdur)
            gpu_end = host + 6 + kdur
            t.op("aten::_local_scalar_dense", gpu_end - kdur, kdur + 20)
            t.memcpy("Memcpy DtoH (Device -> Pinned)", gpu_end - kdur + 1, gpu_end + 1, 1.5, 4)
            t.api("cudaStreamSynchronize", gpu_end - kdur + 5, kdur + 12)
            host = gpu_end + 20
        t.call(i, start, host - start)
    return t
