"""The fenced code blocks of the project's Markdown, and the markers that say how to run them.

A block is a fence (```` ``` ```` or `~~~`, indented or not, e.g. inside a list item) whose info
string starts with its language. ```` ```python ```` and ```` ```php ```` blocks are examples that
the docs test runs; every other language (`sh`, `ini`, `text`, …) is shown only. HTML comments on
the lines right above a fence (blank lines between are allowed) are markers, invisible on the page:

- `<!-- not-run: why -->`: the block is not run (a fragment that cannot run); the reason is required
  and shows in the test report as the skip reason;
- `<!-- needs: cluster -->` (or `sentinel`, `redlock`, several separated by commas): the block runs
  with that deployment started for it: `$REDIS_CLUSTER_URL` / `$REDIS_SENTINEL_URL` (which then
  also become `$REDIS_URL`), `$REDLOCK_URLS` (comma-separated URLs of three independent servers).

Any other HTML comment right above a fence is an error, so a misspelt marker cannot go
unnoticed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

RUN_LANGUAGES = {"python": "python", "py": "python", "php": "php"}
NEEDS = ("cluster", "sentinel", "redlock")

FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`]*?)[ \t]*$")
COMMENT = re.compile(r"^[ \t]*<!--(?P<body>.*?)-->[ \t]*$")
MARKER = re.compile(r"^\s*(?P<key>not-run|needs)\s*:(?P<value>.*)$", re.S)


class MarkdownError(ValueError):
    """A fence or a marker the docs test cannot read."""


@dataclass(frozen=True)
class Block:
    """One fenced code block: where it is, its language, its code and its markers."""

    path: str  # relative to the repository root, with slashes
    line: int  # the line of the opening fence, from 1
    language: str  # the first word of the info string, lowercase ("" when there is none)
    code: str
    not_run: str | None = None
    needs: tuple[str, ...] = field(default=())

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def runs_as(self) -> str | None:
        """"python" or "php" when the docs test runs this block, else None."""
        return RUN_LANGUAGES.get(self.language)


def _markers(lines: list[str], fence_index: int, where: str) -> dict[str, str]:
    markers: dict[str, str] = {}
    i = fence_index - 1
    while i >= 0 and not lines[i].strip():
        i -= 1
    while i >= 0 and (c := COMMENT.match(lines[i])):
        m = MARKER.match(c["body"])
        if m is None:
            raise MarkdownError(f"{where}: unknown marker {lines[i].strip()} (expected not-run: or needs:)")
        key, value = m["key"], m["value"].strip()
        if key in markers:
            raise MarkdownError(f"{where}: marker {key} given twice")
        markers[key] = value
        i -= 1
    return markers


def parse(text: str, path: str) -> list[Block]:
    """The fenced blocks of one Markdown text, in order."""
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE_OPEN.match(lines[i])
        if m is None:
            i += 1
            continue
        where = f"{path}:{i + 1}"
        indent, fence = len(m["indent"]), m["fence"]
        language = m["info"].split()[0].lower().lstrip("{.").rstrip("}") if m["info"] else ""
        close = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        end = next((j for j in range(i + 1, len(lines)) if close.match(lines[j])), None)
        if end is None:
            raise MarkdownError(f"{where}: the fence is never closed")
        body = [ln[indent:] if ln[:indent].strip() == "" else ln.lstrip() for ln in lines[i + 1:end]]
        markers = _markers(lines, i, where)
        not_run = markers.get("not-run")
        if not_run is not None and not not_run:
            raise MarkdownError(f"{where}: <!-- not-run: … --> needs a reason")
        needs = tuple(n.strip() for n in markers["needs"].split(",")) if "needs" in markers else ()
        for n in needs:
            if n not in NEEDS:
                raise MarkdownError(f"{where}: <!-- needs: {n} -->: expected one of {', '.join(NEEDS)}")
        if markers and language not in RUN_LANGUAGES:
            raise MarkdownError(f"{where}: a marker above a {language or 'plain'} block, which is never run")
        blocks.append(Block(path, i + 1, language, "\n".join(body) + "\n", not_run, needs))
        i = end + 1
    return blocks


def documents(root: Path) -> list[Path]:
    """The Markdown whose examples must run: README.md, CONTRIBUTING.md and docs/."""
    return [p for p in (root / "README.md", root / "CONTRIBUTING.md") if p.exists()] + sorted(
        (root / "docs").rglob("*.md"))


def collect(root: Path) -> list[Block]:
    """Every fenced block of those documents."""
    return [b for p in documents(root) for b in parse(p.read_text(), p.relative_to(root).as_posix())]
