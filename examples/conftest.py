"""On a machine without a GPU, the examples measure torch's CPU work on one thread.

With torch's default of one thread per core, a parallel op whose worker thread loses its
core to another process waits a whole scheduler tick (about 4 ms): the median then snaps to
4, 8 or 16 ms, whatever the code costs, and the plugin flags it ``PLATEAU`` and keeps it out
of a saved baseline. One thread keeps the CPU figures about the code (the demo does the same).
"""

import torch

if not torch.cuda.is_available():
    torch.set_num_threads(1)
