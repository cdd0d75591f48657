"""GitHub Actions: the step summary, and ``::error file=...,line=12,title=...::message``
annotations on the regressed tests' lines (``::warning``: inconclusive); GitHub shows at most
10 of each per step, so regressions come first, largest slowdown first."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from pathlib import PurePath

from pytest_gpuperf.model import Result
from pytest_gpuperf.outcome import INCONCLUSIVE, REGRESSION
from pytest_gpuperf.reporting import markdown
from pytest_gpuperf.reporting import verdicts as v

#: ``$GITHUB_STEP_SUMMARY`` takes at most 1 MiB per step; stay clear of it.
STEP_SUMMARY_LIMIT = 1_000_000
#: Annotation levels of each verdict kind (the others are not annotated).
LEVELS = {REGRESSION: "error", INCONCLUSIVE: "warning"}


def enabled(mode: str, env: Mapping[str, str]) -> bool:
    """Whether to write GitHub outputs: ``on``, ``off``, or ``auto`` (``GITHUB_ACTIONS=true``)."""
    return mode == "on" or (mode != "off" and env.get("GITHUB_ACTIONS", "").lower() == "true")


def escape_data(text: str) -> str:
    """A workflow command's message: ``%``, CR and LF encoded (``%25``, ``%0D``, ``%0A``)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value: as :func:`escape_data`, plus ``:`` and ``,``."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def workspace_path(
    path: str, rootdir: str | PurePath | None, workspace: str | PurePath | None
) -> str | None:
    """``path`` relative to ``$GITHUB_WORKSPACE``; None outside it (GitHub cannot place it)."""
    p = PurePath(path)
    if rootdir is not None and not p.is_absolute():
        p = PurePath(rootdir) / p
    if workspace is None:
        return PurePath(path).as_posix()
    try:
        rel = PurePath(posixpath.normpath(p.as_posix())).relative_to(
            PurePath(posixpath.normpath(PurePath(workspace).as_posix()))
        )
    except ValueError:
        return None
    return rel.as_posix()


def annotation(
    result: Result,
    *,
    rootdir: str | PurePath | None = None,
    workspace: str | PurePath | None = None,
) -> str | None:
    """The ``::error`` / ``::warning`` line for ``result``, or None if its verdict needs none."""
    r, c = v.row(result), result.comparison
    level = LEVELS.get(r.kind)
    if level is None or c is None or not c.final:
        return None
    props: list[str] = []
    loc = result.location
    if loc and isinstance(loc[0], str):
        path = workspace_path(loc[0], rootdir, workspace)
        if path is not None:
            props.append(f"file={escape_property(path)}")
            if len(loc) > 1 and isinstance(loc[1], int) and loc[1] > 0:
                props.append(f"line={loc[1]}")
    change = "" if r.change == "-" else f" {r.change}"
    title = f"gpuperf {r.label}: {result.id.display} [{result.id.mode}]{change}"
    props.append(f"title={escape_property(title)}")
    return f"::{level} {','.join(props)}::{escape_data(message(result))}"


def message(result: Result) -> str:
    """The annotation's text: the verdict's explanation, diagnosis and artifact names."""
    parts = [v.explanation(result) or v.summary_line(result)]
    if diag := v.diagnosis(result):
        parts.append("where the time went:\n" + "\n".join(f"  {d}" for d in diag))
    if names := ", ".join(a.name for a in v.artifacts(result) if a.path):
        parts.append(f"artifacts: {names}")
    return "\n".join(parts)


def annotate(
    results: Sequence[Result],
    *,
    rootdir: str | PurePath | None = None,
    workspace: str | PurePath | None = None,
) -> list[str]:
    """Every annotation of a session, regressions first (lines to print on stdout)."""
    lines = (annotation(r.result, rootdir=rootdir, workspace=workspace) for r in v.rows(results))
    return [line for line in lines if line is not None]


def step_summary(
    results: Sequence[Result], *, baseline: str | None = None, limit: int = STEP_SUMMARY_LIMIT
) -> str:
    """The Markdown report within ``limit`` bytes: else without the sections, else cut."""
    text = markdown.render(results, baseline=baseline)
    if len(text.encode()) <= limit:
        return text
    note = (
        "The details did not fit GitHub's step summary limit; see the Markdown or HTML "
        "report in the job's artifacts (--gpuperf-markdown, --gpuperf-html)."
    )
    text = markdown.render(results, baseline=baseline, footer=[note], with_details=False)
    data = text.encode()
    if len(data) <= limit:
        return text
    cut = data[: limit - 200].decode(errors="ignore")
    cut = cut[: cut.rfind("\n") + 1]
    return cut + "\n" + markdown.escape("(cut: the table did not fit the step summary)") + "\n"
