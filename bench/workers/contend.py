"""Benchmark worker (Python): `rounds` critical sections on one lock.

Two kinds of critical section:

- ``sleep``: sleep `cs_ms`, then GET + SET of a counter key through redis-py
  (the shape of a real critical section: a little waiting, a read-modify-write
  through the language's usual client). Lost updates of that counter show a
  broken lock.
- ``busy``: a deliberately non-atomic read-modify-write of a counter file
  shared by all workers (opened once, fixed width: one pread and one pwrite),
  then spin until `cs_ms` have passed since the lock was taken.

After each release the worker pauses `pause_ms` (0: none) before it asks
again; the ping-pong measurement uses it so that two processes alternate.

Protocol: prints ``ready`` once connected and warmed up, reads the start
instant (monotonic ns) from stdin, runs, prints one JSON line (acquire waits
in ns, critical-section [start, end) in monotonic ns), then stays until stdin
closes (an interpreter shutting down would take a CPU from workers still
measuring).

Usage: contend.py <impl> <url> <lock name> <rounds> <sleep|busy> <cs_ms> <pause_ms> <counter>
impl: ferrolock | ferrolock-fair | redis-py | python-redis-lock
counter: a Redis key (sleep) or a file path (busy).
"""

import json
import os
import sys
import time

import redis

impl, url, name, rounds, mode, cs_ms, pause_ms, counter = sys.argv[1:]
rounds, cs, pause = int(rounds), float(cs_ms) / 1000, float(pause_ms) / 1000
raw = redis.Redis.from_url(url)

if impl.startswith("ferrolock"):
    from ferrolock import Lock

    lock = Lock(name, ttl=30, fair=impl.endswith("fair"))  # watchdog on, the default
    acquire, release = (lambda: lock.acquire(timeout=120)), lock.release
elif impl == "redis-py":
    lock = raw.lock("Lock:" + name, timeout=30, blocking_timeout=120)
    acquire, release = lock.acquire, lock.release
elif impl == "python-redis-lock":
    import redis_lock

    lock = redis_lock.Lock(raw, name, expire=120)
    acquire, release = (lambda: lock.acquire(timeout=120)), lock.release
else:
    sys.exit(f"unknown impl {impl}")


def sleep_section() -> None:
    time.sleep(cs)
    value = int(raw.get(counter) or 0)  # deliberately non-atomic
    raw.set(counter, value + 1)


fd = os.open(counter, os.O_RDWR) if mode == "busy" else -1


def busy_section(t1: int) -> None:
    value = int(os.pread(fd, 32, 0) or 0)  # deliberately non-atomic
    end = t1 + int(cs * 1e9)
    while time.monotonic_ns() < end:
        pass
    os.pwrite(fd, str(value + 1).encode().ljust(32), 0)


raw.get(counter if mode == "sleep" else "warm-up")  # connected before the start
print("ready", flush=True)
start_at = int(sys.stdin.readline())
while time.monotonic_ns() < start_at:
    time.sleep(0.0005)
waits, spans = [], []
for _ in range(rounds):
    t0 = time.monotonic_ns()
    assert acquire()
    t1 = time.monotonic_ns()
    if mode == "sleep":
        sleep_section()
    else:
        busy_section(t1)
    t2 = time.monotonic_ns()
    release()
    waits.append(t1 - t0)
    spans.append((t1, t2))
    if pause:
        time.sleep(pause)
print(json.dumps({"waits": waits, "spans": spans}), flush=True)
sys.stdin.read()
