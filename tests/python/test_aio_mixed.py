"""Async, sync and PHP workers on one queue, and async and sync and PHP
holders of one lock: nothing lost, nothing handled twice, no overlap."""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

import ferrolock
from ferrolock import aio
from tests.conftest import PHP_EXT

PHP_WORKER = """<?php
// Reserves and acks until the queue stays empty for a second; logs each id.
[, $name, $log] = $argv;
$q = new RedisQueue();
$misses = 0;
while ($misses < 2) {
    $task = $q->reserve($name, 30.0, 1.0);
    if ($task === false) { $misses++; continue; }
    $misses = 0;
    usleep(200);
    if ($q->ack($name, $task['id'], $task['receipt'])) {
        file_put_contents($log, "{$task['id']}\\n", FILE_APPEND);
    }
}
"""

PHP_LOCKER = """<?php
// Takes the lock $n times (RedisLock, waiting), adds 1 to a counter file
// inside with a read-modify-write, releases.
[, $name, $counter, $n] = $argv;
$l = new RedisLock();
for ($i = 0; $i < (int)$n; $i++) {
    if (!$l->lock($name, 30, 15)) { fwrite(STDERR, "not acquired\\n"); exit(1); }
    $v = (int)file_get_contents($counter);
    usleep(300);
    file_put_contents($counter, (string)($v + 1));
    $l->unlock($name);
}
"""

IDS = 3_000


@pytest.fixture(scope="module", autouse=True)
def extension_built() -> None:
    assert PHP_EXT.exists(), f"{PHP_EXT} is missing: run `make php`"


def php(tmp_path: Path, source: str, url: str, *args: str) -> subprocess.Popen[str]:
    script = tmp_path / f"w{abs(hash(source))}.php"
    script.write_text(source)
    return subprocess.Popen(["php", "-d", f"extension={PHP_EXT}", str(script), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "REDIS_URL": url})


def test_async_sync_and_php_workers_share_a_queue(url, name, tmp_path):
    ids = [f"t{i}" for i in range(IDS)]
    ferrolock.Queue(name).enqueue(ids)
    php_log = tmp_path / "php.log"
    php_log.write_text("")
    procs = [php(tmp_path, PHP_WORKER, url, name, str(php_log)) for _ in range(2)]
    sync_seen: list[str] = []
    lock = threading.Lock()

    def sync_handler(task: ferrolock.Task) -> None:
        time.sleep(0.0002)
        with lock:
            sync_seen.append(task.id)

    sync_worker = threading.Thread(
        target=lambda: ferrolock.Queue(name).work(sync_handler, concurrency=2, wait=2))
    sync_worker.start()
    async_seen: list[str] = []

    async def handler(task: aio.Task) -> None:
        await asyncio.sleep(0.0002)
        async_seen.append(task.id)

    async def main() -> int:
        return await aio.Queue(name).work(handler, concurrency=8, wait=2)

    handled = asyncio.run(main())
    sync_worker.join(60)
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    php_seen = php_log.read_text().split()
    every = async_seen + sync_seen + php_seen
    print(f"\n{IDS} tasks: {len(async_seen)} by asyncio, {len(sync_seen)} by threads, "
          f"{len(php_seen)} by PHP")
    assert handled == len(async_seen)
    assert sorted(every) == sorted(ids), "every task handled exactly once"
    assert async_seen and sync_seen and php_seen, "all three kinds took part"
    stats = ferrolock.Queue(name).stats()
    assert stats["in_flight"] == 0 and stats["due"] == 0


def test_async_sync_and_php_holders_exclude_each_other(url, name, tmp_path):
    counter = tmp_path / "counter"
    counter.write_text("0")
    procs = [php(tmp_path, PHP_LOCKER, url, name, str(counter), "30") for _ in range(2)]

    def bump() -> None:
        v = int(counter.read_text())
        time.sleep(0.0003)
        counter.write_text(str(v + 1))

    def sync_side() -> None:
        for _ in range(30):
            with ferrolock.Lock(name, timeout=30):
                bump()

    t = threading.Thread(target=sync_side)
    t.start()

    async def main() -> None:
        async def one() -> None:
            for _ in range(15):
                async with aio.Lock(name, timeout=30):
                    bump()
                    await asyncio.sleep(0)

        await asyncio.gather(one(), one())

    asyncio.run(main())
    t.join(60)
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    assert int(counter.read_text()) == 2 * 30 + 30 + 2 * 15, "no lost update"
