"""The session's outputs in one call: each entry of :data:`.outputs.OUTPUTS` whose option is
set, on the controller, when the session finishes (after the save)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_gpuperf.baseline.records import Baseline
from pytest_gpuperf.model import Result
from pytest_gpuperf.reporting.outputs import OUTPUTS, Output, ReportContext, Where, Written
from pytest_gpuperf.reporting.settings import ReportSettings


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
) -> Written:
    """Write the report files (``--gpuperf-json``, ``-markdown``, ``-html``, ``-csv``) and,
    under GitHub Actions (per ``--gpuperf-github``), append to ``$GITHUB_STEP_SUMMARY`` and
    return the annotations.

    ``baseline``: the one compared with (its runs feed the HTML plots); ``env``: the process
    environment; ``rootdir``: pytest's, test and artifact paths are relative to it; relative
    report paths are taken from ``cwd`` (as ``--junitxml``); ``session``: the JSON's session
    block; ``only``: just these outputs (a confirmation child writes its JSON alone);
    ``baseline_dirs`` are never written into, nor is any baseline file (nor through another
    user's symbolic link: ``baseline.fileio.write_output``); ``added``: the outputs plugins
    added (``pytest_gpuperf_output_formats``) with their options' values, written last.
    """
    ctx = ReportContext(
        results,
        baseline=baseline,
        rootdir=rootdir or Path.cwd(),
        fingerprint_extra=fingerprint_extra,
        session=session or {},
        sort=settings.sort,
    )
    values: dict[str, Any] = dict(settings.output_values())
    values.update((o.option, value) for o, value in (added or {}).items())
    where = Where(cwd or Path.cwd(), baseline_dirs, os.environ if env is None else env)
    out = Written()
    for o in (*OUTPUTS, *(added or {})):
        value = values.get(o.option)
        if value and (only is None or o.option in only) and (ctx.results or o.when_empty):
            o.write(value, ctx, where, out)
    return out
