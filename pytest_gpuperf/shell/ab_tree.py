"""The base side of ``--gpuperf-ab=REF``: REF checked out in a temporary git worktree.

A base process gets the base root and its ``src/`` first on ``PYTHONPATH`` and loads
:class:`BaseTreeCheck`, which reports any module imported from the *current* tree (an
editable install shadowing the base).
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf.baseline.fileio import atomic_write_text, output_target
from pytest_gpuperf.errors import OutputError
from pytest_gpuperf.model import printable
from pytest_gpuperf.shell.rerun import is_child, left_by_dead, temp_prefix

#: In a base process: where its BaseTreeCheck writes what it found.
CHECK_ENV = "GPUPERF_AB_CHECK"
#: In a base process: the base worktree's root, and the current tree's root.
BASE_ENV = "GPUPERF_AB_BASE"
CURRENT_ENV = "GPUPERF_AB_CURRENT"


class ABError(Exception):
    """``--gpuperf-ab`` cannot be done; the message says why and what to do."""


def git(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``git ARGS`` in ``cwd``, its output read as text (never raises for git's exit status)."""
    try:
        return subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=300
        )
    except FileNotFoundError:
        raise ABError(
            "--gpuperf-ab and --gpuperf-bisect need git, and no git executable is on the PATH"
        ) from None


def remove_stale(where: Path) -> list[str]:
    """Remove, and say so, the A/B worktrees of this repository that killed sessions left
    (registered with git, the process that made them gone); returns their paths."""
    listed = git(["worktree", "list", "--porcelain"], where)
    if listed.returncode != 0:
        return []
    removed = []
    for line in listed.stdout.splitlines():
        if not line.startswith("worktree "):
            continue
        path = Path(line[len("worktree ") :])
        if path.name != "base" or not left_by_dead(path.parent.name, ("ab",)):
            continue
        git(["worktree", "remove", "--force", str(path)], where)
        shutil.rmtree(path.parent, ignore_errors=True)
        removed.append(str(path))
    if removed:
        git(["worktree", "prune"], where)
        print(
            f"gpuperf: removed {len(removed)} A/B worktree(s) that killed sessions left: "
            + ", ".join(removed),
            file=sys.stderr,
            flush=True,
        )
    return removed


def _commit_of(ref: str, where: Path, top: str, flag: str) -> str:
    """The commit REF names: a commit, a branch, a tag (peeled), ``:/message``..."""
    obj = git(["rev-parse", "--verify", "--quiet", "--end-of-options", ref], where)
    if obj.returncode != 0 or not obj.stdout.strip():
        raise ABError(
            f"{flag}={ref}: git knows no commit, branch or tag {ref!r} in {top} (in CI, "
            "fetch it first: actions/checkout with fetch-depth: 0)"
        )
    sha = obj.stdout.strip()
    kind = git(["cat-file", "-t", sha], where).stdout.strip()
    if kind == "tag":  # an annotated tag: the commit it tags
        peeled = git(["rev-parse", "--verify", "--quiet", f"{sha}^{{commit}}"], where)
        kind, sha = ("commit", peeled.stdout.strip()) if peeled.returncode == 0 else ("tag", sha)
    if kind != "commit":
        raise ABError(
            f"{flag}={ref}: {ref!r} names a {kind or 'git object'} ({sha[:12]}), not a "
            "commit: A/B checks out a whole commit; give a commit, branch or tag"
        )
    return sha


