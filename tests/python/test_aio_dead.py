"""ferrolock.aio.Queue's dead-letter admin (``dead``, ``retry_dead``,
``purge_dead``): the sync ``Queue``'s signatures and return shapes, awaited,
the loop never blocked; and every public method of the sync ``Queue`` has an
awaitable counterpart."""

from __future__ import annotations

import asyncio
import inspect

import pytest

import ferrolock
from ferrolock import aio


def test_dead_letters_are_listed_retried_and_purged(url, name):
    async def main() -> None:
        q = aio.Queue(name, max_attempts=1)
        await q.enqueue({"a": b"A"}, delay=-2)
        await q.enqueue(["b", "c"], delay=-1)
        for t in await q.reserve(10):
            assert await t.nack()
        dead = await q.dead()
        assert isinstance(dead, list) and all(isinstance(t, aio.Task) for t in dead)
        assert [t.id for t in dead] == ["a", "b", "c"]
        assert dead[0].payload == b"A" and dead[0].attempts == 1
        # The same shapes as the sync queue's answers.
        sync = [(t.id, t.score, t.attempts, t.payload) for t in q.sync.dead()]
        assert [(t.id, t.score, t.attempts, t.payload) for t in dead] == sync
        assert [t.id for t in await q.dead(1, offset=1)] == ["b"]
        assert await q.dead(5, offset=3) == []
        assert (await q.stats())["dead"] == 3
        assert await q.retry_dead("a") == 1
        a = await q.reserve()
        assert a is not None and (a.id, a.attempts, a.payload) == ("a", 1, b"A")
        assert await a.ack()
        assert await q.purge_dead(["b", "nope"]) == 1
        assert await q.retry_dead() == 1  # all: c
        c = await q.reserve()
        assert c is not None and c.id == "c"
        assert await c.ack()
        assert await q.purge_dead() == 0
        for bad in (0, -1):
            with pytest.raises(ValueError, match="count"):
                await q.dead(bad)
        with pytest.raises(ValueError, match="offset"):
            await q.dead(offset=-1)
        with pytest.raises(TypeError, match="ids"):
            await q.retry_dead(5)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="ids"):
            await q.purge_dead(5)  # type: ignore[arg-type]

    asyncio.run(main())


def test_the_admin_calls_run_off_the_loop(url, name):
    sync = ferrolock.Queue(name, max_attempts=1)
    sync.enqueue([f"t{i}" for i in range(500)], delay=-1)
    for t in sync.reserve(500):
        t.nack()

    async def main() -> None:
        q = aio.Queue.of(sync)
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        ticking = asyncio.create_task(ticker())
        try:
            got = await asyncio.gather(q.dead(500), q.stats())
            assert len(got[0]) == 500 and got[1]["dead"] == 500
            assert await q.retry_dead() == 500
            assert await q.len() == 500
        finally:
            ticking.cancel()
        assert ticks > 0, "the loop ran while the calls were under way"

    asyncio.run(main())


def test_every_sync_queue_method_has_an_awaitable_form():
    def public(cls: type) -> set[str]:
        return {n for n in dir(cls) if not n.startswith("_") and callable(getattr(cls, n))}

    # Sync-only by nature: `work` has its own awaitable form; `len` is `__len__`.
    missing = public(ferrolock.Queue) - public(aio.Queue) - {"from_redis"}
    assert missing == set(), f"aio.Queue lacks {sorted(missing)}"
    for admin in ("dead", "retry_dead", "purge_dead"):
        method = getattr(aio.Queue, admin)
        assert inspect.iscoroutinefunction(method), admin
        assert list(inspect.signature(method).parameters) == \
            list(inspect.signature(getattr(ferrolock.Queue, admin)).parameters), admin
