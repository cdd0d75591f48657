"""Tests marked ``world_size=N``, in a process that is no rank: their ranks are started here.

Such a test is a :class:`GroupItem` that spawns N pytest ranks (:mod:`.ranks`); consecutive
tests of one world size share one start. The ranks join through a store this process hosts
(no two groups race for a port), which holds every device's lock while they run; they report
to the group's folder (``GPUPERF_GROUP_DIR``). docs/distributed.md.
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.artifacts.collectors.base import ChildRun
from pytest_gpuperf.errors import GpuPerfError
from pytest_gpuperf.measure.distributed import nccl_environment
from pytest_gpuperf.measure.ranks import GROUP_DIR_ENV, RANK_VARS
from pytest_gpuperf.model import Result, short_test_id
from pytest_gpuperf.shell.locks import devices_locked
from pytest_gpuperf.shell.markers import world_size
from pytest_gpuperf.shell.progress import silent
from pytest_gpuperf.shell.rerun import child_environ, child_flags, forwarded_args, rooted, run_child
from pytest_gpuperf.shell.xdist import machine_gpus, nvml_uuids

if TYPE_CHECKING:
    from pytest_gpuperf.shell.session import GpuPerfSession
    from pytest_gpuperf.shell.settings import RunContext, Settings

RESULTS_FILE = "results.jsonl"
#: set on the ranks when the session keeps their collectives' profile (a save)
PROFILE_ENV = "GPUPERF_GROUP_PROFILE"
#: how often the launcher looks at its ranks, seconds
POLL_S = 0.25
#: how long a rank may take to start (import torch, collect) before it counts as hung
STARTUP_S = 120.0
#: how long a rank whose session ended may take to exit
EXIT_S = 30.0
#: environment of the launching process that its ranks must not inherit
DROPPED_ENV = (
    "PYTEST_ADDOPTS",
    "PYTEST_CURRENT_TEST",
    "PYTEST_XDIST_WORKER",
    "PYTEST_XDIST_WORKER_COUNT",
    "PYTEST_XDIST_TESTRUNUID",
    *RANK_VARS,
)


class GroupError(GpuPerfError):
    """A test's ranks crashed, hung or could not start."""

    __module__ = "pytest_gpuperf"


def status_path(folder: Path | str, rank: int) -> Path:
    return Path(folder) / f"rank-{rank}.json"


def log_path(folder: Path | str, rank: int) -> Path:
    return Path(folder) / f"rank-{rank}.log"


def write_json_atomic(path: Path, doc: Mapping[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, default=str))
    os.replace(tmp, path)


@dataclass
class RankStatus:
    """A rank's status file: where it is, and how each of its tests went."""

    rank: int
    #: the test it is in, and since when (time.time()); None between tests
    test: str | None = None
    since: float | None = None
    #: nodeid -> {"outcome": passed|failed|skipped, "when": setup|call|teardown, "text": ...}
    outcomes: dict[str, dict[str, Any]] = field(default_factory=dict)
    finished: bool = False
    #: when the rank last wrote its status (None: never)
    written: float | None = None

    @classmethod
    def read(cls, folder: Path | str, rank: int) -> RankStatus:
        path = status_path(folder, rank)
        try:
            d = json.loads(path.read_text())
            written = path.stat().st_mtime
        except (OSError, ValueError):
            return cls(rank)
        outcomes = dict(d.get("outcomes") or {})
        return cls(rank, d.get("test"), d.get("since"), outcomes, bool(d.get("finished")), written)


@dataclass
class Outcome:
    """How one test went on its ranks, as this process reports it."""

    kind: str  # passed, failed, skipped, error
    text: str = ""
    results: list[Result] = field(default_factory=list)


