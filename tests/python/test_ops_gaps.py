"""What a process reports about a ``Redlock`` (its figures in the metrics, a
hold lost to its renewal reaching ``on_lost`` and the ``ferrolock`` logger) on
three real masters, and a forced release logged with the token it ended and
where it came from."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator

import pytest

import ferrolock
from ferrolock import Lock, Redlock, _native, aio
from ferrolock.ops import Inspector
from tests.support.servers import RedisServer, voting_masters

TTL = 3.0


@pytest.fixture(scope="module")
def masters() -> Iterator[list[RedisServer]]:
    with voting_masters(3, TTL) as servers:
        yield servers


def urls(masters: list[RedisServer]) -> list[str]:
    return [s.url for s in masters]


def wait_for(check, what: str, timeout: float = 15.0) -> None:
    until = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < until, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_redlock_acquires_misses_and_holds_are_counted(masters, name):
    before = _native._metrics()
    a = Redlock(name, urls(masters), ttl=TTL)
    b = Redlock(name, urls(masters), ttl=TTL)
    assert a.acquire(blocking=False)
    assert not b.acquire(blocking=False)
    assert not b.acquire(timeout=0.2)
    threading.Timer(0.3, a.release).start()
    assert b.acquire(timeout=10)
    b.release()
    after = _native._metrics()
    assert after["lock_wait"]["count"] >= before["lock_wait"]["count"] + 2
    assert after["acquires_missed"] >= before["acquires_missed"] + 2
    assert after["lock_hold"]["count"] >= before["lock_hold"]["count"] + 2
    assert after["lock_hold"]["sum"] - before["lock_hold"]["sum"] >= 0.3


def test_on_lost_fires_for_a_redlock_whose_keys_are_deleted(masters, name, caplog):
    caplog.set_level(logging.WARNING, logger="ferrolock")
    lost: list[tuple[object, int]] = []
    called = threading.Event()

    def on_lost(lock: object) -> None:
        lost.append((lock, threading.get_ident()))
        called.set()

    before = _native._metrics()["locks_lost"]
    lock = Redlock(name, urls(masters), ttl=TTL, auto_renew=True, on_lost=on_lost)
    with pytest.raises(ferrolock.LockLostError):
        with lock:
            for s in masters:
                s.cmd("DEL", f"Lock:{name}")
            assert called.wait(15), "on_lost was not called"
            assert lock.lost
    [(got, thread)] = lost
    assert got is lock and thread != threading.get_ident()
    time.sleep(0.3)
    assert len(lost) == 1, "once per hold"
    assert _native._metrics()["locks_lost"] > before

    def losses() -> list[logging.LogRecord]:
        return [r for r in caplog.records if getattr(r, "ferrolock_event", None) == "lock_lost"
                and getattr(r, "ferrolock_name", None) == name]

    wait_for(losses, "the loss logged")
    [record] = losses()
    assert record.name == "ferrolock.lock" and record.levelno == logging.ERROR
    assert record.getMessage().startswith(f'redlock "{name}": lost'), record.getMessage()
    # Given up everywhere: the name is free for the next holder.
    assert Redlock(name, urls(masters), ttl=TTL).acquire(blocking=False)


def test_a_renewed_redlock_outlives_its_ttl_and_a_plain_one_does_not(masters, name):
    renewed = Redlock(name, urls(masters), ttl=TTL, auto_renew=True, on_lost=lambda _l: None)
    with renewed:
        time.sleep(TTL * 1.5)  # past its TTL, over several renewals (one every TTL / 3)
        assert not renewed.lost and renewed.owned()
    assert not renewed.locked()
    plain = Redlock(name + "-plain", urls(masters), ttl=TTL)
    assert plain.acquire(blocking=False)
    wait_for(lambda: plain.lost, "the plain hold's validity runs out")
    with pytest.raises(TypeError, match="on_lost"):
        Redlock(name, urls(masters), on_lost=42)  # type: ignore[arg-type]


def test_aio_redlock_renews_and_reports(masters, name):
    called = threading.Event()

    async def main() -> None:
        lock = aio.Redlock(name, urls(masters), ttl=TTL, auto_renew=True,
                           on_lost=lambda _l: called.set())
        with pytest.raises(ferrolock.LockLostError):
            async with lock:
                await asyncio.sleep(TTL * 1.5)
                assert await lock.owned(), "renewed past its TTL"
                for s in masters:
                    s.cmd("DEL", f"Lock:{name}")
                while not called.is_set():
                    await asyncio.sleep(0.02)
                assert lock.lost

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_forced_release_is_logged_with_the_token_and_its_origin(redis_server, name, caplog):
    caplog.set_level(logging.INFO, logger="ferrolock")
    holder = Lock(name, url=redis_server.url, auto_renew=False)
    assert holder.acquire(blocking=False)
    token = holder.token
    assert token is not None
    before = _native._metrics()["forced_releases"]
    assert Inspector(redis_server.url).force_release(name) == token[:8] + "…"

    def forced() -> list[logging.LogRecord]:
        return [r for r in caplog.records if getattr(r, "ferrolock_event", None) == "forced_release"
                and getattr(r, "ferrolock_name", None) == name]

    wait_for(forced, "the forced release logged")
    [record] = forced()
    assert record.name == "ferrolock.lock" and record.levelno == logging.WARNING
    assert record.ferrolock_holder == token[:8] + "…"  # type: ignore[attr-defined]
    assert record.ferrolock_origin == "inspector"  # type: ignore[attr-defined]
    assert token[:8] in record.getMessage() and "inspector" in record.getMessage()
    assert _native._metrics()["forced_releases"] == before + 1
    with pytest.raises(ferrolock.LockNotOwnedError):
        holder.release()
