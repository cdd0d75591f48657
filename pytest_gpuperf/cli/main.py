"""``pytest-gpuperf``: baselines and run files from the shell (list, show, compare, prune, export).

Every error is one line on stderr naming the file or baseline and the fix, never a traceback.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import math
import os
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from pytest_gpuperf import __version__
from pytest_gpuperf.baseline import DEFAULT_DIR, is_name
from pytest_gpuperf.baseline.codec import SCHEMA_VERSION
from pytest_gpuperf.baseline.fileio import output_target, write_output
from pytest_gpuperf.baseline.filelock import DEFAULT_TIMEOUT_S
from pytest_gpuperf.baseline.store import BaselineStore
from pytest_gpuperf.errors import GpuPerfError
from pytest_gpuperf.interrupt import how, sigterm_as_ctrl_c
from pytest_gpuperf.model import printable
from pytest_gpuperf.reporting.columns import params_text
from pytest_gpuperf.units import fmt_pct, fmt_time
from pytest_gpuperf.values import (
    OptionValueError,
    fraction,
    int_at_least,
    positive_float,
    probability,
    sort_key,
)

if TYPE_CHECKING:
    from pytest_gpuperf.measure.backend import Modes

_T = TypeVar("_T")

#: Exit codes, as documented in --help and docs/ci.md.
OK = 0
GATE_FAILED = 1
INPUT_ERROR = 2
NOTHING_COMPARED = 3
INTERRUPTED = 130

EPILOG = """\
exit codes:
  0  success (compare: no regression; demo: every step went as designed)
  1  compare: a regression was found (with --fail-on inconclusive, also an inconclusive
     verdict); demo: a step did not go as designed
  2  usage or input error: bad arguments, unknown baseline, unreadable or corrupt file,
     a baseline locked by another process
  3  compare: no benchmark of B has comparable runs in A (other environment, other
     settings, or not in A), so nothing was gated
  130  interrupted

A and B of compare, and the source of export, are baseline names (files NAME.json in
--dir) or paths of files: a baseline file, or a results file written by --gpuperf-json.
"""


class UsageProblem(GpuPerfError):
    """A bad command line the parser could not see (a date, an empty selection)."""


# --- sources ----------------------------------------------------------------------------


def load_source(arg: str, directory: str) -> Any:
    """A :class:`~pytest_gpuperf.cli.runsets.RunSet` from a baseline name or a file path."""
    from pytest_gpuperf.cli.runsets import RunSet, read_file

    name = arg
    if arg.endswith(".json") or "/" in arg or "\\" in arg or Path(arg).is_file():
        if not _names_a_baseline_file(arg, directory):
            return read_file(Path(arg))
        name = arg[: -len(".json")]  # show main.json: the baseline main
    return RunSet(name, BaselineStore(directory).load(name))


def _names_a_baseline_file(arg: str, directory: str) -> bool:
    """``NAME.json`` given alone, no such file here, and the baseline NAME in ``directory``."""
    if not arg.endswith(".json") or os.sep in arg or "/" in arg or os.path.lexists(arg):
        return False
    return is_name(arg[: -len(".json")]) and (Path(directory) / arg).is_file()


# --- commands ---------------------------------------------------------------------------


def cmd_list(args: argparse.Namespace, out: TextIO) -> int:
    """Every baseline and its saved sessions, from the indexes alone (runs are not read)."""
    store = BaselineStore(args.dir)
    names = store.names()
    for path, why in store.strays():
        print(f"{path} is not a baseline: {why}", file=sys.stderr)
    if not names:
        print(f"no baselines in {args.dir} (create one with pytest --gpuperf-save=NAME)", file=out)
        return OK
    status = OK
    for name in names:
        try:
            o = store.overview(name)
        except GpuPerfError as e:
            print(f"{name}: {e}", file=sys.stderr)
            status = INPUT_ERROR
            continue
        print(
            f"{name}  ({o.path}): {o.benchmarks} benchmark(s), {o.runs} run(s), "
            f"{o.environments} environment(s), updated {o.updated}",
            file=out,
        )
        for s in o.sessions:
            extra = f"  commit {printable(s.commit[:12])}" if s.commit else ""
            print(
                f"  {s.timestamp}  run {', '.join(s.run_ids)}  environment {s.fingerprint_id}  "
                f"{s.benchmarks} benchmark(s){extra}",
                file=out,
            )
    return status


def cmd_show(args: argparse.Namespace, out: TextIO) -> int:
    from tabulate import tabulate

    side = load_source(args.name, args.dir)
    b = side.baseline
    print(
        f"baseline {b.name} ({b.path}): schema version {SCHEMA_VERSION}, written by "
        f"pytest-gpuperf {b.plugin_version}, created {b.created}, updated {b.updated}",
        file=out,
    )
    rows = []
    for entry in b.benchmarks.values():
        every = entry.runs  # decoded once, then split by environment
        for fid in entry.fingerprint_ids():
            runs = [r for r in every if r.fingerprint_id == fid]
            logs = [math.log(r.median) for r in runs if r.median > 0]
            sd = statistics.stdev(logs) if len(logs) >= 2 else None
            row = [entry.ident.display, params_text(entry.ident), entry.ident.mode, fid, len(runs)]
            last = runs[-1]
            rows.append([*row, fmt_time(last.median), fmt_pct(sd, digits=2), last.timestamp])
    headers = ["benchmark", "params", "mode", "environment", "runs", "newest median"]
    headers += ["run-to-run SD", "newest run"]
    print(tabulate(rows, headers=headers, disable_numparse=True), file=out)
    print("", file=out)
    for fid, fp in b.fingerprints.items():
        keys = ", ".join(f"{k}={v}" for k, v in fp.items())
        print(f"environment {fid}: {keys}", file=out)
    return OK


def _modes() -> Modes:
    """The plugins' timing modes, as a pytest session gets them."""
    from pytest_gpuperf.registry import build, plugin_manager

    return build(plugin_manager().hook).modes


