"""Benchmark queue consumer: one process running one system's worker loop.

Protocol: prints ``ready`` once imported and connected, reads the start instant
(monotonic ns) from stdin, then consumes until the runner kills it. Each job
is `qjobs.record`, which appends a record to $BENCH_JOBS_FILE.

Usage: queue_worker.py <system> <url> <queue name>   (with $BENCH_JOBS_FILE set)

Systems (the keys of WORKERS):
- ferrolock-reserve: ``Queue.reserve(wait=…)`` then ``Task.ack()`` (two round trips per job);
- ferrolock-work: ferrolock's worker loop, ``Queue.work`` (one round trip per job: the ack
  of a job reserves the next; heartbeats on, as by default);
- ferrolock-batch: ``Queue.reserve(16, wait=…)`` then an ``ack()`` each;
- ferrolock-work-php: ``RedisQueue::work`` (PHP, queue_worker.php);
- legacy-pop-php: the legacy PHP class's ``pop`` (queue lock, ZRANGEBYSCORE, ZREM, unlock);
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


def ferrolock_work(url: str, name: str) -> None:
    from ferrolock import Queue

    q = Queue(name, url=url)
    len(q)
    wait_for_start()
    q.work(lambda task: qjobs.record(int(task.id.rsplit(":", 1)[1])))


def ferrolock_batch(url: str, name: str) -> None:
    from ferrolock import Queue

    q = Queue(name, url=url)
    len(q)
    wait_for_start()
    while True:
        for task in q.reserve(16, wait=5.0):
            qjobs.record(int(task.id.rsplit(":", 1)[1]))
            task.ack()


def php(system: str) -> Callable[[str, str], None]:
    """A PHP consumer (queue_worker.php), in place of this process."""

    def run(url: str, name: str) -> None:
        here = os.path.dirname(os.path.abspath(__file__))
        ext = os.path.join(here, "..", "..", "target", "release", "libferrolock_php.so")
        sys.stdout.flush()
        os.execvp("php", ["php", "-d", f"extension={ext}", os.path.join(here, "queue_worker.php"),
                          system, url, name])

    return run


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
    "ferrolock-work": ferrolock_work,
    "ferrolock-batch": ferrolock_batch,
    "ferrolock-work-php": php("ferrolock-work-php"),
    "legacy-pop-php": php("legacy-pop-php"),
    "huey": huey,
    "rq": lambda url, name: _rq(url, name, simple=True),
    "rq-fork": lambda url, name: _rq(url, name, simple=False),
}

if __name__ == "__main__":
    system, url, name = sys.argv[1:]
    WORKERS[system](url, name)
