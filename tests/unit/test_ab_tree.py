"""The base tree of ``--gpuperf-ab=REF``: what REF may name, and worktrees that killed
sessions left. Real git repositories, no pytest session."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_gpuperf.shell.ab_tree import ABError, BaseTree, collection_error

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def git(where: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}  # fmt: skip
    done = subprocess.run(["git", *args], cwd=where, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "a.txt").write_text("one\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "c1 base")
    (root / "a.txt").write_text("two\n")
    git(root, "commit", "-q", "-am", "c2")
    git(root, "tag", "-a", "v1", "-m", "annotated", "HEAD~1")
    return root


def test_a_message_search_and_an_annotated_tag_resolve_to_their_commit(repo: Path) -> None:
    """T17: ``:/message`` never resolved (``^{commit}`` was appended to the pattern)."""
    first = git(repo, "rev-parse", "HEAD~1")
    assert BaseTree.resolve(":/c1 base", repo)[0] == first
    assert BaseTree.resolve("v1", repo)[0] == first
    assert BaseTree.resolve("main", repo)[0] == git(repo, "rev-parse", "HEAD")


@pytest.mark.parametrize(("ref", "kind"), [("HEAD^{tree}", "tree"), ("HEAD:a.txt", "blob")])
def test_a_tree_or_a_blob_is_named_for_what_it_is(repo: Path, ref: str, kind: str) -> None:
    """T17: a tree or a blob got "git knows no commit, branch or tag", though it exists."""
    with pytest.raises(ABError, match=rf"names a {kind} \([0-9a-f]{{12}}\), not a commit"):
        BaseTree.resolve(ref, repo)


def test_a_ref_with_a_newline_is_refused_without_echoing_it_raw(repo: Path) -> None:
    """T17: a newline in REF was echoed raw, so a line of the error began with ``::error::``."""
    with pytest.raises(ABError) as e:
        BaseTree.resolve("HEAD\n::error::x", repo)
    assert "\n" not in str(e.value) and "no control characters" in str(e.value)
    assert r"'HEAD\n::error::x'" in str(e.value)


def test_uninitialised_submodules_get_a_hint(tmp_path: Path) -> None:
    """T17: a base tree whose code is in a submodule failed with ModuleNotFoundError alone."""
    (tmp_path / "base").mkdir()
    tree = BaseTree("HEAD~1", "a" * 40, tmp_path, tmp_path / "base", tmp_path)
    error = [{"path": "test_x.py", "text": "ModuleNotFoundError: No module named 'vendored'"}]
    assert "git submodules" not in collection_error(tree, error)
    (tree.path / ".gitmodules").write_text('[submodule "vendored"]\n')
    assert "has git submodules (.gitmodules), which a worktree does not check out" in (
        collection_error(tree, error)
    )


KILLED = """
import os, sys
from pathlib import Path
from pytest_gpuperf.shell.ab_tree import BaseTree
tree = BaseTree.create("HEAD~1", Path(sys.argv[1]))
print(tree.path, flush=True)
os._exit(0)  # as a SIGKILL would: no clean-up
"""


def test_a_worktree_a_killed_session_left_is_removed_by_the_next(repo: Path) -> None:
    """T18: a SIGKILLed A/B session left a registered worktree that nothing removed."""
    from pytest_gpuperf.shell.ab_tree import remove_stale

    done = subprocess.run(
        [sys.executable, "-c", KILLED, str(repo)], capture_output=True, text=True, check=True
    )
    left = Path(done.stdout.strip())
    assert left.is_dir() and str(left) in git(repo, "worktree", "list")
    live = BaseTree.create("HEAD", repo)  # a session still running: its tree stays
    try:
        assert remove_stale(repo) == [str(left)]
        assert not left.parent.exists() and str(left) not in git(repo, "worktree", "list")
        assert live.path.is_dir() and remove_stale(repo) == []
    finally:
        live.remove()
    assert git(repo, "worktree", "list").count("\n") == 0


def _check_places(root: Path) -> dict[str, Path]:
    """Where a hostile GPUPERF_AB_CHECK may point (device nodes only as copies, as root)."""
    golden = Path(__file__).parent.parent / "data" / "baseline-v1" / "golden.json"
    p = {"folder": root / "dir", "fifo": root / "fifo", "baseline": root / "main.json"}
    p["folder"].mkdir()
    os.mkfifo(p["fifo"])
    shutil.copy(golden, p["baseline"])
    p["baseline-link"] = root / "to-baseline.json"
    p["baseline-link"].symlink_to(p["baseline"])
    p["fifo-link"] = root / "to-fifo"
    p["fifo-link"].symlink_to(p["fifo"])
    p["under-file"] = p["baseline"] / "check.json"
    if os.geteuid() == 0:
        import stat

        p["device"] = root / "null"
        os.mknod(p["device"], 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    return p


def test_the_base_check_is_written_only_into_a_regular_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """GPUPERF_AB_CHECK goes through the outputs' rule: a folder raised, a FIFO hung the base
    process, a device node or a baseline (through a link too) was written over."""
    import stat
    import threading

    from pytest_gpuperf.shell.ab_tree import BaseTreeCheck, read_check

    p = _check_places(tmp_path)
    before = {name: (os.lstat(path).st_mode, os.lstat(path).st_rdev) for name, path in p.items()
              if os.path.lexists(path)}  # fmt: skip
    golden = p["baseline"].read_bytes()
    for name, path in p.items():
        check = BaseTreeCheck(path, tmp_path, tmp_path / "current", lambda item: True)
        done = threading.Thread(target=lambda c=check: (c._write(), c._write()), daemon=True)
        done.start()
        done.join(10)
        assert not done.is_alive(), f"{name}: writing the check hung"
        assert check.refused is not None, name
        assert "\n" not in check.refused and CHECK_NAME in check.refused, check.refused
    err = capsys.readouterr().err
    assert err.count("gpuperf: GPUPERF_AB_CHECK") == len(p)  # once per process, not per write
    after = {name: (os.lstat(path).st_mode, os.lstat(path).st_rdev) for name, path in p.items()
             if os.path.lexists(path)}  # fmt: skip
    assert after == before and p["baseline"].read_bytes() == golden
    assert stat.S_ISFIFO(os.lstat(p["fifo"]).st_mode)
    # the parent's own place, a new file in its temp folder, is written
    out = tmp_path / "tmpdir" / "check.json"
    out.parent.mkdir()
    BaseTreeCheck(out, tmp_path, tmp_path / "current", lambda item: True)._write()
    assert read_check(out) == {"benchmarks": [], "errors": [], "shadowed": []}


CHECK_NAME = "GPUPERF_AB_CHECK"
