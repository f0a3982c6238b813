"""gevent and eventlet: waits that yield to the hub instead of stalling it.

Under ``gevent.monkey.patch_all()`` or ``eventlet.monkey_patch()`` the
greenlets of a thread share one OS thread. A lock or queue wait that blocked
it would stall the hub: the greenlet holding the lock would never run again to
release it. The native module checks at each blocking call whether
``threading`` is patched (``_thread.get_ident`` is no longer the builtin) and,
if so, asks :func:`_cooperative_wait` how the current greenlet can wait; the
wait itself then runs on a thread of its own, and the greenlet waits for it
through the hub. Killing the greenlet (``Greenlet.kill()``, ``gevent.Timeout``,
Ctrl-C) cancels the wait, and gives back a lock or task it got meanwhile.

Calls go one way: this module registers a function with the native module; the
native module never imports the package.
"""

from __future__ import annotations

import _thread
from importlib import import_module
from typing import Callable

from ferrolock import _native

__all__ = ["caller_id"]


def _cooperative_wait() -> Callable[[int], object] | None:
    """How the current greenlet waits until a file descriptor is readable
    without blocking its hub, or ``None`` when it must wait on its thread
    (threading not patched by a library we know, or the caller is the hub)."""
    patched_by = getattr(_thread.get_ident, "__module__", None) or ""
    if patched_by.startswith("gevent"):
        # Imported by name: already loaded by the patching, and untyped.
        gevent = import_module("gevent")
        if gevent.getcurrent() is gevent.get_hub():
            return None  # the hub itself cannot yield
        wait_read: Callable[[int], object] = import_module("gevent.socket").wait_read
        return wait_read
    if patched_by.startswith("eventlet"):
        hubs = import_module("eventlet.hubs")
        if import_module("greenlet").getcurrent() is hubs.get_hub().greenlet:
            return None

        def trampoline_read(fd: int) -> None:
            hubs.trampoline(fd, read=True)

        return trampoline_read
    return None


def caller_id() -> int:
    """Who is calling, as a same-thread check should see it: the OS thread's
    id, or under gevent/eventlet the current greenlet's
    (``threading.get_ident()`` as patched)."""
    return _native._caller_id()


_native._set_green_hook(_cooperative_wait)
