"""GitHub Actions: annotations (format, escaping, order) and the step summary."""

from __future__ import annotations

import re

import pytest

from pytest_gpuperf.reporting import github
from tests.unit.reporting_data import HOSTILE, result, session

COMMAND = re.compile(r"^::(error|warning) ((?:[a-zA-Z]+=[^,:]*)(?:,[a-zA-Z]+=[^,:]*)*)::(.*)$")


def parse(line: str) -> tuple[str, dict[str, str], str]:
    m = COMMAND.match(line)
    assert m, line
    props = dict(p.split("=", 1) for p in m.group(2).split(","))
    return m.group(1), props, m.group(3)


def test_errors_for_regressions_then_warnings_for_inconclusive() -> None:
    lines = github.annotate(session())
    levels = [parse(line)[0] for line in lines]
    assert levels == ["error", "error", "warning"]
    _, props, message = parse(lines[0])
    assert props["file"] == "tests/test_ops.py" and props["line"] == "12"
    assert props["title"] == "gpuperf regression%3A test_mm[8192-bf16] [cuda-events] +21.0 %25 time"
    assert message.startswith("gpuperf: test_mm[8192-bf16] is slower than its baseline")
    assert "\n" not in message and "%0A  baseline" in message


def test_one_line_per_annotation_whatever_the_test_id() -> None:
    line = github.annotation(result(HOSTILE, kind="regression", ratio=1.1))
    assert line is not None
    assert "\n" not in line and "\r" not in line
    _, props, message = parse(line)
    # ',' and ':' would end a property; '%' would start an escape; the raw newline of the
    # id arrives as the text \n (BenchId escapes control characters)
    assert "a%2Cb%3Ac%250A\\n*bold*" in props["title"]
    assert "a,b:c%250A\\n*bold*" in message


def test_escaping_follows_the_workflow_command_rules() -> None:
    assert github.escape_data("50% a\r\nb") == "50%25 a%0D%0Ab"
    assert github.escape_property("a:b,c%\n") == "a%3Ab%2Cc%25%0A"


def test_no_annotation_for_other_verdicts_or_unconfirmed_suspects() -> None:
    assert github.annotation(result(kind="no-change")) is None
    assert github.annotation(result(kind="improvement", ratio=0.9)) is None
    assert github.annotation(result(kind="regression", ratio=1.2, final=False)) is None
    assert github.annotation(result(kind=None)) is None


def test_without_location_the_annotation_has_no_file() -> None:
    line = github.annotation(result(kind="regression", ratio=1.2, line=None))
    assert line is not None
    _, props, _ = parse(line)
    assert "file" not in props and "line" not in props and "title" in props


def test_paths_are_made_relative_to_the_workspace() -> None:
    r = result(kind="regression", ratio=1.2)
    line = github.annotation(r, rootdir="/w/repo/python", workspace="/w/repo")
    assert line is not None and parse(line)[1]["file"] == "python/tests/test_ops.py"
    outside = github.annotation(r, rootdir="/elsewhere", workspace="/w/repo")
    assert outside is not None and "file" not in parse(outside)[1]
    assert github.workspace_path("tests/t.py", None, None) == "tests/t.py"


def test_artifacts_and_diagnosis_in_the_message() -> None:
    r = result(kind="regression", ratio=1.2)
    r.artifacts = [{"kind": "nsys", "path": "a/b/trace.nsys-rep", "summary": "gemm +20 %"}]
    _, _, message = parse(github.annotation(r) or "")
    assert "%0Awhere the time went:%0A  gemm +20 %25" in message
    assert message.endswith("%0Aartifacts: trace.nsys-rep")


@pytest.mark.parametrize(
    ("mode", "env", "expected"),
    [
        ("auto", {"GITHUB_ACTIONS": "true"}, True),
        ("auto", {}, False),
        ("auto", {"GITHUB_ACTIONS": "false"}, False),
        ("on", {}, True),
        ("off", {"GITHUB_ACTIONS": "true"}, False),
    ],
)
def test_enabled(mode: str, env: dict[str, str], expected: bool) -> None:
    assert github.enabled(mode, env) is expected


def test_step_summary_stays_under_the_limit() -> None:
    results = session() * 30
    full = github.step_summary(results, limit=10**9)
    assert "<details>" in full
    short = github.step_summary(results, limit=len(full.encode()) // 2)
    assert len(short.encode()) <= len(full.encode()) // 2
    assert "<details>" not in short and "did not fit" in short
    tiny = github.step_summary(results, limit=3000)
    assert len(tiny.encode()) <= 3000 and "cut" in tiny