def outcome_of(nodeid: str, statuses: Sequence[RankStatus], results: list[Result]) -> Outcome:
    """Failed where any rank failed, skipped where rank 0 skipped, else passed."""

    def of(outcome: str) -> list[tuple[int, dict[str, Any]]]:
        return [(s.rank, s.outcomes[nodeid]) for s in statuses
                if s.outcomes.get(nodeid, {}).get("outcome") == outcome]  # fmt: skip

    failed, skipped = of("failed"), of("skipped")
    if failed:
        failed.sort(key=lambda ro: _after_a_peer(str(ro[1].get("text", ""))))
        lines = [f"rank {r} ({o.get('when', 'call')}) skipped it: {o.get('text', '')}; a rank "
                 "that skips leaves the others waiting in its collectives: skip on every rank, "
                 "or on none" for r, o in skipped] + [
            f"rank {r} ({o.get('when', 'call')})"
            + (" (when a peer left)" if _after_a_peer(str(o.get("text", ""))) else "")
            + f": {o.get('text', '')}"
            for r, o in failed
        ]  # fmt: skip
        head = f"the test failed on {len(failed)} of its {len(statuses)} rank(s)"
        if skipped:
            head += f", after rank {', '.join(str(r) for r, _ in skipped)} skipped it alone"
        return Outcome("failed", head + ":\n" + "\n".join(lines))
    lead = statuses[0].outcomes.get(nodeid, {}) if statuses else {}
    if lead.get("outcome") == "skipped":
        return Outcome("skipped", str(lead.get("text") or "skipped on its ranks"))
    return Outcome("passed", results=results)


#: what a rank's error says when it failed because a peer stopped (gloo, NCCL, c10d)
_PEER_LEFT = (
    "Connection closed by peer",
    "remote worker",
    "Connection reset by peer",
    "Broken pipe",
    "NCCL communicator was aborted",
    "Watchdog caught collective",
)


def _after_a_peer(text: str) -> bool:
    return any(s in text for s in _PEER_LEFT)


def read_results(folder: Path | str) -> dict[str, list[Result]]:
    """Rank 0's results, by test (each line of ``results.jsonl`` is one test's)."""
    out: dict[str, list[Result]] = {}
    try:
        lines = (Path(folder) / RESULTS_FILE).read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            d = json.loads(line)
            out[str(d["nodeid"])] = [Result.from_dict(r) for r in d["results"]]
        except (ValueError, KeyError, TypeError):
            continue  # a line cut short by a kill: that test has no results
    return out


_FRAME = re.compile(r'File "([^"]+)", line (\d+) in (\S+)')


def where_it_was(log_text: str) -> str | None:
    """The innermost frame of a rank's faulthandler stack, and the test's own under library
    code: ``in all_reduce (c10d.py:2950), from t.py:12 in test_step``."""
    block = log_text.rsplit("Current thread", 1)
    if len(block) < 2:
        block = log_text.rsplit("Thread 0x", 1)
        if len(block) < 2:
            return None
    frames = _FRAME.findall(block[1].split("\n\n", 1)[0])
    if not frames:
        return None
    path, line, func = frames[0]
    where = f"in {func} ({Path(path).name}:{line})"
    here = str(Path(__file__).resolve().parents[1])  # this package: the plugin's own frames
    libs = ("site-packages", "dist-packages", f"{os.sep}lib{os.sep}python", here)
    if any(s in path for s in libs):
        own = next((f for f in frames if not any(s in f[0] for s in libs)), None)
        if own is not None:
            where += f", from {Path(own[0]).name}:{own[1]} in {own[2]}"
    return where


def log_text(folder: Path | str, rank: int) -> str:
    try:
        return log_path(folder, rank).read_text(errors="replace")
    except OSError:
        return ""


#: One rank: its stack to its log when the launcher asks (SIGUSR1; through a copy of the log's
#: descriptor, which pytest's capture does not take), pytest, and no atexit (a process group
#: torn down at exit must not hang it).
RANK_MAIN = """import faulthandler, os, signal, sys, pytest
stacks = os.fdopen(os.dup(2), "w")
if hasattr(signal, "SIGUSR1"):
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
code = pytest.main(sys.argv[1:])
sys.stdout.flush()
os._exit(int(code))
"""


