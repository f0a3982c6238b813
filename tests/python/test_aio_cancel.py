"""Cancellation at every await point of ferrolock.aio leaves no lock held,
no task reserved and no waiter registered.

Each test cancels a call at a spread of instants (before its first round
trip, while it is on the executor, while it waits, just as it succeeds), by
``task.cancel()`` and by ``asyncio.timeout``/``wait_for``, and then checks
Redis."""

from __future__ import annotations

import asyncio
import random

import pytest

import ferrolock
from ferrolock import aio

DELAYS = [0.0, 0.0001, 0.0003, 0.0007, 0.001, 0.002, 0.004, 0.008, 0.02, 0.05]


def waiters(r, pattern: str) -> int:
    return sum(int(r("ZCARD", k)) for k in r("KEYS", pattern))


async def cancel_after(coro, delay: float):
    """Runs ``coro`` as a task and cancels it after ``delay`` (if not done)."""
    task = asyncio.create_task(coro)
    await asyncio.sleep(delay)
    task.cancel()
    try:
        return await task
    except asyncio.CancelledError:
        return "cancelled"


def test_cancelled_acquires_leave_no_lock(url, r, name):
    """Free lock: the acquire succeeds or is cancelled; either way, once the
    cancelled task is done the lock is free (or owned by the winner, who
    releases)."""

    async def main() -> tuple[int, int]:
        got = cancelled = 0
        for i in range(120):
            lock = aio.Lock(name, fair=i % 2 == 0)
            result = await cancel_after(lock.acquire(), DELAYS[i % len(DELAYS)] * random.random())
            if result == "cancelled":
                cancelled += 1
                assert lock.token is None
                assert r("EXISTS", f"Lock:{name}") == 0, f"round {i}: a cancelled acquire left the lock held"
            else:
                got += 1
                await lock.release()
        return got, cancelled

    got, cancelled = asyncio.run(main())
    assert cancelled > 0 and got > 0, (got, cancelled)


def test_cancelled_waits_leave_no_registration(url, r, name):
    """Busy lock: waits cancelled at any point (and by a timeout) leave no
    registration; the holder's release then goes to nobody."""

    async def main() -> None:
        holder = aio.Lock(name, fair=True)
        assert await holder.acquire()
        for i, delay in enumerate(DELAYS * 3):
            lock = aio.Lock(name, fair=i % 2 == 0)
            assert await cancel_after(lock.acquire(timeout=30), delay) == "cancelled"
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.1):
                await aio.Lock(name).acquire()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(aio.Lock(name).__aenter__(), 0.1)
        assert waiters(r, f"*Lock:{name}:waiters") == 0
        await holder.release()
        assert r("EXISTS", f"Lock:{name}") == 0

    asyncio.run(main())


def test_cancel_as_the_lock_is_handed_over(url, r, name):
    """The release hands the lock to the waiter as it is cancelled: the hand
    over is given back."""

    async def main() -> None:
        for i in range(60):
            holder = aio.Lock(name)
            assert await holder.acquire()
            lock = aio.Lock(name)
            task = asyncio.create_task(lock.acquire(timeout=30))
            await asyncio.sleep(0.01)  # registered
            release = asyncio.create_task(holder.release())
            await asyncio.sleep(DELAYS[i % len(DELAYS)] * random.random())
            task.cancel()
            try:
                got = await task
            except asyncio.CancelledError:
                got = None
            await release
            if got:
                await lock.release()
            assert r("EXISTS", f"Lock:{name}") == 0, f"round {i}: a handed-over lock stayed held"
            assert waiters(r, f"*Lock:{name}:waiters") == 0

    asyncio.run(main())


def test_cancelled_release_still_releases(url, r, name):
    async def main() -> None:
        for delay in DELAYS:
            lock = aio.Lock(name)
            assert await lock.acquire()
            await cancel_after(lock.release(), delay)
            assert r("EXISTS", f"Lock:{name}") == 0

    asyncio.run(main())


