"""The session's outputs in one call: each entry of :data:`.outputs.OUTPUTS` whose option is
set, on the controller, when the session finishes (after the save)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_gpuperf.baseline.records import Baseline
from pytest_gpuperf.model import Result
from pytest_gpuperf.reporting.outputs import OUTPUTS, Output, ReportContext, Written
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
    """Write each output whose option is set (then the ``added`` ones plugins declared);
    report paths are relative to ``cwd``, test and artifact paths to ``rootdir``; ``only``:
    just these outputs (a confirmation child's JSON); nothing goes into ``baseline_dirs``."""
    ctx = ReportContext(
        results,
        baseline=baseline,
        rootdir=rootdir or Path.cwd(),
        fingerprint_extra=fingerprint_extra,
        session=session or {},
        sort=settings.sort,
        cwd=cwd or Path.cwd(),
        baseline_dirs=baseline_dirs,
        environ=os.environ if env is None else env,
    )
    values = settings.output_values()
    chosen = [*((o, values[o.option]) for o in OUTPUTS), *(added or {}).items()]
    out = Written()
    for o, value in chosen:
        if value and (only is None or o.option in only) and (ctx.results or o.when_empty):
            o.write(value, ctx, out)
    return out
