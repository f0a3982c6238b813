"""Benchmark worker for the scale section: `threads` waiters in one process,
each with its own Lock object on one name, each taking the lock once and
holding it `hold_ms` (spinning, as bench/scale.py's workers do: a sleep
overshoots by 0.05-0.1 ms, a tenth of a 1 ms hold), all asking at the start
instant, after a warm-up (see below).

Protocol as contend.py: ``ready``, start instant on stdin, one JSON line
(acquire waits in ns, holds [start, end) in monotonic ns, failures), then stay
until stdin closes.

Usage: scale.py <url> <lock name> <threads> <fair 0|1> <hold_ms> <timeout_s> <prefix>
(prefix `Lock:` turns legacy interop on, any other prefix leaves it off)
"""

import json
import sys
import threading
import time

from ferrolock import Lock

url, name, threads, fair, hold_ms, timeout, prefix = sys.argv[1:]
threads, fair, hold, timeout = int(threads), fair == "1", float(hold_ms) / 1000, float(timeout)
locks = [Lock(name, url=url, ttl=30, fair=fair, prefix=prefix) for _ in range(threads)]
# Warmed up before the start, as a service that has run would be: the
# process's pooled connection and its wait subscription exist (one try-once
# and one short wait on a lock of its own). Cold, the first hand-overs in
# each process also wait for those to be set up (2-15 ms each).
warm = Lock(f"{name}-warm-up-{threading.get_native_id()}", url=url, prefix=prefix)
assert warm.acquire(blocking=False)
assert not Lock(warm.name, url=url, prefix=prefix).acquire(timeout=0.05)
warm.release()
waits: list[int] = []
spans: list[tuple[int, int]] = []
failures: list[str] = []
mutex = threading.Lock()
go = threading.Event()
start_at = 0


def waiter(lock: Lock) -> None:
    go.wait()
    while time.monotonic_ns() < start_at:
        time.sleep(0.0005)
    t0 = time.monotonic_ns()
    try:
        ok = lock.acquire(timeout=timeout)
    except Exception as e:  # reported, not hidden: a waiter that fails is a result
        with mutex:
            failures.append(repr(e))
        return
    if not ok:
        with mutex:
            failures.append("timeout")
        return
    t1 = time.monotonic_ns()
    until = time.perf_counter() + hold
    while time.perf_counter() < until:  # spinning: the hold is exact (a sleep overshoots it)
        pass
    t2 = time.monotonic_ns()
    lock.release()
    with mutex:
        waits.append(t1 - t0)
        spans.append((t1, t2))


pool = [threading.Thread(target=waiter, args=(lk,)) for lk in locks]
for t in pool:
    t.start()
print("ready", flush=True)
start_at = int(sys.stdin.readline())
go.set()
for t in pool:
    t.join()
print(json.dumps({"waits": waits, "spans": spans, "failures": failures}), flush=True)
sys.stdin.read()
