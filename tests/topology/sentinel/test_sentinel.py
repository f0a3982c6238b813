"""Sentinel: failover, dead or stopped sentinels, min_replicas on a replica."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

import ferrolock
from ferrolock import Lock, Queue
from tests.support.servers import SentinelSetup


def test_sentinel_failover_during_a_workload():
    with SentinelSetup() as setup:
        url = setup.url + "?timeout=1&connect_timeout=1"
        # A hold whose release hit the switch stays behind on one side until
        # its TTL: keep the TTL short so the workload is not blocked for long.
        lock, queue = Lock("sfo", url=url, ttl=2, auto_renew=False), Queue("sfo", url=url)
        first_master = setup.current_master_port()
        stop = threading.Event()
        stats = {"ok": 0, "errors": 0, "longest_gap": 0.0}

        def work() -> None:
            last_ok = time.monotonic()
            while not stop.is_set():
                try:
                    if not lock.acquire(timeout=3):
                        continue
                    queue.enqueue(str(stats["ok"]))
                    queue.pop()
                    lock.release()
                    stats["ok"] += 1
                    now = time.monotonic()
                    stats["longest_gap"] = max(stats["longest_gap"], now - last_ok)
                    last_ok = now
                except (ferrolock.ConnectionError, ferrolock.LockNotOwnedError):
                    stats["errors"] += 1
                    time.sleep(0.05)

        t = threading.Thread(target=work)
        t.start()
        time.sleep(1)
        before = stats["ok"]
        setup.sentinels[0].cmd("SENTINEL", "FAILOVER", "mymaster")
        until = time.monotonic() + 30
        while setup.current_master_port() == first_master:
            assert time.monotonic() < until, "no failover"
            time.sleep(0.1)
        time.sleep(3)
        after_failover = stats["ok"]
        time.sleep(2)
        stop.set()
        t.join()
        assert stats["ok"] > after_failover > before, stats
        assert stats["longest_gap"] < 15, f"bounded pause: {stats}"
        # The same objects now write to the new master.
        new_master = next(n for n in (setup.master, setup.replica) if n.port != first_master)
        assert lock.acquire(timeout=3)
        assert new_master.cmd("GET", "Lock:sfo") == lock.token.encode()
        lock.release()
        print(f"sentinel failover: {stats}")


class DeadSentinel:
    """A listed sentinel that never helps, the way real ones fail.

    silent: its process accepts connections and never answers (hung, or
    stopped with SIGSTOP). unreachable: connecting never completes (its host
    went down without resetting connections): the accept queue of a listener
    that never accepts is full, so the kernel drops further SYNs.
    """

    def __init__(self, fault: str):
        import socket

        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(0)
        self.port = self.server.getsockname()[1]
        self.accepted: list = []
        if fault == "silent":
            threading.Thread(target=self._accept, daemon=True).start()
        else:
            for _ in range(3):
                c = socket.socket()
                c.setblocking(False)
                c.connect_ex(("127.0.0.1", self.port))
                self.accepted.append(c)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self.server.close()
        for c in self.accepted:
            c.close()


@pytest.mark.parametrize("fault", ["silent", "unreachable"])
def test_a_dead_first_sentinel_costs_one_timeout_not_every_operation(fault):
    # The redis crate's Sentinel client had no timeouts: either fault used to
    # hang the first operation for good. Now the dead sentinel costs one
    # timeout; the next one answers and is asked first from then on (the
    # Sentinel client guidelines), though the master is re-checked every
    # second.
    dead = DeadSentinel(fault)
    try:
        # (A slow down-after: a spurious failover on a loaded machine would
        # add a lookup with a re-check of its own.)
        with SentinelSetup(down_after_ms=5000) as setup:
            url = (f"redis+sentinel://127.0.0.1:{dead.port},"
                   + setup.url.removeprefix("redis+sentinel://") + "?connect_timeout=1&timeout=1")
            lock = Lock("dead-sentinel", url=url, auto_renew=False)
            durations: list[float] = []
            errors: list[BaseException] = []

            def work() -> None:
                try:
                    end = time.monotonic() + 3.5  # the first lookup, then two re-checks at least
                    while time.monotonic() < end:
                        start = time.monotonic()
                        assert lock.acquire(blocking=False)
                        lock.release()
                        durations.append(time.monotonic() - start)
                except BaseException as e:  # reported below, not lost in the thread
                    errors.append(e)

            t = threading.Thread(target=work, daemon=True)
            t.start()
            t.join(timeout=60)
            assert not t.is_alive(), "an operation hung on the dead sentinel"
            assert not errors, errors
            stalled = [d for d in durations if d > 0.9]
            assert len(stalled) == 1, f"one timeout, once: {len(durations)} ops, stalls {stalled}"
            if fault == "silent":
                assert len(dead.accepted) == 1, "asked once only"
    finally:
        dead.close()


def test_min_replicas_confirms_on_a_replica():
    with SentinelSetup() as setup:
        master = f"redis://127.0.0.1:{setup.current_master_port()}/0"
        lock = Lock("wait-1", url=master, min_replicas=1)
        assert lock.acquire(blocking=False)
        # The acquire drew the fencing token itself (not on first read), so
        # its WAIT covered that write too: the replica has it already.
        (fence_key,) = setup.replica.cmd("KEYS", "*Lock:wait-1:fence")
        assert int(setup.replica.cmd("GET", fence_key)) == lock.fencing_token
        lock.release()
        # Handed over by a release (the grant was written by the releaser's
        # connection): still confirmed on the replica before success.
        holder = Lock("wait-1", url=master)
        assert holder.acquire()
        threading.Timer(0.3, holder.release).start()
        assert lock.acquire(timeout=10)
        assert setup.replica.cmd("GET", "Lock:wait-1") == lock.token.encode()
        lock.release()
        lonely = Lock("wait-2", url=master, min_replicas=2)
        with pytest.raises(ferrolock.LockError, match="replicas"):
            lonely.acquire(blocking=False)
        assert not lonely.locked(), "released when not confirmed"


def sentinel_stopped(setup: SentinelSetup, url_with_timeouts: str):
    """A client whose first-asked sentinel has just been stopped (SIGSTOP):
    its next lookup waits for one `timeout` on that sentinel."""
    import contextlib

    @contextlib.contextmanager
    def stopped():
        first = setup.sentinels[0].proc
        warm = Lock("warm-up", url=url_with_timeouts, auto_renew=False)
        assert warm.acquire(blocking=False)  # sentinels[0] answers, and stays first
        warm.release()
        first.send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            first.send_signal(signal.SIGCONT)

    return stopped()


def test_a_sentinel_lookup_does_not_hold_up_other_threads():
    with SentinelSetup(down_after_ms=5000) as setup:
        url = setup.url + "?connect_timeout=1&timeout=1"
        with sentinel_stopped(setup, url):
            durations: list[list[float]] = [[], []]
            errors: list[BaseException] = []

            def work(i: int) -> None:
                lock = Lock(f"threads-{i}", url=url, auto_renew=False)
                try:
                    end = time.monotonic() + 2.5
                    while time.monotonic() < end:
                        start = time.monotonic()
                        assert lock.acquire(blocking=False)
                        lock.release()
                        durations[i].append(time.monotonic() - start)
                except BaseException as e:
                    errors.append(e)

            threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=30)
            assert not any(t.is_alive() for t in threads) and not errors, errors
            # One thread asks the sentinels and waits for the stopped one; the
            # other goes on with the master it knows (before: it waited on
            # the pool's lock for the whole lookup).
            stalls = [sum(d > 0.9 for d in ds) for ds in durations]
            assert sorted(stalls) == [0, 1], f"stalls per thread: {stalls}"
            assert min(len(ds) for ds in durations) > 100


def test_fork_does_not_wait_for_a_sentinel_lookup():
    with SentinelSetup(down_after_ms=5000) as setup:
        url = setup.url + "?connect_timeout=3&timeout=3"
        with sentinel_stopped(setup, url):
            time.sleep(1.1)  # the master wants confirming again
            lock = Lock("fork-lookup", url=url, auto_renew=False)
            looking = threading.Thread(target=lambda: lock.acquire(blocking=False) and lock.release())
            looking.start()
            time.sleep(0.3)  # now asking the stopped sentinel, for 3 s
            start = time.monotonic()
            pid = os.fork()
            if pid == 0:
                ok = False
                try:
                    child = Lock("fork-lookup-child", url=url, auto_renew=False)
                    ok = child.acquire(blocking=False)
                    child.release()
                finally:
                    os._exit(0 if ok else 1)
            forked_in = time.monotonic() - start
            _, status = os.waitpid(pid, 0)
            looking.join()
            assert os.waitstatus_to_exitcode(status) == 0, "the child could lock"
            assert forked_in < 1.5, f"fork() waited {forked_in:.1f} s for the lookup"


def test_with_every_sentinel_stopped_the_known_master_is_kept():
    with SentinelSetup(down_after_ms=5000) as setup:
        url = setup.url + "?connect_timeout=0.5&timeout=0.5"
        lock = Lock("no-sentinels", url=url, auto_renew=False)
        assert lock.acquire(blocking=False)
        lock.release()
        for s in setup.sentinels:
            s.proc.send_signal(signal.SIGSTOP)
        try:
            done = 0
            end = time.monotonic() + 3  # the master wants confirming: each lookup fails
            while time.monotonic() < end:
                assert lock.acquire(blocking=False)
                lock.release()
                done += 1
            assert done > 100
        finally:
            for s in setup.sentinels:
                s.proc.send_signal(signal.SIGCONT)
