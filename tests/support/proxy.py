"""A TCP proxy for network faults: forwards loopback connections to a server and can stall.

``Proxy(target_port)`` listens on a free loopback port (``.port``) and forwards every
connection to ``127.0.0.1:target_port``. ``stall()`` stops forwarding both ways while
keeping every connection open (new ones are accepted too): to a client the server hangs, as
behind a link that drops packets. ``resume()`` forwards again, delivering what waited, as TCP
does when the link comes back. ``stall_after_reply()`` lets the next chunk of bytes from the
server through and stalls right behind it: the server answered one request, then hangs.
``close()`` (or leaving a ``with`` block) closes everything.

One thread accepts, two threads per connection pump bytes (one each way); a pump waits while
stalled before it reads and again before it writes, so nothing is forwarded once ``stall()``
has returned.
"""

from __future__ import annotations

import select
import socket
import threading


class Proxy:
    """Forwards ``127.0.0.1:<port>`` to ``127.0.0.1:<target_port>``; can stall and resume."""

    def __init__(self, target_port: int, host: str = "127.0.0.1"):
        self.target = (host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._stall_after_reply = False
        self.connections = 0
        threading.Thread(target=self._accept, name=f"proxy-{self.port}", daemon=True).start()

    def stall(self) -> None:
        """Stops forwarding, both ways, on every connection (they stay open)."""
        self._flowing.clear()

    def resume(self) -> None:
        """Forwards again (what was sent meanwhile is delivered)."""
        with self._lock:
            self._stall_after_reply = False
        self._flowing.set()

    def stall_after_reply(self) -> None:
        """Forwards the next chunk the server sends, then stalls (see the module docs)."""
        with self._lock:
            self._stall_after_reply = True

    @property
    def stalled(self) -> bool:
        return not self._flowing.is_set()

    def close(self) -> None:
        self._closed.set()
        self._flowing.set()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for s in [self._listener, *sockets]:
            try:
                s.close()
            except OSError:
                pass

    def __enter__(self) -> Proxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self._closed.is_set():
                    client.close()
                    server.close()
                    return
                self._sockets += [client, server]
                self.connections += 1
            for src, dst, from_server in ((client, server, False), (server, client, True)):
                threading.Thread(target=self._pump, args=(src, dst, from_server), daemon=True).start()

    def _wait_flowing(self) -> bool:
        """Waits while stalled; False once closed."""
        while not self._flowing.wait(0.05):
            if self._closed.is_set():
                return False
        return not self._closed.is_set()

    def _pump(self, src: socket.socket, dst: socket.socket, from_server: bool) -> None:
        try:
            while self._wait_flowing():
                ready, _, _ = select.select([src], [], [], 0.05)
                if not ready:
                    continue
                data = src.recv(65536)
                if not data:
                    dst.shutdown(socket.SHUT_WR)
                    return
                if not self._wait_flowing():
                    return
                dst.sendall(data)
                if from_server:
                    with self._lock:
                        if self._stall_after_reply:
                            self._stall_after_reply = False
                            self._flowing.clear()
        except (OSError, ValueError):  # reset, or closed by the other pump or close()
            pass
        finally:
            for s in (src, dst):
                try:
                    s.close()
                except OSError:
                    pass
