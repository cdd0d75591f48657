"""What torch.profiler's first session costs on this GPU, against the sessions after it.

The first diagnosis of a regression profiles a few calls in a fresh process; if most of its
profiled window is the profiler's one-time start (CUPTI, Kineto), a spare Python that started
it ahead saves that time. Prints the wall seconds of three sessions of 10 small calls, each in
one process, and of the CUDA context's start.

    python3 bench/gpu/profiler_warm.py
"""

from __future__ import annotations

import time


def main() -> None:
    t = time.perf_counter()
    import torch
    from torch.profiler import ProfilerActivity, profile

    print(f"import torch: {time.perf_counter() - t:.2f} s")
    t = time.perf_counter()
    x = torch.ones(1024, 1024, device="cuda")
    torch.cuda.synchronize()
    print(f"CUDA context: {time.perf_counter() - t:.2f} s")
    y = torch.randn(8, 512, 512, device="cuda")

    def new_work() -> None:  # kernels the first session never ran
        torch.softmax(torch.bmm(y, y), dim=-1)

    for i, (what, work) in enumerate(
        [("mul, first session", lambda: x.mul_(1.0001)), ("bmm+softmax, second", new_work),
         ("bmm+softmax, third", new_work)]
    ):  # fmt: skip
        work()  # warm calls outside the profiler, as the capture child makes them
        torch.cuda.synchronize()
        t = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                work()
            torch.cuda.synchronize()
        inside = time.perf_counter() - t
        t2 = time.perf_counter()
        prof.export_chrome_trace(f"/tmp/profiler_warm_{i}.json")
        print(f"session {i + 1} ({what}): {inside:.2f} s (export {time.perf_counter() - t2:.2f} s)")


if __name__ == "__main__":
    main()
