"""Names from users' code reach no output raw (T10)."""

from __future__ import annotations

import xml.dom.minidom
from pathlib import Path
from xml.sax.saxutils import escape

import pytest

from pytest_gpuperf.model import BenchId, Result
from pytest_gpuperf.reporting import junit, markdown
from pytest_gpuperf.reporting.terminal import TableSpec, render
from tests.unit.reporting_data import result

HOSTILE = "\x1b[31mansi\n::error::byname\r\x00\x7f\u2028\u202ex"


def hostile_result() -> Result:
    params = (("p", HOSTILE), ("q", "a\nb"))
    bid = BenchId("tests/test_ops.py::test_x[0]", HOSTILE, "cuda-events", params)
    return result("test_x[0]", kind="regression", ratio=2.0, measured={"id": bid})


def test_printable_escapes_every_control_character_as_pytest_does() -> None:
    from pytest_gpuperf.model import printable

    assert printable("plain [1-2] ünï") == "plain [1-2] ünï"
    assert printable("a\x1b[31m\nb\u202e") == "a\\x1b[31m\\nb\\u202e"
    assert printable(HOSTILE).isprintable()


def test_a_name_with_control_characters_reaches_no_report_raw() -> None:
    """T10: ESC and newline in gpu_bench(name=...) reached the terminal and the JUnit XML
    raw, and a newline started a line with ::error::, which GitHub runs as a command."""
    r = hostile_result()
    assert BenchId.from_dict(r.id.to_dict()) == r.id  # a saved name reads back the same
    texts = {
        "terminal": render([r], TableSpec(verbose=True)),
        "markdown": markdown.render([r]),
        "key": r.id.key,
        "display": r.id.display,
    }
    for where, text in texts.items():
        assert "\x1b" not in text and "\u202e" not in text, where
        for line in text.splitlines():
            assert not line.lstrip(" |`").startswith("::"), (where, line)
    body = "".join(
        f'<property name="{escape(k)}" value="{escape(v)}"/>'  # as pytest's junitxml writes
        for k, v in junit.junit_properties([r])
    )
    xml.dom.minidom.parseString(f"<p>{body}</p>")  # well-formed


@pytest.mark.parametrize("field", ["nodeid", "name"])
def test_a_run_file_with_raw_control_characters_is_escaped_when_read(field: str) -> None:
    d = result("test_x").id.to_dict()
    d[field] = (d[field] or "fwd") + "\n::warning::x\x1b"
    bid = BenchId.from_dict(d)
    assert "\n" not in getattr(bid, field) and "\x1b" not in bid.key


def test_list_shows_a_commit_from_the_environment_escaped(tmp_path: Path) -> None:
    """GITHUB_SHA=$'deadbeef\\n::error::sha' made `list` print a line starting ::e."""
    import io

    from pytest_gpuperf.baseline.store import BaselineStore
    from pytest_gpuperf.cli import main as cli

    store = BaselineStore(tmp_path)
    store.save("main", [result("test_x").run], meta={"ci_sha": "dead\n::error::sha\x1b[2J"})
    out = io.StringIO()
    assert cli.main(["list", "--dir", str(tmp_path)], out=out) == cli.OK
    assert "\x1b" not in out.getvalue()
    assert not any(x.lstrip().startswith("::") for x in out.getvalue().splitlines())
