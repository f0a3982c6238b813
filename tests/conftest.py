"""Fixtures shared by the Python, PHP and cross-language tests.

One redis-server per test session (unique key names per test let tests share
it); tests that stop or reconfigure Redis start their own.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.resp import Resp
from tests.support.servers import RedisServer

ROOT = Path(__file__).resolve().parent.parent
PHP_EXT = ROOT / "target" / "release" / "libferrolock_php.so"


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture
def url(redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> str:
    """The shared server's URL, also exported as $REDIS_URL for the test."""
    monkeypatch.setenv("REDIS_URL", redis_server.url)
    return redis_server.url


@pytest.fixture
def r(redis_server: RedisServer) -> Iterator[Resp]:
    """A raw connection for assertions."""
    c = redis_server.client()
    yield c
    c.close()


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    """A lock/queue name unique to this test."""
    return f"{request.node.name}-{uuid.uuid4().hex[:8]}"


def run_php(script: str | Path, *args: str, env: dict[str, str] | None = None,
            timeout: float = 120, check: bool = True, ini: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """Runs a PHP script with the ferrolock extension and assertions enabled."""
    # The system php.ini stays in effect (it loads Debian's php-redis, which the
    # legacy-style reference classes in the tests use).
    cmd = ["php", "-d", f"extension={PHP_EXT}", "-d", "zend.assertions=1",
           "-d", "assert.exception=1", "-d", "error_reporting=-1", "-d", "display_errors=stderr"]
    for i in ini:
        cmd += ["-d", i]
    cmd += [str(script), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    if check and proc.returncode != 0:
        raise AssertionError(f"{script} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc

