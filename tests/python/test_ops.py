"""What a process reports (issue 21): ``on_lost`` callbacks (a lock lost to
``DEBUG SLEEP``, a lock freed by an operator), the ``ferrolock`` logger (quiet
by default), the Prometheus collector scraped and parsed with
``prometheus_client``'s text parser, and the Inspector's argument checks."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

import ferrolock
from ferrolock import Lock, Queue
from ferrolock.ops import Inspector, set_slow_acquire
from tests.support.servers import RedisServer


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with RedisServer("--enable-debug-command", "local") as s:
        yield s


class Calls:
    """An ``on_lost`` callback that records its calls and their threads."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, int]] = []
        self.event = threading.Event()

    def __call__(self, lock: object) -> None:
        self.calls.append((lock, threading.get_ident()))
        self.event.set()


def wait_for(check, what: str, timeout: float = 15.0) -> None:
    until = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < until, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_on_lost_is_called_once_when_debug_sleep_outlives_the_ttl(server, name, caplog):
    caplog.set_level(logging.WARNING, logger="ferrolock")
    lost = Calls()
    lock = Lock(name, url=server.url + "?timeout=0.3&connect_timeout=0.3", ttl=1, on_lost=lost)
    assert lock.acquire(blocking=False)
    # The server sleeps past the TTL: renewals time out, the key expires.
    sleeper = threading.Thread(target=lambda: server.cmd("DEBUG", "SLEEP", "2.5"))
    sleeper.start()
    assert lost.event.wait(15), "on_lost was not called"
    sleeper.join()
    [(got, thread)] = lost.calls
    assert got is lock, "called with the lock object"
    assert thread != threading.get_ident(), "from a background thread"
    # The release finds it lost: it raises, and the callback is not called again.
    with pytest.raises(ferrolock.LockError):
        lock.release()
    time.sleep(0.5)
    assert len(lost.calls) == 1
    def losses() -> list[logging.LogRecord]:
        return [r for r in caplog.records if getattr(r, "ferrolock_event", None) == "lock_lost"]

    wait_for(lambda: losses(), "the loss logged")
    [record] = losses()
    assert record.name == "ferrolock.lock" and record.levelno == logging.ERROR
    assert "lost: no renewal succeeded within its TTL" in record.getMessage() or \
        "lost: the watchdog found it expired" in record.getMessage(), record.getMessage()
    assert record.ferrolock_name == name  # type: ignore[attr-defined]
    # The renewals that timed out were reported (the first of the streak).
    failed = [r for r in caplog.records if getattr(r, "ferrolock_event", None) == "renewal_failed"]
    assert len(failed) <= 1 and all(r.levelno == logging.WARNING for r in failed)
    # A new hold is reported again when lost (once per hold).
    assert lock.acquire(blocking=False)
    Inspector(server.url).force_release(name)
    wait_for(lambda: len(lost.calls) == 2, "the second loss reported")


def test_on_lost_when_an_operator_frees_the_lock(redis_server, name, caplog):
    caplog.set_level(logging.INFO, logger="ferrolock")
    lost = Calls()
    lock = Lock(name, url=redis_server.url, ttl=0.6, on_lost=lost)
    with pytest.raises(ferrolock.LockLostError):
        with lock:
            freed = Inspector(redis_server.url).force_release(name)
            assert freed == lock.token[:8] + "…"
            assert lost.event.wait(10), "the watchdog found it gone"
            assert lost.calls[0][0] is lock
            assert lock.locked() is False
    # The block's release found it lost: no second call.
    time.sleep(0.3)
    assert len(lost.calls) == 1
    forced = [r for r in caplog.records if getattr(r, "ferrolock_event", None) == "forced_release"]
    assert forced and forced[0].levelno == logging.WARNING and "released by force" in forced[0].getMessage()


def test_no_callback_for_a_lock_released_normally_nor_after_the_object_is_gone(redis_server, name):
    lost = Calls()
    lock = Lock(name, url=redis_server.url, ttl=0.6, on_lost=lost)
    for _ in range(3):
        with lock:
            time.sleep(0.3)  # renewed at least once
    assert lost.calls == []
    # A lost lock whose object was dropped calls nothing (weakly referenced).
    other = Lock(name + "-gone", url=redis_server.url, ttl=0.6, on_lost=lost)
    assert other.acquire(blocking=False)
    del other
    Inspector(redis_server.url).force_release(name + "-gone")
    time.sleep(1.5)
    assert lost.calls == []


def test_on_lost_must_be_callable(redis_server, name):
    with pytest.raises(TypeError, match="on_lost"):
        Lock(name, url=redis_server.url, on_lost=42)  # type: ignore[arg-type]


def test_slow_acquires_and_dead_letters_are_logged(redis_server, name, caplog):
    caplog.set_level(logging.INFO, logger="ferrolock")
    set_slow_acquire(0.2)
    started = time.time()
    try:
        holder = Lock(name, url=redis_server.url, auto_renew=False)
        holder.acquire()
        waiter = Lock(name, url=redis_server.url)
        timer = threading.Timer(0.5, holder.release)
        timer.start()
        assert waiter.acquire(timeout=10)
        waiter.release()
        timer.join()
        wait_for(lambda: any(r.ferrolock_event == "slow_acquire" for r in caplog.records  # type: ignore[attr-defined]
                             if hasattr(r, "ferrolock_event")), "the slow acquire logged")
        slow = next(r for r in caplog.records if getattr(r, "ferrolock_event", None) == "slow_acquire")
        assert started <= slow.ferrolock_at <= slow.created, "when it happened, not when logged"  # type: ignore[attr-defined]
        # Below the threshold: not logged.
        caplog.clear()
        with Lock(name, url=redis_server.url):
            pass
        set_slow_acquire(None)
    finally:
        set_slow_acquire(1.0)
    q = Queue(name, url=redis_server.url, max_attempts=1)
    q.enqueue("poison")
    task = q.reserve()
    assert task is not None and task.nack()
    wait_for(lambda: any(getattr(r, "ferrolock_event", None) == "dead_lettered" and r.name == "ferrolock.queue"
                         for r in caplog.records), "the dead letter logged")
    assert not any(getattr(r, "ferrolock_event", None) == "slow_acquire" for r in caplog.records)


