"""The session's outputs in one call: every entry of :data:`.outputs.OUTPUTS` (the report
files, the GitHub step summary and annotations) given the session's context.

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
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.baseline.records import Baseline
from pytest_gpuperf.model import Result
from pytest_gpuperf.reporting.settings import ReportSettings

if TYPE_CHECKING:
    from pytest_gpuperf.reporting.outputs import Output


@dataclass(frozen=True)
class CiOutputs:
    #: workflow commands (``::error ...``): print each on its own line on stdout
    annotations: list[str] = field(default_factory=list)
    #: one line per report written, for the terminal summary
    messages: list[str] = field(default_factory=list)
    #: reports that could not be written, with why (show them in red; the session goes on)
    errors: list[str] = field(default_factory=list)


def write_ci_outputs(
    settings: ReportSettings,
    results: Sequence[Result],
    *,
    baseline: Baseline | None = None,
    env: Mapping[str, str] | None = None,
    rootdir: Path | None = None,
    fingerprint_extra: Mapping[str, Any] | None = None,
    cwd: Path | None = None,
    session: Mapping[str, Any] | None = None,
    only: Sequence[str] | None = None,
    baseline_dirs: Sequence[Path] = (),
    added: Mapping[Output, Any] | None = None,
) -> CiOutputs:
    """Write each output of :data:`.outputs.OUTPUTS` whose option is set: the report files
    (``--gpuperf-json``, ``-markdown``, ``-html``, ``-csv``) and, under GitHub Actions (per
    ``--gpuperf-github``), the lines appended to ``$GITHUB_STEP_SUMMARY`` and the
    annotations returned.

    ``baseline`` is the one the session compared with (its stored runs feed
    the HTML plots); ``env`` the process environment; ``rootdir`` pytest's
    rootdir (test and artifact paths are relative to it); relative report
    paths are taken from ``cwd`` (the current directory, as ``--junitxml``);
    ``session`` the JSON's session block; ``only``: just these files, no GitHub
    outputs (a confirmation child writes its JSON and nothing else);
    ``baseline_dirs`` are never written into (nor is any baseline file);
    ``added``: the outputs plugins added (``pytest_gpuperf_output_formats``), with the
    value of each one's option, written after the built-in ones.
    """
    from pytest_gpuperf.reporting.outputs import OUTPUTS, ReportContext, write_outputs

    environ = os.environ if env is None else env
    root = rootdir or Path.cwd()
    ctx = ReportContext(
        results,
        baseline=baseline,
        rootdir=root,
        fingerprint_extra=fingerprint_extra,
        session=session or {},
        sort=settings.sort,
    )
    values: dict[str, Any] = dict(settings.output_values())
    values.update((o.option, value) for o, value in (added or {}).items())
    written = write_outputs(
        values, ctx, only=only, cwd=cwd, baseline_dirs=baseline_dirs,
        environ=environ, outputs=(*OUTPUTS, *(added or {})),
    )  # fmt: skip
    return CiOutputs(
        annotations=written.annotations, messages=written.messages, errors=written.errors
    )
