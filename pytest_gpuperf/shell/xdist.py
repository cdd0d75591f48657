"""pytest-xdist support: one GPU per worker, pinned before CUDA starts.

A worker's GPU comes from ``PYTEST_XDIST_WORKER`` (``gw3`` -> 3), pinned in
``pytest_load_initial_conftests``, before any conftest can start CUDA; GPUs from
``CUDA_VISIBLE_DEVICES``, else NVML (by UUID). More workers than GPUs share them
round-robin, and the per-GPU lock serialises their measurements.
"""

from __future__ import annotations

import os
import re

WORKER_ENV = "PYTEST_XDIST_WORKER"
PINNED_ENV = "GPUPERF_PINNED_GPU"
#: the GPUs of the machine, as the worker saw them before it was pinned to one (a test
#: marked world_size= started from a worker runs its ranks on these)
ALL_GPUS_ENV = "GPUPERF_ALL_GPUS"


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES entries (no torch import)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d.strip() for d in env.split(",") if d.strip() and d.strip() != "-1"]
    return nvml_uuids()


def nvml_uuids() -> list[str]:
    """Every GPU's UUID, in NVML's order (none without NVML or a driver)."""
    from pytest_gpuperf.telemetry.nvml import close_nvml, open_nvml, uuid_of

    try:
        nvml = open_nvml()
    except Exception:
        return []
    try:
        count = nvml.nvmlDeviceGetCount()
        return [uuid_of(nvml, nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
    except Exception:
        return []
    finally:
        close_nvml(nvml)


def worker_index(worker_id: str | None) -> int | None:
    m = re.fullmatch(r"gw(\d+)", worker_id or "")
    return int(m.group(1)) if m else None


def pin_this_worker() -> str | None:
    """In an xdist worker, restrict CUDA to the worker's GPU; return it (or None). The
    decision goes to ``GPUPERF_PINNED_GPU`` (empty: no GPU) for its children to inherit."""
    if PINNED_ENV in os.environ:
        return os.environ[PINNED_ENV] or None
    idx = worker_index(os.environ.get(WORKER_ENV))
    if idx is None:
        return None
    gpus = visible_gpus()
    gpu = gpus[idx % len(gpus)] if gpus else ""
    os.environ[ALL_GPUS_ENV] = ",".join(gpus)
    if gpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    os.environ[PINNED_ENV] = gpu
    return gpu or None


def machine_gpus() -> list[str]:
    """The GPUs this process may give a group of ranks (an xdist worker's: before its pin),
    as CUDA_VISIBLE_DEVICES entries."""
    saved = os.environ.get(ALL_GPUS_ENV)
    if saved is not None:
        return [g for g in saved.split(",") if g]
    return visible_gpus()