def test_the_library_is_quiet_unless_logging_is_configured(redis_server, name):
    # A lost lock in a process that configured no logging prints nothing.
    code = f"""
import time, ferrolock
from ferrolock.ops import Inspector
lost = []
lock = ferrolock.Lock({name!r}, url={redis_server.url!r}, ttl=0.6, on_lost=lost.append)
lock.acquire()
Inspector({redis_server.url!r}).force_release({name!r})
until = time.monotonic() + 10
while not lost and time.monotonic() < until:
    time.sleep(0.05)
assert lost, "not reported"
print("lost", flush=True)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "lost\n" and proc.stderr == ""
    # With logging configured, the same run logs the loss and the forced release.
    proc = subprocess.run([sys.executable, "-c", "import logging; logging.basicConfig()\n" + code],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "ERROR:ferrolock.lock:" in proc.stderr and ": lost: " in proc.stderr
    assert "released by force" in proc.stderr


def scrape(registry) -> dict[str, object]:
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    text = generate_latest(registry).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample(families, family: str, suffix: str = "", **labels: str) -> float:
    for s in families[family].samples:
        if s.name == family + suffix and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise AssertionError(f"no sample {family}{suffix} {labels}: {families[family].samples}")


def test_the_prometheus_collector_scrape_parses(redis_server, name):
    pytest.importorskip("prometheus_client")
    from prometheus_client import CollectorRegistry

    from ferrolock.metrics import register

    registry = CollectorRegistry()
    q = Queue(f"{name}-q", url=redis_server.url, max_attempts=1)
    collector = register([f"{name}-q"], url=redis_server.url, registry=registry)
    q.enqueue({"dies": "x"})
    task = q.reserve()
    assert task is not None and task.nack()
    q.enqueue(["due1", "due2"])
    q.enqueue("later", delay=600)
    q.enqueue("flying")
    reserved = q.reserve()
    assert reserved is not None
    before = scrape(registry)
    waits = sample(before, "ferrolock_lock_wait_seconds", "_count")
    holds = sample(before, "ferrolock_lock_hold_seconds", "_count")
    lost = sample(before, "ferrolock_locks_lost", "_total")
    forced = sample(before, "ferrolock_lock_forced_releases", "_total")

    for _ in range(3):
        with Lock(name, url=redis_server.url):
            time.sleep(0.01)
    lost_lock = Lock(f"{name}-lost", url=redis_server.url, ttl=0.6, on_lost=lambda _l: None)
    lost_lock.acquire()
    Inspector(redis_server.url).force_release(f"{name}-lost")
    until = time.monotonic() + 10
    while sample(scrape(registry), "ferrolock_locks_lost", "_total") < lost + 1:
        assert time.monotonic() < until, "the lost lock counted"
        time.sleep(0.05)
    after = scrape(registry)

    queue = {"queue": f"{name}-q"}
    assert sample(after, "ferrolock_queue_due", **queue) == 2
    assert sample(after, "ferrolock_queue_delayed", **queue) == 1
    assert sample(after, "ferrolock_queue_in_flight", **queue) == 1
    assert sample(after, "ferrolock_queue_dead", **queue) == 1
    assert 0 <= sample(after, "ferrolock_queue_oldest_due_age_seconds", **queue) < 60
    assert sample(after, "ferrolock_queue_up", **queue) == 1
    assert after["ferrolock_lock_wait_seconds"].type == "histogram"
    assert sample(after, "ferrolock_lock_wait_seconds", "_count") >= waits + 4
    assert sample(after, "ferrolock_lock_hold_seconds", "_count") >= holds + 3
    assert sample(after, "ferrolock_lock_hold_seconds", "_bucket", le="+Inf") == \
        sample(after, "ferrolock_lock_hold_seconds", "_count")
    assert sample(after, "ferrolock_lock_hold_seconds", "_sum") >= 0.03
    assert sample(after, "ferrolock_lock_forced_releases", "_total") == forced + 1
    assert sample(after, "ferrolock_queue_dead_lettered", "_total") >= 1
    assert sample(after, "ferrolock_settlements_pending") >= 0
    # A queue that cannot be read is reported down, the scrape still works.
    collector.add_queue(Queue("unreachable", url="redis://127.0.0.1:1/0?connect_timeout=0.2"))
    down = scrape(registry)
    assert sample(down, "ferrolock_queue_up", queue="unreachable") == 0
    assert sample(down, "ferrolock_queue_due", **queue) == 2
    collector.remove_queue("unreachable")
    assert "unreachable" not in str(scrape(registry)["ferrolock_queue_up"].samples)
    reserved.ack()


def test_inspector_arguments_are_checked(redis_server):
    ins = Inspector(redis_server.url)
    with pytest.raises(ValueError, match="limit"):
        ins.locks(limit=0)
    with pytest.raises(ValueError, match="1000"):
        ins.locks(limit=1001)
    with pytest.raises(ValueError, match="waiters"):
        ins.lock("x", waiters=-1)
    with pytest.raises(TypeError, match="names"):
        ins.locks_named("abc")
    with pytest.raises(ValueError, match="lock name"):
        ins.lock("")
    assert ins.force_release("never-held") is None
    assert ins.queue("never-used")["due"] == 0
    assert repr(ins) == "<ferrolock.Inspector>"
