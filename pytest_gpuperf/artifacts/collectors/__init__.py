"""The collectors of evidence (device adapters): the :class:`~.base.Collector` protocol
(:mod:`.base`), torch.profiler, TORCH_TRACE, Nsight Systems and Nsight Compute, the
measuring process's side of a capture (:mod:`.child`) and the runner of external
programs with a time budget (:mod:`.process`).

They import no pytest module: what a collector needs (settings, a way to re-run
the test) comes in its :class:`~.base.CaptureContext`.
"""
