"""Redis Cluster: names spread over the masters, fair mode, a slot migration."""

from __future__ import annotations

import threading
import time

import pytest

from ferrolock import Lock, Queue
from tests.support.servers import RedisCluster


@pytest.fixture(scope="module")
def cluster():
    with RedisCluster() as c:
        yield c


def test_cluster_locks_and_queues_on_1000_names(cluster):
    names = [f"n{i}" for i in range(900)] + [f"{{tag}}{i}" for i in range(50)] + \
            [f"a}}{{b{i}" for i in range(25)] + [f"{{{i}}}x{{y}}" for i in range(25)]
    used_nodes = set()
    for n in names:
        lock = Lock(n, url=cluster.url, auto_renew=False)
        assert lock.acquire(blocking=False), n
        used_nodes.add(cluster.node_of(f"Lock:{n}").port)
        lock.release()
        q = Queue(n, url=cluster.url)
        assert q.enqueue([n, "other"]) == 2
        assert [t.id for t in q.pop(2)] == sorted([n, "other"])
    assert len(used_nodes) == 3, "names spread over every master"


def test_cluster_fair_mode_and_notifications(cluster):
    holder = Lock("cfair", url=cluster.url, fair=True)
    assert holder.acquire()
    order: list[int] = []

    def waiter(i: int) -> None:
        lock = Lock("cfair", url=cluster.url, fair=True)
        assert lock.acquire(timeout=20)
        order.append(i)
        lock.release()

    threads = []
    for i in range(3):
        t = threading.Thread(target=waiter, args=(i,))
        t.start()
        threads.append(t)
        time.sleep(0.3)
    released = time.monotonic()
    holder.release()
    for t in threads:
        t.join()
    assert order == [0, 1, 2]
    assert time.monotonic() - released < 0.9, "handed over by notification, not by re-checks"


def test_cluster_survives_a_slot_migration(cluster):
    lock = Lock("moving{m}", url=cluster.url, auto_renew=False)
    queue = Queue("moving{m}", url=cluster.url)
    queue.enqueue(["a", "b"])
    assert lock.acquire(blocking=False)
    _src, dst = cluster.move_slot_of("Lock:moving{m}")
    assert cluster.node_of("Lock:moving{m}").port == dst.port
    lock.release()  # MOVED -> followed
    for _ in range(20):
        assert lock.acquire(blocking=False)
        lock.release()
    assert [t.id for t in queue.pop(2)] == ["a", "b"], "the queue moved with its slot"
