"""Servers for the docs examples: a standalone redis-server of their own, and the deployments a
block asks for with `<!-- needs: … -->` (started on first use, once per session).

Before each example every server it is given is emptied (FLUSHALL): each example starts on an empty
database whatever the ones before it left (locks, queues), so examples may use any names.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.servers import RedisCluster, RedisServer, SentinelSetup


class Deployments:
    """The servers of the docs examples; `env(needs)` empties them and names them for a block."""

    def __init__(self) -> None:
        self.standalone = RedisServer()
        self.cluster: RedisCluster | None = None
        self.sentinel: SentinelSetup | None = None
        self.redlock: list[RedisServer] = []

    def env(self, needs: tuple[str, ...]) -> dict[str, str]:
        servers = [self.standalone]
        env = {"REDIS_URL": self.standalone.url}
        if "redlock" in needs:
            if not self.redlock:
                self.redlock = [RedisServer() for _ in range(3)]
            servers += self.redlock
            env["REDLOCK_URLS"] = ",".join(s.url for s in self.redlock)
        if "sentinel" in needs:
            if self.sentinel is None:
                self.sentinel = SentinelSetup()
            servers.append(self.sentinel.master)
            env["REDIS_URL"] = env["REDIS_SENTINEL_URL"] = self.sentinel.url
        if "cluster" in needs:
            if self.cluster is None:
                self.cluster = RedisCluster()
            servers += self.cluster.nodes
            env["REDIS_URL"] = env["REDIS_CLUSTER_URL"] = self.cluster.url
        for s in servers:
            s.cmd("FLUSHALL")
        return env

    def close(self) -> None:
        for s in self.redlock:
            s.close()
        if self.sentinel is not None:
            self.sentinel.close()
        if self.cluster is not None:
            self.cluster.close()
        self.standalone.close()


@pytest.fixture(scope="session")
def deployments() -> Iterator[Deployments]:
    d = Deployments()
    yield d
    d.close()
