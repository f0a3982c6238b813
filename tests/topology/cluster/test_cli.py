"""The ``ferrolock`` command line on a 3-master cluster: the scenarios of
``tests/python/test_cli.py`` (names spread over every master, so that listings
must scan each), and a listing bounded across masters."""

from __future__ import annotations

import json

import pytest

from ferrolock import Lock, Queue
from tests.python.test_cli import cli, ok, scenario_locks, scenario_queues
from tests.support.servers import RedisCluster


@pytest.fixture(scope="module")
def cluster():
    with RedisCluster() as c:
        yield c


def node_cmd(cluster):
    """``r_of``: a raw call on the master of a key."""
    return lambda key: cluster.node_of(key).cmd


def test_lock_commands_on_a_cluster(cluster):
    names = [f"cl-locks-{i}-orders" for i in range(6)]
    assert len({cluster.node_of(f"Lock:{n}").port for n in names}) >= 2, "names on several masters"
    scenario_locks(cluster.url, "cl-locks-", node_cmd(cluster))


def test_queue_commands_on_a_cluster(cluster):
    names = ["cl-queues-mails", "cl-queues-reports"]
    assert len({cluster.node_of(f"Queue:{n}").port for n in names}) == 2, "the two queues on two masters"
    scenario_queues(cluster.url, "cl-queues-")


def test_listings_find_names_on_every_master(cluster):
    names = [f"cl-every-{i}" for i in range(30)]
    assert len({cluster.node_of(f"Lock:{n}").port for n in names}) == 3
    locks = [Lock(n, url=cluster.url, ttl=60, auto_renew=False) for n in names]
    for lock in locks:
        assert lock.acquire(blocking=False)
    for n in names:
        Queue(n, url=cluster.url).enqueue("t")
    try:
        doc = json.loads(ok(cli(cluster.url, "locks", "cl-every-", "--json")))
        assert doc["complete"] is True and [lk["name"] for lk in doc["locks"]] == sorted(names)
        doc = json.loads(ok(cli(cluster.url, "queues", "cl-every-", "--json")))
        assert doc["complete"] is True and [q["name"] for q in doc["queues"]] == sorted(names)
        doc = json.loads(ok(cli(cluster.url, "locks", "cl-every-", "--json", "--limit", "7")))
        assert doc["complete"] is False and len(doc["locks"]) == 7
        frame = ok(cli(cluster.url, "watch", "--count", "1", "--locks", "cl-every-", "--queues", "cl-every-",
                       "--limit", "50"))
        assert "30 held" in frame and "QUEUES  30" in frame
    finally:
        for lock in locks:
            lock.release()
