"""Under pytest-xdist: results reach the controller, measurements never overlap on a device."""

from __future__ import annotations

import itertools
import json

import pytest

from tests.conftest import FAST

pytest.importorskip("xdist")


def test_results_reach_the_controller_and_measurements_are_serialised(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        """
        import json, os, time
        import pytest

        @pytest.mark.parametrize("i", range(6))
        def test_b(gpu_bench, i, tmp_path_factory):
            calls = []

            def work():
                calls.append(time.time())
                time.sleep(0.0005)

            gpu_bench(work)
            log = tmp_path_factory.getbasetemp().parent / "spans.jsonl"
            with open(log, "a") as f:
                f.write(json.dumps([calls[0], calls[-1], os.environ.get("PYTEST_XDIST_WORKER")]) + "\\n")
        """
    )
    result = pytester.runpytest_subprocess(
        "-n", "2", "-p", "no:cacheprovider", *FAST, "--gpuperf-json=o.json"
    )
    result.assert_outcomes(passed=6)
    doc = json.loads((pytester.path / "o.json").read_text())
    assert len(doc["results"]) == 6
    assert len({r["run_id"] for r in doc["results"]}) == 1
    # its median, in µs (a 0.5 ms sleep), in ms where a loaded machine oversleeps
    result.stdout.fnmatch_lines(["*= gpuperf =*", "test_b[[]0[]] * [µm]s *"])
    spans = []
    for f in pytester.path.parent.rglob("spans.jsonl"):
        spans += [json.loads(x) for x in f.read_text().splitlines()]
    assert len(spans) == 6 and len({w for _, _, w in spans}) == 2
    spans.sort()
    for (_, end, _), (start, _, _) in itertools.pairwise(spans):
        assert start >= end  # one measurement at a time on the device


@pytest.mark.parametrize("distribute", [["-n", "1"], ["--tx", "popen", "--dist", "load"]])
def test_the_controller_writes_the_settings_however_xdist_was_asked_to_distribute(
    pytester: pytest.Pytester, distribute: list[str]
) -> None:
    # xdist's controller runs no test: it says how they are measured in pytest's header
    pytester.makepyfile("def test_b(gpu_bench):\n    gpu_bench(lambda: None)\n")
    result = pytester.runpytest_subprocess(*distribute, "-p", "no:cacheprovider", *FAST)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["gpuperf: device=*, * rounds of * ms after a warm-up *"])
