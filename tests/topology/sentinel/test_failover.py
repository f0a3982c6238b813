"""Locks through Sentinel failovers (issue 27): a release lost in a master crash
leaves no renewed hold, a graceful switch-over stalls no longer than the
switch itself and blames no expiry, and min_replicas fails fast and recovers.
Python here; PHP workers in `workers/`."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

import ferrolock
from ferrolock import Lock
from tests.conftest import PHP_EXT, run_php
from tests.support.servers import SentinelSetup

WORKERS = Path(__file__).parent / "workers"


def wait_for(predicate, timeout: float, what: str, step: float = 0.02) -> float:
    """Polls until `predicate()`; returns when (monotonic)."""
    until = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < until, what
        time.sleep(step)
    return time.monotonic()


def replicated(setup: SentinelSetup, key: str, value: bytes) -> bool:
    return setup.replica.cmd("GET", key) == value


def test_a_release_lost_in_a_master_crash_leaves_no_renewed_hold():
    with SentinelSetup() as setup:
        first = setup.current_master_port()
        url = setup.url + "?timeout=0.5&connect_timeout=0.5"
        holder = Lock("crash", url=url)  # auto_renew: the watchdog renews it
        assert holder.acquire(blocking=False)
        token = holder.token.encode()
        wait_for(lambda: replicated(setup, "Lock:crash", token), 10, "the hold reached the replica")
        # Another client (its own pool) waits for the name.
        other = Lock("crash", url=setup.url + "?timeout=0.5&connect_timeout=0.4", auto_renew=False)
        got: dict[str, object] = {}

        def wait() -> None:
            got["ok"] = other.acquire(timeout=40)
            got["at"] = time.monotonic()

        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(0.3)
        setup.master.stop()  # kill -9 while the holder is about to release
        with pytest.raises(ferrolock.ConnectionError, match="completed in the background"):
            holder.release()
        assert holder.token is None, "the object no longer holds it: no renewal goes on"
        promoted = wait_for(lambda: setup.current_master_port() != first, 60, "a replica was promoted",
                            step=0.05)
        waiter.join(40)
        assert got.get("ok") is True, got
        took = got["at"] - promoted  # type: ignore[operator]
        print(f"acquired {took:.2f} s after the promotion was reported")
        assert took < 1.0 + 0.5, f"others acquire within the promotion time + 1 s: {took:.2f} s"
        assert setup.replica.cmd("GET", "Lock:crash") == other.token.encode()
        other.release()


def sections(lock: Lock, stop: threading.Event, log: list, errors: list) -> None:
    """Acquire/release in a loop, logging when each section ended, and errors."""
    while not stop.is_set():
        try:
            if lock.acquire(timeout=10):
                time.sleep(0.002)
                lock.release()
                log.append(time.monotonic())
        except ferrolock.FerrolockError as e:
            errors.append((time.monotonic(), type(e).__name__, str(e)))
            time.sleep(0.01)


def longest_gap(times: list[float]) -> float:
    return max((b - a for a, b in zip(times, times[1:])), default=0.0)


def test_a_graceful_failover_stalls_no_longer_than_the_switch_and_blames_no_expiry():
    with SentinelSetup() as setup:
        first = setup.current_master_port()
        url = setup.url + "?timeout=1&connect_timeout=1"
        stop = threading.Event()
        log: list[float] = []
        errors: list[tuple[float, str, str]] = []
        # Holds that would otherwise wait out their TTL (5 s) after the switch.
        workers = [threading.Thread(target=sections,
                                    args=(Lock("graceful", url=url, ttl=5, auto_renew=False), stop, log, errors))
                   for _ in range(3)]
        for w in workers:
            w.start()
        time.sleep(1)
        started = time.monotonic()
        setup.sentinels[0].cmd("SENTINEL", "FAILOVER", "mymaster")
        switched = wait_for(lambda: setup.current_master_port() != first, 30, "no failover", step=0.05)
        time.sleep(4)
        stop.set()
        for w in workers:
            w.join(30)
        during = [t for t in log if t > started - 0.5]
        gap = longest_gap(during)
        print(f"graceful failover: switched after {switched - started:.2f} s, longest gap {gap:.2f} s, "
              f"{len(log)} sections, errors: {errors}")
        assert [t for t in log if t > switched], "sections go on after the switch"
        assert gap < (switched - started) + 1.5, f"no stall beyond the switch: {gap:.2f} s"
        for _, kind, message in errors:
            if kind == "LockNotOwnedError":
                assert "master changed" in message, message


def test_min_replicas_fails_fast_through_a_switch_over_and_recovers():
    with SentinelSetup() as setup:
        first = setup.current_master_port()
        url = setup.url + "?timeout=1&connect_timeout=1"
        lock = Lock("quorum", url=url, min_replicas=1, auto_renew=False, ttl=5)
        stop = threading.Event()
        tries: list[tuple[float, float, bool, str]] = []

        def work() -> None:
            while not stop.is_set():
                start = time.monotonic()
                try:
                    ok = lock.acquire(blocking=False)
                    if ok:
                        lock.release()
                    tries.append((start, time.monotonic() - start, ok, ""))
                except ferrolock.FerrolockError as e:
                    tries.append((start, time.monotonic() - start, False, str(e)))
                time.sleep(0.01)

        t = threading.Thread(target=work)
        t.start()
        time.sleep(1)
        setup.sentinels[0].cmd("SENTINEL", "FAILOVER", "mymaster")
        wait_for(lambda: setup.current_master_port() != first, 30, "no failover", step=0.05)
        new = next(n for n in (setup.master, setup.replica) if n.port != first)
        reattached = wait_for(lambda: b"connected_slaves:1" in new.cmd("INFO", "replication")
                              and b"state=online" in new.cmd("INFO", "replication"), 30,
                              "the old master reattached as a replica", step=0.02)
        time.sleep(2)
        stop.set()
        t.join(30)
        quorum_errors = [x for x in tries if "replica" in x[3]]
        print(f"{len(tries)} tries, {len(quorum_errors)} refused for replicas, "
              f"slowest {max(x[1] for x in tries):.2f} s")
        # Refusals are quick: nobody holds the key for a whole WAIT.
        slow = [x for x in quorum_errors if x[1] > 1.0]
        assert len(slow) <= 1, f"at most the one WAIT that found the replica gone: {slow}"
        # Acquires succeed again within about a second of the replica's return.
        after = [x for x in tries if x[0] > reattached and x[2]]
        assert after, "acquires succeed again after the replica reattached"
        assert after[0][0] - reattached < 1.5, f"recovered {after[0][0] - reattached:.2f} s after"


@pytest.mark.skipif(not PHP_EXT.exists(), reason="the PHP extension is not built (make php)")
def test_php_workers_through_a_graceful_failover():
    with SentinelSetup() as setup:
        first = setup.current_master_port()
        url = setup.url + "?timeout=1&connect_timeout=1"
        result: dict[str, object] = {}

        def run() -> None:
            result["proc"] = run_php(WORKERS / "lock_loop.php", url, "php-graceful", "8", timeout=60)

        worker = threading.Thread(target=run)
        worker.start()
        time.sleep(2)  # the PHP worker is running sections
        started = time.time()
        setup.sentinels[0].cmd("SENTINEL", "FAILOVER", "mymaster")
        wait_for(lambda: setup.current_master_port() != first, 30, "no failover", step=0.05)
        switched = time.time()
        worker.join(60)
        lines = [json.loads(line) for line in result["proc"].stdout.splitlines() if line.startswith("{")]
        done = [x["t"] for x in lines if x.get("ok")]
        errors = [x for x in lines if "error" in x]
        gap = longest_gap([t for t in done if t > started - 0.5])
        print(f"PHP: {len(done)} sections, switch {switched - started:.2f} s, gap {gap:.2f} s, errors {errors}")
        assert [t for t in done if t > switched], "sections go on after the switch"
        assert gap < (switched - started) + 1.5, f"no stall beyond the switch: {gap:.2f} s"


@pytest.mark.skipif(not PHP_EXT.exists(), reason="the PHP extension is not built (make php)")
def test_php_min_replicas_fails_fast_through_a_switch_over_and_recovers(tmp_path):
    with SentinelSetup() as setup:
        first = setup.current_master_port()
        url = setup.url + "?timeout=1&connect_timeout=1"
        result: dict[str, object] = {}
        stop = tmp_path / "stop"

        def run() -> None:
            result["proc"] = run_php(WORKERS / "lock_loop.php", url, "php-quorum", "50", "1", "0", str(stop),
                                     timeout=90)

        worker = threading.Thread(target=run)
        worker.start()
        time.sleep(2)
        setup.sentinels[0].cmd("SENTINEL", "FAILOVER", "mymaster")
        wait_for(lambda: setup.current_master_port() != first, 30, "no failover", step=0.05)
        new = next(n for n in (setup.master, setup.replica) if n.port != first)
        wait_for(lambda: b"state=online" in new.cmd("INFO", "replication"), 30,
                 "the old master reattached as a replica", step=0.02)
        reattached = time.time()
        time.sleep(2)
        stop.touch()
        worker.join(60)
        lines = [json.loads(line) for line in result["proc"].stdout.splitlines() if line.startswith("{")]
        refused = [x for x in lines if "replica" in x.get("error", "")]
        slow = [x for x in refused if x["took"] > 1.0]
        after = [x for x in lines if x.get("ok") and x["t"] > reattached]
        print(f"PHP min_replicas: {len(lines)} tries, {len(refused)} refused, slow {slow}, "
              f"first success after reattach {(after[0]['t'] - reattached) if after else None}, "
              f"last line {lines[-1]['t'] - reattached:.2f} s after the reattach: {lines[-1]}")
        assert len(slow) <= 1, f"refusals are quick: {slow}"
        assert after and after[0]["t"] - reattached < 1.5, "recovered within about a second"
