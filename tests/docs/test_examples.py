"""Docs that cannot rot: every ```python and ```php block of README.md, CONTRIBUTING.md and docs/
runs here as a complete program, in a fresh process, against a real redis-server named by
`$REDIS_URL` (emptied before each block; see conftest.py), and must succeed:

- Python: `python -W error example.py` exits 0 (a warning is an error) and writes nothing to stderr
  that says a thread or a finalizer failed (a logged error, such as the worker loop's for a failing
  task, is allowed);
- PHP: `php -d extension=target/release/libferrolock_php.so example.php` (with assertions on,
  `error_reporting=-1`, errors displayed on stderr) exits 0 with an empty stderr: a warning, a
  notice or a deprecation fails. `error_log()` goes to a file, not stderr. A block without
  `<?php` gets one. `vendor/autoload.php` beside the script stands in for composer's: it loads the
  bridge package (`php/bridge/`) and Debian's symfony/lock, as the bridge tests do.

Markers (`<!-- not-run: why -->`, `<!-- needs: cluster -->`, …) are described in blocks.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_php
from tests.docs.blocks import Block, MarkdownError, collect, parse
from tests.docs.conftest import Deployments

BLOCKS = collect(ROOT)
RUNNABLE = [b for b in BLOCKS if b.runs_as]
BRIDGE_BOOTSTRAP = ROOT / "tests" / "php" / "bridge" / "bootstrap.php"
TIMEOUT = 120  # seconds per example: generous, the machine is shared
# What Python prints when an exception is swallowed by a thread or a finalizer: exit code 0 hides it.
SILENT_FAILURES = re.compile(r"^(Exception in thread|Exception ignored in|Fatal Python error)", re.M)


def run_block(block: Block, env: dict[str, str], tmp_path: Path) -> None:
    """Runs one block as a program in `tmp_path`; raises AssertionError, with its output, if it fails."""
    if block.runs_as == "python":
        script = tmp_path / "example.py"
        script.write_text(block.code)
        try:
            proc = subprocess.run([sys.executable, "-W", "error", script.name], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=TIMEOUT)
        except subprocess.TimeoutExpired as e:
            raise AssertionError(f"{block.id}: still running after {TIMEOUT} s:\n{e.stdout}\n{e.stderr}") from None
        ok = proc.returncode == 0 and not SILENT_FAILURES.search(proc.stderr)
    else:
        code = block.code if block.code.lstrip().startswith("<?php") else "<?php\n" + block.code
        script = tmp_path / "example.php"
        script.write_text(code)
        (tmp_path / "vendor").mkdir()
        (tmp_path / "vendor" / "autoload.php").write_text(f"<?php\nrequire_once {str(BRIDGE_BOOTSTRAP)!r};\n")
        try:
            proc = run_php(script, env=env, timeout=TIMEOUT, check=False,
                           ini=(f"error_log={tmp_path / 'error_log.txt'}",))
        except subprocess.TimeoutExpired as e:
            raise AssertionError(f"{block.id}: still running after {TIMEOUT} s:\n{e.stdout}\n{e.stderr}") from None
        ok = proc.returncode == 0 and proc.stderr == ""
    if not ok:
        raise AssertionError(f"{block.id}: the {block.runs_as} example failed (exit {proc.returncode})\n"
                             f"--- code\n{block.code}--- stdout\n{proc.stdout}--- stderr\n{proc.stderr}")


@pytest.mark.parametrize("block", [
    pytest.param(b, id=b.id, marks=[pytest.mark.skip(reason=f"not-run: {b.not_run}")] if b.not_run else [])
    for b in RUNNABLE])
def test_example_runs(block: Block, deployments: Deployments, tmp_path: Path) -> None:
    run_block(block, {**os.environ, **deployments.env(block.needs)}, tmp_path)


def test_the_examples_are_found() -> None:
    """The README and the API pages have examples in both languages: an extractor that finds nothing
    would let every example rot."""
    found = {(b.path, b.runs_as) for b in RUNNABLE if not b.not_run}
    for page in ("README.md", "docs/queue.md"):
        assert (page, "python") in found and (page, "php") in found, page
    assert ("docs/python.md", "python") in found and ("docs/php.md", "php") in found


def test_every_fence_names_its_language() -> None:
    """A fence without a language would hide a Python or PHP example from this test."""
    unnamed = [b.id for b in BLOCKS if not b.language]
    assert not unnamed, f"fences without a language (write ```text for plain text): {unnamed}"


def test_the_docs_home_links_every_page() -> None:
    """docs/index.md is the site's home: it links every page of docs/."""
    index = (ROOT / "docs" / "index.md").read_text()
    linked = set(re.findall(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)", index))
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")} - {"index.md"}
    assert pages <= linked, f"docs/index.md does not link {sorted(pages - linked)}"


def test_the_links_outside_the_site_name_files_that_exist() -> None:
    """README.md, CONTRIBUTING.md and tests/README.md are not part of the site (whose links
    `mkdocs build --strict` checks): their relative links are checked here."""
    broken = []
    for doc in (ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "tests" / "README.md"):
        text = re.sub(r"^ *(```|~~~).*?^ *\1", "", doc.read_text(), flags=re.M | re.S)  # not in code
        for target in re.findall(r"\]\(([^)\s#]+)(?:#[^)\s]*)?(?:\s+\"[^\"]*\")?\)", text):
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target) and not (doc.parent / target).exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
    assert not broken, f"links to files that do not exist: {broken}"


