"""The outputs' columns, declared once (reporting/columns.py): a column declared there is in
the terminal table, the HTML summary, the CSV and the JSON report, with nothing else to
change; without one, the outputs are as they were."""

from __future__ import annotations

import csv
import io

import pytest

from pytest_gpuperf.reporting import csv_report, html, json_report
from pytest_gpuperf.reporting.columns import COLUMNS, OWN_COLUMNS, Column, added_columns
from pytest_gpuperf.reporting.terminal import TableSpec, render_table
from pytest_gpuperf.units import fmt_time
from pytest_gpuperf.values import table_columns
from tests.unit.reporting_data import session

E2E = 0.000123


@pytest.fixture
def declared(monkeypatch: pytest.MonkeyPatch) -> Column:
    """One new column, declared as the package would declare one (an entry of COLUMNS)."""
    col = Column(
        "e2e",
        "e2e median",
        lambda r: E2E if r.run.rounds else None,
        fmt_time,
        "e2e median: end to end, per call",
    )
    monkeypatch.setitem(COLUMNS, col.key, col)
    return col


def test_a_declared_column_is_in_the_terminal_the_html_the_csv_and_the_json(
    declared: Column,
) -> None:
    results = session()
    measured = [r for r in results if r.run.rounds]
    cell = fmt_time(E2E)
    # the terminal: under -v, and when asked for by key (the option knows it too)
    for spec in (TableSpec(verbose=True), TableSpec(columns=table_columns("median,e2e"))):
        table = render_table(results, spec)
        assert "e2e median" in table.splitlines()[0]
        assert sum(cell in line for line in table.splitlines()) == len(measured)
    # the HTML summary table: its header and each row's cell
    page = html.render(results)
    assert "<th>e2e median</th>" in page
    assert page.count(f'<td class="num">{cell}</td>') == len(measured)
    # the CSV: a column of raw values (seconds), empty where there is none
    rows = list(csv.DictReader(io.StringIO(csv_report.render(results))))
    assert [row["e2e"] for row in rows] == [repr(E2E) if r.run.rounds else "" for r in results]
    # the JSON: each result's declared columns, raw
    doc = json_report.build(results, plugin_version="0")
    assert [d["columns"] for d in doc["results"]] == [
        {"e2e": E2E if r.run.rounds else None} for r in results
    ]


def test_without_a_new_column_the_outputs_have_only_their_own() -> None:
    assert set(COLUMNS) == OWN_COLUMNS and added_columns() == []
    results = session()
    doc = json_report.build(results, plugin_version="0")
    assert all("columns" not in d for d in doc["results"])
    header = csv_report.render(results).splitlines()[0].split(",")
    assert header[-1] == "run_id"


def test_the_columns_and_sort_options_help_lists_every_key_there_is() -> None:
    """The ``--gpuperf-columns`` and ``--gpuperf-sort`` help texts (and docs/reference.md, made
    from them) name their keys by hand: a column or an order added without its word there
    fails here."""
    import re

    from pytest_gpuperf.reporting.terminal import SORT_KEYS
    from pytest_gpuperf.shell.options import OPTIONS_BY_NAME

    def listed(help_text: str) -> list[str]:
        words = help_text.split(": ", 1)[1].split("; ", 1)[0]
        return [w for w in re.split(r"[,\s]+", words) if w and w != "(regressions"]

    columns = " ".join(OPTIONS_BY_NAME["columns"].help.split())
    assert listed(columns) == [k for k in COLUMNS if k != "name"]
    order = " ".join(OPTIONS_BY_NAME["sort"].help.split())
    keys = [w for w in re.findall(r"[a-z_]+", order.split(": ", 1)[1]) if w in SORT_KEYS]
    assert sorted(keys) == sorted(SORT_KEYS)
