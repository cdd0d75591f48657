"""gpu_bench over the benchmark works, as a user's test file (run by measurement_accuracy.py)."""

from __future__ import annotations

import pytest
from works import WORKS


@pytest.mark.parametrize("work", list(WORKS))
@pytest.mark.gpuperf(cuda_graph="both")
def test_work(gpu_bench, work):
    fn, flops, nbytes = WORKS[work]()
    gpu_bench(fn, flops=flops or None, bytes=nbytes or None)