def cmd_compare(args: argparse.Namespace, out: TextIO) -> int:
    from pytest_gpuperf.cli.runsets import compare
    from pytest_gpuperf.reporting import verdicts as v
    from pytest_gpuperf.reporting.outputs import OUTPUTS_BY_OPTION, ReportContext
    from pytest_gpuperf.reporting.terminal import TableSpec, render
    from pytest_gpuperf.verdict import VerdictSettings

    given = {"threshold": args.threshold, "alpha": args.alpha}  # None: the gate's default
    settings = VerdictSettings(
        fail_on=args.fail_on,
        gate_secondary=args.gate_secondary,
        numerics=args.numerics,
        **{k: v for k, v in given.items() if v is not None},
    )
    for option, path in (("--markdown", args.markdown), ("--html", args.html), ("--csv", args.csv)):
        if path:
            output_target(path, what=option, baseline_dirs=[Path(args.dir)])
    reference = load_source(args.a, args.dir)
    candidate = load_source(args.b, args.dir)
    modes = _modes()
    outcome = compare(reference, candidate, settings.decision_policy(), settings, modes=modes)
    rows = v.rows(outcome.results)
    print(f"{candidate.label} compared with {reference.label}: {v.headline(rows)}", file=out)
    sort, label = args.sort or "verdict", reference.label
    spec = TableSpec(sort=sort, fail_on=args.fail_on, modes=modes)
    print(render([r.result for r in rows], spec), file=out)  # the plugin's summary
    for failures in outcome.failures.values():  # beyond the time: secondary metrics, numerics
        for failure in failures:
            print(failure, file=out)
    ctx = ReportContext(
        outcome.results, baseline_label=label, histories=outcome.histories, sort=sort
    )
    for option in ("markdown", "html", "csv"):
        if path := getattr(args, option):
            _write(f"--{option}", path, OUTPUTS_BY_OPTION[option].text(ctx, Path(path)), args)
    if outcome.failing():  # the gate's own rule (verdict.decide.outcome), not a copy of it
        return GATE_FAILED
    if not outcome.m:
        print(
            f"nothing was gated: no benchmark of {candidate.label} has comparable runs in "
            f"{reference.label}",
            file=sys.stderr,
        )
        return NOTHING_COMPARED
    return OK


def _write(option: str, path: str, text: str, args: argparse.Namespace) -> None:
    try:
        write_output(path, text, what=option, baseline_dirs=[Path(args.dir)])
    except OSError as e:
        raise UsageProblem(f"{option}: cannot write {path}: {e.strerror or e}") from None


def cmd_prune(args: argparse.Namespace, out: TextIO) -> int:
    if args.keep_runs is None and args.fingerprint is None and args.before is None:
        raise UsageProblem(
            "prune needs what to remove: --keep-runs N, --fingerprint ID and/or --before DATE"
        )
    before = _parse_date(args.before) if args.before else None

    def waiting(text: str) -> None:
        print(
            f"pytest-gpuperf prune: {text} (waiting up to {args.lock_timeout:g} s)", file=sys.stderr
        )

    store = BaselineStore(args.dir, lock_timeout=args.lock_timeout, on_wait=waiting)
    summary = store.prune(
        args.name,
        keep_runs=args.keep_runs,
        fingerprint_id=args.fingerprint,
        before=before,
        dry_run=args.dry_run,
    )
    print(summary.describe(), file=out)
    return OK


def _parse_date(text: str) -> _dt.datetime:
    try:
        t = _dt.datetime.fromisoformat(text)
    except ValueError:
        raise UsageProblem(
            f"--before {text!r} is not a date: use ISO format, e.g. 2025-11-01 or "
            "2025-11-01T12:00:00+00:00 (UTC when no zone is given)"
        ) from None
    return t if t.tzinfo else t.replace(tzinfo=_dt.timezone.utc)


def cmd_export(args: argparse.Namespace, out: TextIO) -> int:
    from pytest_gpuperf.cli.runsets import latest
    from pytest_gpuperf.reporting import export
    from pytest_gpuperf.reporting.outputs import OUTPUTS_BY_OPTION, ReportContext

    to_file = args.output not in (None, "-")
    if to_file:
        output_target(args.output, what="-o", baseline_dirs=[Path(args.dir)])
    side = load_source(args.source, args.dir)
    results, histories = latest(side)
    target = Path(args.output) if to_file else Path.cwd() / "-"
    args.format = args.format or EXPORT_SUFFIXES.get(target.suffix.lower(), "markdown")
    if args.format == "pytest-benchmark":
        when = _dt.datetime.fromisoformat(side.baseline.updated)
        text = export.pytest_benchmark(results, created=when, modes=_modes())
    else:
        title, sort = f"gpuperf: {side.label}", args.sort or "collection"
        ctx = ReportContext(results, histories=histories, title=title, sort=sort)
        text = OUTPUTS_BY_OPTION[args.format].text(ctx, target)
    if not to_file:
        out.write(text)
    else:
        _write("-o", args.output, text, args)
        print(f"{args.format} written to {args.output}", file=sys.stderr)
    return OK


def cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
    from pytest_gpuperf import demo

    return demo.Demo(demo.demo_folder(args.path), args.runs, out).run()


# --- the parser -------------------------------------------------------------------------


def _checked(convert: Callable[[str], _T]) -> Callable[[str], _T]:
    """``convert`` for argparse: the option checker's message as argparse's on a bad value."""

    def check(text: str) -> _T:
        try:
            return convert(text)
        except OptionValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return check


SORT_HELP = (
    "row order, as --gpuperf-sort: verdict, collection, name, median, mean, min, max, change, "
    "first_call, memory, throughput"
)


def _at_least_two(text: str) -> int:
    try:
        return int_at_least(2)(text)
    except OptionValueError:
        raise argparse.ArgumentTypeError(
            f"expected 2 or more runs (the noise between runs is learnt from several), got {text!r}"
        ) from None


#: ``export -o PATH`` without ``--format``: the format its suffix names, else Markdown.
EXPORT_SUFFIXES = {".md": "markdown", ".html": "html", ".csv": "csv", ".json": "pytest-benchmark"}


