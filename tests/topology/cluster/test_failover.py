"""Redis Cluster master failover (a master with a replica killed, issue 27.6): a
release lost in the crash leaves no renewed hold, and another client acquires
within the promotion time + 1 s. Python and PHP."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

import ferrolock
from ferrolock import Lock
from tests.conftest import PHP_EXT, run_php
from tests.support.servers import RedisCluster

SENTINEL_WORKERS = Path(__file__).parent.parent / "sentinel" / "workers"


def wait_for(predicate, timeout: float, what: str, step: float = 0.02) -> float:
    until = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < until, what
        time.sleep(step)
    return time.monotonic()


def read_replica(node, key: str) -> bytes | None:
    """GET on a cluster replica (READONLY first, else it answers MOVED)."""
    with node.client() as c:
        c("READONLY")
        return c("GET", key)


def promoted(cluster: RedisCluster, key: str, old: int) -> bool:
    try:
        return cluster.node_of(key).port != old
    except Exception:
        return False


def test_a_release_lost_in_a_cluster_master_crash_leaves_no_renewed_hold():
    with RedisCluster(replicas=1) as cluster:
        name = "cfo"
        key = f"Lock:{name}"
        master = cluster.node_of(key)
        replica = cluster.replica_of(master)
        holder = Lock(name, url=cluster.url + "?timeout=0.5&connect_timeout=0.5")  # renewed
        assert holder.acquire(blocking=False)
        wait_for(lambda: read_replica(replica, key) == holder.token.encode(), 10, "the hold reached the replica")
        other = Lock(name, url=cluster.url + "?timeout=0.5&connect_timeout=0.4", auto_renew=False)
        got: dict[str, object] = {}

        def wait() -> None:
            try:
                got["ok"] = other.acquire(timeout=40)
            except ferrolock.FerrolockError as e:
                got["ok"] = e
            got["at"] = time.monotonic()

        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(0.3)
        master.stop()  # kill -9
        with pytest.raises(ferrolock.ConnectionError, match="completed in the background"):
            holder.release()
        assert holder.token is None, "the object no longer holds it: no renewal goes on"
        at = wait_for(lambda: promoted(cluster, key, master.port), 60, "the replica was promoted", step=0.05)
        waiter.join(45)
        assert got.get("ok") is True, got
        took = got["at"] - at  # type: ignore[operator]
        print(f"acquired {took:.2f} s after the promotion was visible")
        assert took < 1.0 + 0.5, f"others acquire within the promotion time + 1 s: {took:.2f} s"
        assert replica.cmd("GET", key) == other.token.encode()
        other.release()


@pytest.mark.skipif(not PHP_EXT.exists(), reason="the PHP extension is not built (make php)")
def test_php_workers_go_on_after_a_cluster_master_crash():
    with RedisCluster(replicas=1) as cluster:
        name = "cfo-php"
        master = cluster.node_of(f"Lock:{name}")
        url = cluster.url + "?timeout=0.5&connect_timeout=0.5"
        result: dict[str, object] = {}

        def run() -> None:
            result["proc"] = run_php(SENTINEL_WORKERS / "lock_loop.php", url, name, "12", timeout=90)

        worker = threading.Thread(target=run)
        worker.start()
        time.sleep(2)
        master.stop()
        wait_for(lambda: promoted(cluster, f"Lock:{name}", master.port), 60, "the replica was promoted",
                 step=0.05)
        at = time.time()
        worker.join(90)
        lines = [json.loads(line) for line in result["proc"].stdout.splitlines() if line.startswith("{")]
        done = [x["t"] for x in lines if x.get("ok")]
        after = [t for t in done if t > at]
        print(f"PHP: {len(done)} sections, {len(after)} after the promotion, first "
              f"{(after[0] - at) if after else None}")
        assert after, "sections go on after the promotion"
        assert after[0] - at < 1.0 + 0.5, "within the promotion time + 1 s"
