"""Redlock over several independent masters: quorum, hung and dying masters, PHP."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import ferrolock
from ferrolock import LockTimeout, Redlock
from tests.conftest import ROOT, run_php
from tests.support.servers import RedisServer

HERE = Path(__file__).parent


@pytest.fixture
def masters():
    servers = [RedisServer() for _ in range(5)]
    yield servers
    for s in servers:
        s.close()


def urls_of(servers) -> list[str]:
    return [s.url + "?connect_timeout=0.3&timeout=0.5" for s in servers]


def holders(servers, key: str) -> int:
    count = 0
    for s in servers:
        if s.proc is None:
            continue
        count += s.cmd("EXISTS", key)
    return count


def test_redlock_refuses_a_master_listed_twice(masters):
    urls = urls_of(masters)
    with pytest.raises(ValueError, match="listed twice"):
        Redlock("rl", [urls[0], urls[1], urls[0]])


def test_redlock_is_not_held_up_by_a_hung_master(masters):
    three = masters[:3]
    urls = [s.url for s in three]  # the default 3 s timeouts: longer than the TTL
    warm = Redlock("hung", urls, ttl=2)
    assert warm.acquire(blocking=False)  # connections to all three are pooled
    warm.release()
    os.kill(three[2].proc.pid, signal.SIGSTOP)  # stopped: accepts, never answers
    try:
        lock = Redlock("hung", urls, ttl=2)
        assert lock.acquire(timeout=8), "the two live masters are a quorum"
        assert lock.owned() and not lock.lost
        lock.release()
        assert holders(three[:2], "Lock:hung") == 0
        with Redlock("hung", urls, ttl=2, timeout=8):
            pass
    finally:
        os.kill(three[2].proc.pid, signal.SIGCONT)


def test_redlock_quorum(masters):
    urls = urls_of(masters)
    lock = Redlock("rl", urls, ttl=10)
    assert lock.acquire(blocking=False)
    assert holders(masters, "Lock:rl") == 5
    assert lock.owned() and lock.fencing_token > 0
    other = Redlock("rl", urls, ttl=10)
    assert not other.acquire(timeout=0.3), "a second client cannot get a quorum"
    lock.release()
    assert holders(masters, "Lock:rl") == 0

    masters[0].stop()
    masters[1].stop()
    assert lock.acquire(blocking=False), "3 of 5 masters are a quorum"
    lock.extend(5)
    lock.release()

    fences = []
    for _ in range(5):
        with Redlock("rl", urls) as held:
            fences.append(held.fencing_token)
    assert fences == sorted(set(fences)), "fencing tokens increase across Redlock holders"

    masters[2].stop()
    # 2 of 5 answering cannot decide anything: the error says so at once,
    # as a single server that is down would, instead of waiting out the
    # timeout (or forever) against masters that are down.
    started = time.monotonic()
    with pytest.raises(ferrolock.ConnectionError, match="only 2 of 5 Redis masters answered"):
        lock.acquire(timeout=5)
    assert time.monotonic() - started < 3
    with pytest.raises(ConnectionError):  # the builtin, too
        with Redlock("rl", urls, timeout=0.3):
            pass
    with pytest.raises(ferrolock.ConnectionError):
        lock.locked()
    assert holders(masters, "Lock:rl") == 0, "a failed attempt releases what it took"

    masters[0].start()  # 3 of 5 again: a quorum, but the lock is busy
    holder = Redlock("rl", urls, ttl=10)
    assert holder.acquire(blocking=False)
    assert not lock.acquire(timeout=0.3), "busy on a quorum: no error, just not acquired"
    with pytest.raises(LockTimeout):
        with Redlock("rl", urls, timeout=0.3):
            pass
    for s in masters:
        if s.proc is not None:
            assert not s.cmd("SCAN", "0", "MATCH", "*Lock:rl:waiters", "COUNT", "1000")[1], \
                "timed-out waiters deregistered"
    masters[3].stop()  # 2 of 5: the holder's release cannot be confirmed
    with pytest.raises(ferrolock.ConnectionError):
        holder.release()
    assert holder.token is None, "the hold is given up either way"


def test_redlock_from_php(masters):
    urls = urls_of(masters)
    script = HERE / "_redlock.php"
    script.write_text("<?php $l = new RedisLock(['servers' => json_decode($argv[1])]);"
                      "var_dump($l->lock('php-rl', 0.3)); var_dump($l->unlock('php-rl'));")
    try:
        import json
        assert run_php(script, json.dumps(urls)).stdout.split() == ["bool(true)", "bool(true)"]
        for s in masters[:3]:
            s.stop()
        out = run_php(script, json.dumps(urls), check=False)
        assert out.returncode != 0 and "RedisLockException" in out.stderr, out
        assert "only 2 of 5 Redis masters answered" in out.stderr, out.stderr
    finally:
        script.unlink()


def test_redlock_contention_while_masters_die_and_come_back(masters, tmp_path):
    """4 processes x 200 increments; one master at a time is killed and brought
    back only after the lock TTL (Redlock's delayed restart), no update lost."""
    urls = urls_of(masters)
    counter = tmp_path / "counter"
    counter.write_text("0")
    workers = [subprocess.Popen([sys.executable, str(HERE / "workers" / "redlock_increment.py"),
                                 str(counter), "200", *urls], cwd=ROOT) for _ in range(4)]
    restarts = 0
    try:
        while any(w.poll() is None for w in workers):
            victim = random.choice(masters)
            victim.stop()
            time.sleep(2.5)  # > ttl (2 s): the restarted master forgot only expired locks
            victim.start()
            restarts += 1
            time.sleep(0.3)
        assert [w.returncode for w in workers] == [0, 0, 0, 0]
    finally:
        for w in workers:
            w.kill()
            w.wait()
    assert int(counter.read_text()) == 800
    assert restarts >= 1
    print(f"redlock: 800 increments, {restarts} master restarts, 0 lost")
