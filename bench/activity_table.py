"""Which GPU activity figures (NVML GPM) move when a GEMM's precision changes, and what else
the figures say: one GPM window per workload, as the plugin reads it after a measurement.

Run on the GPU machine from the repository root (about 15 s on an H200):

    python3 bench/activity_table.py --json $OUT/activity-table.json

Workloads, each warmed up for ``--warm`` seconds, then ``--windows`` GPM windows of
``--window`` seconds of back-to-back calls (the plugin's window is 0.12 s):

* a 4096^3 GEMM in bf16, fp16, fp32 with TF32 allowed (``tf32``) and fp32 without TF32;
* the zoo's MLP block (``autocast_dropped``: 2048 x 4096 -> 16384 -> 4096) under bf16
  autocast, in fp32 with TF32 allowed, and in fp32 without TF32;
* a memory-bound fp32 multiply of 256M elements, 64 MiB pinned host-to-device copies.

For each: every GPM figure (median over the windows, with its range), the achieved
TFLOP/s against the dtype's dense peak (measure/peaks.py) and what
``telemetry.activity.bound`` calls it. The table under it says, against bf16, which
figures moved by the rule the diagnosis uses (``telemetry.activity.moved``), so the
story of a precision change cites figures that this GPU showed moving.
Without CUDA it runs the same flow on a fake GPM (no figures) as a smoke test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pytest_gpuperf.measure import peaks
from pytest_gpuperf.telemetry import activity as act


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def workloads(device: str) -> dict[str, tuple[Callable[[], Any], float | None, str | None]]:
    """name -> (one call, FLOPs per call or None, math kind for the peak or None)."""
    import torch

    n = 4096 if device == "cuda" else 128
    out: dict[str, tuple[Callable[[], Any], float | None, str | None]] = {}

    def gemm(dtype: Any, tf32: bool) -> Callable[[], Any]:
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)

        def run() -> Any:
            torch.backends.cuda.matmul.allow_tf32 = tf32
            return a @ b

        return run

    flops = 2.0 * n**3
    out["gemm bf16"] = (gemm(torch.bfloat16, False), flops, "bf16")
    out["gemm fp16"] = (gemm(torch.float16, False), flops, "fp16")
    out["gemm fp32, TF32 allowed"] = (gemm(torch.float32, True), flops, "tf32")
    out["gemm fp32, no TF32"] = (gemm(torch.float32, False), flops, "fp32")
    tokens, width = (2048, 4096) if device == "cuda" else (32, 64)
    mlp = torch.nn.Sequential(
        torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width)
    ).to(device)
    x = torch.randn(tokens, width, device=device)
    mlp_flops = 2.0 * 2 * tokens * width * 4 * width

    def block(autocast: bool, tf32: bool) -> Callable[[], Any]:
        def run() -> Any:
            torch.backends.cuda.matmul.allow_tf32 = tf32
            with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=autocast):
                return mlp(x)

        return run

    out["MLP bf16 autocast"] = (block(True, False), mlp_flops, "bf16")
    out["MLP fp32, TF32 allowed"] = (block(False, True), mlp_flops, "tf32")
    out["MLP fp32, no TF32"] = (block(False, False), mlp_flops, "fp32")
    big = torch.randn((256 if device == "cuda" else 1) * 2**20, device=device)
    out["mul fp32 256M (memory-bound)"] = (lambda: big.mul_(1.0), None, None)
    if device == "cuda":
        host = torch.empty(16 * 2**20, pin_memory=True)
        dev = torch.empty(16 * 2**20, device=device)
        out["H2D copy 64 MiB pinned"] = (lambda: dev.copy_(host, non_blocking=True), None, None)
    return out


def windows(
    window: Any, call: Callable[[], Any], n: int, seconds: float
) -> tuple[list[dict[str, Any]], float]:
    """``n`` GPM windows of about ``seconds`` each of back-to-back calls; the time per call."""
    per_call = []
    got = []
    for _ in range(n):
        window.start()
        t0 = time.perf_counter()
        calls = 0
        while time.perf_counter() - t0 < seconds:
            for _ in range(4):
                call()
            calls += 4
            _sync()
        dt = time.perf_counter() - t0
        got.append(window.stop(window_s=round(dt, 4), calls=calls))
        per_call.append(dt / calls)
    return got, statistics.median(per_call)


def _median(rows: list[dict[str, Any]], key: str) -> dict[str, float] | None:
    vals = [float(r[key]) for r in rows if isinstance(r.get(key), (int, float))]
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from pytest_gpuperf.telemetry.probe import NvmlTelemetry

    device = "cuda" if torch.cuda.is_available() else "cpu"
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu (smoke run)"
    tel = NvmlTelemetry() if device == "cuda" else None
    window = tel.activity_window() if tel is not None else _FakeWindow()
    if not window.wanted and device == "cuda":
        print(f"GPM unavailable: {window.reason}")
    rows = []
    try:
        for label, (call, flops, kind) in workloads(device).items():
            end = time.perf_counter() + args.warm
            while time.perf_counter() < end:
                call()
            _sync()
            got, per_call = windows(window, call, args.windows, args.window)
            row: dict[str, Any] = {"workload": label, "per_call_s": per_call, "windows": got}
            row["figures"] = {k: _median(got, k) for k in act.KEYS if _median(got, k)}
            if flops is not None and kind is not None:
                peak = peaks.peak_for(name)
                tflops = flops / per_call / 1e12
                row["tflops"] = round(tflops, 2)
                if peak is not None and kind in peak.tflops:
                    row["of_peak"] = round(tflops / peak.tflops[kind], 4)
                    row["peak_kind"] = kind
            medians = {"available": True, **{k: v["median"] for k, v in row["figures"].items()}}
            b = act.bound(medians)
            row["bound"] = b.label if b else None
            rows.append(row)
    finally:
        if tel is not None:
            tel.close()
    return {"gpu": name, "torch": str(torch.__version__), "rows": rows, "args": vars(args)}


class _FakeWindow:
    wanted = False
    reason = "no CUDA: a smoke run"

    def start(self) -> None:
        pass

    def stop(self, **facts: Any) -> dict[str, Any]:
        return {"available": False, "reason": self.reason, **facts}


def report(doc: dict[str, Any]) -> str:
    rows = doc["rows"]
    keys = [k for k in act.KEYS if any(k in r["figures"] for r in rows)]
    lines = [f"GPU activity per workload on {doc['gpu']} (torch {doc['torch']}); GPM median of "
             f"{doc['args']['windows']} windows of {doc['args']['window']} s"]  # fmt: skip
    head = ["workload", "µs/call", "TFLOP/s", "of peak", *[act.LABELS[k] for k in keys], "bound"]
    lines.append(" | ".join(head))
    for r in rows:
        cells = [r["workload"], f"{1e6 * r['per_call_s']:.1f}", f"{r.get('tflops', '-')}"]
        cells.append(f"{100 * r['of_peak']:.0f} % ({r['peak_kind']})" if "of_peak" in r else "-")
        cells += [act.fmt(k, (r["figures"].get(k) or {}).get("median")) for k in keys]
        cells.append(str(r["bound"]))
        lines.append(" | ".join(cells))
    lines.append("")
    lines.append("moved against the bf16 row of its group (telemetry.activity.moved, the rule the")
    lines.append("diagnosis uses):")
    by_name = {r["workload"]: r for r in rows}
    for base, others in (
        ("gemm bf16", ("gemm fp16", "gemm fp32, TF32 allowed", "gemm fp32, no TF32")),
        ("MLP bf16 autocast", ("MLP fp32, TF32 allowed", "MLP fp32, no TF32")),
    ):
        if base not in by_name:
            continue
        b = [w for w in by_name[base]["windows"] if w.get("available")]
        for o in others:
            if o not in by_name:
                continue
            cur = {"available": True, **{k: v["median"] for k, v in by_name[o]["figures"].items()}}
            moves = act.moved(b, cur)
            text = ", ".join(m.text() for m in moves) or "nothing moved"
            peak = ""
            if "of_peak" in by_name[o] and "of_peak" in by_name[base]:
                peak = (f"; achieved {100 * by_name[base]['of_peak']:.0f} % of the bf16 peak -> "
                        f"{100 * by_name[o]['of_peak']:.0f} % of the {by_name[o]['peak_kind']} peak")  # fmt: skip
            lines.append(f"  {base} -> {o}: {text}{peak}")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--warm", type=float, default=0.3, help="warm-up seconds per workload")
    p.add_argument("--windows", type=int, default=3, help="GPM windows per workload")
    p.add_argument("--window", type=float, default=0.15, help="seconds per window (>= 0.11)")
    p.add_argument("--json", help="also write every window's figures to this file")
    args = p.parse_args()
    print("command: python3 bench/activity_table.py " + " ".join(sys.argv[1:]))
    t0 = time.perf_counter()
    doc = measure(args)
    print(report(doc))
    print(f"({time.perf_counter() - t0:.1f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
