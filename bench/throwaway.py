"""A throwaway redis-server for the bench scripts that need one of their own."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def redis_url(url: str | None) -> Iterator[str]:
    """`url` itself, or (None) the URL of a redis-server started on a free
    port for the block and stopped after it."""
    if url is not None:
        yield url
        return
    port = free_port()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
                              stdout=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), 0.1).close()
                break
            except OSError:
                time.sleep(0.02)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.terminate()
        server.wait()
