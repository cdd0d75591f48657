"""Run tests again in a fresh pytest process and read back what it measured.

Used to confirm a suspect (the unit of evidence is the process) and by the artifact
collectors (nsys, ncu, TORCH_TRACE). The child gets the parent's rootdir, ini file, ``-p``
plugins and gpuperf settings, and ``--gpuperf-child``, which turns off what a child must
not do (save, compare, capture, re-run, report).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import stat
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pytest_gpuperf.artifacts.collectors.base import ChildRun
from pytest_gpuperf.artifacts.collectors.process import parent_env, run_process
from pytest_gpuperf.baseline.fileio import pid_alive
from pytest_gpuperf.model import Result
from pytest_gpuperf.reporting.json_report import load_results
from pytest_gpuperf.reporting.outputs import OUTPUT_OPTIONS
from pytest_gpuperf.shell.options import OPTIONS_BY_NAME, option_text

if TYPE_CHECKING:
    import pytest

    from pytest_gpuperf.artifacts.collectors.process import SparePython
    from pytest_gpuperf.shell.settings import RunContext

CHILD_FLAG = "--gpuperf-child"
CHILD_ENV = "GPUPERF_CHILD"

#: The kinds of temp folders a session's processes leave when killed (:func:`remove_stale_folders`)
_STALE_KINDS = ("child", "ab-check", "peer", "inventory", "group-profile")


def temp_prefix(kind: str) -> str:
    """The prefix of a temp folder of this session's: ``KIND-PID-`` (then mkdtemp's letters),
    so that a later session can tell a dead process's (:func:`left_by_dead`)."""
    return f"{kind}-{os.getpid()}-"


def left_by_dead(name: str, kinds: Sequence[str]) -> bool:
    """Whether folder ``name`` is a :func:`temp_prefix` one of ``kinds`` (``gpuperf-`` each)
    whose process is gone."""
    alts = "|".join(re.escape(k) for k in kinds)
    m = re.fullmatch(rf"gpuperf-(?:{alts})-([1-9][0-9]{{0,9}})-[a-z0-9_]+", name)
    return m is not None and not pid_alive(int(m.group(1)))


def remove_stale_folders(tmp: Path | None = None) -> list[Path]:
    """Remove this user's child temp folders in ``tmp`` whose pid runs no process (left by a
    session killed outright); anything else is left alone. Never raises; returns them."""
    removed: list[Path] = []
    try:
        folder = Path(tmp or tempfile.gettempdir())
        uid = os.geteuid()
        for path in folder.glob("gpuperf-*-*-*"):
            if not left_by_dead(path.name, _STALE_KINDS):
                continue
            try:
                st = os.lstat(path)
                if stat.S_ISDIR(st.st_mode) and st.st_uid == uid:
                    shutil.rmtree(path)
                    removed.append(path)
            except OSError:
                continue
    except Exception:
        pass
    return removed


#: What the command that captures a test later leaves out of the session's options (a
#: search of the history, shell/bisect.py, is its session's own, in no command it starts).
_NOT_IN_CAPTURE_COMMAND = OUTPUT_OPTIONS | frozenset(
    {"save", "baseline", "ab", "only", "skip", "disable", "capture", "capture_session_budget"}
    | {"bisect", "bisect_bad", "bisect_budget"}
)
#: gpuperf options a child never inherits: those, the device and the capture settings (a
#: child never captures: only the parent's collectors do).
_NOT_FORWARDED = _NOT_IN_CAPTURE_COMMAND | {
    "device",
    "artifacts_dir",
    "capture_timeout",
    "capture_budget",
    "capture_skip",
    "capture_calls",
    "ncu_kernels",
    "inventory",
}


def forwarded_args(run: RunContext) -> list[str]:
    """The parent's command-line settings, as arguments for a child pytest."""
    args = ["--rootdir", str(run.rootpath), "-p", "no:cacheprovider", "-p", "no:randomly"]
    if run.inipath is not None:
        args += ["-c", str(run.inipath)]
    return (
        args
        + _plugin_args(run)
        + _override_args(run, _NOT_FORWARDED)
        + _cli_settings(run, _NOT_FORWARDED)
    )


