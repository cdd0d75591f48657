"""The zoo's campaigns keep what every confirmation child measured (``ZOO_KEEP_CHILDREN``).

A gated session re-measures its suspects in fresh processes, and an A/B session
(``--gpuperf-ab``) measures both trees in fresh processes; each such child writes its results
to a temporary JSON that the parent reads and deletes. Those are fresh-process runs like any
other, so ``bench/zoo_campaign.py sessions`` and ``bench/gpu/part-gate-b.sh`` set
``ZOO_KEEP_CHILDREN=<folder>/<tag>`` and each child, once its JSON is written, copies it to
``<folder>/<tag>.child-<n>.json`` beside a ``.meta`` with the variant it ran (GPUPERF_ZOO and
the cases the code itself makes bad): ``bench/zoo_replay.py`` reads them as runs.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from cases import CODE_BAD, bad_cases


def _variant() -> str:
    spec = os.environ.get("GPUPERF_ZOO", "")
    if not CODE_BAD:
        return spec
    if spec.strip() == "bad":
        return "bad"
    return "bad:" + ",".join(sorted(bad_cases(spec) | CODE_BAD))


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    keep = os.environ.get("ZOO_KEEP_CHILDREN")
    if not keep or os.environ.get("GPUPERF_CHILD") != "1":
        return
    written = session.config.getoption("gpuperf_json", None)
    if not written or not Path(written).exists():
        return
    stem = Path(keep)
    n = 1
    while (target := stem.with_name(f"{stem.name}.child-{n}.json")).exists():
        n += 1
    shutil.copyfile(written, target)
    meta = {"variant": _variant(), "rootdir": str(session.config.rootpath), "child": True,
            "time": time.time()}  # fmt: skip
    target.with_suffix(".meta").write_text(json.dumps(meta))
