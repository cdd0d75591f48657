"""The ``--gpuperf-json`` document: every result of a run, with the environments it ran in."""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_gpuperf.model import Result
from pytest_gpuperf.reporting.columns import added_columns
from pytest_gpuperf.reporting.explain import change_text, words

SCHEMA = "pytest-gpuperf/results"
SCHEMA_VERSION = 1


def environment_id(env: Mapping[str, Any] | None) -> str | None:
    if not env:
        return None
    blob = json.dumps(env, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def build(
    results: Sequence[Result], *, plugin_version: str, session: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    environments: dict[str, Any] = {}
    out_results = []
    added = added_columns()
    for r in results:
        d = r.to_dict(words)
        env = d.pop("environment", None)
        eid = environment_id(env)
        if eid is not None:
            environments[eid] = env
        d["environment_id"] = eid
        if r.comparison is not None and isinstance(d.get("comparison"), dict):
            # the change the gate used, as every output writes it (loading ignores it)
            d["comparison"]["change"] = change_text(r.comparison, r.id.mode)
        if added:  # the declared columns beyond the result's own fields (a reader's convenience)
            d["columns"] = {c.key: c.raw(r) for c in added}
        out_results.append(d)
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "plugin_version": plugin_version,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "session": dict(session or {}),
        "environments": environments,
        "results": out_results,
    }


def dumps(doc: Mapping[str, Any]) -> str:
    """Stable formatting: sorted keys, two-space indent, trailing newline (diffs well)."""
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def load_results(doc: Mapping[str, Any]) -> list[Result]:
    """Results back from a document written by :func:`build` (environments re-attached)."""
    if doc.get("schema") != SCHEMA:
        raise ValueError(f"not a pytest-gpuperf results file (schema {doc.get('schema')!r})")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(
            f"results schema version {doc.get('schema_version')!r} is not supported "
            f"(this pytest-gpuperf reads version {SCHEMA_VERSION})"
        )
    envs = doc.get("environments", {})
    out = []
    for d in doc.get("results", []):
        d = dict(d)
        d["environment"] = envs.get(d.pop("environment_id", None) or "")
        out.append(Result.from_dict(d))
    return out
