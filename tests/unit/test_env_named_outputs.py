"""Files named by environment variables follow the output rule (the rule of T2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def test_the_lock_log_named_by_the_environment_never_goes_into_a_baseline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GPUPERF_LOCK_LOG naming a baseline got a JSON line appended to it."""
    from pytest_gpuperf.shell import locks

    baseline = tmp_path / "main.json"
    baseline.write_text('{"schema":"pytest-gpuperf/baseline","schema_version":3}')
    before = baseline.read_bytes()
    monkeypatch.setenv("GPUPERF_LOCK_LOG", str(baseline))
    locks._log_hold("cpu", "me", 0.0)
    assert baseline.read_bytes() == before
    log = tmp_path / "holds.jsonl"
    monkeypatch.setenv("GPUPERF_LOCK_LOG", str(log))
    locks._log_hold("cpu", "me", 0.0)
    locks._log_hold("cpu", "me", 1.0)
    assert [json.loads(x)["taken"] for x in log.read_text().splitlines()] == [0.0, 1.0]


@pytest.mark.parametrize("where", ["main.runs/x.json", "new.json", "main.lock"])
def test_a_file_named_by_the_environment_stays_out_of_a_baseline_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """No option names the baseline folder of GPUPERF_LOCK_LOG: the folder is known by the
    NAME.json and NAME.runs/ pair it holds."""
    from pytest_gpuperf.shell import locks

    (tmp_path / "main.runs").mkdir()
    (tmp_path / "main.json").write_text('{"schema":"pytest-gpuperf/baseline"}')
    monkeypatch.setenv("GPUPERF_LOCK_LOG", str(tmp_path / where))
    locks._log_hold("cpu", "me", 0.0)
    assert not (tmp_path / where).exists()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.setenv("GPUPERF_LOCK_LOG", str(tmp_path / "elsewhere" / "new.json"))
    locks._log_hold("cpu", "me", 0.0)
    assert (tmp_path / "elsewhere" / "new.json").exists()