@dataclass
class BaseTree:
    """REF at ``sha``, checked out at ``path``; ``toplevel`` is the current tree's root."""

    ref: str
    sha: str
    toplevel: Path
    path: Path
    tmp: Path
    removed: bool = False
    #: the option that asked for the tree, for its errors
    flag: str = "--gpuperf-ab"

    @property
    def label(self) -> str:
        """``HEAD~1 (1a2b3c4d5e6f)``: what the reports call the base side."""
        if self.sha.startswith(self.ref):
            return self.sha[:12]
        return f"{self.ref} ({self.sha[:12]})"

    @classmethod
    def resolve(cls, ref: str, where: Path, flag: str = "--gpuperf-ab") -> tuple[str, Path]:
        """(the commit REF names, the repository's top-level directory)."""
        if not ref.isprintable():
            raise ABError(
                f"{flag}={ref!r}: a REF has no control characters (a newline, a tab, an "
                "escape); give a commit, branch or tag"
            )
        top = git(["rev-parse", "--show-toplevel"], where)
        if top.returncode != 0:
            raise ABError(
                f"{flag}={ref}: {where} is not inside a git repository "
                f"({top.stderr.strip() or 'git rev-parse failed'}); A/B checks REF out with "
                "git, so run pytest from a clone"
            )
        return _commit_of(ref, where, top.stdout.strip(), flag), Path(top.stdout.strip()).resolve()

    @classmethod
    def create(cls, ref: str, where: Path, flag: str = "--gpuperf-ab") -> BaseTree:
        """Check REF out, detached, into a new temporary directory."""
        sha, top = cls.resolve(ref, where, flag)
        tmp = Path(tempfile.mkdtemp(prefix=temp_prefix("gpuperf-ab"))).resolve()
        path = tmp / "base"
        added = git(["worktree", "add", "--detach", "--force", str(path), sha], top)
        if added.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise ABError(f"{flag}={ref}: git worktree add failed: {added.stderr.strip()[-500:]}")
        return cls(ref, sha, top, path, tmp, flag=flag)

    def remove(self) -> None:
        """Remove the worktree and its temporary directory (idempotent; never raises)."""
        if self.removed:
            return
        self.removed = True
        git(["worktree", "remove", "--force", str(self.path)], self.toplevel)
        shutil.rmtree(self.tmp, ignore_errors=True)
        git(["worktree", "prune"], self.toplevel)

    def base_of(self, path: Path) -> Path:
        """The base tree's counterpart of ``path`` (a path in the current tree)."""
        p = path.resolve()
        if not p.is_relative_to(self.toplevel):
            return p
        return self.path / p.relative_to(self.toplevel)

    def env(self, side: str) -> dict[str, str]:
        """Environment additions for a process of ``side`` ("base" or "current")."""
        caches = self.tmp / "caches" / side
        env = {
            "TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor"),
            "TRITON_CACHE_DIR": str(caches / "triton"),
        }
        if side == "base":
            old = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
            mapped = [str(self.base_of(Path(p))) for p in old]
            first = [str(self.path), str(self.path / "src")]
            env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([*first, *mapped]))
            env[BASE_ENV] = str(self.path)
            env[CURRENT_ENV] = str(self.toplevel)
        return env

    def to_dict(self) -> dict[str, str]:
        return {k: str(getattr(self, k)) for k in ("ref", "sha", "toplevel", "path", "tmp")}

    @classmethod
    def from_dict(cls, d: Mapping[str, str]) -> BaseTree:
        return cls(d["ref"], d["sha"], Path(d["toplevel"]), Path(d["path"]), Path(d["tmp"]))


def shadowing_modules(base: Path, current: Path) -> list[tuple[str, str]]:
    """(module, file) of each imported module from the current tree (not the installation's
    files, a venv inside the repository, nor the plugin's)."""
    installed = {
        Path(p).resolve()
        for p in (sys.prefix, sys.exec_prefix, sys.base_prefix, *site.getsitepackages())
    }
    found = []
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if not file or name.partition(".")[0] == "pytest_gpuperf":
            continue
        p = Path(file).resolve()
        theirs = p.is_relative_to(base) or any(p.is_relative_to(s) for s in installed)
        if p.is_relative_to(current) and not theirs:
            found.append((name, str(p)))
    return sorted(found)


