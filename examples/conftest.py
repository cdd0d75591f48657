"""Shared settings of the example benchmarks.

The examples run anywhere: on a machine with an NVIDIA GPU they measure CUDA
kernels; without one (``--gpuperf-device=auto`` falls back to the CPU) they
measure the same PyTorch code on the CPU, with smaller problems.
"""

from __future__ import annotations

import torch

ON_GPU = torch.cuda.is_available()
