"""The ``pytest-gpuperf`` command line (ring 4): on the core only, no pytest.

- :mod:`.main`: the argument parser and one function per subcommand;
- :mod:`.runsets`: the run sets that ``compare`` and ``latest`` read (a
  baseline, or a results JSON) and their comparison.
"""