def _override_args(run: RunContext, leave_out: frozenset[str]) -> list[str]:
    """The command line's ``-o gpuperf_NAME=VALUE`` ini overrides, but ``leave_out``'s."""
    out: list[str] = []
    inv = list(run.invocation_args)
    for i, a in enumerate(inv):
        if a in ("-o", "--override-ini") and i + 1 < len(inv):
            value = inv[i + 1]
        elif a.startswith("--override-ini="):
            value = a.split("=", 1)[1]
        elif a.startswith("-o") and len(a) > 2:
            value = a[2:]
        else:
            continue
        key = value.split("=", 1)[0].strip()
        if key.startswith("gpuperf_") and key.removeprefix("gpuperf_") not in leave_out:
            out += ["-o", value]
    return out


def _plugin_args(run: RunContext) -> list[str]:
    """The ``-p`` plugins of the command line (but xdist: one test runs in one process)."""
    args: list[str] = []
    inv = list(run.invocation_args)
    for i, a in enumerate(inv):
        if a == "-p" and i + 1 < len(inv) and not inv[i + 1].startswith(("no:xdist", "xdist")):
            args += ["-p", inv[i + 1]]
        elif a.startswith("-p") and len(a) > 2 and "xdist" not in a:
            args.append(a)
    return args


def _cli_settings(run: RunContext, leave_out: frozenset[str]) -> list[str]:
    """The gpuperf options given on the command line, but ``leave_out``, each as the user
    wrote it (``Setting.given``), so that the child parses what this session parsed."""
    args: list[str] = []
    for name, setting in run.resolved.settings.items():
        if setting.source != "cli" or name in leave_out:
            continue
        opt = OPTIONS_BY_NAME[name]
        given = setting.given if setting.given is not None else option_text(setting.value)
        if opt.flag:
            if given is True or setting.value is True:
                args.append(opt.flag_name)
        elif given is not None:
            args.append(f"{opt.flag_name}={given}")
    return args


def capture_command(run: RunContext, nodeid: str) -> str:
    """The command that captures ``nodeid``'s evidence later, from where this session ran:
    the test alone against this session's reference, ``--gpuperf-capture=always``."""
    path, sep, rest = nodeid.partition("::")
    target = os.path.relpath(run.rootpath / path, run.invocation_dir) + sep + rest
    exe = Path(sys.executable)  # its name where PATH finds it, else its full path
    found = shutil.which(exe.name)
    python = exe.name if found and Path(found).resolve() == exe.resolve() else str(exe)
    args = [python, "-m", "pytest", target]
    given = {a.split("=", 1)[0] for a in run.invocation_args}
    if run.inipath is not None and given & {"-c", "--config-file"}:
        args += ["-c", os.path.relpath(run.inipath, run.invocation_dir)]
    if "--rootdir" in given:
        args += ["--rootdir", os.path.relpath(run.rootpath, run.invocation_dir)]
    args += _plugin_args(run) + _cli_settings(run, _NOT_IN_CAPTURE_COMMAND)
    session = run.settings.session
    if session.ab:
        args.append(f"--gpuperf-ab={session.ab}")
    elif session.baseline:
        args.append(f"--gpuperf-baseline={session.baseline}")
    args.append("--gpuperf-capture=always")
    return shlex.join(args)


class Tree(Protocol):
    """A checked-out tree (:class:`.ab_tree.BaseTree`, which imports this module)."""

    def base_of(self, path: Path) -> Path: ...
    def env(self, side: str) -> dict[str, str]: ...


def run_child(
    run: RunContext,
    nodeid: str | Sequence[str],
    *,
    device: str,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    prefix: Sequence[str] = (),
    timeout_s: float = 600.0,
    log_path: Path | None = None,
    spare: SparePython | None = None,
    drop_env: Sequence[str] = (),
    tree: Tree | None = None,
) -> ChildRun:
    """Run ``nodeid`` (or several, in order) in one new process with the parent's settings,
    here or in ``tree``'s rootdir, ini and code; ``drop_env``: ours the child must not inherit."""
    nodeids = [nodeid] if isinstance(nodeid, str) else list(nodeid)
    args, root, cwd = forwarded_args(run), run.rootpath, run.invocation_dir
    if tree is not None:
        root, cwd = tree.base_of(root), tree.base_of(cwd)
        args, env = _in_tree(args, root, tree), {**tree.env("base"), **(env or {})}
    return run_pytest_child(
        rooted(root, nodeids),
        device=device,
        args=[*args, *extra_args],
        env=env,
        prefix=prefix,
        timeout_s=timeout_s,
        cwd=cwd,
        log_path=log_path,
        spare=spare,
        drop_env=("PYTEST_ADDOPTS", *drop_env),
    )


