"""What a collector is, what it gets (:class:`CaptureContext`) and what it gives back
(:class:`CollectorResult`). A collector never raises for a problem of its own (a missing
tool, a hung child, a parse error): that becomes the result's ``reason``."""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pytest_gpuperf.settings_fields import option

if TYPE_CHECKING:
    from pytest_gpuperf.model import Result
    from pytest_gpuperf.outcome import Comparison

OK = "ok"
SKIPPED = "skipped"
FAILED = "failed"
TIMEOUT = "timeout"
#: not run yet: after the session's verdicts, within its capture budget (shell/capture_budget.py)
DEFERRED = "deferred"


@dataclass(frozen=True)
class CaptureSettings:
    """The capture options of a session (each field's meaning: its option's help)."""

    mode: str = option("capture", "on-failure")
    #: captured profiles go to <artifacts_dir>/<run id>/<test>/<tool>/
    artifacts_dir: str = option("artifacts_dir", ".gpuperf/artifacts")
    timeout_s: float = option("capture_timeout", 60.0)
    budget_s: float = option("capture_budget", 120.0)
    session_budget_s: float = option("capture_session_budget", 180.0)
    skip: tuple[str, ...] | None = option("capture_skip", None)
    calls: int = option("capture_calls", 10)
    ncu_kernels: int = option("ncu_kernels", 3)
    inventory: str = option("inventory", "auto")


@dataclass
class CollectorResult:
    """What one collector produced: files (in its folder), a JSON-safe summary, or why not."""

    name: str
    status: str = OK
    files: list[Path] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == OK

    @classmethod
    def skipped(cls, name: str, reason: str) -> CollectorResult:
        return cls(name, SKIPPED, reason=reason)

    @classmethod
    def child_failed(
        cls, name: str, run: ChildRun, what: str, files: list[Path], tail: bool = True
    ) -> CollectorResult:
        """A child that left nothing to read: killed at its time budget, else ``what``, its exit
        status and (``tail``) its output's last two lines."""
        why = f"{what} (exit status {run.returncode})"
        if tail:
            why += ": " + " | ".join(run.log_tail.splitlines()[-2:])
        if run.returncode == -9:
            why = f"killed after {run.wall_s:.0f} s (its time budget)"
        return cls(name, TIMEOUT if run.returncode == -9 else FAILED, files, {}, why, run.wall_s)

    def to_dict(self, relative_to: Path | None = None) -> dict[str, Any]:
        """The manifest's entry (:meth:`from_dict` reads it back)."""
        return {
            "name": self.name,
            "status": self.status,
            "reason": self.reason,
            "wall_s": round(self.wall_s, 3),
            "files": [relative(p, relative_to) for p in self.files],
            "summary": self.summary,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], directory: Path) -> CollectorResult:
        files = [directory / str(f) for f in d.get("files") or ()]
        summary = dict(d.get("summary") or {})
        status, wall_s = str(d.get("status") or OK), float(d.get("wall_s") or 0.0)
        return cls(str(d.get("name")), status, files, summary, d.get("reason"), wall_s)

    def line(self) -> str:
        if self.status == OK:
            return f"{self.name}: ok ({self.wall_s:.1f} s)"
        return f"{self.name}: {self.status}: {self.reason}"


def relative(p: Path, base: Path | None) -> str:
    """``p`` relative to ``base`` where it lies under it, else as it is."""
    return str(p.relative_to(base)) if base is not None and p.is_relative_to(base) else str(p)


@dataclass
class ChildRun:
    """What a child pytest run of the test gave back: its results, exit status and output."""

    results: list[Result]
    returncode: int
    wall_s: float
    log_tail: str = ""
    command: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.results)


#: run_child(*, env, prefix, timeout_s, log_path, extra_args) -> ChildRun; the shell
#: (:mod:`pytest_gpuperf.shell.capture`) passes one in, bound to the test to re-run.
ChildRunner = Callable[..., ChildRun]


@dataclass
class CaptureContext:
    """Everything a collector needs about the regressed test (``keys``: the benchmarks to
    capture), and what earlier collectors found (``state``: the profiler pass's analysis and
    hotspot kernels, for ncu and TORCH_TRACE). A collector writes into ``directory / <name>``.
    """

    nodeid: str
    directory: Path
    device: str
    keys: Sequence[str]
    results: Sequence[Result] = ()
    comparisons: Mapping[str, Comparison] = field(default_factory=dict)
    #: the session's ``pytest.Config`` (``None`` outside a session), for a conftest's collector
    config: Any = None
    timeout_s: float = 60.0
    #: the ``time.monotonic()`` by which the whole capture ends (:meth:`budget`)
    deadline: float = float("inf")
    calls: int = 10
    ncu_kernels: int = 3
    run_child: ChildRunner | None = None
    state: dict[str, Any] = field(default_factory=dict)
    #: per key, the kernel inventory of its baseline runs
    baseline_inventories: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: tools left out (--gpuperf-capture-skip), for a collector whose child serves another
    skip: frozenset[str] = frozenset()
    _background: list[threading.Thread] = field(default_factory=list, repr=False)

    def later(self, work: Callable[[], None]) -> None:
        """Run ``work`` (a collector reading its report) while the next tool profiles; it may
        touch only its own result and ``state`` keys (an error is dropped); :meth:`settle`
        waits for it."""

        def run() -> None:
            with contextlib.suppress(Exception):
                work()

        thread = threading.Thread(target=run, name="gpuperf-capture-later", daemon=True)
        thread.start()
        self._background.append(thread)

    def settle(self, grace_s: float = 30.0) -> None:
        """Wait for the work of :meth:`later` (until the deadline, plus ``grace_s``)."""
        for thread in self._background:
            thread.join(timeout=max(self.deadline - time.monotonic(), 0.0) + grace_s)
        self._background.clear()

    def budget(self) -> float:
        """Seconds this collector may use: the per-tool timeout, or what is left if less."""
        return max(0.0, min(self.timeout_s, self.deadline - time.monotonic()))

    def folder(self, name: str) -> Path:
        path = self.directory / name
        path.mkdir(parents=True, exist_ok=True)
        return path


@runtime_checkable
class Collector(Protocol):
    """One kind of evidence. Add your own with the ``pytest_gpuperf_collectors`` hook."""

    name: str

    def available(self) -> str | None:
        """``None`` if this collector can run here, else why not (``"nsys not found on PATH"``)."""
        ...

    def collect(self, ctx: CaptureContext) -> CollectorResult:
        """Capture into ``ctx.folder(self.name)``; report problems in the result, never raise."""
        ...


class CudaToolCollector:
    """A collector of the command-line tool ``name`` (nsys, ncu): on PATH, on a CUDA GPU."""

    name: str

    def available(self) -> str | None:
        return None if shutil.which(self.name) else f"{self.name} not found on PATH"

    def collect(self, ctx: CaptureContext) -> CollectorResult:
        if ctx.device != "cuda":
            return CollectorResult.skipped(self.name, "the benchmark does not run on a CUDA GPU")
        return self._collect(ctx)

    def _collect(self, ctx: CaptureContext) -> CollectorResult:
        raise NotImplementedError