@dataclass
class LaunchSpec:
    """One start of a group's ranks, watched until they end, fail or overstay."""

    nodeids: list[str]
    world_size: int
    args: list[str]
    env: dict[str, str]
    cwd: str
    folder: Path
    timeout_s: float
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    started: float = 0.0

    def run(self) -> tuple[dict[str, Outcome], str | None]:
        """Each finished test's outcome, and what went wrong (None: nothing)."""
        store = tcp_store(self.world_size)
        self.env["MASTER_PORT"] = str(store.port)
        try:  # a rank that fails to start ends those started before it
            self.start()
            problem = self.watch()
        except BaseException:
            self.kill(dump=False)
            raise
        statuses, results = self.statuses(), read_results(self.folder)
        out: dict[str, Outcome] = {}
        for nodeid in self.nodeids:
            if all(s.outcomes.get(nodeid, {}).get("done") for s in statuses):
                out[nodeid] = outcome_of(nodeid, statuses, results.get(nodeid, []))
                continue
            if problem is not None:
                out[nodeid] = Outcome("error", problem)
            break  # not reached: the tests left start ranks of their own
        del store
        return out, problem

    def start(self) -> None:
        """Start the ranks, each in its own process group, with a child's environment (less
        :data:`DROPPED_ENV`) and its rank's variables; each one's output to its log."""
        env = child_environ({**self.env, "PYTHONUNBUFFERED": "1"}, DROPPED_ENV)
        for r in range(self.world_size):
            mine = dict(env, RANK=str(r), LOCAL_RANK=str(r), ROLE_RANK=str(r))
            with log_path(self.folder, r).open("w") as log:
                self.processes.append(subprocess.Popen(
                    [sys.executable, "-c", RANK_MAIN, *self.args], cwd=self.cwd, env=mine,
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True,
                ))  # fmt: skip
        self.started = time.time()

    def statuses(self) -> list[RankStatus]:
        return [RankStatus.read(self.folder, r) for r in range(self.world_size)]

    def watch(self) -> str | None:
        """Wait for the ranks; None when every rank ended well, else what went wrong."""
        while True:
            codes = [p.poll() for p in self.processes]
            if all(code == 0 for code in codes):
                return None
            failed = next((r for r, code in enumerate(codes) if code not in (None, 0)), None)
            if failed is not None:  # the others may end by themselves, then are stopped
                end = time.monotonic() + 2.0
                while any(p.poll() is None for p in self.processes) and time.monotonic() < end:
                    time.sleep(0.05)
                self.kill(dump=False)
                if RankStatus.read(self.folder, failed).finished:
                    return None  # its session ended (a failed test stops it): the rest start anew
                return self.crash_text(failed, int(codes[failed] or 0))
            stuck = self.overstayed()
            if stuck is not None:
                self.kill(dump=True)
                return self.hang_text(stuck)
            time.sleep(POLL_S)

    def overstayed(self) -> RankStatus | None:
        """A rank longer than the timeout in or between tests (its start: :data:`STARTUP_S`)."""
        now = time.time()
        for s in self.statuses():
            limit = self.timeout_s
            if s.finished:
                since, limit = (s.written or now), EXIT_S
            elif s.test is not None and s.since:
                since = s.since
            elif s.outcomes and s.written:
                since = s.written
            else:
                since, limit = self.started, max(limit, STARTUP_S)
            if now - since > limit:
                return s
        return None

    def kill(self, *, dump: bool) -> None:
        """Every rank's stack to its log (``dump``), then kill every rank and its children."""
        alive = [p for p in self.processes if p.poll() is None]
        if dump and alive and hasattr(signal, "SIGUSR1"):
            for p in alive:
                with contextlib.suppress(OSError):
                    os.kill(p.pid, signal.SIGUSR1)
            time.sleep(1.0)
        for p in self.processes:
            with contextlib.suppress(OSError, AttributeError):
                os.killpg(p.pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                p.kill()
        for p in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(5)

    def crash_text(self, index: int, code: int) -> str:
        how = f"exited with status {code}"
        if code < 0:
            with contextlib.suppress(ValueError):
                how = f"was killed by {signal.Signals(-code).name}"
        status = RankStatus.read(self.folder, index)
        where = f" in {status.test.rsplit('::', 1)[-1]}" if status.test else ""
        lines = [
            f"rank {index} of {self.world_size} {how}{where}; the other ranks were stopped, "
            "and nothing of the test was saved."
        ]
        text = log_text(self.folder, index).splitlines()
        tail = [ln for ln in text if ln.strip() and not ln.startswith(("  File", "Thread"))]
        if tail:
            tail_text = textwrap.indent("\n".join(tail[-6:]), "  ")
            lines.append(f"rank {index}'s last lines:\n{tail_text}")
        lines.append(f"every rank's output: {self.folder}/rank-<r>.log")
        return "\n".join(lines)

    def hang_text(self, stuck: RankStatus) -> str:
        test = short_test_id(stuck.test or "its start")
        lines = [
            f"{test} did not finish on its {self.world_size} ranks within {self.timeout_s:g} s "
            "(--gpuperf-dist-timeout): every rank was killed, and nothing of it was saved."
        ]
        for r in range(self.world_size):
            where = where_it_was(log_text(self.folder, r))
            lines.append(f"  rank {r} was {where or 'not reached (no stack written)'}")
        lines.append(
            "A rank that never reaches a collective the others wait in (an exception, a branch "
            f"on the rank, a slow rank) hangs them all. Every rank's output: "
            f"{self.folder}/rank-<r>.log"
        )
        return "\n".join(lines)


def tcp_store(world_size: int) -> Any:
    """A rendezvous store on a free port of this host."""
    from torch.distributed import TCPStore

    return TCPStore(
        "127.0.0.1", 0, world_size, is_master=True, wait_for_workers=False,
        timeout=datetime.timedelta(seconds=60),
    )  # fmt: skip


class GroupItem(pytest.Item):
    """A test marked ``world_size=N``: running it runs its ranks (:class:`GroupLauncher`)."""

    def __init__(
        self,
        *,
        original: pytest.Item,
        world_size: int,
        runner: Callable[[GroupItem], None],
        **kw: Any,
    ):
        super().__init__(**kw)
        self.world_size = world_size
        self._runner = runner
        self._info = original.reportinfo()
        self.own_markers = list(getattr(original, "own_markers", []))
        self.keywords.update(dict(original.keywords))
        self.callspec = getattr(original, "callspec", None)
        self.fixturenames: list[str] = []

    def runtest(self) -> None:
        self._runner(self)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self._info

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, GroupError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


class GroupLauncher:
    """The plugin, in a process that is no rank, that starts the ranks of ``world_size=`` tests
    and hands each test its outcome."""

    def __init__(self, session: GpuPerfSession):
        self.session = session
        self.run = session.run
        self.look_ahead = not self.run.is_worker  # a worker does not know what it runs next
        self.outcomes: dict[str, Outcome] = {}
        self.order: list[GroupItem] = []

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """Replace each test marked ``world_size=`` by its :class:`GroupItem`, in place."""
        for i, item in enumerate(items):
            ws = world_size(item)
            if ws is not None and not isinstance(item, GroupItem) and item.parent is not None:
                items[i] = GroupItem.from_parent(
                    item.parent, name=item.name, original=item, world_size=ws, runner=self.run_item
                )

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.set_collected(session.items)

    def set_collected(self, items: Sequence[pytest.Item]) -> None:
        self.order = [i for i in items if isinstance(i, GroupItem)]

    def batch(self, item: GroupItem) -> list[str]:
        """This test and the ones after it that the same start can run (same world size)."""
        if not self.look_ahead or item not in self.order:
            return [item.nodeid]
        out = []
        for other in self.order[self.order.index(item) :]:
            if other.world_size != item.world_size or other.nodeid in self.outcomes:
                break
            out.append(other.nodeid)
        return out or [item.nodeid]

    def run_item(self, item: GroupItem) -> None:
        """Run a world_size= test on its ranks, or take its outcome from an earlier start."""
        session = self.session
        got = self.outcomes.pop(item.nodeid, None)
        if got is None:
            device, progress = session.ensure_device(), session.progress()
            self.outcomes.update(self.start(self.batch(item), item.world_size, device, progress))
            got = self.outcomes.pop(item.nodeid, None)
        got = got or Outcome("error", "its ranks ended without reporting it")
        if got.kind == "skipped":
            pytest.skip(got.text)
        if got.kind == "failed":
            pytest.fail(got.text, pytrace=False)
        if got.kind == "error":
            raise GroupError(got.text)
        for r in got.results:
            session.keep(item, r)

    def confirmation_runner(
        self, run: RunContext, nodeid: str | Sequence[str], *, device: str, **kw: Any
    ) -> ChildRun:
        """A confirmation's fresh processes: the ranks of the leading targets of one world
        size, or a child pytest."""
        targets = [nodeid] if isinstance(nodeid, str) else list(nodeid)
        worlds = {i.nodeid: i.world_size for i in self.order}
        world = worlds.get(targets[0])
        if world is None or kw:
            return run_child(run, nodeid, device=device, **kw)
        nodeids = list(itertools.takewhile(lambda t: worlds.get(t) == world, targets))
        t0 = time.perf_counter()
        outcomes = self.start(nodeids, world, device)
        results = [r for o in outcomes.values() if o.kind == "passed" for r in o.results]
        bad = [f"{n}: {o.text}" for n, o in outcomes.items() if o.kind != "passed"]
        return ChildRun(results, 1 if bad else 0, time.perf_counter() - t0, "\n".join(bad),
                        [f"{world} ranks of {', '.join(nodeids)}"])  # fmt: skip

    def capture_runner(self, nodeid: str, device: str) -> None:
        """A capture's fresh process: shell/capture.py's own child pytest."""

    def start(
        self, nodeids: list[str], world: int, device: str, progress: Any = None
    ) -> dict[str, Outcome]:
        """Start ``world`` ranks that run ``nodeids``, under the lock of every device they use."""
        gpus, why = self._gpus(world, device)
        if why:
            return {n: Outcome("skipped", why) for n in nodeids}
        session = self.run.settings.session
        folder = Path(tempfile.mkdtemp(prefix="gpuperf-group-"))
        spec = self._spec(nodeids, world, device, gpus, folder)
        label = (
            f"{nodeids[0].rsplit('::', 1)[-1]}"
            + (f" and {len(nodeids) - 1} more" if len(nodeids) > 1 else "")
            + f" on {world} rank(s) ({'nccl' if device == 'cuda' else 'gloo'})"
        )
        owner = f"{nodeids[0]} (world_size={world})"
        task = (progress or silent()).task(label)
        with task, devices_locked(
            lock_keys(device, gpus), timeout_s=session.lock_timeout, owner=owner,
            on_wait=getattr(progress, "task", None),
        ):  # fmt: skip
            out, problem = spec.run()
        if problem is None:
            shutil.rmtree(folder, ignore_errors=True)
        return out

    def _gpus(self, world: int, device: str) -> tuple[list[str], str | None]:
        """The GPUs of a group of ``world`` ranks (none on the CPU), or why it cannot run."""
        if device != "cuda":
            return [], None
        gpus = machine_gpus()
        if len(gpus) < world:
            return [], (
                f"world_size={world} needs {world} GPUs, one per rank; this machine has "
                f"{len(gpus)} ({', '.join(gpus) or 'none visible'})"
            )
        return gpus[:world], None

    def _spec(
        self, nodeids: list[str], world: int, device: str, gpus: list[str], folder: Path
    ) -> LaunchSpec:
        run = self.run
        args = [*rooted(run.rootpath, nodeids), *child_flags(device), *forwarded_args(run)]
        if run.settings.session.disable:
            args.append("--gpuperf-disable")
        env = {
            GROUP_DIR_ENV: str(folder),
            "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(world),
            "GROUP_RANK": "0",
            "GROUP_WORLD_SIZE": "1",
            "ROLE_WORLD_SIZE": str(world),
            "MASTER_ADDR": "127.0.0.1",
            "TORCHELASTIC_USE_AGENT_STORE": "True",
            "GPUPERF_NO_LOCK": "1",  # this process holds the group's locks
        }
        if world > 1 and "OMP_NUM_THREADS" not in os.environ:
            env["OMP_NUM_THREADS"] = "1"  # what torchrun gives each of several workers
        if device == "cuda":
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
            env["GPUPERF_PINNED_GPU"] = ",".join(gpus)
            env.update(nccl_environment(folder, os.environ.get))
        if profiles(run.settings):
            env[PROFILE_ENV] = "1"
        return LaunchSpec(
            nodeids=nodeids, world_size=world, args=args, env=env,
            cwd=str(run.invocation_dir), folder=folder,
            timeout_s=run.settings.session.dist_timeout,
        )  # fmt: skip


def profiles(settings: Settings) -> bool:
    """Whether ranks profile their collectives, as the kernel inventory is taken."""
    mode = settings.capture.inventory
    return mode == "always" or (mode == "auto" and bool(settings.session.save))


def lock_keys(device: str, gpus: Sequence[str]) -> list[str]:
    """The device locks a group takes, named as :func:`.locks.device_key` does (an index
    through NVML's list of UUIDs)."""
    if device != "cuda":
        return ["cpu"]
    uuids = nvml_uuids() if any(g.isdigit() for g in gpus) else []
    out = []
    for g in gpus:
        if g.isdigit() and int(g) < len(uuids):
            out.append(f"gpu-{uuids[int(g)]}")
        else:
            out.append(f"gpu-{g}" if g.startswith(("GPU-", "MIG-")) else f"gpu-index-{g}")
    return out
