"""The asyncio examples of docs/python.md run as they are against a real
redis-server (`$REDIS_URL`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

DOC = ROOT / "docs" / "python.md"


def examples() -> list[str]:
    text = DOC.read_text()
    section = text[text.index("## asyncio"):]
    section = section[:section.index("\n## ", 3)]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_the_section_has_examples() -> None:
    assert len(examples()) >= 3


@pytest.mark.parametrize("index", range(len(examples())))
def test_example_runs(index: int, url: str, tmp_path: Path) -> None:
    script = tmp_path / f"example{index}.py"
    script.write_text(examples()[index])
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "REDIS_URL": url})
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr
