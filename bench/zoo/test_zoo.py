"""The regression zoo as a benchmark suite (bench/zoo/cases.py holds the cases).

``GPUPERF_ZOO=bad`` runs every case's bad variant, ``GPUPERF_ZOO=bad:a,b`` those named;
unset, every case runs its good variant. Save a baseline from the good variants, then
compare the bad ones against it::

    pytest bench/zoo --gpuperf-save=zoo          # three times, in fresh processes
    GPUPERF_ZOO=bad pytest bench/zoo --gpuperf-baseline=zoo
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from cases import BY_NAME, CASES, CODE_BAD, bad_cases

BAD = bad_cases(os.environ.get("GPUPERF_ZOO", "")) | CODE_BAD
ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    # as the demo does: a second intra-op thread that a busy machine schedules late makes a
    # CPU op's time jump by orders of magnitude between processes
    torch.set_num_threads(1)


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_zoo(gpu_bench, name):
    case = BY_NAME[name]
    if case.gpu_only and gpu_bench.device != "cuda":
        pytest.skip(f"{case.name} needs a GPU")
    torch.manual_seed(0)  # the same inputs in every process: the numerics compare
    fn = case.make(gpu_bench.device, case.name in BAD)
    gpu_bench(fn, **case.options)
