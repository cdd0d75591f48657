"""``python -m pytest_gpuperf.cli``: the ``pytest-gpuperf`` command."""

import sys

from pytest_gpuperf.cli.main import main

sys.exit(main())
