"""Every option of the plugin, declared once: a flag ``--gpuperf-<name>``, an ini key
``gpuperf_<name>`` and (``per_test``) a keyword of the marker and of ``gpu_bench(...)``, one
parser for every source (precedence: :mod:`.config`). Its default is its settings field's
(:func:`~pytest_gpuperf.settings_fields.option`), in the lowest ring that reads it."""

from __future__ import annotations

import difflib
from argparse import SUPPRESS
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import pytest

from pytest_gpuperf.artifacts.collectors.base import CaptureSettings
from pytest_gpuperf.baseline import DEFAULT_DIR, DEFAULT_KEEP_RUNS
from pytest_gpuperf.baseline.filelock import DEFAULT_TIMEOUT_S
from pytest_gpuperf.measure.policy import MeasurePolicy
from pytest_gpuperf.reporting.settings import ReportSettings
from pytest_gpuperf.settings_fields import OPTION, option, option_fields
from pytest_gpuperf.values import (
    baseline_name,
    choice,
    collective_name,
    cuda_graph_mode,
    fraction,
    group_keys,
    int_at_least,
    name_list,
    non_negative_float,
    number_or_callable,
    parse_bool,
    positive_float,
    probability,
    sort_key,
    table_columns,
    telemetry_interval,
    text,
)
from pytest_gpuperf.verdict.policy import PER_TEST_VERDICT, VerdictSettings


@dataclass(frozen=True)
class Option:
    name: str
    parse: Callable[[Any], Any]
    help: str
    #: store_true flag on the command line
    flag: bool = False
    metavar: str | None = None

    @property
    def default(self) -> Any:
        return _DEFAULTS[self.name]

    @property
    def per_test(self) -> bool:
        """A keyword of the marker and of gpu_bench(...)."""
        return self.name in PER_TEST_OPTIONS

    @property
    def cli(self) -> bool:
        """A command-line flag and ini key (the work per call is set per test only)."""
        return self.name not in _WORK

    @property
    def flag_name(self) -> str:
        return "--gpuperf-" + self.name.replace("_", "-")

    @property
    def ini_name(self) -> str:
        return "gpuperf_" + self.name


@dataclass(frozen=True)
class SessionSettings:
    device: str = option("device", "auto")
    disable: bool = option("disable", False)
    only: bool = option("only", False)
    skip: bool = option("skip", False)
    lock_timeout: float = option("lock_timeout", DEFAULT_TIMEOUT_S)
    dist_timeout: float = option("dist_timeout", 300.0)
    save: str | None = option("save", None)
    baseline: str | None = option("baseline", None)
    ab: str | None = option("ab", None)
    bisect: str | None = option("bisect", None)
    bisect_bad: str | None = option("bisect_bad", None)
    bisect_budget: float = option("bisect_budget", 3600.0)
    baseline_dir: str = option("baseline_dir", DEFAULT_DIR)
    keep_runs: int = option("keep_runs", DEFAULT_KEEP_RUNS)


@dataclass(frozen=True)
class TelemetrySettings:
    enabled: bool = option("telemetry", True)
    interval_ms: float = option("telemetry_interval_ms", 10.0)
    raw: bool = option("telemetry_raw", False)
    nvtx: bool = option("nvtx", True)
    activity: bool = option("activity", True)


#: a number, or a callable of the test's parameters
Work = float | Callable[..., float] | None


@dataclass(frozen=True)
class WorkSettings:
    """Work per call, for throughput: marker and ``gpu_bench(...)`` keywords only."""

    flops: Work = option("flops", None)
    bytes: Work = option("bytes", None)
    collective: str | None = option("collective", None)


#: Every settings class; each option is a field of exactly one.
SETTINGS_CLASSES: tuple[type[Any], ...] = (
    SessionSettings,
    MeasurePolicy,
    VerdictSettings,
    CaptureSettings,
    ReportSettings,
    TelemetrySettings,
    WorkSettings,
)


_WORK = frozenset(option_fields(WorkSettings).values())
#: What :class:`.settings.PerTest` resolves: the measurement, the work, part of the verdict.
PER_TEST_OPTIONS = frozenset(option_fields(MeasurePolicy).values()) | _WORK | set(PER_TEST_VERDICT)

_DEFAULTS = {
    f.metadata[OPTION]: f.default
    for c in SETTINGS_CLASSES
    for f in fields(c)
    if OPTION in f.metadata
}

