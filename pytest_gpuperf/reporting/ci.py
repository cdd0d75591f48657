"""The session's CI outputs in one call: Markdown and HTML files, the GitHub step summary and
annotations.

The plugin calls :func:`write_ci_outputs` once, on the controller, when the
session finishes (after the baseline is saved), then prints what it returns
in the terminal summary: the annotations (workflow commands, which GitHub
reads from stdout) and one line per file written. A file that cannot be
written is reported, never raised: the verdicts stand without the report.

File system only; no torch, no pytest.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

from pytest_gpuperf.baseline.records import Baseline
from pytest_gpuperf.model import Result


class Settings(Protocol):
    """What is read of the settings: ``GpuPerfConfig`` or a plain dict."""

    def __getitem__(self, name: str) -> Any: ...


@dataclass(frozen=True)
class CiOutputs:
    #: workflow commands (``::error ...``): print each on its own line on stdout
    annotations: list[str] = field(default_factory=list)
    #: one line per report written, for the terminal summary
    messages: list[str] = field(default_factory=list)
    #: reports that could not be written, with why (show them in red; the session goes on)
    errors: list[str] = field(default_factory=list)


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


def _write(
    path: Path, text: str, what: str, option: str, out: CiOutputs, baseline_dirs: Sequence[Path]
) -> None:
    from pytest_gpuperf.errors import OutputError
    from pytest_gpuperf.fileio import write_output

    try:
        write_output(path, text, what=option, baseline_dirs=baseline_dirs)
    except OutputError as e:
        out.errors.append(f"cannot write the {what} to {path}: {e}")
        return
    except OSError as e:
        out.errors.append(f"cannot write the {what} to {path}: {e.strerror or e}")
        return
    out.messages.append(f"{what} written to {path}")


def write_ci_outputs(
    settings: Settings,
    results: Sequence[Result],
    *,
    baseline: Baseline | None = None,
    env: Mapping[str, str] | None = None,
    rootdir: Path | None = None,
    fingerprint_extra: Mapping[str, Any] | None = None,
    cwd: Path | None = None,
    baseline_dirs: Sequence[Path] = (),
) -> CiOutputs:
    """Write ``--gpuperf-markdown``, ``--gpuperf-html`` and, under GitHub Actions (per
    ``--gpuperf-github``), append to ``$GITHUB_STEP_SUMMARY`` and return the annotations.

    ``baseline`` is the one the session compared with (its stored runs feed
    the HTML plots); ``env`` the process environment; ``rootdir`` pytest's
    rootdir (test and artifact paths are relative to it); relative report
    paths are taken from ``cwd`` (the current directory, as ``--junitxml``);
    ``baseline_dirs`` are never written into (nor is any baseline file).
    """
    from pytest_gpuperf.reporting import github, html, markdown
    from pytest_gpuperf.reporting.history import histories

    environ = os.environ if env is None else env
    root = rootdir or Path.cwd()
    here = cwd or Path.cwd()
    out = CiOutputs()
    name = baseline.name if baseline is not None else None
    if not results:
        return out
    md_path = settings["markdown"]
    if md_path:
        text = markdown.render(results, baseline=name)
        _write(here / md_path, text, "Markdown report", "--gpuperf-markdown", out, baseline_dirs)
    html_path = settings["html"]
    if html_path:
        target = here / html_path
        page = html.render(
            results,
            histories=histories(results, baseline, fingerprint_extra),
            baseline=name,
            artifact_href=artifact_href(target, root),
        )
        _write(target, page, "HTML report", "--gpuperf-html", out, baseline_dirs)
    if github.enabled(str(settings["github"]), environ):
        summary_file = environ.get("GITHUB_STEP_SUMMARY")
        if summary_file:
            text = github.step_summary(results, baseline=name)
            try:
                with open(summary_file, "a", encoding="utf-8") as f:
                    f.write(text + "\n")
                out.messages.append("step summary added to $GITHUB_STEP_SUMMARY")
            except OSError as e:
                out.errors.append(
                    f"cannot append to $GITHUB_STEP_SUMMARY ({summary_file}): {e.strerror or e}"
                )
        out.annotations.extend(
            github.annotate(results, rootdir=root, workspace=environ.get("GITHUB_WORKSPACE"))
        )
    return out
