"""Run one test again in a fresh pytest process and read back what it measured.

Used to confirm a suspect verdict (the unit of evidence is the process, so a
second opinion must come from a new process) and by the artifact collectors
(a test re-run under nsys, ncu or TORCH_TRACE). The child gets the parent's
rootdir, ini file, ``-p`` plugins and gpuperf settings, and the hidden flag
``--gpuperf-child``, which turns off everything a child must not do: save or
compare baselines, capture artifacts, re-run tests itself, write reports.
:func:`run_pytest_child` is the one place a child pytest's command is built.
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
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.artifacts.collectors.base import ChildRun
from pytest_gpuperf.artifacts.collectors.process import parent_env, run_process
from pytest_gpuperf.baseline.fileio import pid_alive
from pytest_gpuperf.model import Result
from pytest_gpuperf.reporting.json_report import load_results
from pytest_gpuperf.reporting.outputs import OUTPUT_OPTIONS
from pytest_gpuperf.shell.options import OPTIONS_BY_NAME

if TYPE_CHECKING:
    import pytest

    from pytest_gpuperf.artifacts.collectors.process import SparePython
    from pytest_gpuperf.shell.settings import RunContext

CHILD_FLAG = "--gpuperf-child"
CHILD_ENV = "GPUPERF_CHILD"

#: The temp folders of a session's processes (``gpuperf-child``; the A/B base collection's
#: ``gpuperf-ab-check``; a torchrun rank's fresh peers' ``gpuperf-peer``; the kernel
#: inventory's and a rank's profile, ``gpuperf-inventory`` and ``gpuperf-group-profile``),
#: named ``KIND-PID-XXXXXXXX`` after the process that made them (:func:`temp_prefix`) so
#: that a later session can tell those of a dead one.
_STALE_NAME = re.compile(
    r"gpuperf-(?:child|ab-check|peer|inventory|group-profile)-([1-9][0-9]{0,9})-[a-z0-9_]+"
)


def temp_prefix(kind: str) -> str:
    """The prefix of a temp folder of this session's: ``KIND-PID-``."""
    return f"{kind}-{os.getpid()}-"


def remove_stale_folders(tmp: Path | None = None) -> list[Path]:
    """Remove the children's temp folders that a session killed outright left in ``tmp``
    (the temp folder): this user's folders whose name's pid runs no process. A name that
    does not parse, a live pid, a link, a file and another user's folder are left alone.
    Never raises; returns what it removed."""
    removed: list[Path] = []
    try:
        folder = Path(tmp or tempfile.gettempdir())
        uid = os.geteuid()
        for path in folder.glob("gpuperf-*-*-*"):
            m = _STALE_NAME.fullmatch(path.name)
            if m is None or pid_alive(int(m.group(1))):
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


#: gpuperf options a child never inherits (it has its own say, or must not do them): every
#: output of the session's end (reporting/outputs.py; the child writes its JSON where
#: run_pytest_child says), and these.
_NOT_FORWARDED = OUTPUT_OPTIONS | frozenset(
    {
        "save",
        "baseline",
        "ab",
        "only",
        "skip",
        "disable",
        "device",
        "capture",
        # capture settings: a child never captures (only the parent's collectors do)
        "artifacts_dir",
        "capture_timeout",
        "capture_budget",
        "capture_session_budget",
        "capture_skip",
        "capture_calls",
        "ncu_kernels",
        "inventory",
    }
)


#: What the command that captures a test later leaves out of the session's options: the
#: outputs, the save, what selects or compares (the command names its own), the capture's
#: own switch and the session's budget (one test fits in it).
_NOT_IN_CAPTURE_COMMAND = OUTPUT_OPTIONS | frozenset(
    {"save", "baseline", "ab", "only", "skip", "disable", "capture", "capture_session_budget"}
)
#: A search of the history (shell/bisect.py) is its session's own, in no command it starts.
_BISECT = frozenset({"bisect", "bisect_bad", "bisect_budget"})
_NOT_FORWARDED |= _BISECT
_NOT_IN_CAPTURE_COMMAND |= _BISECT


def forwarded_args(run: RunContext) -> list[str]:
    """The parent's settings, as arguments for a child pytest: those given on the command
    line (``run.resolved`` knows where each value came from), in the options' own words."""
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
    """The ``-o gpuperf_NAME=VALUE`` ini overrides of the command line, as given (a child
    reads the ini file, not this command line), but those of ``leave_out``."""
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
    """The gpuperf options given on the command line, but ``leave_out``, as arguments: each
    exactly as the user wrote it (``Setting.given``), whatever the type its parser makes of
    it (a tuple, a bool, a number), so that the child parses what this session parsed."""
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


def option_text(value: Any) -> str | None:
    """A parsed option value back as the text its parser reads (a setting made without the
    user's own words): ``("median", "ci")`` -> ``median,ci``, ``True`` -> ``true``; None
    for a value no text stands for (a callable, None)."""
    if value is None or callable(value):
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list, set, frozenset)):
        return ",".join(str(x) for x in value)
    return str(value)


def capture_command(run: RunContext, nodeid: str) -> str:
    """The one command that captures ``nodeid``'s evidence later, from where this session ran:
    the test alone, compared with this session's baseline (or A/B reference), captured
    whatever its verdict (``--gpuperf-capture=always``), with the session's other options."""
    path, sep, rest = nodeid.partition("::")
    target = os.path.relpath(run.rootpath / path, run.invocation_dir) + sep + rest
    args = [_interpreter(), "-m", "pytest", target]
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


def _interpreter() -> str:
    """This session's Python as a command: its name where that name finds it on PATH (the
    usual activated venv), else its full path, so that the command works as printed."""
    exe = Path(sys.executable)
    found = shutil.which(exe.name)
    return exe.name if found and Path(found).resolve() == exe.resolve() else str(exe)


def run_child(
    run: RunContext,
    nodeid: str | Sequence[str],
    *,
    device: str,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    prefix: Sequence[str] = (),
    timeout_s: float = 600.0,
    cwd: Path | None = None,
    log_path: Path | None = None,
    spare: SparePython | None = None,
    drop_env: Sequence[str] = (),
) -> ChildRun:
    """Run ``nodeid`` (or several, in order) in one new process, optionally under ``prefix``
    (e.g. ``nsys profile``), with the parent's settings (``spare``: see run_pytest_child).

    The whole process tree is killed after ``timeout_s``; ``log_path`` gets the full output.
    ``drop_env``: variables of ours the child must not inherit (a torchrun rank's, for a
    child that is no rank).
    """
    nodeids = [nodeid] if isinstance(nodeid, str) else list(nodeid)
    targets = []
    for n in nodeids:
        path, _, rest = n.partition("::")
        targets.append(str(run.rootpath / path) + (f"::{rest}" if rest else ""))
    return run_pytest_child(
        targets,
        device=device,
        args=[*forwarded_args(run), *extra_args],
        env=env,
        prefix=prefix,
        timeout_s=timeout_s,
        cwd=cwd or run.invocation_dir,
        log_path=log_path,
        spare=spare,
        drop_env=("PYTEST_ADDOPTS", *drop_env),
    )


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
    """The one place a child pytest is started: ``[prefix] python -m pytest TARGETS -q
    --gpuperf-child --gpuperf-device=DEVICE --gpuperf-json=TMP ARGS``, its results read back.

    The child's environment is ours without ``drop_env``, with ``GPUPERF_CHILD=1``, this
    process's id for the child to watch (it ends itself when we are killed outright) and
    ``env``. It runs in its own process group, killed whole at the timeout: a child under
    a profiler (nsys, ncu) is a grandchild that must not outlive us. ``spare``, a Python
    started ahead with its imports done, runs a child without a ``prefix`` instead of a new
    process (:class:`~pytest_gpuperf.artifacts.collectors.process.SparePython`).
    """
    with tempfile.TemporaryDirectory(prefix=temp_prefix("gpuperf-child")) as tmp:
        out = Path(tmp) / "results.json"
        cmd = [
            *prefix,
            sys.executable,
            "-m",
            "pytest",
            *targets,
            "-q",
            CHILD_FLAG,
            f"--gpuperf-device={device}",
            f"--gpuperf-json={out}",
            *args,
        ]
        child_env = dict(os.environ)
        for name in drop_env:
            child_env.pop(name, None)
        child_env[CHILD_ENV] = "1"
        child_env.update(parent_env())  # the child ends itself once we are gone
        if env:
            child_env.update(env)
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


def is_child(config: pytest.Config) -> bool:
    """Whether this pytest is a child the plugin started: every command line
    :func:`run_pytest_child` and the group launcher build carries :data:`CHILD_FLAG`
    (its environment's :data:`CHILD_ENV` alone may have leaked into a user's shell)."""
    return bool(config.getoption("gpuperf_child", False))


def leaked_child_marker(config: pytest.Config) -> str | None:
    """A :data:`CHILD_ENV` in the environment of a session the plugin did not start: it is
    removed from this process's environment (so nothing here, nor a child of this session,
    takes the session for a child) and the warning to show is returned; None otherwise."""
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
