"""Where a capture's files go: ``<artifacts_dir>/<run id>/<test>/<collector>/...`` and a manifest.

Test ids become folder names (:func:`safe_name`): readable, portable, distinct. Pure Python.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_gpuperf.baseline.fileio import atomic_write_text

MANIFEST = "manifest.json"
MANIFEST_SCHEMA = "pytest-gpuperf/artifacts"
MANIFEST_VERSION = 1
#: Longest folder name made from a test id (file systems allow 255 bytes; paths get long).
MAX_NAME = 96

_UNSAFE = re.compile(r"[^A-Za-z0-9._=+-]+")
_RESERVED = {"con", "prn", "aux", "nul"} | {f"{d}{i}" for d in ("com", "lpt") for i in range(10)}


def safe_name(text: str, max_len: int = MAX_NAME) -> str:
    """A folder name for ``text``, with a short hash wherever the mapping lost information."""
    readable = text.replace("::", "--").replace("/", "-").replace("\\", "-")
    readable = _UNSAFE.sub("_", readable).strip("._-") or "_"
    lossy = readable != text
    if len(readable) > max_len - 9:
        readable = readable[: max_len - 9].rstrip("._-")
        lossy = True
    if readable.lower().split(".")[0] in _RESERVED:
        lossy = True
    if lossy:
        readable = f"{readable}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"
    return readable


class Layout:
    """The folders of one session's captures."""

    def __init__(self, root: Path | str, run_id: str):
        self.root = Path(root)
        self.run_id = run_id

    @property
    def run_dir(self) -> Path:
        return self.root / safe_name(self.run_id)

    def prepare(self, nodeid: str) -> Path:
        """Create the test's folder (and a ``.gitignore`` at the root); return it."""
        self.root.mkdir(parents=True, exist_ok=True)
        ignore = self.root / ".gitignore"
        if not ignore.exists():
            with contextlib.suppress(OSError):
                ignore.write_text("# created by pytest-gpuperf: captured profiles\n*\n")
        path = self.run_dir / safe_name(nodeid)
        path.mkdir(parents=True, exist_ok=True)
        return path


def write_manifest(
    directory: Path,
    *,
    nodeid: str,
    run_id: str,
    device: str,
    benchmarks: Sequence[str],
    collectors: Sequence[Mapping[str, Any]],
    diagnosis: Mapping[str, Any] | None = None,
    wall_s: float | None = None,
    timing: Mapping[str, Any] | None = None,
) -> Path:
    """``manifest.json``: what was captured for one test, with paths relative to its folder."""
    doc = {
        "schema": MANIFEST_SCHEMA,
        "schema_version": MANIFEST_VERSION,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "nodeid": nodeid,
        "run_id": run_id,
        "device": device,
        "benchmarks": list(benchmarks),
        "wall_s": None if wall_s is None else round(wall_s, 3),
        "collectors": [dict(c) for c in collectors],
        "diagnosis": dict(diagnosis) if diagnosis else None,
        "timing": dict(timing) if timing else None,
    }
    path = directory / MANIFEST
    atomic_write_text(path, json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")
    return path


def read_manifest(directory: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((directory / MANIFEST).read_text())
    if doc.get("schema") != MANIFEST_SCHEMA:
        raise ValueError(f"{directory / MANIFEST} is not a pytest-gpuperf artifacts manifest")
    return doc
