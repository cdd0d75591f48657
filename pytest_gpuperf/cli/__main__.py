"""``python -m pytest_gpuperf.cli``: the ``pytest-gpuperf`` command."""

from __future__ import annotations

import sys

from pytest_gpuperf.cli.main import main

sys.exit(main())
