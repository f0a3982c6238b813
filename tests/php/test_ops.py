"""Ferrolock\\Metrics and Ferrolock\\Events: tests/php/ops_test.php against a
server of its own started with DEBUG enabled (the script makes it sleep past a
lock's TTL)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_php
from tests.support.servers import RedisServer

PHP = Path(__file__).parent


def test_php_metrics_and_the_lost_lock_hook() -> None:
    with RedisServer("--enable-debug-command", "local") as server:
        proc = run_php(PHP / "ops_test.php", env={"REDIS_URL": server.url.removesuffix("/0")})
    assert proc.stdout.count("ok - ") == 6, proc.stdout + proc.stderr
    # The throwing hook went to error_log (stderr in the CLI), once.
    assert proc.stderr.count("the lost-lock hook failed") == 1, proc.stderr
    assert "RuntimeException: hook-broke" in proc.stderr
    assert "Warning" not in proc.stderr, proc.stderr
