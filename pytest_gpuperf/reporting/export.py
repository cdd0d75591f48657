"""Our results in pytest-benchmark's ``--benchmark-json`` format (github-action-benchmark,
Bencher), every field it writes; ``fullname`` is the baseline key, what it has no field
for goes into ``extra_info``."""

from __future__ import annotations

import datetime as _dt
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_gpuperf import __version__
from pytest_gpuperf.jsonsafe import json_safe
from pytest_gpuperf.measure import backend
from pytest_gpuperf.measure.summary import quantile
from pytest_gpuperf.model import Result
from pytest_gpuperf.reporting import verdicts as v

#: The pytest-benchmark JSON version whose shape this follows.
FORMAT_VERSION = "5.1.0"


def _stats(rounds: Sequence[float], iterations: int) -> dict[str, Any]:
    xs = sorted(float(x) for x in rounds)
    n = len(xs)
    mean = sum(xs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1)) if n > 1 else 0.0
    q1, q3 = quantile(xs, 0.25), quantile(xs, 0.75)
    iqr = q3 - q1
    inside = [x for x in xs if q1 - 1.5 * iqr <= x <= q3 + 1.5 * iqr] or xs
    iqr_out = n - len(inside)
    sd_out = sum(1 for x in xs if abs(x - mean) > sd) if sd > 0 else 0
    return {
        "min": xs[0],
        "max": xs[-1],
        "mean": mean,
        "stddev": sd,
        "rounds": n,
        "median": quantile(xs, 0.5),
        "iqr": iqr,
        "q1": q1,
        "q3": q3,
        "iqr_outliers": iqr_out,
        "stddev_outliers": sd_out,
        "outliers": f"{sd_out};{iqr_out}",
        "ld15iqr": inside[0],
        "hd15iqr": inside[-1],
        "ops": 1.0 / mean if mean > 0 else 0.0,
        "total": sum(xs) * iterations,
        "data": list(rounds),
        "iterations": iterations,
    }


def _benchmark(r: Result, modes: backend.Modes | None) -> dict[str, Any]:
    c = r.comparison
    params = dict(r.id.params)
    policy = r.run.policy or {}
    extra: dict[str, Any] = {
        "gpuperf_key": r.id.key,
        "mode": r.id.mode,
        "device": r.run.device,
        "device_name": r.run.device_name,
        "stability": r.run.stability,
        "first_call_s": r.run.first_call_s,
        "peak_memory_bytes": r.run.peak_memory_bytes,
        "tflops": r.run.tflops,
        "gbps": r.run.gbps,
        "verdict": v.kind_of(r),
    }
    if c is not None:
        extra.update(ratio=c.ratio, baseline_s=c.baseline_s)
    plain = backend.get(r.id.mode, modes).plain_name
    name = r.id.display if plain else f"{r.id.display}@{r.id.mode}"
    return {
        "group": None,
        "name": name,
        "fullname": r.id.key,
        "params": params or None,
        "param": "-".join(params.values()) or None,
        "extra_info": {k: x for k, x in extra.items() if x is not None},
        "options": {
            "disable_gc": False,
            "timer": r.id.mode,
            "min_rounds": policy.get("rounds"),
            "max_time": (policy.get("round_ms") or 0) / 1e3 or None,
            "min_time": None,
            "warmup": bool(r.run.warmup),
        },
        "stats": _stats(r.run.rounds, r.run.calls_per_round),
    }


def machine_info(environment: Mapping[str, Any] | None) -> dict[str, Any]:
    """pytest-benchmark's ``machine_info`` from our environment record (GPU fields added)."""
    env = dict(environment or {})
    info: dict[str, Any] = {
        "node": env.get("hostname"),
        "processor": env.get("cpu_model"),
        "machine": env.get("machine"),
        "python_implementation": "CPython",
        "python_version": env.get("python"),
        "system": env.get("system", "Linux"),
        "cpu": {"brand_raw": env.get("cpu_model")},
    }
    gpu = ("gpu_name", "driver", "cuda_runtime", "torch", "triton")
    return {**info, **{k: env[k] for k in gpu if env.get(k) is not None}}


def pytest_benchmark(
    results: Sequence[Result],
    *,
    created: _dt.datetime | None = None,
    commit_info: Mapping[str, Any] | None = None,
    modes: backend.Modes | None = None,
) -> str:
    """The ``--benchmark-json`` document of ``results`` (those without rounds left out)."""
    measured = [r for r in results if r.run.rounds]
    env = next((r.run.environment for r in measured if r.run.environment), None)
    when = created or _dt.datetime.now(_dt.timezone.utc)
    doc = {
        "machine_info": machine_info(env),
        "commit_info": dict(commit_info or {}),
        "benchmarks": [_benchmark(r, modes) for r in measured],
        "datetime": when.isoformat(),
        "version": FORMAT_VERSION,
        "generator": f"pytest-gpuperf {__version__}",
    }
    return json.dumps(json_safe(doc), indent=2, ensure_ascii=False, allow_nan=False) + "\n"
