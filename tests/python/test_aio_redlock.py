"""ferrolock.aio.Redlock waits step by step, as aio.Lock does: many waiting
tasks cost no thread, each is handed the lock by the release, and a cancelled
wait leaves no registration on any master."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

import ferrolock
from ferrolock import _native, aio
from tests.support.servers import RedisServer, voting_masters

TTL = 2.0


@pytest.fixture(scope="module")
def masters() -> Iterator[list[RedisServer]]:
    with voting_masters(3, TTL) as servers:
        yield servers


def urls(masters: list[RedisServer]) -> list[str]:
    return [s.url for s in masters]


def registrations(masters: list[RedisServer], name: str) -> int:
    """Waiters registered on all masters (the key has a hash tag in front)."""
    return sum(int(s.cmd("ZCARD", k)) for s in masters
               for k in s.cmd("KEYS", f"*Lock:{name}:waiters"))


def test_many_waiting_tasks_cost_no_thread_and_each_is_handed_the_lock(masters, name):
    holder = ferrolock.Redlock(name, urls(masters), ttl=TTL, auto_renew=True)
    assert holder.acquire(timeout=10)
    n = 40

    async def main() -> tuple[list[int], int]:
        got: list[int] = []

        async def waiter(i: int) -> None:
            lock = aio.Redlock(name, urls(masters), ttl=TTL, auto_renew=True)
            assert await lock.acquire(timeout=60)
            got.append(i)
            assert await lock.owned()
            await lock.release()

        tasks = [asyncio.create_task(waiter(i)) for i in range(n)]
        # Every task registers on the masters, then waits without a thread.
        for _ in range(500):
            if registrations(masters, name) >= n * 3:
                break
            await asyncio.sleep(0.02)
        assert registrations(masters, name) >= n * 3, "every task waits, registered on every master"
        waiting_threads = threading.active_count()
        holder.release()
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
        return got, waiting_threads

    before = threading.active_count()
    got, waiting_threads = asyncio.run(main())
    assert sorted(got) == list(range(n))
    # A thread per waiting task would be 40 more; the executor pool's and the
    # hubs' threads are what may start.
    assert waiting_threads - before < n // 2, (before, waiting_threads)
    assert _native._aio_stats()["threads_peak"] <= _native._aio_stats()["max_threads"]
    assert registrations(masters, name) == 0


def test_a_cancelled_wait_leaves_no_registration_and_the_lock_goes_on(masters, name):
    async def main() -> None:
        holder = aio.Redlock(name, urls(masters), ttl=TTL, auto_renew=True)
        assert await holder.acquire(timeout=10)
        registered = False
        for delay in (0.0, 0.001, 0.01, 0.05, 0.2, 0.5):
            task = asyncio.create_task(aio.Redlock(name, urls(masters), ttl=TTL).acquire(timeout=30))
            await asyncio.sleep(delay)
            registered = registered or registrations(masters, name) > 0
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        assert registered, "no wait got as far as registering on the masters"
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await aio.Redlock(name, urls(masters), ttl=TTL).acquire()
        # The cancellation ends within one command timeout (settled off the loop).
        for _ in range(250):
            if registrations(masters, name) == 0:
                break
            await asyncio.sleep(0.02)
        assert registrations(masters, name) == 0
        await holder.release()
        after = aio.Redlock(name, urls(masters), ttl=TTL)
        assert await after.acquire(blocking=False), "nothing was left holding it"
        await after.release()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_wait_times_out_as_a_blocking_one_does(masters, name):
    holder = ferrolock.Redlock(name, urls(masters), ttl=TTL, auto_renew=True)
    assert holder.acquire(timeout=10)
    try:
        async def main() -> None:
            lock = aio.Redlock(name, urls(masters), ttl=TTL)
            assert await lock.acquire(timeout=0.3) is False
            with pytest.raises(ferrolock.LockTimeout):
                async with aio.Redlock(name, urls(masters), ttl=TTL, timeout=0.3):
                    pass

        asyncio.run(asyncio.wait_for(main(), 30))
        assert registrations(masters, name) == 0
    finally:
        holder.release()
