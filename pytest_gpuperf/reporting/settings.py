"""The report options of a session: the output files, the terminal table, GitHub, progress."""

from __future__ import annotations

from dataclasses import dataclass

from pytest_gpuperf.reporting.outputs import OUTPUT_OPTIONS
from pytest_gpuperf.settings_fields import option


@dataclass(frozen=True)
class ReportSettings:
    #: the output files (``reporting.outputs.OUTPUTS``, by option): None when not asked for
    json: str | None = option("json", None)
    markdown: str | None = option("markdown", None)
    html: str | None = option("html", None)
    csv: str | None = option("csv", None)
    #: GitHub step summary and annotations: "auto", "on" or "off"
    github: str = option("github", "auto")
    #: order of the terminal table (and of the CSV rows)
    sort: str = option("sort", "verdict")
    #: columns of the terminal table; None: those that fit
    columns: tuple[str, ...] | None = option("columns", None)
    #: one terminal table per group
    group_by: tuple[str, ...] | None = option("group_by", None)
    #: progress lines: "auto", "on" or "off"
    progress: str = option("progress", "auto")

    def output_values(self) -> dict[str, str | None]:
        """``{output option: value}``: the report files' paths and the GitHub mode."""
        return {name: getattr(self, name) for name in sorted(OUTPUT_OPTIONS)}
