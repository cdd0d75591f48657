"""gpu_bench end to end on the CPU backend, as users run it (pytester)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import FAST, VIRTUAL_TIME_CONFTEST


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", *FAST, *args)


def test_returns_the_result_and_reports_a_table(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import torch

        def test_mm(gpu_bench):
            a = torch.randn(64, 64, device=gpu_bench.device)
            out = gpu_bench(torch.mm, a, a)
            torch.testing.assert_close(out, a @ a)
        """
    )
    result = run(pytester)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "gpuperf: measuring on the CPU: *, torch * (no CUDA); 10 rounds of 1 ms, warm-up ≤ 30 ms",
            "*= gpuperf =*",
            "benchmark*median*95% CI*spread*first call*",
            "test_mm *s*%*",
        ]
    )
    assert "NVML" not in result.stdout.str() and "telemetry" not in result.stdout.str()
    table = result.stdout.str().split("= gpuperf =")[1]
    assert max(len(line) for line in table.splitlines()) <= 120
    header = next(line for line in result.outlines if line.startswith("gpuperf: measuring"))
    assert len(header) <= 120, header
    # -v: every column
    verbose = run(pytester, "-v")
    verbose.stdout.fnmatch_lines(
        ["benchmark*params*mode*median*spread*95% CI*rounds*first call*memory*throughput*"]
    )
    chosen = run(pytester, "--gpuperf-columns=min,median", "--gpuperf-group-by=func")
    chosen.stdout.fnmatch_lines(["func=test_mm", "benchmark    min * median", "test_mm *"])
    bad = run(pytester, "--gpuperf-sort=fastest")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR


def test_fn_exception_fails_the_test_with_that_exception(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def boom():
            raise ZeroDivisionError("from the benchmarked function")

        def test_boom(gpu_bench):
            gpu_bench(boom)
        """
    )
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*ZeroDivisionError: from the benchmarked function*"])


def test_non_callable_is_a_type_error_naming_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_bad(gpu_bench):
            gpu_bench(42)
        """
    )
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*TypeError: gpu_bench() needs a callable*got int 42*"])


def test_first_call_is_reported_apart_from_the_steady_state(pytester: pytest.Pytester) -> None:
    """A 100 ms first call (think: compile) must not leak into a 0.2 ms median."""
    pytester.makepyfile(
        """
        import time, json
        calls = []

        def work():
            time.sleep(0.1 if not calls else 0.0002)
            calls.append(1)

        def test_lazy(gpu_bench):
            gpu_bench(work)
        """
    )
    result = run(pytester, "--gpuperf-json=out.json")
    result.assert_outcomes(passed=1)
    doc = json.loads((pytester.path / "out.json").read_text())
    (r,) = doc["results"]
    assert r["first_call_s"] >= 0.09
    assert r["summary"]["median"] < 0.01
    assert max(r["rounds"]) < 0.01


def test_named_measurements_and_duplicate_names(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import torch

        def test_two(gpu_bench):
            x = torch.randn(100)
            gpu_bench(torch.sin, x, name="fwd")
            gpu_bench(torch.cos, x, name="bwd")

        def test_twice_unnamed(gpu_bench):
            x = torch.randn(100)
            gpu_bench(torch.sin, x)
            gpu_bench(torch.cos, x)
        """
    )
    result = run(pytester, "--gpuperf-json=out.json")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["*gpu_bench was called twice in test_twice_unnamed without a name*"]
    )
    keys = {r["id"]["key"] for r in json.loads((pytester.path / "out.json").read_text())["results"]}
    assert "test_named_measurements_and_duplicate_names.py::test_two::fwd@cpu" in keys
    assert "test_named_measurements_and_duplicate_names.py::test_two::bwd@cpu" in keys


def test_disable_runs_each_function_once_untimed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        calls = []

        def test_count(gpu_bench):
            assert gpu_bench(lambda: calls.append(1) or 7) == 7
            assert len(calls) == 1
        """
    )
    result = run(pytester, "--gpuperf-disable", "--gpuperf-json=out.json")
    result.assert_outcomes(passed=1)
    assert json.loads((pytester.path / "out.json").read_text())["results"] == []
    assert "gpuperf: benchmarks disabled (--gpuperf-disable)" in result.stdout.str()


