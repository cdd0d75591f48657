"""The header: where and how benchmarks are measured, and the GPUs' state. Written after
collection, not in ``pytest_report_header``: a session without benchmarks imports no torch."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_gpuperf.measure.device import cuda_unavailable_reason
from pytest_gpuperf.measure.environment import collect_environment
from pytest_gpuperf.reporting.terminal import fold
from pytest_gpuperf.shell.session import GpuPerfSession, is_benchmark

DISABLED = "benchmarks disabled (--gpuperf-disable): each benchmarked function runs once, untimed"
#: The header line fits a terminal of this width (the CPU model is shortened to fit).
HEADER_WIDTH = 120


class HeaderPlugin:
    def __init__(self, session: GpuPerfSession):
        self.session = session
        self.settings = session.settings
        #: the GPUs' state from NVML at the start (CUDA, telemetry on): the JSON keeps it
        self.gpu_state: dict[str, Any] | None = None

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        """The settings, for the xdist controller only (the others: after collection)."""
        if not self.session.run.is_controller:
            return []
        session, measure = self.settings.session, self.settings.measure
        if session.disable:
            return [f"gpuperf: {DISABLED}"]
        return [
            f"gpuperf: device={session.device}, {measure.rounds} rounds of "
            f"{measure.round_ms:g} ms after a warm-up of up to {measure.warmup_ms:g} ms"
        ]

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Once benchmarks are selected: where and how they are measured, the GPUs' state."""
        config = session.config
        if config.getoption("collectonly", False) or not any(map(is_benchmark, session.items)):
            return
        tr = config.pluginmanager.get_plugin("terminalreporter")
        if config.get_verbosity() < 0 or config.getoption("no_header"):
            tr = None
        if self.settings.session.disable:
            if tr is not None:
                tr.write_line(f"gpuperf: {DISABLED}")
            return
        device = self.session.ensure_device()
        telemetry = self.settings.telemetry
        lines = []
        if device == "cuda" and telemetry.enabled:  # a CPU run never touches NVML
            from pytest_gpuperf.telemetry.header import collect_gpu_state, render_header

            self.gpu_state = collect_gpu_state()
            lines = render_header(
                self.gpu_state, interval_ms=telemetry.interval_ms, activity=telemetry.activity
            )
        if tr is not None:
            for line in shown([*self.where_lines(device), *lines]):
                tr.write_line(line)

    def where_lines(self, device: str) -> list[str]:
        """``measuring on the CPU: AMD EPYC 7B13, 2 threads, torch 2.13.0+cpu (no CUDA); 30
        rounds of 10 ms, warm-up ≤ 500 ms``: one line of at most 120 characters, or two."""
        measure = self.settings.measure
        env = collect_environment(device)
        how = (
            f"{measure.rounds} rounds of {measure.round_ms:g} ms, "
            f"warm-up ≤ {measure.warmup_ms:g} ms"
        )
        if device == "cuda":
            graph = measure.cuda_graph
            timing = {True: "CUDA-graph replay", "both": "CUDA events and CUDA-graph replay"}.get(
                graph, "CUDA events" + (" with an L2 flush" if measure.l2_flush else "")
            )
            where = f"{{name}} (cuda:{env.get('gpu_index', 0)}, torch {env.get('torch')}): {timing}"
            name = str(env.get("gpu_name") or "the GPU")
        else:
            why = (
                "--gpuperf-device=cpu"
                if self.settings.session.device == "cpu"
                else cuda_unavailable_reason(short=True)
            )
            threads = env.get("torch_threads")
            where = (
                f"the CPU: {{name}}, {threads} thread{'s' if threads != 1 else ''}, torch "
                f"{env.get('torch')} ({why})"
            )
            name = str(env.get("cpu_model") or "unknown CPU")
        return _fit(
            f"measuring on {where}; {how}", name=name, width=HEADER_WIDTH - len("gpuperf: ")
        )


def shown(lines: list[str]) -> list[str]:
    """The header's lines as printed, wrapped like the summary's."""
    return [fold("gpuperf: " + line, HEADER_WIDTH) for line in lines]


def _fit(template: str, *, name: str, width: int) -> list[str]:
    """``template`` with ``{name}`` (a device's model) in ``width`` characters, the name
    shortened (``…``) to no less than 8; where that is too long, two lines split at ``"; "``."""
    parts = [template]
    if len(template.replace("{name}", name[:8])) > width and "; " in template:
        head, tail = template.split("; ", 1)
        parts = [head + ";", tail]
    lines = []
    for part in parts:
        room = width - len(part.replace("{name}", ""))
        short = name if len(name) <= room else name[: max(room - 1, 8)].rstrip() + "…"
        lines.append(part.replace("{name}", short))
    return lines
