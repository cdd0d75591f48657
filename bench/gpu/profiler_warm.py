"""What torch.profiler's one-time start costs on this GPU, and whether the spare's prelude
takes it ahead (a CPU-only session: ``PRELUDE`` in pytest_gpuperf/shell/capture.py).

Two fresh processes profile 10 small CUDA calls after the CUDA context, the second after
the prelude; each prints its seconds. The first diagnosis profiles in such a process, so
a first CUDA session that stays slow after the prelude means the prelude does not warm it.

    python3 bench/gpu/profiler_warm.py
"""

from __future__ import annotations

import subprocess
import sys
import time


def one(prelude: bool) -> None:
    t = time.perf_counter()
    import torch
    from torch.profiler import ProfilerActivity, profile

    print(f"  import torch: {time.perf_counter() - t:.2f} s")
    if prelude:
        from pytest_gpuperf.shell.capture import PRELUDE

        t = time.perf_counter()
        exec(PRELUDE, {})
        print(f"  the prelude (a CPU-only session): {time.perf_counter() - t:.2f} s")
    t = time.perf_counter()
    x = torch.ones(1024, 1024, device="cuda")
    x.mul_(1.0001)  # a warm call outside the profiler, as the capture child makes them
    torch.cuda.synchronize()
    print(f"  CUDA context and a first call: {time.perf_counter() - t:.2f} s")
    t = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
        for _ in range(10):
            x.mul_(1.0001)
        torch.cuda.synchronize()
    print(f"  first CUDA session: {time.perf_counter() - t:.2f} s")


def main() -> None:
    if len(sys.argv) > 1:
        one(sys.argv[1] == "prelude")
        return
    for how in ("cold", "prelude"):
        print(f"profiler_warm, {how}:", flush=True)
        subprocess.run([sys.executable, __file__, how], check=False, timeout=120)


if __name__ == "__main__":
    main()
