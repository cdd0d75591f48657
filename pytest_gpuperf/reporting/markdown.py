"""The Markdown report: a GitHub-flavoured verdict table, regressions first, then their details
(``$GITHUB_STEP_SUMMARY`` and ``--gpuperf-markdown``). Everything that comes from a test is
escaped: a hostile test id cannot break the table or inject HTML."""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

from pytest_gpuperf.model import Result
from pytest_gpuperf.outcome import DIFFERENT_ENVIRONMENT, IMPROVEMENT, INCONCLUSIVE, REGRESSION
from pytest_gpuperf.reporting import verdicts as v

_INLINE = re.compile(r"([\\`*_{}\[\]|~!])")
_LEADING = re.compile(r"^([#+=-])")


def escape(text: object) -> str:
    """Text that GitHub Markdown shows as it is, on one line, also in a table cell."""
    s = " ".join(str(text).split())  # a newline would end the table row
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _LEADING.sub(r"\\\1", _INLINE.sub(r"\\\1", s))


def code_block(text: str, info: str = "text") -> str:
    """``text`` in a fenced block whose fence is longer than any backtick run inside it."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text.rstrip()}\n{fence}"


def table(rows: Sequence[v.Row]) -> str:
    head = ["", "benchmark", "params", "mode", "verdict", "change", "interval", "baseline"]
    head += ["current", "runs (base / current)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        verdict = f"**{escape(r.label)}**" if r.kind == REGRESSION else escape(r.label)
        cells = [v.look(r.kind).icon, *map(escape, (r.name, r.params, r.result.id.mode))]
        cells += [verdict, *map(escape, (r.change, r.interval, r.baseline, r.current, r.runs))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _artifacts(result: Result) -> list[str]:
    out = []
    for a in v.artifacts(result):
        text = f"`{_code(a.name)}`"
        if a.kind:
            text += f" ({escape(a.kind)})"
        if a.path and a.path != a.name:
            text += f": `{_code(a.path)}`"
        if a.note:
            text += f" — {escape(a.note)}"
        out.append(f"- {text}")
    return out


def _code(s: str) -> str:
    """Inline code cannot hold a backtick or a newline; replace them."""
    return " ".join(s.replace("`", "'").split())


def details(r: v.Row) -> str:
    """One benchmark's section: summary line, diagnosis, explanation, artifacts."""
    res = r.result
    heading = f"{r.name} ({res.id.mode}): {r.label}"
    icon = v.look(r.kind).icon
    body: list[str] = []
    if diag := v.diagnosis(res):
        body += ["**Where the time went**", "", *(f"- {escape(x)}" for x in diag), ""]
    if explanation := v.explanation(res):
        body += [code_block(explanation), ""]
    if arts := _artifacts(res):
        body += ["**Artifacts** (uploaded with the job's artifacts)", "", *arts, ""]
    if res.notes:
        body += [*(f"- {escape(n)}" for n in res.notes), ""]
    if r.kind == REGRESSION:  # shown open; the others folded
        return "\n".join([f"#### {icon} {escape(heading)}", "", *body]).rstrip()
    # Inside an HTML block Markdown escapes are not processed: escape for HTML only.
    summary = f"{icon} {html.escape(' '.join(heading.split()))}"
    return "\n".join(["<details>", f"<summary>{summary}</summary>", "", *body, "</details>"])


def render(
    results: Sequence[Result],
    *,
    title: str | None = None,
    baseline: str | None = None,
    footer: Sequence[str] = (),
    with_details: bool = True,
) -> str:
    """The whole report: a headline, the table, then a section per benchmark that needs one."""
    rs = v.rows(results)
    lines = [f"## {escape(title or 'gpuperf')}: {escape(v.headline(rs))}", ""]
    if baseline:
        lines += [f"Compared with baseline `{_code(baseline)}`.", ""]
    if not rs:
        lines.append("No benchmark ran.")
    else:
        lines += [table(rs), ""]
        if with_details:
            for r in rs:
                if r.kind in (REGRESSION, INCONCLUSIVE, IMPROVEMENT, DIFFERENT_ENVIRONMENT):
                    lines += [details(r), ""]
    for f in footer:
        lines += [escape(f), ""]
    return "\n".join(lines).rstrip() + "\n"
