"""The ``pytest-gpuperf`` command line (ring 4): on the core only, no pytest."""
