"""The PHP examples of docs/php.md run as they are against a real redis-server
(`$REDIS_URL`), without a warning; the bridge examples' composer autoloader is
stood in for by the bridge tests' bootstrap (Debian's symfony/lock, the
package's PSR-4 autoloading)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_php

DOC = ROOT / "docs" / "php.md"
AUTOLOAD = "require __DIR__ . '/vendor/autoload.php';"
BOOTSTRAP = Path(__file__).parent / "bridge" / "bootstrap.php"


def examples() -> list[str]:
    return re.findall(r"```php\n(<\?php\n.*?)```", DOC.read_text(), flags=re.S)


def test_the_doc_has_examples() -> None:
    assert len(examples()) >= 8


@pytest.mark.parametrize("index", range(len(examples())))
def test_example_runs(index: int, url: str, tmp_path: Path) -> None:
    code = examples()[index].replace(AUTOLOAD, f"require {str(BOOTSTRAP)!r};")
    script = tmp_path / f"example{index}.php"
    script.write_text(code)
    proc = run_php(script, env={"REDIS_URL": url})
    assert proc.stderr == "", proc.stderr
