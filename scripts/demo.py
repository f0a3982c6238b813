#!/usr/bin/env python3
"""The ferrolock demo: Python and PHP workers share one lock and one queue.

Starts a throwaway redis-server on a free port, enqueues jobs, runs three
Python workers (ferrolock package) and three PHP workers (the extension's
legacy-compatible RedisQueue/RedisLock) together, and checks that every job
was done exactly once and no counter update was lost.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PHP_EXT = ROOT / "target" / "release" / "libferrolock_php.so"
JOBS = 60


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    if not PHP_EXT.exists():
        sys.exit(f"{PHP_EXT} is missing: run `make demo` (it builds it)")
    port = free_port()
    work = Path(tempfile.mkdtemp(prefix="ferrolock-demo-"))
    redis = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "no", "--dir", str(work)], stdout=subprocess.DEVNULL)
    try:
        for _ in range(500):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.01)
        url = f"redis://127.0.0.1:{port}/0"
        env = {**os.environ, "REDIS_URL": url}
        print(f"redis-server on {url} (throwaway)\n")

        from ferrolock import Queue

        counter = work / "counter.txt"
        counter.write_text("0")
        Queue("demo:jobs", url=url).enqueue([str(i) for i in range(1, JOBS + 1)])
        print(f"enqueued {JOBS} jobs; 3 Python + 3 PHP workers share the lock 'demo:counter'\n")

        workers = []
        for i in range(3):
            workers.append(subprocess.Popen([sys.executable, str(ROOT / "scripts" / "demo_worker.py"),
                                             f"python-{i + 1}", str(counter)], env=env))
            workers.append(subprocess.Popen(["php", "-d", f"extension={PHP_EXT}",
                                             str(ROOT / "scripts" / "demo_worker.php"),
                                             f"php-{i + 1}", str(counter)], env=env))
        failed = [w for w in workers if w.wait(timeout=300) != 0]
        total = int(counter.read_text())
        left = len(Queue("demo:jobs", url=url))
        print(f"\ncounter = {total} (expected {JOBS}), jobs left in the queue = {left}")
        if failed or total != JOBS or left:
            print("DEMO FAILED")
            return 1
        print("every job done exactly once, no update lost")
        return 0
    finally:
        redis.kill()
        redis.wait()


if __name__ == "__main__":
    sys.exit(main())
