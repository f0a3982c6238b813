"""asyncio cases of the benchmark (`bench/run.py --only asyncio`), one per process.

    aio_cases.py uncontended <impl> <url> <seconds>
    aio_cases.py contention <impl> <url> <tasks> <rounds> <cs_ms>

impl: `ferrolock.aio` (fair=False), `ferrolock.aio-fair`, `redis.asyncio`
(redis-py's asyncio Lock: blocking acquire polls every 0.1 s, its default).
Prints one JSON object.

uncontended: acquire+release cycles per second of one task (`acquire(blocking=False)`).
contention: `tasks` tasks of one process x `rounds` critical sections on one
lock, each = sleep `cs_ms` + GET + SET of a counter through redis.asyncio;
span, acquire waits, lost updates, and the process's peak thread count.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid

import redis.asyncio


def make_lock(impl: str, url: str, name: str, client: redis.asyncio.Redis):
    if impl.startswith("ferrolock.aio"):
        from ferrolock import aio

        return aio.Lock(name, url=url, fair=impl.endswith("fair"), timeout=300)
    return client.lock(name, timeout=30, blocking_timeout=300)


async def uncontended(impl: str, url: str, seconds: float) -> dict:
    client = redis.asyncio.Redis.from_url(url)
    lock = make_lock(impl, url, f"bench-aio-unc-{impl}", client)
    for _ in range(500):
        assert await lock.acquire(blocking=False)
        await lock.release()
    n = 0
    start = time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        for _ in range(100):
            await lock.acquire(blocking=False)
            await lock.release()
        n += 100
    rate = n / (time.perf_counter() - start)
    await client.aclose()
    return {"pairs_per_s": rate}


async def contention(impl: str, url: str, tasks: int, rounds: int, cs_ms: float) -> dict:
    client = redis.asyncio.Redis.from_url(url, max_connections=tasks + 10)
    name = f"bench-aio-cont-{uuid.uuid4().hex[:8]}"
    counter = f"{name}:counter"
    await client.set(counter, 0)
    waits: list[float] = []
    peak_threads = 0

    async def one() -> None:
        nonlocal peak_threads
        lock = make_lock(impl, url, name, client)
        for _ in range(rounds):
            t0 = time.perf_counter()
            assert await lock.acquire()
            waits.append(time.perf_counter() - t0)
            await asyncio.sleep(cs_ms / 1000)
            v = int(await client.get(counter))
            await client.set(counter, v + 1)
            peak_threads = max(peak_threads, len(os.listdir("/proc/self/task")))
            await lock.release()

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(tasks)))
    span = time.perf_counter() - start
    got = int(await client.get(counter))
    await client.aclose()
    waits.sort()
    return {"span_s": span, "sections": tasks * rounds, "lost_updates": tasks * rounds - got,
            "wait_p50_ms": waits[len(waits) // 2] * 1000,
            "wait_p99_ms": waits[int(len(waits) * 0.99)] * 1000,
            "peak_threads": peak_threads}


def main() -> None:
    case, impl, url, *rest = sys.argv[1:]
    if case == "uncontended":
        out = asyncio.run(uncontended(impl, url, float(rest[0])))
    else:
        out = asyncio.run(contention(impl, url, int(rest[0]), int(rest[1]), float(rest[2])))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