def test_cancelled_async_with_releases(url, r, name):
    async def main() -> None:
        for delay in DELAYS:
            async def body() -> None:
                async with aio.Lock(name, timeout=5):
                    await asyncio.sleep(1)

            await cancel_after(body(), delay)
            assert r("EXISTS", f"Lock:{name}") == 0

    asyncio.run(main())


def test_cancelled_reserves_leave_no_task_reserved(url, r, name):
    """Tasks due: each reserve is cancelled at some instant or succeeds;
    successes are acked. In the end every task is acked or queued again,
    none in flight."""

    async def main() -> None:
        q = aio.Queue(name, backoff=0, backoff_jitter=0)
        await q.enqueue([str(i) for i in range(100)])
        acked: set[str] = set()
        for i in range(150):
            count = None if i % 3 else 2
            got = await cancel_after(q.reserve(count, wait=1), DELAYS[i % len(DELAYS)] * random.random())
            if got == "cancelled" or got is None:
                continue
            for task in got if isinstance(got, list) else [got]:
                assert await task.ack()
                acked.add(task.id)
        stats = await q.stats()
        assert stats["in_flight"] == 0, stats
        assert len(acked) + stats["due"] + stats["delayed"] == 100

    asyncio.run(main())


def test_cancelled_waits_for_work_leave_nothing(url, r, name):
    async def main() -> None:
        q = aio.Queue(name)
        for delay in DELAYS:
            assert await cancel_after(q.reserve(wait=30), delay) == "cancelled"
            assert await cancel_after(q.pop(wait=30), delay) == "cancelled"
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.1):
                async for _ in q:
                    pass
        assert waiters(r, f"*Queue:{name}:waiters") == 0
        await q.enqueue("x")
        stats = await q.stats()
        assert stats["due"] == 1 and stats["in_flight"] == 0

    asyncio.run(main())


def test_cancelled_pops_put_tasks_back(url, r, name):
    async def main() -> None:
        q = aio.Queue(name)
        await q.enqueue([str(i) for i in range(50)])
        taken: set[str] = set()
        for i in range(80):
            got = await cancel_after(q.pop(wait=1), DELAYS[i % len(DELAYS)] * random.random())
            if got not in ("cancelled", None):
                taken.add(got.id)
        assert len(taken) + await q.len() == 50

    asyncio.run(main())


def test_cancelled_worker_leaves_no_task_reserved(url, r, name):
    """The worker loop cancelled while it handles a task (nacked), while it
    reserves the next (given back), while it waits for work."""

    async def main() -> None:
        q = aio.Queue(name, backoff=0, backoff_jitter=0)
        await q.enqueue([str(i) for i in range(40)])
        done: list[str] = []

        async def handler(task: aio.Task) -> None:
            await asyncio.sleep(0.003)
            done.append(task.id)

        for i in range(25):
            await cancel_after(q.work(handler, concurrency=2), 0.002 + 0.02 * random.random())
            stats = await q.stats()
            assert stats["in_flight"] == 0, f"round {i}: {stats}"
        # Waiting for work (queue drained by now or soon): cancelled, nothing left.
        await q.work(handler, wait=0)
        await cancel_after(q.work(handler), 0.2)
        stats = await q.stats()
        assert stats["in_flight"] == 0 and stats["due"] == 0
        assert set(done) == {str(i) for i in range(40)}
        assert waiters(r, f"*Queue:{name}:waiters") == 0

    asyncio.run(main())


def test_sync_async_with_cancelled_while_waiting(url, r, name):
    """``async with ferrolock.Lock`` (the sync class) is cancellable too."""
    holder = ferrolock.Lock(name)
    assert holder.acquire()

    async def main() -> None:
        waiter = ferrolock.Lock(name)
        task = asyncio.create_task(waiter.__aenter__())
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        holder.release()
        assert not waiter.locked()

    asyncio.run(main())
