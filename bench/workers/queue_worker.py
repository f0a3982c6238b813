"""Benchmark queue consumer: one process running one system's worker loop.

Protocol: prints ``ready`` once imported and connected, reads the start instant
(monotonic ns) from stdin, then consumes until the runner kills it. Each job
is `qjobs.record`, which appends a record to $BENCH_JOBS_FILE.

Usage: queue_worker.py <system> <url> <queue name>   (with $BENCH_JOBS_FILE set)

Systems (the keys of WORKERS):
- ferrolock-reserve: ``Queue.reserve(wait=…)`` then ``Task.ack()`` (two round trips per job);
- huey: huey's own consumer (``huey.create_consumer``), one worker thread;
- rq: RQ's ``SimpleWorker`` (runs jobs in its own process);
- rq-fork: RQ's default ``Worker`` (forks a work horse per job).
To add a system (e.g. ferrolock's own worker loop), add a function here and a
row to QUEUE_SYSTEMS in bench/run.py.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import qjobs


def wait_for_start() -> None:
    print("ready", flush=True)
    start_at = int(sys.stdin.readline())
    while time.monotonic_ns() < start_at:
        time.sleep(0.0002)


def ferrolock_reserve(url: str, name: str) -> None:
    from ferrolock import Queue

    q = Queue(name, url=url)
    len(q)  # connected before the start
    wait_for_start()
    while True:
        task = q.reserve(wait=5.0)
        if task is None:
            continue
        qjobs.record(int(task.id.rsplit(":", 1)[1]))
        task.ack()


def huey(url: str, name: str) -> None:
    import hueyapp

    huey, _ = hueyapp.make(url, name)
    consumer = huey.create_consumer(workers=1, worker_type="thread", periodic=False, check_worker_health=False)
    huey.storage.conn.ping()
    wait_for_start()
    consumer.run()


def _rq(url: str, name: str, simple: bool) -> None:
    import redis
    from rq import Queue, SimpleWorker, Worker

    conn = redis.Redis.from_url(url)
    cls = SimpleWorker if simple else Worker
    worker = cls([Queue(name, connection=conn)], connection=conn)
    conn.ping()
    wait_for_start()
    worker.work(logging_level="WARNING")


WORKERS: dict[str, Callable[[str, str], None]] = {
    "ferrolock-reserve": ferrolock_reserve,
    "huey": huey,
    "rq": lambda url, name: _rq(url, name, simple=True),
    "rq-fork": lambda url, name: _rq(url, name, simple=False),
}

if __name__ == "__main__":
    system, url, name = sys.argv[1:]
    WORKERS[system](url, name)
