"""asyncio: ``async with`` never blocks the event loop."""

from __future__ import annotations

import asyncio
import time

import pytest

from ferrolock import Lock, LockTimeout


def test_async_with_50_tasks(url, r, name):
    counter = f"{name}:value"
    inside = 0
    max_inside = 0

    async def worker() -> None:
        nonlocal inside, max_inside
        async with Lock(name, timeout=60):
            inside += 1
            max_inside = max(max_inside, inside)
            await asyncio.sleep(0.002)
            r("INCR", counter)
            inside -= 1

    async def main() -> None:
        await asyncio.gather(*(worker() for _ in range(50)))

    asyncio.run(main())
    assert max_inside == 1
    assert int(r.get(counter)) == 50


def test_waiting_does_not_block_the_loop(url, name):
    holder = Lock(name)
    assert holder.acquire()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    async def main() -> float:
        t = asyncio.create_task(ticker())
        loop = asyncio.get_running_loop()
        loop.call_later(0.3, holder.release)
        start = time.monotonic()
        async with Lock(name, timeout=10):
            waited = time.monotonic() - start
        t.cancel()
        return waited

    waited = asyncio.run(main())
    assert 0.25 < waited < 2
    assert ticks >= 15, "the loop kept running while the lock was awaited"


def test_async_timeout_raises_lock_timeout(url, name):
    holder = Lock(name)
    assert holder.acquire()

    async def main() -> None:
        async with Lock(name, timeout=0.2):
            pytest.fail("must not enter")

    with pytest.raises(LockTimeout):
        asyncio.run(main())
    holder.release()


def test_cancelled_waiter_leaves_no_lock_behind(url, name):
    holder = Lock(name)
    assert holder.acquire()
    waiter = Lock(name)

    async def main() -> None:
        task = asyncio.create_task(waiter.__aenter__())
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        holder.release()
        await asyncio.sleep(0.3)  # the worker thread notices the cancel within 50 ms

    asyncio.run(main())
    assert not waiter.locked(), "a cancelled wait must not keep the lock"


def test_async_decorator(url, name):
    @Lock(name, timeout=5)
    async def critical(x: int) -> int:
        assert Lock(name).locked()
        await asyncio.sleep(0)
        return x + 1

    assert asyncio.run(critical(1)) == 2
    assert not Lock(name).locked()
