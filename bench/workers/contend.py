"""Benchmark worker (Python): `rounds` critical sections on one lock.

Each critical section does a deliberately non-atomic read-modify-write of a
counter file shared by all workers (lost updates show a broken lock; the file
is opened once and padded to a fixed width, so an update is one pread and one
pwrite) and works (spins) until `cs_ms` have passed since it got the lock: a
sleep would overshoot by a scheduler tick and charge that to the lock.

Usage: contend.py <impl> <url> <lock name> <counter file> <rounds> <start_at_ns> <cs_ms>
impl: ferrolock | ferrolock-fair | redis-py | python-redis-lock
Prints one JSON line: acquire waits (ns), critical-section start/end (monotonic ns).
"""

import json
import os
import sys
import time

import redis

impl, url, name, counter, rounds, start_at, cs_ms = sys.argv[1:]
rounds, start_at, cs = int(rounds), int(start_at), float(cs_ms) / 1000
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

raw.ping()
# Opened once: the critical section should cost 2 ms of work, not file opens.
fd = os.open(counter, os.O_RDWR)
while time.monotonic_ns() < start_at:
    time.sleep(0.0005)
waits, spans = [], []
for _ in range(rounds):
    t0 = time.monotonic_ns()
    assert acquire()
    t1 = time.monotonic_ns()
    value = int(os.pread(fd, 32, 0) or 0)  # deliberately non-atomic
    end = t1 + int(cs * 1e9)
    while time.monotonic_ns() < end:
        pass
    os.pwrite(fd, str(value + 1).encode().ljust(32), 0)
    t2 = time.monotonic_ns()
    release()
    waits.append(t1 - t0)
    spans.append((t1, t2))
print(json.dumps({"waits": waits, "spans": spans}), flush=True)
sys.stdin.read()  # stay until every worker is done (the runner closes stdin)
