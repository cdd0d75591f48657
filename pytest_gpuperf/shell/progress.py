"""Progress of long steps (first call, measuring, confirmation runs, capture): without it,
minutes inside one test look like a hang. Shown once a step lasts ``delay_s``: on a terminal
one line rewritten at most once a second, in a CI log a line every ``every_s``."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

#: The widest progress line (the terminal summary's width too).
WIDTH = 120


class Task:
    """One piece of long work; :meth:`update` changes what the line says about it."""

    def __init__(self, progress: Progress, label: str):
        self.progress = progress
        self.label = label
        self.detail = ""
        self.started = progress.clock()
        self.shown = False
        self.last_line = self.started

    def update(self, detail: str) -> None:
        """E.g. ``"kernel 3 of 12"``; shown with the next tick."""
        self.detail = detail

    def tick(self) -> None:
        self.progress.tick()

    def text(self, now: float) -> str:
        detail = f" ({self.detail})" if self.detail else ""
        shared = self.progress.shared_task
        if shared is not None:
            label = f"{shared.label} ({self.label}{', ' + self.detail if self.detail else ''})"
            return _fit(label, f" ... {now - shared.started:.0f} s")
        return _fit(f"{self.label}{detail}", f" ... {now - self.started:.0f} s")


def _fit(label: str, tail: str) -> str:
    """``gpuperf: {label}{tail}`` in :data:`WIDTH` columns: the label loses its middle."""
    room = WIDTH - len("gpuperf: ") - len(tail)
    if len(label) > room:
        keep = max(room - 1, 8)
        label = label[: keep - keep // 2] + "…" + label[len(label) - keep // 2 :]
    return f"gpuperf: {label}{tail}"


class Progress:
    def __init__(
        self,
        write: Callable[[str], None] | None,
        *,
        tty: bool = False,
        delay_s: float = 2.0,
        every_s: float = 15.0,
        clock: Callable[[], float] = time.monotonic,
        ticker: bool = True,
    ):
        self.write = write
        self.tty = tty
        self.delay_s = delay_s
        self.every_s = every_s
        self.clock = clock
        self.ticker = ticker
        self._task: Task | None = None
        #: the one line that several tasks in a row share (:meth:`shared`), or None
        self.shared_task: Task | None = None
        self._lock = threading.Lock()
        self._width = 0

    @property
    def enabled(self) -> bool:
        return self.write is not None

    @classmethod
    def from_config(cls, config: pytest.Config, mode: str = "auto") -> Progress:
        """Writing to pytest's terminal reporter, around output capturing."""
        tr = config.pluginmanager.get_plugin("terminalreporter")
        on = mode == "on" or (mode == "auto" and config.get_verbosity() >= 0)
        if tr is None or not on or hasattr(config, "workerinput"):
            return cls(None)
        capture = config.pluginmanager.get_plugin("capturemanager")

        def write(text: str) -> None:
            ctx = capture.global_and_fixture_disabled() if capture else contextlib.nullcontext()
            with ctx:
                if not text.startswith(("\r", "\n")):
                    tr.ensure_newline()  # never after pytest's dots on the same line
                tr.write(text, flush=True)

        return cls(write, tty=bool(getattr(tr, "isatty", False)))

    @contextlib.contextmanager
    def task(self, label: str, *, ticker: bool = True) -> Iterator[Task]:
        """``with progress.task("re-measuring test_mm"):``; ``ticker=False``: no thread, the
        caller calls ``task.tick()`` (a measurement, between its rounds)."""
        task = Task(self, label)
        if not self.enabled:
            yield task
            return
        with self._lock:
            self._task = task
        stop = threading.Event()
        thread = None
        if self.ticker and ticker:
            thread = threading.Thread(target=self._run, args=(stop,), daemon=True)
            thread.start()
        try:
            yield task
        finally:
            stop.set()
            if thread is not None:
                thread.join(timeout=2)
            with self._lock:
                self._finish(task)
                self._task = None

    @contextlib.contextmanager
    def shared(self, label: str) -> Iterator[None]:
        """One line for the tasks inside, each task's label in brackets."""
        outer = Task(self, label)
        self.shared_task = outer
        try:
            yield
        finally:
            with self._lock:
                self.shared_task = None
                if outer.shown and self.tty and self.write is not None:
                    self._finish(outer)

    def _run(self, stop: threading.Event) -> None:
        while not stop.wait(1.0):
            self.tick()

    def tick(self) -> None:
        """Show the current task if it has lasted (the ticker thread's, every second)."""
        with self._lock:
            task = self._task
            if task is None or self.write is None:
                return
            now = self.clock()
            if now - task.started < self.delay_s:
                return
            line = task.text(now)
            shown = self.shared_task or task  # who remembers that the line is up
            if self.tty:
                if shown.shown and now - shown.last_line < 1.0:
                    return
                pad = max(0, self._width - len(line))
                prefix = "" if shown.shown else "\n"
                self.write(f"{prefix}\r{line}{' ' * pad}")
                self._width = len(line)
            elif not shown.shown or now - shown.last_line >= self.every_s:
                self.write(line + "\n")
            else:
                return
            shown.shown = task.shown = True
            shown.last_line = now

    def _finish(self, task: Task) -> None:
        if not task.shown or self.write is None or self.shared_task is not None:
            return  # a shared line ends once, with the whole (shared())
        took = self.clock() - task.started
        done = _fit(task.label, f": done in {took:.1f} s")
        if self.tty:
            pad = max(0, self._width - len(done))
            self.write(f"\r{done}{' ' * pad}\n")
            self._width = 0
        else:
            self.write(done + "\n")


def silent() -> Progress:
    """A progress that shows nothing (tests, the CLI, workers)."""
    return Progress(None)
