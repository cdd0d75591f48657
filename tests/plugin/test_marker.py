"""The gpuperf marker: parametrisation, ids and collection errors that name the test and word."""

from __future__ import annotations

import pytest


def test_shapes_and_dtypes_parametrize_with_readable_ids(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest, torch

        @pytest.mark.gpuperf(
            shapes=[(4096, 4096), (256, 256)], dtypes=[torch.bfloat16, torch.float32]
        )
        def test_mm(gpu_bench, shape, dtype):
            pass
        """
    )
    result = pytester.runpytest("--collect-only", "-q")
    result.stdout.fnmatch_lines(
        [
            "*test_mm[[]4096x4096-bfloat16[]]",
            "*test_mm[[]4096x4096-float32[]]",
            "*test_mm[[]256x256-bfloat16[]]",
            "*test_mm[[]256x256-float32[]]",
        ]
    )


def test_misspelt_keyword_is_a_collection_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gpuperf(cuda_grph=True)
        def test_typo(gpu_bench):
            pass
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*test_typo: unknown keyword 'cuda_grph' in @pytest.mark.gpuperf;"
            " did you mean 'cuda_graph'?*"
        ]
    )


def test_shapes_without_a_shape_argument_is_a_collection_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gpuperf(shapes=[(8, 8)])
        def test_noshape(gpu_bench):
            pass
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*test_noshape: @pytest.mark.gpuperf(shapes=...) parametrizes an argument named 'shape'*"]
    )


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        (
            "rounds=2",
            "*test_bad: @pytest.mark.gpuperf, rounds=: expected a whole number >= 5, got 2*",
        ),
        ("cuda_graph='sometimes'", "*cuda_graph=: expected False, True or 'both'*"),
        ("round_ms=-1", "*round_ms=: expected a number > 0, got -1*"),
        ("shapes=[]", "*test_bad: shapes= of @pytest.mark.gpuperf must be a non-empty list*"),
        # accepted, to fail inside the test
        (
            "dtypes=['float99']",
            "*test_bad: dtypes= of @pytest.mark.gpuperf: 'float99' is not a torch dtype; "
            "did you mean 'float*'? Give torch dtypes*",
        ),
        ("dtypes=[3]", "*test_bad: dtypes= of @pytest.mark.gpuperf: 3 is not a torch dtype*"),
        ("'positional'", "*takes keywords only*"),
    ],
)
def test_bad_marker_values_are_collection_errors(
    pytester: pytest.Pytester, marker: str, message: str
) -> None:
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.gpuperf({marker})
        def test_bad(gpu_bench, shape=None):
            pass
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([message])


def test_dtypes_given_by_name_are_torch_dtypes(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gpuperf(dtypes=["bfloat16", "torch.float32"])
        def test_ok(gpu_bench, dtype):
            pass
        """
    )
    result = pytester.runpytest("--collect-only", "-q")
    result.stdout.fnmatch_lines(["*test_ok[[]bfloat16[]]", "*test_ok[[]float32[]]"])


def test_marker_overrides_options_and_call_overrides_marker(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import json, pytest

        @pytest.mark.gpuperf(rounds=7, round_ms=0.5)
        def test_over(gpu_bench):
            gpu_bench(lambda: None, name="marker")
            gpu_bench(lambda: None, name="call", rounds=6)
        """
    )
    result = pytester.runpytest(
        "--gpuperf-rounds=9", "--gpuperf-warmup-ms=20", "--gpuperf-json=o.json"
    )
    result.assert_outcomes(passed=1)
    import json

    doc = json.loads((pytester.path / "o.json").read_text())
    rounds = {r["id"]["name"]: r["policy"]["rounds"] for r in doc["results"]}
    assert rounds == {"marker": 7, "call": 6}


def test_class_and_module_markers_apply(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        pytestmark = pytest.mark.gpuperf(rounds=8)

        class TestGroup:
            pytestmark = pytest.mark.gpuperf(round_ms=0.5)

            def test_in_class(self, gpu_bench):
                gpu_bench(lambda: None)
        """
    )
    result = pytester.runpytest("--gpuperf-warmup-ms=20", "--gpuperf-json=o.json")
    result.assert_outcomes(passed=1)
    import json

    (r,) = json.loads((pytester.path / "o.json").read_text())["results"]
    assert r["policy"]["rounds"] == 8 and r["policy"]["round_ms"] == 0.5


def test_a_bad_world_size_is_a_collection_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gpuperf(world_size=0)
        def test_none(gpu_bench):
            pass
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*test_none: world_size= of @pytest.mark.gpuperf must be a whole number of ranks, "
         "1 or more, got 0; e.g. @pytest.mark.gpuperf(world_size=2)*"]
    )  # fmt: skip


def test_collective_without_world_size_says_what_to_add(
    pytester: pytest.Pytester, fast_args: list[str]
) -> None:
    pytester.makepyfile(
        """
        import pytest
        import torch

        @pytest.mark.gpuperf(collective="all_reduce")
        def test_alone(gpu_bench):
            gpu_bench(torch.add, torch.ones(4), 1.0)
        """
    )
    result = pytester.runpytest(*fast_args)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*collective='all_reduce' in test_alone: a collective's bus bandwidth depends on the "
         "world size, and this test runs in one process; mark it "
         "@pytest.mark.gpuperf(world_size=N), or drop collective=*"]
    )  # fmt: skip
