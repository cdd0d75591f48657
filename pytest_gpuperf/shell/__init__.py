"""The pytest side (ring 3): options, settings, markers, the ``gpu_bench`` fixture,
the session, the re-run gate, xdist, hook specs and the evidence capture.

``pytest_gpuperf.plugin`` (the ``pytest11`` entry point) delegates here. Nothing
in the core, the device adapters or the CLI imports this package.
"""
