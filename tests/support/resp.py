"""A minimal RESP2 client for test assertions (the code under test is ferrolock;
this only reads and pokes at Redis to check what it did)."""

from __future__ import annotations

import socket
from typing import Any


class RespError(Exception):
    """An error reply."""


class Resp:
    def __init__(self, port: int, host: str = "127.0.0.1", password: str | None = None):
        self.sock = socket.create_connection((host, port), timeout=10)
        self.buf = self.sock.makefile("rb")
        if password is not None:
            self("AUTH", password)

    def __call__(self, *args: Any) -> Any:
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            b = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        self.sock.sendall(b"".join(out))
        return self._read()

    def _read(self) -> Any:
        line = self.buf.readline()
        if not line:
            raise ConnectionError("connection closed")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RespError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.buf.read(n + 2)[:-2]
            return data
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._read() for _ in range(n)]
        raise RespError(f"bad reply {line!r}")

    def get(self, key: str | bytes) -> bytes | None:
        return self("GET", key)

    def close(self) -> None:
        self.buf.close()
        self.sock.close()

    def __enter__(self) -> Resp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Monitor:
    """Records the commands clients send (``MONITOR``), leaving out the ones
    scripts run internally. Use as a context manager; ``.commands`` is a list
    of argument lists (decoded)."""

    def __init__(self, port: int, password: str | None = None):
        import threading

        self.conn = Resp(port, password=password)
        self.conn.sock.sendall(b"*1\r\n$7\r\nMONITOR\r\n")
        assert self.conn.buf.readline().startswith(b"+OK")
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            for raw in self.conn.buf:
                self.lines.append(raw.decode(errors="replace").rstrip())
        except (OSError, ValueError):
            pass

    @property
    def commands(self) -> list[str]:
        return [line.split("] ", 1)[1] for line in self.lines if "] " in line and " lua]" not in line]

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, *exc: object) -> None:
        import socket
        import time

        time.sleep(0.05)  # let the last lines arrive
        try:
            self.conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._reader.join(2)
        self.conn.close()
