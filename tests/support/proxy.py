"""A TCP proxy between the client and a test server, for network faults a
paused server cannot make: a network that holds packets back and delivers
them late (``stall``/``resume``), a server that hangs behind a link that stops
forwarding, new connections included (``hang``, ``hang_after_reply``), and a
connection that dies after its command was delivered, before the reply
(``cut_replies``).

Threads, not asyncio: a stalled direction holds the chunk it read and stops
reading, so what the client sends meanwhile stays buffered in the kernel and
reaches the server on resume, even after the client reset the connection.
"""

from __future__ import annotations

import socket
import threading


class Proxy:
    """Forwards a free loopback port to ``127.0.0.1:<target>``."""

    def __init__(self, target: int):
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.port = self._listener.getsockname()[1]
        self._cond = threading.Condition()
        self._opened = 0
        self._stalled_below = 0
        self._cut = 0
        self._hung = False
        self._hang_after_reply = False
        self._stop = False
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, query: str = "") -> str:
        return f"redis://127.0.0.1:{self.port}/0{query}"

    def stall(self) -> None:
        """Hold back everything on the connections open now, both ways, until
        ``resume``; connections opened later pass."""
        with self._cond:
            self._stalled_below = self._opened

    def hang(self) -> None:
        """Hold back everything, both ways, on every connection (those opened
        later too: they are accepted, nothing passes) until ``resume``: to the
        client, the server hangs."""
        with self._cond:
            self._hung = True

    def hang_after_reply(self) -> None:
        """Pass the next reply of the server (any connection), then ``hang``:
        the server answered one request and then hung."""
        with self._cond:
            self._hang_after_reply = True

    @property
    def hung(self) -> bool:
        with self._cond:
            return self._hung

    def resume(self) -> None:
        """Deliver what ``stall`` or ``hang`` held back, and go on forwarding."""
        with self._cond:
            self._stalled_below = 0
            self._hung = self._hang_after_reply = False
            self._cond.notify_all()

    def cut_replies(self, n: int = 1) -> None:
        """Drop the next ``n`` replies of the server (any connection) and close
        their connection: the command ran, the client learns nothing of it."""
        with self._cond:
            self._cut = n

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._listener.close()
        for s in self._sockets:
            try:
                s.close()
            except OSError:
                pass

    def __enter__(self) -> Proxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._sockets.append(s)
            with self._cond:
                self._opened += 1
                number = self._opened
            threading.Thread(target=self._pump, args=(client, server, number, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, number, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, number: int, replies: bool) -> None:
        src.settimeout(0.05)
        while not self._stop:
            try:
                chunk = src.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if not chunk:
                break
            with self._cond:
                while (number <= self._stalled_below or self._hung) and not self._stop:
                    self._cond.wait()
                if replies and self._cut > 0:
                    self._cut -= 1
                    for s in (src, dst):
                        try:
                            s.shutdown(socket.SHUT_RDWR)
                        except OSError:
                            pass
                    return
                if replies and self._hang_after_reply:
                    self._hang_after_reply = False
                    self._hung = True
            try:
                dst.sendall(chunk)
            except OSError:
                break
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass
