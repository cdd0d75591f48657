"""``pytest-gpuperf demo``: save a baseline, compare unchanged code (must pass), plant a
slowdown (``GPUPERF_DEMO_PLANT=row_loop``) and compare again (must fail, with a diagnosis).
It judges only what a user sees (exit codes, the results JSON), so CI can run it; pytest
runs in child processes, never here."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from pytest_gpuperf.units import fmt_time

BASELINE = "demo"
TEST_FILE = "test_demo.py"
PLANT_ENV = "GPUPERF_DEMO_PLANT"
PLANT = "row_loop"
PLANTED_TEST = "test_normalize_rows"
BENCHMARKS = ("test_matmul", "test_layer_norm", PLANTED_TEST)
#: The plugin's module, loaded by name: the demo's runs do not autoload plugins.
PLUGIN = "pytest_gpuperf.plugin"
PLUGINS = ("-p", PLUGIN, "-p", "no:cacheprovider", "-p", "no:randomly")
#: Only the first save keeps a kernel inventory (the kernels of the demo's benchmarks do not
#: change between runs; each inventory costs a profiler pass per benchmark).
LATER_SAVES = ("--gpuperf-inventory=never",)
#: Pass or fail by pytest's exit code (pytest.ExitCode.OK / TESTS_FAILED).
OK, TESTS_FAILED = 0, 1


def prepare(folder: Path) -> Path:
    """The demo's folder: its benchmarks, and an ini that makes it the rootdir."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(Path(__file__).with_name("benchmarks.py"), folder / TEST_FILE)
    (folder / "pytest.ini").write_text(
        "[pytest]\n# pytest-gpuperf demo: this folder is the rootdir; nothing else applies\n",
        encoding="utf-8",
    )
    return folder


def pytest_command(folder: Path, *args: str) -> list[str]:
    """``python -m pytest test_demo.py`` with this plugin alone (see :func:`child_env`)."""
    where = ("-c", str(folder / "pytest.ini"), "--rootdir", str(folder))
    return [sys.executable, "-m", "pytest", TEST_FILE, *where, *PLUGINS, *args]


def child_env(plant: bool) -> dict[str, str]:
    """The user's environment without their pytest options and plugins (each costs every
    process its import, and a process starts for every run, confirmation and capture)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", PLANT_ENV)}
    return env | {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"} | ({PLANT_ENV: PLANT} if plant else {})


@dataclass
class Outcome:
    """What one pytest run showed: its exit code, and by test name what its JSON says."""

    returncode: int
    kinds: dict[str, str] = field(default_factory=dict)
    medians: dict[str, float] = field(default_factory=dict)
    diagnosed: set[str] = field(default_factory=set)
    ratios: dict[str, float] = field(default_factory=dict)
    saved_to: str | None = None


def read_outcome(returncode: int, doc: Mapping[str, Any] | None) -> Outcome:
    out = Outcome(returncode)
    if not doc:  # none written
        return out
    out.saved_to = (doc.get("session") or {}).get("saved_to")
    for r in doc.get("results", []):
        test = str(r["id"]["nodeid"]).rsplit("::", 1)[-1]
        c = r.get("comparison") or {}
        out.kinds[test] = str(c.get("kind") or "")
        median = (r.get("summary") or {}).get("median")
        if isinstance(median, (int, float)):
            out.medians[test] = float(median)
        ratio = c.get("ratio")
        if isinstance(ratio, (int, float)):
            out.ratios[test] = float(ratio)
        if c.get("diagnosis"):
            out.diagnosed.add(test)
    return out


def check_save(o: Outcome, run: int) -> str | None:
    if o.returncode != OK:
        return f"save run {run} did not pass (pytest exit code {o.returncode})"
    missing = [t for t in BENCHMARKS if t not in o.medians]
    if missing:
        return f"save run {run} measured no {', '.join(missing)}"
    if o.saved_to != BASELINE:
        return f"save run {run} did not save into the baseline {BASELINE!r}"
    return None


def check_unchanged(o: Outcome) -> str | None:
    regressed = sorted(t for t, k in o.kinds.items() if k == "regression")
    if regressed:
        return (
            f"the unchanged code failed: {', '.join(regressed)} came out a regression (a false "
            "alarm)"
        )
    if o.returncode != OK:
        return f"the unchanged code did not pass (pytest exit code {o.returncode})"
    uncompared = [t for t in BENCHMARKS if o.kinds.get(t) in (None, "", "no-baseline")]
    if uncompared:
        return f"{', '.join(uncompared)} found no baseline to compare with"
    return None


def check_planted(o: Outcome) -> str | None:
    kind = o.kinds.get(PLANTED_TEST)
    if kind != "regression":
        return (
            f"the planted slowdown of {PLANTED_TEST} was not caught: its verdict is "
            f"{kind or 'missing'}"
        )
    others = sorted(t for t, k in o.kinds.items() if k == "regression" and t != PLANTED_TEST)
    if others:
        return f"besides the planted one, {', '.join(others)} came out a regression (false alarm)"
    if o.returncode != TESTS_FAILED:
        return f"pytest exited {o.returncode}, not 1 (tests failed)"
    if PLANTED_TEST not in o.diagnosed:
        return f"{PLANTED_TEST} failed without a diagnosis (the capture found nothing)"
    return None


@dataclass
class Demo:
    folder: Path
    runs: int
    out: TextIO
    started: float = field(default_factory=time.monotonic)

    def say(self, text: str = "") -> None:
        from pytest_gpuperf.reporting.terminal import fold

        print(fold(text) if text else text, file=self.out, flush=True)

    def pytest(
        self, name: str, *args: str, plant: bool = False, live: bool = True
    ) -> tuple[Outcome, str]:
        """One pytest process; its output shown as it comes (``live``) or kept."""
        results = self.folder / f"{name}.json"
        results.unlink(missing_ok=True)
        cmd = pytest_command(self.folder, f"--gpuperf-json={results.name}", *args)
        self.out.flush()
        done = subprocess.run(
            cmd,
            cwd=self.folder,
            env=child_env(plant),
            stdout=None if live else subprocess.PIPE,
            stderr=None if live else subprocess.STDOUT,
            text=True,
            check=False,
        )
        doc = None
        with contextlib.suppress(FileNotFoundError, ValueError):
            doc = json.loads(results.read_text(encoding="utf-8"))
        return read_outcome(done.returncode, doc), done.stdout or ""

    def shown(self, *args: str, plant: bool = False) -> str:
        env = f"{PLANT_ENV}={PLANT} " if plant else ""
        return f"  $ {env}pytest {TEST_FILE} " + " ".join(args)

    def run(self) -> int:
        self.say("pytest-gpuperf demo: save a baseline, compare unchanged code, catch a slowdown")
        self.say(f"  in {self.folder}: {TEST_FILE} (3 benchmarks), the baseline in .gpuperf/")
        self.say()
        problem = self.save() or self.unchanged() or self.planted()
        took = time.monotonic() - self.started
        self.say()
        if problem is not None:
            self.say(f"demo: NOT as designed ({took:.0f} s): {problem}")
            self.say(f"  {hint()}")
            self.say(f"  everything is in {self.folder}")
            return 1
        self.say(
            f"demo: as designed ({took:.0f} s): a baseline saved from {self.runs} runs, the "
            "unchanged code passed, the planted slowdown failed with its diagnosis."
        )
        self.say(f"  look around in {self.folder}: report.html (open it in a browser), .gpuperf/")
        return 0

    def save(self) -> str | None:
        self.say(
            f"[1/3] Save a baseline: {self.runs} runs of the unchanged benchmarks, each in a "
            "fresh process"
        )
        self.say("      (the verdict learns the noise between runs from several)")
        self.say(self.shown(f"--gpuperf-save={BASELINE}") + f"    # {self.runs} times")
        self.say(
            f"      (runs 2 to {self.runs} with {' '.join(LATER_SAVES)}: one kernel inventory "
            "is enough for the diagnosis)"
        )
        for i in range(1, self.runs + 1):
            t0 = time.monotonic()
            later = LATER_SAVES if i > 1 else ()
            o, log = self.pytest(
                f"save-{i}", f"--gpuperf-save={BASELINE}", "-q", *later, live=False
            )
            problem = check_save(o, i)
            if problem is not None:
                self.say(log[-4000:])
                return problem
            medians = ", ".join(f"{t} {fmt_time(o.medians[t])}" for t in BENCHMARKS)
            self.say(f"  run {i} of {self.runs}: {medians} ({time.monotonic() - t0:.1f} s)")
        self.say()
        return None

    def unchanged(self) -> str | None:
        self.say("[2/3] Compare the unchanged code with the baseline: it passes")
        args = (f"--gpuperf-baseline={BASELINE}",)
        self.say(self.shown(*args))
        o, _ = self.pytest("unchanged", *args)
        problem = check_unchanged(o)
        if problem is None:
            kinds = ", ".join(f"{t} {o.kinds[t].replace('-', ' ')}" for t in BENCHMARKS)
            self.say(f"[2/3] as designed: passed ({kinds})")
            self.say()
        return problem

    def planted(self) -> str | None:
        self.say(
            f"[3/3] Plant a slowdown in {PLANTED_TEST} (rows normalised one by one in a Python "
            "loop) and compare: it fails, saying where the time went"
        )
        # torch.profiler is enough to say where the time went; Nsight would add minutes here
        args = (
            f"--gpuperf-baseline={BASELINE}",
            "--gpuperf-capture-skip=nsys,ncu",
            "--gpuperf-html=report.html",
        )
        self.say(self.shown(*args, plant=True))
        o, _ = self.pytest("planted", *args, plant=True)
        problem = check_planted(o)
        if problem is None:
            ratio = o.ratios.get(PLANTED_TEST)
            change = f" ({ratio:.1f}x slower)" if ratio else ""
            self.say(
                f"[3/3] as designed: {PLANTED_TEST} failed as a regression{change}, with its "
                "diagnosis; the other benchmarks passed"
            )
        return problem


def hint() -> str:
    try:
        load = os.getloadavg()[0]
        cores = os.cpu_count() or 1
        busy = f" (load average {load:.1f} on {cores} cores)" if load > 0.5 * cores else ""
    except OSError:
        busy = ""
    return (
        f"Timings depend on a quiet machine{busy}: stop other work and run the demo again. If "
        "it goes wrong again, please report it with the output above."
    )


def _refusal(folder: Path) -> str | None:
    """Why ``folder`` cannot hold the demo, which writes its files there and runs pytest in
    it: only a new folder or an empty one (None: it can)."""
    if folder.is_symlink():
        target = os.readlink(folder)
        return f"{folder} is a symbolic link (to {target}): give the path of a real folder"
    if folder.exists() and not folder.is_dir():
        return f"{folder} exists and is not a folder"
    if not folder.exists():
        return None
    if (folder / ".gpuperf").exists():
        return f"{folder} holds an earlier demo's baseline (.gpuperf/)"
    try:
        entries = sorted(e.name for e in os.scandir(folder))
    except OSError as e:
        return f"{folder} cannot be read: {e.strerror or e}"
    if entries:
        shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
        return (
            f"{folder} is not empty ({len(entries)} entries: {shown}); the demo would "
            "overwrite files there and run its conftest.py"
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"{folder} is not writable"
    return None


def demo_folder(path: str | None) -> Path:
    from pytest_gpuperf.errors import GpuPerfError

    if not path:
        return prepare(Path(tempfile.mkdtemp(prefix="gpuperf-demo-")))
    folder = Path(path)
    fix = "give a new or empty folder (--path), or leave --path out for a new temporary one"
    problem = _refusal(folder)
    if problem is not None:
        raise GpuPerfError(f"{problem}: {fix}")
    try:
        return prepare(folder.resolve())
    except OSError as e:
        raise GpuPerfError(
            f"cannot make the demo's folder {folder}: {e.strerror or e}: {fix}"
        ) from e
