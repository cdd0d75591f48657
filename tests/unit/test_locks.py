"""The per-device lock, across real processes."""

from __future__ import annotations

import itertools
import json
import multiprocessing as mp
import os
import time
from pathlib import Path

import pytest

from pytest_gpuperf.locks import LockTimeout, device_lock


def _hold(lock_dir: str, key: str, log: str, hold_s: float) -> None:
    os.environ["GPUPERF_LOCK_DIR"] = lock_dir
    with device_lock(key):
        start = time.monotonic()
        time.sleep(hold_s)
        end = time.monotonic()
    with open(log, "a") as f:
        f.write(json.dumps([start, end]) + "\n")


def test_processes_never_hold_one_device_at_once(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    ctx = mp.get_context("spawn")
    procs = [
        ctx.Process(target=_hold, args=(str(tmp_path), "gpu-GPU-test", str(log), 0.15))
        for _ in range(4)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    spans = sorted(json.loads(line) for line in log.read_text().splitlines())
    assert len(spans) == 4
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end


def test_different_devices_do_not_wait(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPERF_LOCK_DIR", str(tmp_path))
    with device_lock("gpu-a"):
        t = time.monotonic()
        with device_lock("gpu-b", timeout_s=1):
            pass
        assert time.monotonic() - t < 0.5


def test_a_busy_device_times_out_naming_the_holder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUPERF_LOCK_DIR", str(tmp_path))
    ctx = mp.get_context("spawn")
    holder = ctx.Process(target=_hold, args=(str(tmp_path), "gpu-x", str(tmp_path / "l"), 2.0))
    holder.start()
    try:
        deadline = time.monotonic() + 10
        while not (tmp_path / "gpu-x.lock").exists() or not (tmp_path / "gpu-x.lock").read_text():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        waits: list[str] = []
        with (
            pytest.raises(LockTimeout, match=rf"gpu-x stayed busy.*pid {holder.pid}"),
            device_lock("gpu-x", timeout_s=0.3, on_wait=waits.append),
        ):
            pass
        assert waits and f"pid {holder.pid}" in waits[0]
    finally:
        holder.join(10)
