"""RedisQueue::work() as a CLI worker: SIGTERM (pcntl) stops it after the
task at hand; a second SIGINT kills it; the tasks it did not take stay."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ferrolock import Queue
from tests.conftest import PHP_EXT

WORKER = """<?php
$q = new RedisQueue();
$log = $argv[2];
$n = $q->work($argv[1], function (array $task) use ($log) {
    file_put_contents($log, "start {$task['id']}\\n", FILE_APPEND);
    $end = microtime(true) + 1.0;  // busy for a second, whatever signals come
    while (microtime(true) < $end) {
        usleep(10000);
    }
    file_put_contents($log, "done {$task['id']}\\n", FILE_APPEND);
});
echo "handled $n\\n";
"""


@pytest.fixture(scope="module", autouse=True)
def extension_built() -> None:
    assert PHP_EXT.exists(), f"{PHP_EXT} is missing: run `make php`"


def start_worker(tmp_path: Path, url: str, name: str) -> tuple[subprocess.Popen[str], Path]:
    script = tmp_path / "worker.php"
    script.write_text(WORKER)
    log = tmp_path / "log"
    proc = subprocess.Popen(["php", "-d", f"extension={PHP_EXT}", str(script), name, str(log)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "REDIS_URL": url})
    until = time.monotonic() + 10
    while not (log.exists() and "start t0" in log.read_text()):
        assert time.monotonic() < until, "the worker did not start"
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    return proc, log


def test_sigterm_stops_the_worker_after_the_task_at_hand(url: str, name: str, tmp_path: Path) -> None:
    q = Queue(name)
    q.enqueue([f"t{i}" for i in range(5)])
    proc, log = start_worker(tmp_path, url, name)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    assert "handled 1" in out
    assert log.read_text().splitlines() == ["start t0", "done t0"]
    assert len(q) == 4 and q.stats()["in_flight"] == 0, "t0 acked, nothing else taken"


def test_sigterm_while_waiting_for_work(url: str, name: str, tmp_path: Path) -> None:
    q = Queue(name)
    q.enqueue("t0")
    proc, _ = start_worker(tmp_path, url, name)
    time.sleep(1.5)  # t0 is done; the worker waits for work
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=5)
    assert proc.returncode == 0 and "handled 1" in out
    assert q.stats() == {"due": 0, "delayed": 0, "in_flight": 0, "dead": 0, "oldest_due_age": 0.0}


def test_a_second_sigint_kills(url: str, name: str, tmp_path: Path) -> None:
    q = Queue(name)
    q.enqueue([f"t{i}" for i in range(3)])
    proc, _ = start_worker(tmp_path, url, name)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=5)
    assert proc.returncode != 0, "killed by the second SIGINT"
    # Its task comes back when the reservation runs out: nothing is lost.
    assert len(q) + q.stats()["in_flight"] == 3
