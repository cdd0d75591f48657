"""The report files a session writes, declared once: (option, what, renderer) per format.

The session walks :data:`OUTPUTS` once when it finishes
(:func:`write_outputs`); the CLI's ``export`` and ``compare`` render through
the same entries. A new format is one renderer and one entry here (and its
option in ``shell/options.py``). JUnit properties and the terminal summary are
not files and stay where pytest asks for them; the GitHub step summary and
annotations are in :mod:`.ci`.

A file that cannot be written is reported, never raised: the verdicts stand
without the report. Pure Python: no torch, no pytest.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from pytest_gpuperf.baseline.records import Baseline
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

    if ctx.title:
        return markdown.render(ctx.results, baseline=ctx.label, title=ctx.title)
    return markdown.render(ctx.results, baseline=ctx.label)


def artifact_href(html_path: Path, rootdir: Path) -> Any:
    """A function giving each artifact's link relative to the HTML file's folder.

    Artifact paths are relative to the rootdir, or absolute; links are
    relative so that the report and its artifacts can be downloaded together
    (one CI artifact) and still open.
    """
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
    kwargs: dict[str, Any] = {"title": ctx.title} if ctx.title else {}
    return html.render(
        ctx.results,
        histories=hist,
        baseline=ctx.label,
        artifact_href=artifact_href(target, ctx.rootdir),
        **kwargs,
    )


def _csv(ctx: ReportContext, target: Path) -> str:
    from pytest_gpuperf.reporting import csv_report

    return csv_report.render(ctx.results, sort=ctx.sort)


@dataclass(frozen=True)
class Output:
    #: the option that names the file (``--gpuperf-<option>``)
    option: str
    #: what the file is, for the messages
    what: str
    render: Callable[[ReportContext, Path], str]
    #: written also when the session measured nothing (a confirmation child's parent
    #: reads its JSON whatever it holds)
    when_empty: bool = False


OUTPUTS: tuple[Output, ...] = (
    Output("json", "results", _json, when_empty=True),
    Output("markdown", "Markdown report", _markdown),
    Output("html", "HTML report", _html),
    Output("csv", "CSV", _csv),
)
OUTPUTS_BY_OPTION: dict[str, Output] = {o.option: o for o in OUTPUTS}


@dataclass
class Written:
    #: one line per file written, for the terminal summary
    messages: list[str] = field(default_factory=list)
    #: files that could not be written, with why (shown in red; the session goes on)
    errors: list[str] = field(default_factory=list)


def write_outputs(
    paths: Mapping[str, str | None],
    ctx: ReportContext,
    *,
    only: Sequence[str] | None = None,
    cwd: Path | None = None,
    baseline_dirs: Sequence[Path] = (),
) -> Written:
    """Write each output whose path is set in ``paths`` (``{option: path}``, e.g.
    ``ReportSettings.output_paths()``; ``only``: just these); relative paths are taken
    from ``cwd`` (the current directory, as ``--junitxml``). No output is written into
    ``baseline_dirs`` or over a baseline file, nor through another user's symbolic link
    (:func:`pytest_gpuperf.baseline.fileio.write_output`)."""
    from pytest_gpuperf.baseline.fileio import write_output
    from pytest_gpuperf.errors import OutputError

    here = cwd or Path.cwd()
    out = Written()
    for o in OUTPUTS:
        path = paths.get(o.option)
        if not path or (only is not None and o.option not in only):
            continue
        if not ctx.results and not o.when_empty:
            continue
        target = here / str(path)
        try:
            write_output(
                target, o.render(ctx, target), what=f"--gpuperf-{o.option}",
                baseline_dirs=baseline_dirs,
            )  # fmt: skip
        except OutputError as e:
            out.errors.append(f"cannot write the {o.what} to {target}: {e}")
            continue
        except OSError as e:
            out.errors.append(f"cannot write the {o.what} to {target}: {e.strerror or e}")
            continue
        if ctx.results:
            out.messages.append(f"{o.what} written to {target}")
    return out
