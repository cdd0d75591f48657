"""The verdict's options: parsed and resolved like every other option."""

from __future__ import annotations

import pytest

from pytest_gpuperf.shell.config import ConfigError, GpuPerfConfig
from pytest_gpuperf.shell.options import OPTIONS_BY_NAME, PER_TEST_OPTIONS
from pytest_gpuperf.shell.settings import Settings
from pytest_gpuperf.verdict import DEFAULT_POLICY


def test_defaults_agree_with_the_decision_policy() -> None:
    cfg = GpuPerfConfig.from_values({}, {})
    verdict = Settings.from_config(cfg).verdict
    assert verdict.decision_policy() == DEFAULT_POLICY
    assert verdict.gate_secondary == "none"


def test_per_test_and_session_options() -> None:
    assert {"threshold", "gate_secondary", "memory_tolerance", "first_call_tolerance"} <= (
        PER_TEST_OPTIONS
    )
    assert not {"alpha", "fail_on", "reruns", "confirm_budget"} & PER_TEST_OPTIONS
    assert OPTIONS_BY_NAME["fail_on"].flag_name == "--gpuperf-fail-on"


def test_values_from_every_source() -> None:
    cfg = GpuPerfConfig.from_values({"fail_on": "Inconclusive", "alpha": "0.05"}, {"reruns": "1"})
    verdict = Settings.from_config(cfg).verdict
    assert (verdict.fail_on, verdict.alpha, verdict.reruns) == ("inconclusive", 0.05, 1)
    per_test = cfg.resolve(marker={"threshold": 0.1}, call={"gate_secondary": "memory"})
    assert per_test["threshold"].value == 0.1 and per_test["threshold"].source == "marker"
    assert per_test["gate_secondary"].value == "memory"


@pytest.mark.parametrize(
    ("name", "value", "where"),
    [
        ("threshold", "3%", "--gpuperf-threshold"),
        ("threshold", 1.5, "--gpuperf-threshold"),
        ("alpha", 0.5, "--gpuperf-alpha"),
        ("fail_on", "always", "--gpuperf-fail-on"),
        ("reruns", -1, "--gpuperf-reruns"),
        ("confirm_budget", -0.5, "--gpuperf-confirm-budget"),
        ("gate_secondary", "time", "--gpuperf-gate-secondary"),
    ],
)
def test_bad_values_name_their_source(name: str, value: object, where: str) -> None:
    with pytest.raises(ConfigError, match=where):
        GpuPerfConfig.from_values({name: value}, {})
