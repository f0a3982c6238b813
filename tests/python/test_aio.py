"""ferrolock.aio: each awaitable call, waits that cost no thread, and the
loop never blocked."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

import ferrolock
from ferrolock import LockLostError, LockNotOwnedError, LockTimeout, _native, aio
from tests.support.servers import RedisServer


def run(coro):
    return asyncio.run(coro)


# -- locks ---------------------------------------------------------------------------------

def test_acquire_release_and_the_queries(url, r, name):
    async def main() -> None:
        lock = aio.Lock(name, ttl=10)
        assert not await lock.locked()
        assert not await lock.owned()
        assert await lock.fencing_token() is None
        assert await lock.acquire() is True
        assert lock.token is not None and r.get(f"Lock:{name}").decode() == lock.token
        assert await lock.locked() and await lock.owned()
        first = await lock.fencing_token()
        assert isinstance(first, int)
        assert await lock.fencing_token() == first
        await lock.extend(25)
        assert 20_000 < int(r("PTTL", f"Lock:{name}")) <= 25_000
        await lock.extend()
        assert int(r("PTTL", f"Lock:{name}")) <= 10_000
        other = aio.Lock(name)
        assert await other.acquire(blocking=False) is False
        assert await other.acquire(timeout=0.2) is False
        await lock.release()
        assert not await lock.locked() and lock.token is None
        with pytest.raises(LockNotOwnedError):
            await lock.release()
        with pytest.raises(LockNotOwnedError):
            await lock.extend()
        assert await other.acquire(timeout=0) is True
        assert await other.fencing_token() > first
        await other.release()

    run(main())


def test_async_with_decorator_and_timeout(url, name):
    async def main() -> None:
        lock = aio.Lock(name, timeout=0.3)
        async with lock as held:
            assert held is lock and await lock.owned()
            with pytest.raises(LockTimeout, match=r"not acquired within 0\.300 s"):
                async with aio.Lock(name, timeout=0.3):
                    pytest.fail("must not enter")
        assert not await lock.locked()

        @aio.Lock(name, timeout=5)
        async def critical(x: int) -> int:
            assert await aio.Lock(name).locked()
            return x + 1

        assert await critical(1) == 2
        assert not await lock.locked()
        with pytest.raises(TypeError, match="coroutine functions"):
            aio.Lock(name)(lambda: None)

    run(main())


def test_lost_inside_async_with_raises_at_exit(url, r, name):
    async def main() -> None:
        with pytest.raises(LockLostError):
            async with aio.Lock(name, auto_renew=False):
                r("DEL", f"Lock:{name}")
        # Another exception propagating wins over LockLostError.
        with pytest.raises(KeyError):
            async with aio.Lock(name, auto_renew=False):
                r("DEL", f"Lock:{name}")
                raise KeyError("boom")
        # Released inside the block: LockNotOwnedError, not lost.
        with pytest.raises(LockNotOwnedError) as caught:
            async with aio.Lock(name) as lock:
                await lock.release()
        assert not isinstance(caught.value, LockLostError)

    run(main())


def test_sync_and_async_faces_share_one_hold(url, name):
    async def main() -> None:
        sync = ferrolock.Lock(name)
        face = aio.Lock.of(sync)
        assert await face.acquire()
        assert sync.token == face.token and sync.owned()
        sync.release()
        assert not await face.owned()
        # async with of the sync class runs on the same machinery.
        async with ferrolock.Lock(name, timeout=1) as held:
            assert held.owned()
        assert not sync.locked()

    run(main())


def test_reentrant_and_fair_locks(url, name):
    async def main() -> None:
        lock = aio.Lock(name, reentrant=True)
        assert await lock.acquire() and await lock.acquire()
        await lock.release()
        assert await lock.owned()
        await lock.release()
        assert not await lock.locked()

        fair = aio.Lock(name + "f", fair=True)
        order: list[int] = []
        async with fair:
            async def waiter(i: int) -> None:
                async with aio.Lock(name + "f", fair=True, timeout=10):
                    order.append(i)

            tasks = []
            for i in range(5):
                tasks.append(asyncio.create_task(waiter(i)))
                await asyncio.sleep(0.05)  # registered in this order
        await asyncio.gather(*tasks)
        assert order == [0, 1, 2, 3, 4]

    run(main())


def test_redlock_is_awaitable(redis_server, name):
    async def main() -> None:
        # A master younger than one TTL has no vote yet: a wait longer than that waits.
        lock = aio.Redlock(name, [redis_server.url], ttl=2)
        assert await lock.acquire(timeout=5)
        other = aio.Redlock(name, [redis_server.url], ttl=2)
        waiting = asyncio.create_task(other.acquire(timeout=5))
        await asyncio.sleep(0.1)
        await lock.release()
        assert await waiting
        await other.release()

    run(main())


def test_waits_do_not_block_the_loop(url, name):
    holder = ferrolock.Lock(name)
    assert holder.acquire()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    async def main() -> tuple[float, float]:
        t = asyncio.create_task(ticker())
        loop = asyncio.get_running_loop()
        loop.call_later(0.3, holder.release)
        start = time.monotonic()
        assert await aio.Lock(name).acquire(timeout=10)
        lock_wait = time.monotonic() - start
        q = aio.Queue(name)
        loop.call_later(0.3, lambda: ferrolock.Queue(name).enqueue("x"))
        start = time.monotonic()
        task = await q.reserve(wait=10)
        queue_wait = time.monotonic() - start
        assert task is not None and task.id == "x"
        await task.ack()
        t.cancel()
        return lock_wait, queue_wait

    lock_wait, queue_wait = run(main())
    assert 0.25 < lock_wait < 3 and 0.25 < queue_wait < 3
    assert ticks >= 30, "the loop kept running while the lock and the task were awaited"


# -- the queue -----------------------------------------------------------------------------

def test_queue_calls(url, r, name):
    async def main() -> None:
        q = aio.Queue(name, visibility=5)
        assert await q.enqueue(["a", "b", "c"]) == 3
        assert await q.enqueue("a") == 0
        assert await q.enqueue({"p": b"payload"}) == 1
        assert await q.len() == 4
        top = await q.top()
        assert top is not None and top.id == "a"
        assert [t.id for t in await q.top(2)] == ["a", "b"]
        a = await q.reserve()
        assert a is not None and a.id == "a" and a.attempts == 1 and a.receipt
        assert await a.touch(10)
        assert await a.ack() is True
        assert await a.ack() is False
        batch = await q.reserve(2)
        assert [t.id for t in batch] == ["b", "c"]
        assert await batch[0].nack(0) is True
        assert await batch[1].nack(60) is True
        stats = await q.stats()
        assert stats["in_flight"] == 0 and stats["delayed"] == 1 and stats["due"] == 2
        popped = await q.pop(2)
        assert sorted(t.id for t in popped) == ["b", "p"]
        assert {t.id: t.payload for t in popped}["p"] == b"payload"
        assert await q.pop() is None
        assert await q.reserve(wait=0.2) is None
        assert await q.dequeue("c", 0.0) is False
        assert await q.len() == 1

    run(main())


def test_task_context_and_async_for(url, name):
    async def main() -> None:
        q = aio.Queue(name, visibility=1)
        await q.enqueue(["1", "2", "3"])
        seen = []
        async for task in q.tasks(wait=0.3):
            async with task:
                if task.id == "1":
                    await asyncio.sleep(1.5)  # longer than the visibility: the heartbeat keeps it
                seen.append((task.id, task.attempts))
        assert seen == [("1", 1), ("2", 1), ("3", 1)], "each handed out once"
        stats = await q.stats()
        assert stats["in_flight"] == 0 and stats["due"] == 0

        # async for over the queue itself waits forever: a timeout ends it
        await q.enqueue("4")
        got = []
        with pytest.raises(asyncio.TimeoutError):
            async def consume() -> None:
                async for task in q:
                    got.append(task.id)
                    await task.ack()
            await asyncio.wait_for(consume(), 0.5)
        assert got == ["4"]
        assert (await q.stats())["in_flight"] == 0

    run(main())


def test_task_context_nacks_on_error(url, name):
    async def main() -> None:
        q = aio.Queue(name, backoff=0, backoff_jitter=0)
        await q.enqueue("x")
        task = await q.reserve()
        assert task is not None
        with pytest.raises(RuntimeError):
            async with task:
                raise RuntimeError("boom")
        again = await q.reserve(wait=2)
        assert again is not None and again.id == "x" and again.attempts == 2
        await again.ack()

    run(main())


def test_worker_loop(url, name):
    async def main() -> None:
        q = aio.Queue(name, backoff=0, backoff_jitter=0)
        await q.enqueue([str(i) for i in range(50)])
        handled: list[str] = []
        failed_once: set[str] = set()

        async def handler(task: aio.Task) -> None:
            await asyncio.sleep(0.001)
            if task.id in ("7", "8") and task.id not in failed_once:
                failed_once.add(task.id)
                raise ValueError("first attempt fails")
            handled.append(task.id)

        n = await q.work(handler, concurrency=4, wait=0.5)
        assert sorted(handled, key=int) == [str(i) for i in range(50)]
        assert n == 52
        stats = await q.stats()
        assert stats["in_flight"] == 0 and stats["due"] == 0

        # stop: an asyncio.Event ends a loop that waits forever
        stop = asyncio.Event()
        got: list[str] = []

        def plain(task: aio.Task) -> None:  # a plain function runs on the loop
            got.append(task.id)
            if task.id == "last":
                stop.set()

        worker = asyncio.create_task(q.work(plain, stop=stop))
        await asyncio.sleep(0.2)
        await q.enqueue("x")
        await q.enqueue("last", delay=0.05)
        assert await asyncio.wait_for(worker, 10) == 2
        assert got == ["x", "last"]
        assert (await q.stats())["in_flight"] == 0

    run(main())


def test_worker_loop_stops_on_a_threading_event(url, name):
    async def main() -> None:
        q = aio.Queue(name)
        stop = threading.Event()
        threading.Timer(0.3, stop.set).start()
        start = time.monotonic()
        assert await q.work(lambda task: None, stop=stop) == 0
        assert time.monotonic() - start < 5
        assert (await q.stats())["in_flight"] == 0

    run(main())


def test_worker_loop_arguments(url, name):
    async def main() -> None:
        q = aio.Queue(name)
        with pytest.raises(TypeError, match="handler"):
            await q.work(1)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="concurrency"):
            await q.work(print, concurrency=0)
        with pytest.raises(ValueError, match="wait"):
            await q.work(print, wait=-1)

    run(main())


def test_executor_is_bounded(url, name):
    stats = _native._aio_stats()
    assert 1 <= stats["max_threads"] <= 256
    assert stats["threads_peak"] <= stats["max_threads"]


def test_worker_loop_rides_out_a_server_restart(caplog):
    # The blocking loop's test, on the event loop: the ack of `a` and the
    # next take fail while the server is down; the loop logs, pauses and goes
    # on, on the same worker (the core's steps), and then handles `b`.
    with RedisServer() as server:
        url = server.url + "?timeout=0.5"

        def restart_and_enqueue() -> None:
            server.start()
            until = time.monotonic() + 20
            while time.monotonic() < until:  # the machine may be slow: try until it answers
                try:
                    ferrolock.Queue("jobs", url=url).enqueue("b")
                    return
                except ferrolock.ConnectionError:
                    time.sleep(0.1)

        async def main() -> list[str]:
            q = aio.Queue("jobs", url=url)
            await q.enqueue("a")
            seen: list[str] = []
            stop = asyncio.Event()

            async def handler(task: aio.Task) -> None:
                seen.append(task.id)
                if task.id == "a":
                    server.stop()
                    threading.Timer(1.0, restart_and_enqueue).start()
                else:
                    stop.set()

            await asyncio.wait_for(q.work(handler, stop=stop), 60)
            assert (await q.stats())["in_flight"] == 0
            return seen

        with caplog.at_level(logging.WARNING, logger="ferrolock.worker"):
            assert run(main()) == ["a", "b"]
        assert "trying again" in caplog.text
