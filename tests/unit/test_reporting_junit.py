"""JUnit properties of a test's results."""

from __future__ import annotations

import pytest

from pytest_gpuperf.reporting.junit import junit_properties
from tests.unit.reporting_data import result


def test_one_result_gets_plain_names() -> None:
    props = dict(junit_properties([result(kind="regression", ratio=1.062)]))
    assert props["gpuperf.verdict"] == "regression"
    assert props["gpuperf.ratio"] == "1.062"
    assert props["gpuperf.change"] == "+6.2 % time"
    assert props["gpuperf.interval"] == "+4.6 % to +7.8 % (90 % CI)"
    assert props["gpuperf.baseline_s"] == "0.0005"
    assert float(props["gpuperf.median_s"]) == pytest.approx(5.31e-4, rel=0.02)
    assert props["gpuperf.median"].endswith("µs")
    assert props["gpuperf.runs"] == "20 / 3"
    assert all(isinstance(v, str) for v in props.values())


def test_uncompared_result_has_no_verdict_numbers() -> None:
    props = dict(junit_properties([result(kind=None)]))
    assert props["gpuperf.verdict"] == "not compared"
    assert "gpuperf.ratio" not in props


def test_several_results_of_one_test_are_grouped() -> None:
    ev = result(kind="no-change", name="mm", mode="cuda-events")
    gr = result(kind="no-change", name="mm", mode="cuda-graph")
    names = [n for n, _ in junit_properties([ev, gr])]
    assert "gpuperf[mm@cuda-events].median" in names
    assert "gpuperf[mm@cuda-graph].verdict" in names
    assert len(names) == len(set(names))