OPTIONS: tuple[Option, ...] = (
    # --- session ---------------------------------------------------------
    Option(
        "device",
        choice("auto", "cuda", "cpu"),
        "where benchmarks run: cuda, cpu, or auto (cuda when available)",
    ),
    Option(
        "json",
        text,
        "write every result of the run, with the environment, to this JSON file",
        metavar="PATH",
    ),
    Option(
        "disable",
        parse_bool,
        "run each benchmarked function once, untimed: benchmarks become correctness tests",
        flag=True,
    ),
    Option("only", parse_bool, "run only benchmarks (deselect every other test)", flag=True),
    Option("skip", parse_bool, "deselect every benchmark", flag=True),
    Option(
        "lock_timeout",
        positive_float,
        "seconds to wait for a GPU another process measures on, or a baseline it saves into",
        metavar="SECONDS",
    ),
    Option(
        "dist_timeout",
        positive_float,
        "seconds a test marked world_size= may take on its ranks before they are killed and it "
        "fails; also the process group's timeout for a collective a rank never joins",
        metavar="SECONDS",
    ),
    # --- per benchmark -----------------------------------------------------
    Option(
        "cuda_graph",
        cuda_graph_mode,
        "time CUDA-graph replays (kernel time without launch overhead): false, true or both",
        metavar="false|true|both",
    ),
    Option(
        "l2_flush",
        parse_bool,
        "flush the GPU's L2 cache before each timed call (CUDA events backend)",
    ),
    Option(
        "warmup_ms",
        positive_float,
        "longest warm-up, in ms; warm-up ends earlier once round times settle",
        metavar="MS",
    ),
    Option(
        "min_warmup_ms",
        non_negative_float,
        "shortest warm-up, in ms, before settling is checked (a GPU's power cap engages ~0.25 s)",
        metavar="MS",
    ),
    Option(
        "round_ms",
        positive_float,
        "wall time of one round of calls, in ms; its per-call time is one sample",
        metavar="MS",
    ),
    Option("rounds", int_at_least(5), "rounds measured after warm-up", metavar="N"),
    Option(
        "noise_threshold",
        fraction,
        "flag a result as noisy when its rounds' IQR exceeds this fraction of the median",
        metavar="FRACTION",
    ),
    Option(
        "flops",
        number_or_callable,
        "floating-point operations per call (number, or callable of the test's parameters)",
    ),
    Option(
        "bytes",
        number_or_callable,
        "bytes moved per call (number, or callable of the test's parameters)",
    ),
    Option(
        "collective",
        collective_name,
        "the collective the call makes in a test marked world_size= (all_reduce, all_gather, "
        "reduce_scatter, broadcast, all_to_all, reduce, send_recv): its algorithm and bus "
        "bandwidth are reported, its size from bytes= or its largest tensor argument",
    ),
    # --- baselines ---
    Option(
        "save",
        baseline_name,
        "add this run to baseline NAME (one run per benchmark, in the baseline directory)",
        metavar="NAME",
    ),
    Option("baseline", baseline_name, "compare every benchmark with baseline NAME", metavar="NAME"),
    Option(
        "ab",
        text,
        "compare every benchmark with git revision REF, checked out in a temporary worktree "
        "and measured in alternation with this tree in fresh processes (docs/ab.md)",
        metavar="REF",
    ),
    Option(
        "bisect",
        text,
        "instead of running the tests, find the first commit after git revision GOOD where each "
        "selected benchmark is slower than at GOOD, by A/Bs of single commits (docs/bisect.md)",
        metavar="GOOD",
    ),
    Option(
        "bisect_bad",
        text,
        "the other end of --gpuperf-bisect (default: the working tree as it is)",
        metavar="REF",
    ),
    Option(
        "bisect_budget",
        positive_float,
        "seconds --gpuperf-bisect may measure; ranges no step fits are reported as not narrowed",
        metavar="SECONDS",
    ),
    Option(
        "baseline_dir",
        text,
        "directory of the baselines: NAME.json and its runs folder NAME.runs/ each",
        metavar="DIR",
    ),
    Option(
        "keep_runs",
        int_at_least(1),
        "newest runs kept per benchmark and environment; the run-to-run noise is learnt from them",
        metavar="N",
    ),
    # --- verdict ---
    Option(
        "threshold",
        fraction,
        "smallest slowdown that can fail a benchmark, as a fraction (0.03 = 3 %); "
        "a noisy benchmark's threshold is widened, never narrowed",
        metavar="FRACTION",
    ),
    Option(
        "alpha",
        probability,
        "chance that noise alone fails one figure of one unchanged benchmark; per benchmark, "
        "not split across the session (m benchmarks: at most 2 m alpha)",
        metavar="P",
    ),
    Option(
        "fail_on",
        choice("regression", "inconclusive"),
        "fail on confirmed regressions only, or also on benchmarks too noisy to decide",
    ),
    Option(
        "reruns",
        int_at_least(0),
        "fresh processes that may re-measure a suspect benchmark until its verdict is decisive",
        metavar="N",
    ),
    Option(
        "confirm_budget",
        non_negative_float,
        "re-measuring suspects may take this multiple of the session's own time (at least 60 s)",
        metavar="FACTOR",
    ),
    Option(
        "gate_secondary",
        choice("none", "memory", "first-call", "allocations", "all"),
        "also fail when peak memory, first-call (compile) time, or the allocations per call "
        "(caching-allocator requests, cudaMalloc calls, retries; host-device transfers where "
        "both sides have a kernel inventory) grow beyond their tolerance",
    ),
    Option(
        "memory_tolerance",
        fraction,
        "peak-memory growth over the baseline's largest value that counts as higher (+1 MiB)",
        metavar="FRACTION",
    ),
    Option(
        "first_call_tolerance",
        non_negative_float,
        "first-call time growth over the baseline's largest value that counts as higher",
        metavar="FRACTION",
    ),
    Option(
        "numerics",
        choice("off", "report", "gate"),
        "fingerprint each benchmark's returned tensors and compare them with the baseline's: "
        "off, report (a change is reported, never fails) or gate (a change beyond "
        "numerics_tolerance fails the test)",
    ),
    Option(
        "numerics_tolerance",
        non_negative_float,
        "largest relative change of the output's statistics and samples that counts as unchanged",
        metavar="FRACTION",
    ),
    # --- telemetry -------------------------------------------------
    Option(
        "telemetry",
        parse_bool,
        "sample GPU clocks, power, temperature, utilisation, throttle reasons and other "
        "processes with NVML during each CUDA measurement",
    ),
    Option(
        "telemetry_interval_ms",
        telemetry_interval,
        "time between two NVML samples, in ms (1 to 1000)",
        metavar="MS",
    ),
    Option(
        "telemetry_raw",
        parse_bool,
        "keep every telemetry sample in the results (JSON), not only the summaries",
        flag=True,
    ),
    Option(
        "nvtx",
        parse_bool,
        "NVTX ranges gpuperf/<test id> around each CUDA benchmark and its phases (Nsight Systems)",
    ),
    Option(
        "activity",
        parse_bool,
        "after each CUDA measurement, read the GPU's units (NVML GPM: SM, tensor, DRAM, PCIe, "
        "NVLink) and the allocator's figures per call over ~0.12 s of plain calls",
    ),
    # --- CI reports ---
    Option(
        "markdown",
        text,
        "write the verdict report as GitHub-flavoured Markdown to this file (regressions first; "
        "for CI systems other than GitHub Actions)",
        metavar="PATH",
    ),
    Option(
        "html",
        text,
        "write a self-contained HTML report with plots (no network needed) to this file",
        metavar="PATH",
    ),
    Option(
        "csv",
        text,
        "write every result as a CSV row to this file (times in seconds, a column per parameter)",
        metavar="PATH",
    ),
    Option(
        "github",
        choice("auto", "on", "off"),
        "GitHub Actions step summary and ::error annotations on regressed tests; auto: when "
        "GITHUB_ACTIONS=true",
    ),
    Option(
        "sort",
        sort_key,
        "order of the terminal table: verdict (regressions first), collection, name, median, "
        "mean, min, max, change (largest slowdown first), first_call, memory, throughput",
        metavar="KEY",
    ),
    Option(
        "columns",
        table_columns,
        "columns of the terminal table, e.g. median,ci,verdict (the benchmark name comes "
        "first): params, mode, median, mean, min, max, spread, ci, rounds, first_call, memory, "
        "throughput, flag, verdict; default: those that fit 120 characters, all under -v",
        metavar="COLUMNS",
    ),
    Option(
        "group_by",
        group_keys,
        "one terminal table per group: func, fullfunc, file, mode, name, param or param:NAME "
        "(several separated by commas)",
        metavar="KEYS",
    ),
    Option(
        "progress",
        choice("auto", "on", "off"),
        "a progress line for any step over 2 s (first call or compile, measuring, kernel "
        "inventory, confirmation runs, artifact capture); auto: on unless -q",
    ),
    # --- capture ---
    Option(
        "capture",
        choice("never", "on-failure", "always"),
        "capture profiles of a benchmark (torch.profiler, nsys, ncu, TORCH_TRACE) and diagnose "
        "it: never, on-failure (a regression) or always",
    ),
    Option(
        "artifacts_dir",
        text,
        "directory of captured profiles: <dir>/<run id>/<test>/<tool>/, with a manifest.json",
        metavar="DIR",
    ),
    Option(
        "capture_timeout",
        positive_float,
        "seconds one capture tool may run before it is killed",
        metavar="SECONDS",
    ),
    Option(
        "capture_budget",
        positive_float,
        "seconds the whole capture of one test may take; tools not reached are skipped",
        metavar="SECONDS",
    ),
    Option(
        "capture_skip",
        name_list,
        "capture tools to leave out, e.g. nsys,ncu (tools: torch_profiler, torch_trace, nsys, ncu, "
        "and those of pytest_gpuperf_collectors hooks)",
        metavar="NAMES",
    ),
    Option(
        "capture_calls",
        int_at_least(2),
        "steady-state calls profiled per benchmark (fewer when they would take over 2 s)",
        metavar="N",
    ),
    Option(
        "ncu_kernels",
        int_at_least(0),
        "hotspot kernels (by GPU time) that Nsight Compute profiles; 0 turns ncu off",
        metavar="N",
    ),
    Option(
        "inventory",
        choice("auto", "always", "never"),
        "profile a few calls after measuring and keep the kernel inventory with the result: "
        "auto (when saving a baseline), always, never",
    ),
    Option(
        "capture_session_budget",
        non_negative_float,
        "seconds all captures of a session may take: torch.profiler and TORCH_TRACE at each "
        "failing verdict, then Nsight for the largest slowdowns first; the tests not reached "
        "are listed with the command that captures each (0: list them all)",
        metavar="SECONDS",
    ),
)