def test_only_and_skip_select_benchmarks(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        def test_plain():
            pass

        def test_bench(gpu_bench):
            gpu_bench(lambda: None)

        @pytest.mark.gpuperf(rounds=5)
        def test_marked():
            pass
        """
    )
    result = run(pytester, "--gpuperf-only")
    result.assert_outcomes(passed=2, deselected=1)
    result = run(pytester, "--gpuperf-skip")
    result.assert_outcomes(passed=1, deselected=2)


def test_cuda_device_without_cuda_is_a_clear_error(pytester: pytest.Pytester) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    pytester.makepyfile("def test_b(gpu_bench):\n    gpu_bench(lambda: None)\n")
    result = run(pytester, "--gpuperf-device=cuda")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--gpuperf-device=cuda was asked for, but*--gpuperf-device=auto*--gpuperf-device=cpu*"]
    )


def test_json_has_schema_environment_and_raw_rounds(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest, torch

        @pytest.mark.gpuperf(shapes=[(32, 32)], flops=lambda shape: 2 * shape[0] ** 3)
        def test_mm(gpu_bench, shape):
            a = torch.randn(*shape)
            gpu_bench(torch.mm, a, a)
        """
    )
    result = run(pytester, "--gpuperf-json=sub/out.json")
    result.assert_outcomes(passed=1)
    doc = json.loads((pytester.path / "sub" / "out.json").read_text())
    assert doc["schema"] == "pytest-gpuperf/results" and doc["schema_version"] == 1
    (r,) = doc["results"]
    env = doc["environments"][r["environment_id"]]
    for key in ("python", "torch", "cpu_model", "platform"):
        assert env[key]
    assert r["id"]["params"] == {"shape": "32x32"}
    assert len(r["rounds"]) == r["summary"]["n"] >= 5
    assert r["calls_per_round"] >= 1 and r["tflops"] > 0
    assert r["policy"]["rounds"] == 10


def test_noisy_results_are_flagged_with_a_remedy(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import itertools, time
        pattern = itertools.cycle([0.0003, 0.0003, 0.0012])

        def jitter():
            time.sleep(next(pattern))

        def test_noisy(gpu_bench):
            gpu_bench(jitter, round_ms=0.5)
        """
    )
    result = run(pytester)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*NOISY*", "flags:", "*noisy: rounds scatter*raise round_ms*"])


def test_unstable_results_are_flagged(pytester: pytest.Pytester) -> None:
    """A function whose cost flips between two levels never reaches a steady state.

    It runs on a virtual clock (the CPU timer's and the loop's ``time``, advanced only by
    the function itself), so the outcome does not depend on how busy the machine is: with
    wall time and busy-waits, 1 of 4 runs of the suite under load failed.
    """
    pytester.makeconftest(VIRTUAL_TIME_CONFTEST)
    pytester.makepyfile(
        """
        def test_drift(clock, gpu_bench):
            def flips():
                # 0.1 ms or 0.4 ms per call, flipping every 25 ms: the level never holds.
                clock.ns += 400_000 if int(clock.ns / 25e6) % 2 else 100_000

            gpu_bench(flips, rounds=30, round_ms=2, warmup_ms=40)
        """
    )
    result = run(pytester, "--gpuperf-json=o.json")
    result.assert_outcomes(passed=1)
    (r,) = json.loads((pytester.path / "o.json").read_text())["results"]
    assert r["stability"] in ("shift", "no-steady-state")
    result.stdout.fnmatch_lines(["*UNSTABLE*", "*unstable: *"])


def test_throughput_from_callables_of_parameters(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest, torch

        @pytest.mark.gpuperf(shapes=[(1 << 16,)], bytes=lambda shape: 8 * shape[0])
        def test_scale(gpu_bench, shape):
            x = torch.randn(*shape)
            gpu_bench(x.mul_, 1.0)

        @pytest.mark.gpuperf(flops=lambda size: size)
        def test_bad_callable(gpu_bench):
            gpu_bench(lambda: None)
        """
    )
    result = run(pytester)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["*flops= of test_bad_callable is a callable of the test's parameters*'size'*", "*GB/s*"]
    )


def test_in_one_process_the_session_keeps_the_results_the_test_made(
    pytester: pytest.Pytester,
) -> None:
    """Without xdist nothing is turned into a dict and back: the session's results are the
    objects the fixture made (the same Result, and its typed comparison), their free-form
    fields made plain as a worker's dict would bring them."""
    pytester.makeconftest(
        """
        import pytest
        from pytest_gpuperf.shell.session import RESULTS_KEY

        made = []

        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_call(item):
            out = yield
            made.extend(item.stash[RESULTS_KEY])
            return out

        def pytest_gpuperf_telemetry(config, bench_id, telemetry):
            telemetry["pair"] = (1, 2)
            telemetry["lost"] = float("nan")

        def pytest_gpuperf_session_finish(config, results):
            same = [any(r is m for m in made) for r in results]
            print(f"RESULTS {len(results)} SAME {sum(same)}")
            t = results[0].run.telemetry
            print(f"PLAIN {t['pair']!r} {t['lost']!r}")  # plain and frozen, as from a worker
        """
    )
    pytester.makepyfile(
        """
        def test_a(gpu_bench):
            gpu_bench(lambda: sum(range(50)))
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-s", *FAST)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*RESULTS 1 SAME 1*", "*PLAIN (1, 2) None*"])