# The harness itself: markers, indented fences, and what each failure looks like.

SAMPLE = """\
Text.

<!-- not-run: needs a web server -->
```php
$x = 1;
```

1. A list item:

   ```python
   if True:
       print("indented")
   ```

<!-- needs: redlock, cluster -->

~~~~py title="x"
print(1)
~~~~

```sh
echo shown only
```
"""


def test_parse_reads_markers_languages_and_indented_fences() -> None:
    blocks = parse(SAMPLE, "sample.md")
    assert [(b.line, b.language, b.runs_as) for b in blocks] == [
        (4, "php", "php"), (10, "python", "python"), (17, "py", "python"), (21, "sh", None)]
    assert blocks[0].not_run == "needs a web server" and blocks[0].needs == ()
    assert blocks[1].code == 'if True:\n    print("indented")\n' and blocks[1].not_run is None
    assert blocks[2].needs == ("redlock", "cluster") and blocks[2].code == "print(1)\n"
    assert blocks[3].code == "echo shown only\n"


@pytest.mark.parametrize(("text", "message"), [
    ("<!-- not run: typo -->\n```python\nx\n```\n", "unknown marker"),
    ("<!-- not-run: -->\n```python\nx\n```\n", "needs a reason"),
    ("<!-- needs: mongodb -->\n```python\nx\n```\n", "expected one of"),
    ("<!-- not-run: why -->\n```sh\nx\n```\n", "never run"),
    ("```python\nx\n", "never closed"),
])
def test_parse_refuses_what_it_cannot_read(text: str, message: str) -> None:
    with pytest.raises(MarkdownError, match=message):
        parse(text, "sample.md")


@pytest.mark.parametrize(("language", "code", "expected"), [
    ("python", "import sys\nsys.exit(3)\n", "exit 3"),
    ("python", "import warnings\nwarnings.warn('old', DeprecationWarning)\n", "DeprecationWarning"),
    ("python", "import threading\nt = threading.Thread(target=lambda: 1 / 0)\nt.start()\nt.join()\n",
     "Exception in thread"),
    ("php", "echo 1 / 0;\n", "DivisionByZeroError"),
    ("php", "echo $undefined;\n", "Undefined variable"),
    ("php", "assert(1 === 2);\n", "AssertionError"),
])
def test_a_failing_example_fails(language: str, code: str, expected: str, tmp_path: Path) -> None:
    block = Block("sample.md", 1, language, code)
    with pytest.raises(AssertionError, match=expected):
        run_block(block, {**os.environ, "REDIS_URL": "redis://127.0.0.1:1/0"}, tmp_path)


def test_examples_run_against_the_servers_they_need(deployments: Deployments, tmp_path: Path) -> None:
    """`needs:` starts what it says and names it in the environment; each example starts empty."""
    code = """\
import os

from ferrolock import Lock, Queue, Redlock

urls = os.environ["REDLOCK_URLS"].split(",")
assert len(set(urls)) == 3
with Redlock("docs-redlock", urls, ttl=5) as lock:
    assert lock.fencing_token is not None
assert os.environ["REDIS_URL"] == os.environ["REDIS_CLUSTER_URL"]
assert os.environ["REDIS_URL"].startswith("redis+cluster://")
queue = Queue("docs-left-behind")
assert len(queue) == 0, "the previous run's task is still there"
queue.enqueue("left behind")
with Lock("docs-cluster", timeout=5):
    pass
"""
    for i in range(2):
        (tmp_path / str(i)).mkdir()
        block = Block("sample.md", 1, "python", code, needs=("redlock", "cluster"))
        env = {**os.environ, **deployments.env(block.needs)}
        run_block(block, env, tmp_path / str(i))


def test_an_example_can_run_against_sentinel(deployments: Deployments, tmp_path: Path) -> None:
    code = """\
import os

from ferrolock import Lock

assert os.environ["REDIS_URL"] == os.environ["REDIS_SENTINEL_URL"]
assert os.environ["REDIS_URL"].startswith("redis+sentinel://")
with Lock("docs-sentinel", timeout=5) as lock:
    assert lock.owned()
"""
    block = Block("sample.md", 1, "python", code, needs=("sentinel",))
    run_block(block, {**os.environ, **deployments.env(block.needs)}, tmp_path)
