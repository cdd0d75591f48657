"""The temp folders of a session's children carry the session's pid, and a later session
removes those of a session that is gone (one killed outright never removed its own)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _plant(tmp: Path) -> dict[str, Path]:
    dead, live = _dead_pid(), os.getpid()
    p = {
        "dead-child": tmp / f"gpuperf-child-{dead}-ab12_cd3",
        "dead-check": tmp / f"gpuperf-ab-check-{dead}-x9y8z7w6",
        "live-child": tmp / f"gpuperf-child-{live}-ab12_cd3",
        "live-check": tmp / f"gpuperf-ab-check-{live}-x9y8z7w6",
        "old-name": tmp / "gpuperf-child-ab12_cd3",  # no pid: not ours to judge
        "other-name": tmp / f"gpuperf-ab-{dead}-ab12_cd3",  # an A/B worktree's: not this rule's
        "junk-pid": tmp / "gpuperf-child-12x-ab12_cd3",
    }
    for folder in p.values():
        folder.mkdir()
        (folder / "results.json").write_text("{}")
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("keep")
    p["link"] = tmp / f"gpuperf-child-{dead}-link1234"
    p["link"].symlink_to(elsewhere)
    p["file"] = tmp / f"gpuperf-ab-check-{dead}-file1234"
    p["file"].write_text("a file, not a folder")
    p["elsewhere"] = elsewhere
    return p


def test_only_folders_of_dead_sessions_are_removed(tmp_path: Path) -> None:
    from pytest_gpuperf.shell.rerun import remove_stale_folders

    p = _plant(tmp_path)
    removed = remove_stale_folders(tmp_path)
    assert sorted(removed) == sorted([p["dead-child"], p["dead-check"]])
    gone = {k for k, v in p.items() if not v.is_symlink() and not v.exists()}
    assert gone == {"dead-child", "dead-check"}
    assert p["link"].is_symlink() and (p["elsewhere"] / "keep.txt").read_text() == "keep"
    assert p["file"].read_text() == "a file, not a folder"


@pytest.mark.skipif(not IS_ROOT, reason="needs root, to make a folder of another user")
def test_a_folder_of_another_user_is_left_alone(tmp_path: Path) -> None:
    from pytest_gpuperf.shell.rerun import remove_stale_folders

    theirs = tmp_path / f"gpuperf-child-{_dead_pid()}-ab12_cd3"
    theirs.mkdir()
    os.chown(theirs, 12345, 12345)
    assert remove_stale_folders(tmp_path) == []
    assert theirs.is_dir()


def test_a_session_removes_them_at_its_start_and_names_its_own_after_itself(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmp = pytester.path / "tmp"
    tmp.mkdir()
    p = _plant(tmp)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert not p["dead-child"].exists() and not p["dead-check"].exists()
    assert p["live-child"].is_dir() and p["live-check"].is_dir() and p["link"].is_symlink()
    # a child's own folder carries this process's pid
    from pytest_gpuperf.shell.rerun import run_pytest_child

    child = run_pytest_child(["missing.py"], device="cpu", timeout_s=120, cwd=pytester.path)
    (json_arg,) = [a for a in child.command if a.startswith("--gpuperf-json=")]
    assert Path(json_arg.split("=", 1)[1]).parent.name.startswith(f"gpuperf-child-{os.getpid()}-")


#: The kernel inventory of a save, killed outright (SIGKILL) as its profile starts.
KILLED_IN_THE_INVENTORY = """
import os, signal
from pytest_gpuperf.artifacts.collectors import child

def killed(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

child.profile_calls = killed
"""


def test_a_save_killed_in_its_inventory_leaves_no_folder_for_good(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R16: each save killed outright during its kernel inventory left an empty
    gpuperf-inventory-* folder that no later session removed (13 after the kill loops)."""
    import signal

    from tests.conftest import FAST

    tmp = pytester.path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    pytester.makeconftest(KILLED_IN_THE_INVENTORY)
    pytester.makepyfile(test_one="def test_one(gpu_bench):\n    gpu_bench(sum, range(10))\n")
    args = ["-p", "no:cacheprovider", *FAST]
    killed = pytester.runpytest_subprocess(*args, "--gpuperf-save=main")
    assert killed.ret == -signal.SIGKILL, killed.stdout.str()
    (left,) = tmp.glob("gpuperf-inventory-*")
    pytester.makeconftest("")
    pytester.runpytest_subprocess(*args).assert_outcomes(passed=1)
    assert not left.exists()


def test_a_torchrun_ranks_fresh_peer_reports_to_a_folder_removed_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rank's fresh peer (a confirmation under torchrun) reported to a folder that was
    never removed, whose name no later session could tell from another's."""
    from pytest_gpuperf.measure.ranks import GROUP_DIR_ENV
    from pytest_gpuperf.shell.ranks import peer_env

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("RANK", "1")
    with peer_env(29501, {"X": "1"}) as env:
        folder = Path(env[GROUP_DIR_ENV])
        assert folder.is_dir() and folder.name.startswith(f"gpuperf-peer-{os.getpid()}-")
        assert (env["RANK"], env["MASTER_PORT"], env["X"]) == ("1", "29501", "1")
    assert not folder.exists()
