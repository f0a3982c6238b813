"""MkDocs hook (mkdocs.yml `hooks:`): links from docs/ to the rest of the repository.

A page may link a file outside docs/ by its relative path, `[stubs](../php/ferrolock.stubs.php)`,
which is what works when the Markdown is read on the forge or in a checkout. MkDocs cannot serve such
a file and would report the link as broken; this hook checks that the file (or folder) exists in the
repository, warns when it does not (a failure under `mkdocs build --strict`), and points the link at
the repository's copy on the forge (`repo_url`).
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.hooks.ferrolock")

BRANCH = "main"
# An inline link or image target: `](target)` or `](target "title")`.
LINK = re.compile(r"(\]\()([^)\s]+)((?:\s+\"[^\"]*\")?\))")
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")


def _rewrite(target: str, page_dir: Path, docs_dir: Path, root: Path, repo_url: str, page: str) -> str:
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith(("#", "/")):
        return target  # a URL, an anchor on the page, or an absolute path: mkdocs checks those
    path, _, fragment = target.partition("#")
    resolved = Path(posixpath.normpath((page_dir / path).as_posix()))
    if resolved == docs_dir or docs_dir in resolved.parents:
        return target  # inside docs/: mkdocs resolves and checks it
    if not (resolved == root or root in resolved.parents):
        log.warning("%s: the link %r leaves the repository", page, target)
        return target
    if not resolved.exists():
        log.warning("%s: the link %r names %s, which does not exist", page, target,
                    resolved.relative_to(root).as_posix())
        return target
    kind = "tree" if resolved.is_dir() else "blob"
    url = f"{repo_url.rstrip('/')}/{kind}/{BRANCH}/{resolved.relative_to(root).as_posix()}"
    return url + (f"#{fragment}" if fragment else "")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    docs_dir = Path(config["docs_dir"]).resolve()
    root = Path(config["config_file_path"]).resolve().parent
    page_dir = (docs_dir / page.file.src_uri).parent
    repo_url = config["repo_url"] or ""
    out, fence = [], None
    for line in markdown.splitlines(keepends=True):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
        elif fence is not None and m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
            fence = None
        elif fence is None:
            line = LINK.sub(lambda m: m.group(1) + _rewrite(m.group(2), page_dir, docs_dir, root, repo_url,
                                                            page.file.src_uri) + m.group(3), line)
        out.append(line)
    return "".join(out)
