"""RedisLock when Redis stops answering mid-call: tests/php/faults_test.php
against a server of its own, which the script pauses (SIGSTOP, CLIENT PAUSE,
DEBUG SLEEP) by its pid."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_php
from tests.support.servers import RedisServer

PHP = Path(__file__).parent


def test_php_locks_under_pauses() -> None:
    with RedisServer("--enable-debug-command", "local") as server:
        assert server.proc is not None
        proc = run_php(PHP / "faults_test.php", env={"REDIS_URL": server.url.removesuffix("/0"),
                                                     "REDIS_PID": str(server.proc.pid)})
        print(proc.stdout)
        assert proc.stdout.count("ok - ") == 5, proc.stdout
