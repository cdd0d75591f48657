"""On a machine without a GPU, the examples measure torch's CPU work on one thread.

With torch's default of one thread per core, a parallel op's worker threads compete with
every other process for the cores: timed by wall time, they measure the machine more than
the code, and the plugin flags such a run ``CONTENDED`` and leaves it out of its verdicts.
One thread is timed by its own CPU time, which a busy machine does not move (the demo does
the same).
"""

import torch

if not torch.cuda.is_available():
    torch.set_num_threads(1)
