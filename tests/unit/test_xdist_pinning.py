"""GPU pinning of xdist workers (no GPU needed: it only sets CUDA_VISIBLE_DEVICES)."""

from __future__ import annotations

import pytest

from pytest_gpuperf.shell import xdist


def test_worker_index() -> None:
    assert xdist.worker_index("gw12") == 12
    assert xdist.worker_index("master") is None
    assert xdist.worker_index(None) is None


def test_pin_uses_the_visible_devices_round_robin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    monkeypatch.delenv(xdist.PINNED_ENV, raising=False)
    assert xdist.pin_this_worker() == "5"
    import os

    assert os.environ["CUDA_VISIBLE_DEVICES"] == "5"
    # A second call (e.g. a plugin reloaded) keeps the first pin.
    assert xdist.pin_this_worker() == "5"


def test_no_pin_outside_xdist(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv(xdist.PINNED_ENV, raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert xdist.pin_this_worker() is None


def test_a_worker_without_gpus_records_that_it_decided(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.delenv(xdist.PINNED_ENV, raising=False)
    assert xdist.pin_this_worker() is None
    import os

    assert os.environ[xdist.PINNED_ENV] == ""
