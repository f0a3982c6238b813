"""Real redis-servers (standalone, cluster, sentinel) on free loopback ports."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from .resp import Resp

REDIS_SERVER = os.environ.get("REDIS_SERVER", "redis-server")


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

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def client(self) -> Resp:
        return Resp(self.port, password=self.password)

    def __enter__(self) -> RedisServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
        self.tls_port = free_port()
        super().__init__("--tls-port", str(self.tls_port), "--tls-cert-file", str(files["cert"]),
                         "--tls-key-file", str(files["key"]), "--tls-ca-cert-file", str(files["ca"]),
                         "--tls-auth-clients", "no")

    def start(self) -> None:
        super().start()  # the plain port is kept for the harness; clients use tls_port
        wait_port(self.tls_port)
