"""Nothing lost: consumers and holders killed with SIGKILL while they work."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from ferrolock import Queue
from tests.conftest import PHP_EXT, ROOT, run_php

HERE = Path(__file__).parent
TASKS = 20_000


class Consumer:
    """One consumer process, restarted under a new log after each kill."""

    def __init__(self, lang: str, queue: str, url: str, logs: Path, slot: int, loop: bool = False):
        self.lang, self.queue, self.url, self.logs, self.slot = lang, queue, url, logs, slot
        self.loop = loop
        self.incarnation = 0
        self.killed_logs: list[Path] = []
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    @property
    def log(self) -> Path:
        return self.logs / f"{self.lang}-{self.slot}-{self.incarnation}.log"

    def start(self) -> None:
        if self.lang == "python":
            cmd = [sys.executable, str(HERE / "workers" / "consumer.py")]
        else:
            cmd = ["php", "-d", f"extension={PHP_EXT}", str(HERE / "workers" / "consumer.php")]
        mode = ["work"] if self.loop else []
        self.proc = subprocess.Popen([*cmd, self.queue, str(self.log), *mode],
                                     env={**os.environ, "REDIS_URL": self.url}, cwd=ROOT)

    def kill_and_restart(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.killed_logs.append(self.log)
        self.incarnation += 1
        self.start()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()


def drain_under_fire(url: str, r, name: str, langs: list[str], tmp_path: Path,
                     loop: bool = False, tasks: int = TASKS) -> dict:
    queue = Queue(name, url=url)
    ids = [f"t{i}" for i in range(tasks)]
    for i in range(0, tasks, 5000):
        queue.enqueue(ids[i:i + 5000])
    consumers = [Consumer(lang, name, url, tmp_path, i, loop) for i, lang in enumerate(langs)]

    def in_flight() -> int:
        keys = r("KEYS", f"*Queue:{name}:inflight")
        return r("ZCARD", keys[0]) if keys else 0

    kills = 0
    deadline = time.monotonic() + 240
    try:
        while True:
            time.sleep(0.5)
            if len(queue) == 0 and in_flight() == 0:
                break
            assert time.monotonic() < deadline, "the queue was not drained in time"
            random.choice(consumers).kill_and_restart()
            kills += 1
    finally:
        for c in consumers:
            c.stop()
    killed = {p for c in consumers for p in c.killed_logs}
    starts: Counter[str] = Counter()
    acked_ok: Counter[str] = Counter()
    survivor_starts: Counter[str] = Counter()
    for log in tmp_path.glob("*.log"):
        for line in log.read_text().splitlines():
            parts = line.split()
            if len(parts) < 2:
                continue  # a line cut by the kill
            if parts[0] == "S":
                starts[parts[1]] += 1
                if log not in killed:
                    survivor_starts[parts[1]] += 1
            elif parts[0] == "A" and parts[-1] == "ok":
                acked_ok[parts[1]] += 1
    missing = [i for i in ids if starts[i] == 0]
    duplicates = [i for i in ids if starts[i] > 1]
    assert not missing, f"lost tasks: {missing[:10]}"
    assert all(n == 1 for n in acked_ok.values()), "a task was acked twice"
    # A task processed twice was first held by a consumer that got killed:
    # at most one of its processings happened in a consumer that survived.
    assert all(survivor_starts[i] <= 1 for i in duplicates)
    assert all(r("HLEN", k) == 0 for k in r("KEYS", f"*Queue:{name}:receipts")), "no claim left behind"
    assert r("ZCARD", f"Queue:{name}") == 0 and not r("KEYS", f"*Queue:{name}:dead"), "none dead"
    stats = {"tasks": tasks, "kills": kills, "processed twice": len(duplicates), "lost": len(missing)}
    print(f"queue crash test {langs}: {stats}")
    return stats


def test_queue_crash_python_consumers(url, r, name, tmp_path):
    stats = drain_under_fire(url, r, name, ["python"] * 4, tmp_path)
    assert stats["kills"] >= 5


def test_queue_crash_mixed_python_and_php_consumers(url, r, name, tmp_path):
    stats = drain_under_fire(url, r, name, ["python", "php", "python", "php"], tmp_path)
    assert stats["kills"] >= 5


def test_queue_crash_worker_loops_python_and_php(url, r, name, tmp_path):
    # The worker loop acks a task in the round trip that takes the next: a
    # kill between the two leaves one reservation to run out, nothing more.
    stats = drain_under_fire(url, r, name, ["python", "php", "python", "php"], tmp_path,
                             loop=True, tasks=8000)
    assert stats["kills"] >= 5


def test_kill_9_holder_php_waiter_gets_the_lock_after_ttl(url: str, name: str, tmp_path: Path) -> None:
    script = tmp_path / "hold.php"
    script.write_text(f"<?php $l = new RedisLock(); $l->lock({name!r}, 0, 5); echo \"held\\n\"; sleep(600);")
    holder = subprocess.Popen(["php", "-d", f"extension={PHP_EXT}", str(script)],
                              env={**os.environ, "REDIS_URL": url}, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.kill()
    holder.wait()
    holder.stdout.close()
    killed = time.monotonic()
    waiter = tmp_path / "wait.php"
    waiter.write_text(f"<?php $l = new RedisLock(); var_dump($l->lock({name!r}, 30));")
    out = run_php(waiter, env={"REDIS_URL": url}).stdout
    assert "bool(true)" in out
    assert time.monotonic() - killed < 5 + 1 + 1  # TTL + 1 s (+ php start-up)