def _in_tree(forwarded: list[str], root: Path, tree: Tree) -> list[str]:
    """A ``tree`` process's arguments: its rootdir ``root``, its ini file."""
    args, out = iter(forwarded), []
    for a in args:
        if a == "--rootdir":
            next(args)  # the current tree's
            out += [a, str(root)]
        elif a == "-c":
            ini = tree.base_of(Path(next(args)))
            out += [a, str(ini)] if ini.exists() else []
        else:
            out.append(a)
    return out


def rooted(root: Path, nodeids: Sequence[str]) -> list[str]:
    """``nodeids`` with their files under ``root``: a child runs from another folder or tree."""
    parts = (n.partition("::") for n in nodeids)
    return [str(root / path) + sep + rest for path, sep, rest in parts]


def run_pytest_child(
    targets: Sequence[str],
    *,
    device: str,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    drop_env: Sequence[str] = ("PYTEST_ADDOPTS",),
    prefix: Sequence[str] = (),
    timeout_s: float,
    cwd: Path | str | None,
    log_path: Path | None = None,
    spare: SparePython | None = None,
) -> ChildRun:
    """A child pytest started, its results read back (a group's ranks start in group.py, with
    :func:`child_flags` too); its process group is killed whole at the timeout (a profiled
    grandchild must not outlive us). ``spare``: a Python started ahead runs one without a
    ``prefix``."""
    with tempfile.TemporaryDirectory(prefix=temp_prefix("gpuperf-child")) as tmp:
        out = Path(tmp) / "results.json"
        cmd = [*prefix, sys.executable, "-m", "pytest", *targets, *child_flags(device)]
        cmd += [f"--gpuperf-json={out}", *args]
        child_env = child_environ(env, drop_env)
        if spare is not None and not prefix and spare.usable:
            run = spare.run(
                "pytest", cmd[3:], env=child_env, cwd=cwd, timeout_s=timeout_s, log_path=log_path
            )
        else:
            run = run_process(cmd, timeout_s=timeout_s, env=child_env, cwd=cwd, log_path=log_path)
        code, text, wall = (-9 if run.timed_out else run.returncode), run.output, run.wall_s
        if run.error:
            text = f"cannot start {cmd[0]}: {run.error}"
        results: list[Result] = []
        if out.exists():
            try:
                results = load_results(json.loads(out.read_text()))
            except (ValueError, KeyError):
                results = []
        tail = "\n".join(text.strip().splitlines()[-15:])
        return ChildRun(results, code, wall, tail, cmd)


def child_environ(env: Mapping[str, str] | None, drop: Sequence[str]) -> dict[str, str]:
    """A child's environment: ours without ``drop``, with :data:`CHILD_ENV`, our pid to watch
    (it ends itself once we are gone) and ``env``."""
    ours = {k: v for k, v in os.environ.items() if k not in drop}
    return {**ours, CHILD_ENV: "1", **parent_env(), **(env or {})}


def child_flags(device: str) -> list[str]:
    """What every child pytest's command line has: quiet, :data:`CHILD_FLAG`, its device."""
    return ["-q", CHILD_FLAG, f"--gpuperf-device={device}"]


def is_child(config: pytest.Config) -> bool:
    """Whether this pytest is a child the plugin started (its command line has
    :data:`CHILD_FLAG`; :data:`CHILD_ENV` alone may have leaked into a user's shell)."""
    return bool(config.getoption("gpuperf_child", False))


def leaked_child_marker(config: pytest.Config) -> str | None:
    """A :data:`CHILD_ENV` in a session the plugin did not start: removed from the
    environment, and the warning to show returned; None otherwise."""
    if CHILD_ENV not in os.environ or is_child(config):
        return None
    value = os.environ.pop(CHILD_ENV)
    return (
        f"{CHILD_ENV}={value!r} is set in the environment, but this pytest was not started "
        f"by pytest-gpuperf (its command line has no {CHILD_FLAG}): ignored, and this session "
        f"saves, reports and captures as usual. Unset {CHILD_ENV} where it was exported."
    )


def matching(results: Sequence[Result], key: str) -> Result | None:
    for r in results:
        if r.id.key == key:
            return r
    return None
