"""Redis Cluster: waiters of a busy lock follow a slot move at once (issue
27.3): the server drops the slot's sharded wake-up channel when the slot
moves, which wakes the waiters to re-subscribe where it went."""

from __future__ import annotations

import threading
import time

import pytest

from ferrolock import Lock
from tests.support.servers import RedisCluster


@pytest.fixture(scope="module")
def cluster():
    with RedisCluster() as c:
        yield c


def busy(url: str, name: str, workers: int, stop: threading.Event, stamps: list[float],
         errors: list[BaseException]) -> list[threading.Thread]:
    def work() -> None:
        lock = Lock(name, url=url, auto_renew=False, ttl=5)
        while not stop.is_set():
            try:
                if lock.acquire(timeout=10):
                    stamps.append(time.monotonic())
                    time.sleep(0.002)
                    lock.release()
            except Exception as e:
                errors.append(e)
    threads = [threading.Thread(target=work) for _ in range(workers)]
    for t in threads:
        t.start()
    return threads


def longest_gap(stamps: list[float], start: float, end: float) -> float:
    around = sorted(s for s in stamps if start <= s <= end)
    points = [start, *around, end]
    return max(b - a for a, b in zip(points, points[1:]))


def test_a_slot_move_of_a_busy_lock_stalls_its_waiters_briefly(cluster):
    name = "busy-move"
    stop, stamps, errors = threading.Event(), [], []
    threads = busy(cluster.url, name, 4, stop, stamps, errors)
    time.sleep(1.0)
    before = len(stamps)
    moved_at = time.monotonic()
    src, dst = cluster.move_slot_of(f"Lock:{name}")
    moved = time.monotonic()
    time.sleep(1.5)
    stop.set()
    for t in threads:
        t.join(timeout=30)
    assert cluster.node_of(f"Lock:{name}").port == dst.port != src.port
    stall = longest_gap(stamps, moved_at, moved + 0.5)
    after = len([s for s in stamps if s > moved])
    print(f"slot move took {moved - moved_at:.3f} s; longest stall of the busy lock around it "
          f"{stall * 1000:.0f} ms (target 250 ms); {before} holds before, {after} after; errors: {errors[:3]}")
    assert after > 50, "the lock kept moving on the new owner"
    assert stall < 1.0, f"waiters stalled {stall:.3f} s"
