"""The outputs a session writes (:func:`.ci.write_ci_outputs`) and the CLI's ``export`` and
``compare`` render, declared once in :data:`OUTPUTS`: a new format is one renderer, one entry
here and its option in ``shell/options.py``. A file that cannot be written is reported, never
raised: the verdicts stand without the report."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from pytest_gpuperf.baseline.fileio import STANDARD_STREAMS, write_output
from pytest_gpuperf.baseline.records import Baseline
from pytest_gpuperf.errors import OutputError
from pytest_gpuperf.model import Result


@dataclass(frozen=True)
class ReportContext:
    """Everything a renderer may read."""

    results: Sequence[Result]
    #: the baseline the session compared with (its stored runs feed the HTML plots)
    baseline: Baseline | None = None
    #: the name to show for it (a CLI comparison's reference may be a file)
    baseline_label: str | None = None
    #: per benchmark key, precomputed (the CLI); None: from ``baseline``
    histories: Mapping[str, Any] | None = None
    #: pytest's rootdir: test and artifact paths are relative to it
    rootdir: Path = field(default_factory=Path.cwd)
    fingerprint_extra: Mapping[str, Any] | None = None
    #: the JSON's ``session`` block
    session: Mapping[str, Any] = field(default_factory=dict)
    title: str | None = None
    #: --gpuperf-sort, for the formats whose rows have an order of their own (CSV)
    sort: str = "collection"
    #: where relative output paths start; nothing is written into ``baseline_dirs``
    cwd: Path = field(default_factory=Path.cwd)
    baseline_dirs: Sequence[Path] = ()
    #: the process environment (the GitHub Actions variables)
    environ: Mapping[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str | None:
        return self.baseline_label or (self.baseline.name if self.baseline is not None else None)


def _json(ctx: ReportContext, target: Path) -> str:
    from pytest_gpuperf import __version__
    from pytest_gpuperf.reporting import json_report

    doc = json_report.build(ctx.results, plugin_version=__version__, session=ctx.session)
    return json_report.dumps(doc)


def _markdown(ctx: ReportContext, target: Path) -> str:
    from pytest_gpuperf.reporting import markdown

    return markdown.render(ctx.results, baseline=ctx.label, title=ctx.title)


def artifact_href(html_path: Path, rootdir: Path) -> Any:
    """Artifact links relative to the HTML file: they still open downloaded together."""
    base = html_path.resolve().parent

    def href(path: str) -> str | None:
        if not path:
            return None
        target = Path(path) if Path(path).is_absolute() else rootdir / path
        return quote(Path(os.path.relpath(target.resolve(), base)).as_posix())

    return href


def _html(ctx: ReportContext, target: Path) -> str:
    from pytest_gpuperf.reporting import html
    from pytest_gpuperf.reporting.history import histories

    hist = ctx.histories
    if hist is None:
        hist = histories(ctx.results, ctx.baseline, ctx.fingerprint_extra)
    return html.render(
        ctx.results,
        histories=hist,
        baseline=ctx.label,
        artifact_href=artifact_href(target, ctx.rootdir),
        title=ctx.title,
    )


def _csv(ctx: ReportContext, target: Path) -> str:
    from pytest_gpuperf.reporting import csv_report

    return csv_report.render(ctx.results, sort=ctx.sort)


@dataclass
class Written:
    #: one line per file written, for the terminal summary
    messages: list[str] = field(default_factory=list)
    #: files that could not be written, with why (shown in red; the session goes on)
    errors: list[str] = field(default_factory=list)
    #: workflow commands (``::error ...``): print each on its own line on stdout
    annotations: list[str] = field(default_factory=list)


#: write(option value, context, what was written so far)
Writer = Callable[[Any, ReportContext, Written], None]


@dataclass(frozen=True)
class Output:
    #: the option that asks for it (``--gpuperf-<option>``)
    option: str
    #: what it is, for the messages
    what: str
    #: a report file: its text (the option's value is the file's path); None: not a file
    render: Callable[[ReportContext, Path], str] | None = None
    #: how it is written; None: ``render``'s text to the option's path
    writer: Writer | None = None
    #: written also when the session measured nothing (a confirmation child's parent
    #: reads its JSON whatever it holds)
    when_empty: bool = False

    def text(self, ctx: ReportContext, target: Path) -> str:
        """The report file's text (for ``target``: the HTML's links are relative to it)."""
        assert self.render is not None, "only a report file has a text"
        return self.render(ctx, target)

    def write(self, value: Any, ctx: ReportContext, out: Written) -> None:
        if self.writer is not None:
            self.writer(value, ctx, out)
            return
        target = Path(value) if str(value) in STANDARD_STREAMS else ctx.cwd / str(value)
        try:
            write_output(
                target, self.text(ctx, target), what=f"--gpuperf-{self.option}",
                baseline_dirs=ctx.baseline_dirs,
            )  # fmt: skip
        except (OutputError, OSError) as e:  # OSError's strerror: its message without the path
            why = getattr(e, "strerror", None) or e
            out.errors.append(f"cannot write the {self.what} to {target}: {why}")
            return
        if ctx.results:
            out.messages.append(f"{self.what} written to {target}")


def _github(value: Any, ctx: ReportContext, out: Written) -> None:
    """Under GitHub Actions: the step summary, and the annotations of the regressed tests."""
    from pytest_gpuperf.reporting import github

    environ = ctx.environ
    if not github.enabled(str(value), environ):
        return
    if summary_file := environ.get("GITHUB_STEP_SUMMARY"):
        text = github.step_summary(ctx.results, baseline=ctx.label)
        try:
            write_output(
                ctx.cwd / summary_file, text + "\n", what="$GITHUB_STEP_SUMMARY",
                baseline_dirs=ctx.baseline_dirs, append=True,
            )  # fmt: skip
            out.messages.append("step summary added to $GITHUB_STEP_SUMMARY")
        except OutputError as e:
            out.errors.append(f"cannot append to {e}")
        except OSError as e:
            out.errors.append(
                f"cannot append to $GITHUB_STEP_SUMMARY ({summary_file}): {e.strerror or e}"
            )
    out.annotations.extend(
        github.annotate(ctx.results, rootdir=ctx.rootdir, workspace=environ.get("GITHUB_WORKSPACE"))
    )


#: Every output of a session's end, in the order they are written.
OUTPUTS: tuple[Output, ...] = (
    Output("json", "results", _json, when_empty=True),
    Output("markdown", "Markdown report", _markdown),
    Output("html", "HTML report", _html),
    Output("csv", "CSV", _csv),
    Output("github", "GitHub step summary and annotations", writer=_github),
)
OUTPUTS_BY_OPTION: dict[str, Output] = {o.option: o for o in OUTPUTS}
#: The options of the outputs (a confirmation child is given none of them: it writes its
#: JSON where its parent says, and nothing else)
OUTPUT_OPTIONS: frozenset[str] = frozenset(OUTPUTS_BY_OPTION)
#: The report files: the outputs whose option's value is a path
FILE_OUTPUTS: tuple[Output, ...] = tuple(o for o in OUTPUTS if o.render is not None)
