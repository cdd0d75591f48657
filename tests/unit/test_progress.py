"""Progress lines: only for work that lasts, rewritten on a terminal, throttled in a log."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_gpuperf.shell.progress import Progress, silent


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def make(tty: bool) -> tuple[Progress, Clock, list[str]]:
    clock, out = Clock(), []
    return Progress(out.append, tty=tty, clock=clock, ticker=False), clock, out


def test_quick_work_shows_nothing() -> None:
    p, clock, out = make(tty=False)
    with p.task("capturing nsys for test_mm"):
        clock.t += 1.5
        p.tick()
    assert out == []


def test_log_lines_when_work_lasts() -> None:
    p, clock, out = make(tty=False)
    with p.task("re-measuring test_mm in a fresh process (look 2 of 3)") as task:
        for _ in range(40):
            clock.t += 1
            if clock.t - 100 == 10:
                task.update("starting CUDA")
            p.tick()
    assert out[0] == "gpuperf: re-measuring test_mm in a fresh process (look 2 of 3) ... 2 s\n"
    assert out[1].endswith("(starting CUDA) ... 17 s\n")  # every 15 s
    assert len(out) == 4  # 2 s, 17 s, 32 s, done
    assert (
        out[-1]
        == "gpuperf: re-measuring test_mm in a fresh process (look 2 of 3): done in 40.0 s\n"
    )


def test_terminal_line_rewritten_in_place() -> None:
    p, clock, out = make(tty=True)
    with p.task("capturing ncu"):
        for _ in range(5):
            clock.t += 1
            p.tick()
    assert out[0].startswith("\n\rgpuperf: capturing ncu ... 2 s")
    assert all(o.startswith("\r") for o in out[1:])
    assert len(out) == 5 and out[-1].startswith("\rgpuperf: capturing ncu: done in 5.0 s")
    assert out[-1].endswith("\n")


def test_silent_progress_runs_the_work() -> None:
    p = silent()
    ran = []
    with p.task("x") as task:
        task.update("y")
        p.tick()
        ran.append(1)
    assert ran == [1] and not p.enabled


def test_the_ticker_thread_shows_a_lasting_task() -> None:
    import time

    out: list[str] = []
    p = Progress(out.append, delay_s=0.0)
    with p.task("waiting"):
        time.sleep(1.3)
    assert out and out[-1].startswith("gpuperf: waiting: done in")


class FakeTerminal:
    isatty = False

    def __init__(self) -> None:
        self.text: list[str] = []

    def write(self, text: str, flush: bool = False) -> None:
        self.text.append(text)

    def ensure_newline(self) -> None:  # pytest's: end the line of dots, if one is open
        self.newlines = getattr(self, "newlines", 0) + 1


class FakeConfig:
    def __init__(self, verbosity: int, worker: bool = False) -> None:
        self.tr = FakeTerminal()
        self.verbosity = verbosity
        self.pluginmanager = self
        if worker:
            self.workerinput: dict[str, Any] = {}

    def get_plugin(self, name: str) -> Any:
        return self.tr if name == "terminalreporter" else None

    def get_verbosity(self) -> int:
        return self.verbosity


def test_from_config_quiet_under_q_and_in_workers() -> None:
    assert Progress.from_config(FakeConfig(0), "auto").enabled  # type: ignore[arg-type]
    assert not Progress.from_config(FakeConfig(-1), "auto").enabled  # type: ignore[arg-type]
    assert Progress.from_config(FakeConfig(-1), "on").enabled  # type: ignore[arg-type]
    assert not Progress.from_config(FakeConfig(0), "off").enabled  # type: ignore[arg-type]
    assert not Progress.from_config(FakeConfig(0, worker=True), "on").enabled  # type: ignore[arg-type]
    cfg = FakeConfig(0)
    p = Progress.from_config(cfg, "auto")  # type: ignore[arg-type]
    assert p.write is not None
    p.write("hello\n")
    assert cfg.tr.text == ["hello\n"]
    # a line of its own, never after pytest's progress dots; a rewrite stays where it is
    assert cfg.tr.newlines == 1
    p.write("\rhello again")
    assert cfg.tr.newlines == 1


def test_the_header_shortens_a_long_cpu_model_to_fit() -> None:
    from pytest_gpuperf.shell.header import _fit

    template = "measuring on the CPU: {name}, 2 threads, torch 2.13.0+cpu (no CUDA); 30 rounds"
    short = _fit(template, name="AMD EPYC", width=120)
    assert short == [template.replace("{name}", "AMD EPYC")]
    (long,) = _fit(template, name="Intel(R) Xeon(R) Platinum 8480+ " * 3, width=100)
    assert len(long) == 100 and "Intel(R) Xeon(R)" in long and "…," in long


@pytest.mark.parametrize("why", ["no CUDA", "--gpuperf-device=cpu", "no GPU found"])
@pytest.mark.parametrize("torch", ["2.13.0+cpu", "2.10.0.dev20251201+cu128"])
@pytest.mark.parametrize("name", ["AMD EPYC", "Intel(R) Xeon(R) Platinum 8480+ CPU @ 2.00GHz"])
def test_every_header_line_fits_120_columns(why: str, torch: str, name: str) -> None:
    """The newcomer's header of 129 characters on a CPU machine (AMD EPYC, 2 threads,
    --gpuperf-device=cpu): the CPU model could shorten no further, and the line stayed
    long. A line that cannot fit is now two, each within the 120 columns."""
    from pytest_gpuperf.shell.header import HEADER_WIDTH, _fit

    template = (
        f"measuring on the CPU: {{name}}, 128 threads, torch {torch} ({why}); 1000 rounds of "
        "1000 ms, warm-up ≤ 10000 ms"
    )
    lines = _fit(template, name=name, width=HEADER_WIDTH - len("gpuperf: "))
    assert all(len("gpuperf: " + line) <= HEADER_WIDTH for line in lines), lines
    text = " ".join(lines)
    assert f"torch {torch} ({why});" in text and "1000 rounds of 1000 ms" in text
    assert name[:8] in text and (len(lines) == 1 or lines[1].startswith("1000 rounds"))


def test_a_long_label_is_shortened_in_the_middle_to_120_columns() -> None:
    p, clock, out = make(tty=False)
    label = "re-measuring tests/models/test_" + "x" * 150 + "[4096-bf16] in a fresh process"
    with p.task(label):
        clock.t += 3
        p.tick()
    assert len(out) == 2
    assert all(len(line.rstrip("\n")) <= 120 for line in out)
    assert out[0].startswith("gpuperf: re-measuring tests/models/test_x") and "…" in out[0]
    assert out[0].rstrip("\n").endswith("[4096-bf16] in a fresh process ... 3 s")


def test_tasks_in_a_shared_line_show_it_once_in_a_log() -> None:
    p, clock, out = make(tty=False)
    with p.shared("re-measuring test_mm in fresh processes"):
        for look in (2, 3, 4):
            with p.task(f"run {look} of at most 5"):
                clock.t += 4
                p.tick()
    assert out == [
        "gpuperf: re-measuring test_mm in fresh processes (run 2 of at most 5) ... 4 s\n"
    ]


def test_tasks_in_a_shared_line_rewrite_it_on_a_terminal_and_end_it_once() -> None:
    p, clock, out = make(tty=True)
    with p.shared("re-measuring test_mm in fresh processes"):
        for look in (2, 3):
            with p.task(f"run {look} of at most 5"):
                clock.t += 4
                p.tick()
    assert out[0].startswith("\n\rgpuperf: re-measuring test_mm in fresh processes (run 2 of")
    assert out[1].startswith("\rgpuperf: re-measuring test_mm in fresh processes (run 3 of")
    assert out[1].rstrip().endswith("... 8 s")
    assert len(out) == 3 and out[2].startswith("\rgpuperf: re-measuring test_mm in fresh ")
    assert "done in 8.0 s" in out[2] and out[2].endswith("\n")
    assert sum(o.count("\n") for o in out) == 2  # the line opened once and ended once