OPTIONS_BY_NAME: dict[str, Option] = {o.name: o for o in OPTIONS}
#: The built-in capture tools, in the order they run (shell.capture.default_collectors).
CAPTURE_TOOLS = ("torch_profiler", "torch_trace", "nsys", "ncu")
#: Marker keywords that are not measurement options.
MARKER_ONLY = frozenset({"shapes", "dtypes", "world_size"})
#: Keywords of a gpu_bench(...) call that are not measurement options.
CALL_ONLY = frozenset({"name", "setup"})


def check_capture_skip(config: pytest.Config, skip: tuple[str, ...] | None) -> None:
    """--gpuperf-capture-skip names tools that exist (built in, or from collector hooks)."""
    unknown = [n for n in skip or () if n not in CAPTURE_TOOLS]
    if not unknown:
        return
    hooks = config.hook.pytest_gpuperf_collectors(config=config)
    extra = [str(getattr(c, "name", "")) for collectors in hooks for c in collectors or []]
    tools = [*CAPTURE_TOOLS, *extra]
    for name in unknown:
        if name not in extra:
            close = difflib.get_close_matches(name, tools, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise pytest.UsageError(
                f"--gpuperf-capture-skip: no capture tool named {name!r}{hint}; the tools are "
                f"{', '.join(tools)}"
            )


def register(parser: pytest.Parser) -> None:
    """Add every option to pytest's parser (command line and ini)."""
    group = parser.getgroup("gpuperf", "GPU performance benchmarks (pytest-gpuperf)")
    for opt in OPTIONS:
        if not opt.cli:
            continue
        help_text = f"{opt.help} (default: {option_text(opt.default) or 'none'})"
        cli_help = help_text.replace("%", "%%")  # argparse expands %-formats in help
        if opt.flag:
            kw: dict[str, Any] = {"action": "store_true"}
        else:
            choices = ("true", "false") if opt.parse is parse_bool else ()
            choices = getattr(opt.parse, "choices", choices)  # values.choice's
            kw = {"action": "store", "metavar": opt.metavar or "|".join(choices) or None}
        group.addoption(
            opt.flag_name, default=None, dest="gpuperf_" + opt.name, help=cli_help, **kw
        )
        parser.addini(opt.ini_name, help_text, type="string", default=None)
    # Internal: set on the fresh processes that confirm a verdict or capture evidence.
    group.addoption("--gpuperf-child", action="store_true", dest="gpuperf_child", help=SUPPRESS)


def option_text(value: Any) -> str | None:
    """A parsed option value back as its text (``("a", "b")`` -> ``a,b``, ``True`` ->
    ``true``); None for a callable or None."""
    if value is None or callable(value):
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list, set, frozenset)):
        return ",".join(str(x) for x in value)
    return str(value)
