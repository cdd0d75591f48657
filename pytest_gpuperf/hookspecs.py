"""Hooks a user's plugin or conftest.py can implement (all prefixed ``pytest_gpuperf_``).

Registered through ``pytest_addhooks``; pluggy checks implementations against
these signatures. Each spec says when it is called and what it may return.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_gpuperf.model import Result


@pytest.hookspec
def pytest_gpuperf_session_finish(config: pytest.Config, results: list[Result]) -> None:
    """Called on the controller at the end of the session with every result of the run.

    Use it to upload or export results::

        def pytest_gpuperf_session_finish(config, results):
            for r in results:
                print(r.id.key, r.median)
    """
