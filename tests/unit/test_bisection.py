"""The search of ``--gpuperf-bisect`` on synthetic histories whose truth is known.

A benchmark is slower from commit ``k`` on (the truth); a probe tells the search what the
truth is there, unless the commit cannot tell (undecided, or it does not build). Whatever
cannot tell, the answer is never wrong: the range it gives holds ``k``, and it is ``k``
alone whenever ``k`` itself could tell.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping

import pytest

from pytest_gpuperf import outcome as kinds
from pytest_gpuperf.verdict import bisection as b


def run(
    n: int, truth: Mapping[str, int], cannot: Mapping[int, str] | None = None
) -> tuple[b.Search, list[tuple[int, list[str]]]]:
    """The search over commits 1..n of benchmarks slower from ``truth[key]`` on; commits in
    ``cannot`` tell every benchmark that (UNDECIDED or SKIPPED). Returns the search and its
    probes."""
    cannot = cannot or {}
    search = b.Search(n, truth)
    probes = []
    while (probe := search.next_probe()) is not None:
        index, keys = probe
        assert keys, "a probe measures at least one benchmark"
        probes.append(probe)
        told = {
            k: cannot.get(index) or (b.SLOWER if index >= truth[k] else b.NOT_SLOWER) for k in keys
        }
        search.record(index, told)
        assert len(probes) <= n, "the search ends"
    return search, probes


@pytest.mark.parametrize("n", [1, 2, 12, 64])
def test_a_slowdown_at_any_commit_is_found_in_log2_n_probes(n: int) -> None:
    for k in range(1, n + 1):
        search, probes = run(n, {"a": k})
        assert search.ranges["a"].found == k
        assert len(probes) <= math.ceil(math.log2(n)), (k, probes)


def test_two_benchmarks_slowed_at_different_commits_share_their_probes() -> None:
    search, probes = run(12, {"a": 4, "b": 9})
    assert search.ranges["a"].found == 4
    assert search.ranges["b"].found == 9
    alone = len(run(12, {"a": 4})[1]) + len(run(12, {"b": 9})[1])
    assert len(probes) < alone
    assert any(len(keys) == 2 for _, keys in probes), "one probe answered both"


def test_a_commit_that_does_not_build_is_skipped_and_a_neighbour_probed() -> None:
    search, probes = run(12, {"a": 4}, cannot={6: b.SKIPPED})
    assert search.ranges["a"].found == 4
    assert [i for i, _ in probes][:2] == [6, 5], "the nearest commit to the middle instead"


def test_an_undecided_first_slower_commit_leaves_a_range_never_a_guess() -> None:
    search, _ = run(12, {"a": 5}, cannot={5: b.UNDECIDED})
    r = search.ranges["a"]
    assert r.found is None
    assert (r.good, r.bad) == (4, 6)
    assert r.untold() == {5: b.UNDECIDED}


def test_whatever_cannot_tell_the_range_holds_the_truth() -> None:
    rng = random.Random(39)
    for _ in range(2000):
        n = rng.randint(1, 40)
        truth = {"a": rng.randint(1, n), "b": rng.randint(1, n)}
        cannot = {
            i: rng.choice([b.UNDECIDED, b.SKIPPED]) for i in range(1, n) if rng.random() < 0.3
        }
        search, _ = run(n, truth, cannot)
        for key, k in truth.items():
            r = search.ranges[key]
            assert r.good < k <= r.bad, (n, truth, cannot)
            # narrowed to k exactly, unless commits that could not tell stand in the way
            assert r.found == k or set(range(r.good + 1, r.bad)) <= set(cannot), (r, cannot)


def test_outcome_reads_the_gates_verdict() -> None:
    assert b.outcome(kinds.REGRESSION) == b.SLOWER
    assert b.outcome(kinds.NO_CHANGE) == b.outcome(kinds.IMPROVEMENT) == b.NOT_SLOWER
    for kind in (kinds.INCONCLUSIVE, kinds.NO_BASELINE, kinds.DIFFERENT_ENVIRONMENT):
        assert b.outcome(kind) == b.UNDECIDED
    assert b.outcome(None) == b.SKIPPED


def test_what_fails_the_session_follows_fail_on() -> None:
    c = b.Commit(0, "0" * 40, "good")
    report = b.Report(c, c, 60.0)
    report.answers = [b.Answer(str(i), status) for i, status in enumerate(
        [b.FOUND, b.NOT_NARROWED, b.UNDECIDED_AT_BAD, b.NOT_SLOWER_AT_BAD, b.NOT_MEASURED])]  # fmt: skip
    assert [a.key for a in report.failing("regression")] == ["0", "1"]
    assert [a.key for a in report.failing("inconclusive")] == ["0", "1", "2"]
