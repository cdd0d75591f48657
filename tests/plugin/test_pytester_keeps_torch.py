"""The suite's own set-up: in-process pytester runs may import torch's lazy modules in turn.

Without ``tests/conftest.py`` keeping torch's modules across runs, the second run below
fails: the first imported ``torch.distributed._functional_collectives`` (through
``assert_close``), pytester dropped it, and importing it again registers a torch operator
library twice.
"""

from __future__ import annotations

import pytest

BODY = """
import torch

def test_close():
    torch.testing.assert_close(torch.ones(2), torch.ones(2))
"""


def test_two_in_process_runs_import_torch_lazily_in_turn(pytester: pytest.Pytester) -> None:
    pytest.importorskip("torch")
    pytester.makepyfile(BODY)
    for _ in range(2):
        pytester.runpytest("-p", "no:gpuperf", "-p", "no:cacheprovider").assert_outcomes(passed=1)
