"""Peak memory and first-call time against the baseline (pytest_gpuperf.secondary)."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from pytest_gpuperf.outcome import SecondaryComparison
from pytest_gpuperf.reporting.explain import secondary_words
from pytest_gpuperf.verdict.secondary import (
    FIRST_CALL,
    HIGHER,
    LOWER,
    NO_BASELINE,
    PEAK_MEMORY,
    SAME,
    compare_secondary,
)

GIB = 2**30


def test_memory_is_compared_with_the_largest_baseline_value() -> None:
    base = [1.00 * GIB, 1.00 * GIB, 1.01 * GIB]
    same = compare_secondary(base, 1.05 * GIB, 0.05)  # within 5 % of the largest
    assert same.kind == SAME and same.ratio == pytest.approx(1.05)
    higher = compare_secondary(base, 1.07 * GIB, 0.05)
    assert higher.kind == HIGHER
    assert higher.upper == pytest.approx(1.01 * GIB * 1.05 + 2**20)
    assert compare_secondary(base, 0.8 * GIB, 0.05).kind == LOWER


def test_memory_slack_absorbs_allocator_rounding() -> None:
    base = [10 * 2**20] * 3  # 10 MiB: 5 % is only 0.5 MiB
    assert compare_secondary(base, 11 * 2**20, 0.05).kind == SAME
    assert compare_secondary(base, 12 * 2**20, 0.05).kind == HIGHER


def test_first_call_noise_widens_the_band() -> None:
    base = [2.0, 2.9, 2.1]  # compile times vary; the largest one sets the band
    assert compare_secondary(base, 4.0, 0.5, metric=FIRST_CALL).kind == SAME
    assert compare_secondary(base, 4.5, 0.5, metric=FIRST_CALL).kind == HIGHER
    r = compare_secondary(base, 4.0, 0.5, metric=FIRST_CALL)
    assert r.baseline == 2.1 and r.ratio == pytest.approx(4.0 / 2.1)


def test_missing_values() -> None:
    assert compare_secondary([], 1.0, 0.05).kind == NO_BASELINE
    assert compare_secondary([None, None], 1.0, 0.05).kind == NO_BASELINE
    assert compare_secondary([1.0], None, 0.05).kind == NO_BASELINE
    with pytest.raises(ValueError):
        compare_secondary([1.0], 1.0, -0.1)


def test_text_and_round_trip() -> None:
    r = compare_secondary([1.0 * GIB] * 3, 1.2 * GIB, 0.05, metric=PEAK_MEMORY)
    assert secondary_words(r).startswith("peak memory 1.2 GiB vs 1.0 GiB baseline (+20.0 %")
    assert secondary_words(r).endswith(": higher")
    assert "first call 3.000 s" in secondary_words(
        compare_secondary([2.0], 3.0, 0.5, metric=FIRST_CALL)
    )
    assert SecondaryComparison.from_dict(asdict(r)) == r