class BaseTreeCheck:
    """Loaded by a base process: what it collected, what failed, what came from elsewhere."""

    def __init__(
        self, out: Path, base: Path, current: Path, is_benchmark: Callable[[pytest.Item], bool]
    ):
        self.out = out
        self.is_benchmark = is_benchmark
        self.base = base
        self.current = current
        self.benchmarks: list[str] = []
        self.errors: list[dict[str, str]] = []
        #: why the check cannot be written (said once)
        self.refused: str | None = None

    @pytest.hookimpl
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            text = str(report.longreprtext or "")
            self.errors.append({"path": report.nodeid or str(report.fspath), "text": text})

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.benchmarks = [i.nodeid for i in session.items if self.is_benchmark(i)]
        self._write()

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self._write()

    def _write(self) -> None:
        """Write the check as every output is written (``baseline.fileio``'s rule), into a
        regular file only; never raises."""
        if self.refused is not None:
            return
        doc: dict[str, Any] = {
            "benchmarks": self.benchmarks,
            "errors": self.errors,
            "shadowed": shadowing_modules(self.base, self.current),
        }
        try:
            target = output_target(self.out, what=CHECK_ENV)
            if target.kind != "file":
                raise OutputError(
                    f"{CHECK_ENV}: cannot write {self.out}: it is not a regular file; this "
                    "variable is pytest-gpuperf's own (an A/B base process's): unset it"
                )
            atomic_write_text(target.path, json.dumps(doc))
        except (OutputError, OSError) as e:
            self.refused = printable(str(e))
            print(f"gpuperf: {self.refused}", file=sys.stderr)


def register_check(config: pytest.Config, is_benchmark: Callable[[pytest.Item], bool]) -> None:
    """In a base process (a child with ``GPUPERF_AB_CHECK`` and the trees' roots): load
    :class:`BaseTreeCheck`."""
    out = os.environ.get(CHECK_ENV)
    base, current = os.environ.get(BASE_ENV), os.environ.get(CURRENT_ENV)
    if not (out and base and current) or not is_child(config):
        return
    check = BaseTreeCheck(Path(out), Path(base).resolve(), Path(current).resolve(), is_benchmark)
    config.pluginmanager.register(check, "gpuperf-ab-check")


def read_check(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def collection_error(tree: BaseTree, errors: list[dict[str, str]]) -> str:
    """The error of a base tree that cannot be collected, naming the failing file(s)."""
    lines = []
    for e in errors[:3]:
        path = tree.path / e["path"] if e["path"] else tree.path
        text = [ln for ln in e["text"].strip().splitlines() if ln.strip()]
        lines.append(f"  {path}:\n" + "\n".join("    " + ln for ln in text[-6:]))
    more = f"\n  ... and {len(errors) - 3} more" if len(errors) > 3 else ""
    if (tree.path / ".gitmodules").is_file():
        more += (
            f"\n{tree.label} has git submodules (.gitmodules), which a worktree does not check "
            "out: their folders are empty in the base tree, so code in them cannot be imported "
            "there. Install that code (pip install) so that both trees import it, or move it "
            "out of the submodule"
        )
    return (
        f"{tree.flag}={tree.ref}: the base tree {tree.label} cannot be collected: "
        f"{len(errors)} file(s) failed to import:\n" + "\n".join(lines) + more
    )


def shadow_error(tree: BaseTree, shadowed: list[list[str]]) -> str:
    """The error of a base process that imported the current tree's code."""
    names = "\n".join(f"  {m} from {f}" for m, f in shadowed[:5])
    return (
        f"{tree.flag}={tree.ref}: the base tree's processes imported code of the current "
        f"tree ({tree.toplevel}), not of {tree.label}:\n{names}\n"
        "An installed copy of the package under test (pip install -e .) comes before the base "
        "worktree on sys.path. Import it from the repository instead: a src/ or flat layout "
        "found through PYTHONPATH or a conftest.py at the root, without an editable install "
        "(docs/ab.md)"
    )