def _add_compare(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "compare",
        parents=[common],
        help="judge B against A with the plugin's verdict (exit 1 on a regression)",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("a", metavar="A", help="the reference: baseline name or file")
    p.add_argument("b", metavar="B", help="the candidate: baseline name or file")
    p.add_argument(
        "--fail-on",
        choices=("regression", "inconclusive"),
        default="regression",
        help="exit 1 on regressions only (default), or also on inconclusive verdicts",
    )
    p.add_argument(
        "--threshold", type=_checked(fraction), help="smallest slowdown that fails (default 0.03)"
    )
    p.add_argument(
        "--alpha",
        type=_checked(probability),
        help="false-failure rate of one figure of one unchanged benchmark (default 0.0002, "
        "as the gate)",
    )
    p.add_argument(
        "--gate-secondary",
        choices=("none", "memory", "first-call", "allocations", "all"),
        default="none",
        help="also exit 1 when these secondary metrics grew, as --gpuperf-gate-secondary",
    )
    p.add_argument(
        "--numerics",
        choices=("off", "report", "gate"),
        default="report",
        help="compare the outputs' numerics, as --gpuperf-numerics (gate: a change exits 1)",
    )
    p.add_argument("--markdown", metavar="PATH", help="also write the Markdown report here")
    p.add_argument("--html", metavar="PATH", help="also write the HTML report here")
    p.add_argument("--csv", metavar="PATH", help="also write every result as CSV here")
    p.add_argument(
        "--sort", type=_checked(sort_key), metavar="KEY", help=SORT_HELP + " (default: verdict)"
    )
    p.set_defaults(func=cmd_compare)


def _add_prune(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "prune",
        parents=[common],
        help="remove runs from a baseline",
        description="Remove the runs that match every selector given (--fingerprint, --before); "
        "with --keep-runs N, never the newest N runs of a benchmark in its environment "
        "(alone, --keep-runs trims every environment to N). Says per environment what it "
        "removes; try it with --dry-run first.",
    )
    p.add_argument("name", metavar="NAME", help="baseline name")
    p.add_argument(
        "--keep-runs",
        type=_checked(int_at_least(1)),
        metavar="N",
        help="keep the newest N runs of each benchmark per environment",
    )
    p.add_argument("--fingerprint", metavar="ID", help="only runs of this environment")
    p.add_argument("--before", metavar="DATE", help="only runs saved before DATE (ISO, UTC)")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="say per environment what would be removed, and change nothing",
    )
    p.add_argument(
        "--lock-timeout",
        type=_checked(positive_float),
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help="how long to wait while another process saves into the baseline "
        f"(default {DEFAULT_TIMEOUT_S:g}, as --gpuperf-lock-timeout)",
    )
    p.set_defaults(func=cmd_prune)


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--dir",
        default=DEFAULT_DIR,
        help=f"directory of the baselines, as --gpuperf-baseline-dir (default: {DEFAULT_DIR})",
    )
    parser = argparse.ArgumentParser(
        prog="pytest-gpuperf",
        description="Baselines and results of pytest-gpuperf: list, show, compare, prune, "
        "export; and a demo of the main job.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("list", parents=[common], help="baselines and their runs")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("show", parents=[common], help="the benchmarks of one baseline")
    p.add_argument("name", metavar="NAME", help="baseline name, or path of a baseline or run file")
    p.set_defaults(func=cmd_show)

    _add_compare(sub, common)
    _add_prune(sub, common)

    p = sub.add_parser(
        "export",
        parents=[common],
        help="the newest run of a baseline or run file as Markdown, HTML, CSV or "
        "pytest-benchmark JSON",
    )
    p.add_argument("source", metavar="NAME|RUNFILE", help="baseline name, or path of a file")
    p.add_argument(
        "--format",
        choices=("markdown", "html", "csv", "pytest-benchmark"),
        help="default: the one -o's suffix names (.md, .html, .csv, .json: pytest-benchmark), "
        "else markdown. csv: one row per benchmark (times in seconds, a column per test "
        "parameter); pytest-benchmark: the --benchmark-json format that "
        "github-action-benchmark (tool: pytest) and Bencher (python_pytest) read",
    )
    p.add_argument(
        "--sort", type=_checked(sort_key), metavar="KEY", help=SORT_HELP + " (default: collection)"
    )
    p.add_argument("-o", "--output", metavar="PATH", help="write here instead of stdout")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser(
        "demo",
        help="the main job in a minute: save a baseline, compare unchanged code (passes), "
        "plant a slowdown (fails, with its diagnosis); exit 0 when it went as designed",
        description="Runs pytest on three small benchmarks in a fresh folder: saves a baseline "
        "from several runs, each in a fresh process; compares the unchanged code (it must "
        "pass); plants a slowdown and compares again (it must fail, with a diagnosis). Exit "
        "0 when every step went as designed, 1 otherwise. On the GPU where there is one, "
        "else on the CPU.",
    )
    p.add_argument(
        "--path",
        metavar="DIR",
        help="the demo's folder (new or empty; default: a new temporary folder, kept)",
    )
    p.add_argument(
        "--runs",
        type=_at_least_two,
        default=3,
        metavar="N",
        help="runs saved into the baseline (default 3; at least 2)",
    )
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the CLI; returns the exit code (see ``--help``)."""
    parser = build_parser()
    args = parser.parse_args(argv)  # exits 2 on a usage error, 0 on --help
    stream = out or sys.stdout
    restore = sigterm_as_ctrl_c()  # a CI cancellation ends a command as Ctrl-C does
    try:
        code: int = args.func(args, stream)
    except (GpuPerfError, ValueError) as e:  # ValueError: a value the store refused
        print(f"pytest-gpuperf {args.command}: error: {e}", file=sys.stderr)
        return INPUT_ERROR
    except KeyboardInterrupt as e:
        said = f"pytest-gpuperf {args.command}: interrupted ({how(e)})"
        if args.command == "prune":  # its index is replaced in one step
            said += (
                f"; baseline {args.name!r} is whole, pruned or as it was (pytest-gpuperf show "
                f"{args.name} says which)"
            )
        print(printable(said), file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:  # `pytest-gpuperf list | head`
        return OK
    finally:
        restore()
    return code
