"""What happened in the background, told through ``logging`` and ``on_lost``.

The core keeps this process's events (a lock lost on the watchdog thread, a
renewal that failed, a slow acquire, a dead-lettered task, a lost reply
settled by the keeper, a forced release: ``ferrolock::ops::events``) once a
listener asks for them. The listener is a thread of this module, started by
the first ``Lock`` or ``Queue`` (not at import: a process that only imports
ferrolock and forks stays single-threaded). It waits for events in the core
with the GIL released, logs each under the ``ferrolock`` logger
(``ferrolock.lock``, ``ferrolock.queue``, ``ferrolock.settle``; quiet unless
the application configures logging: the package adds a ``NullHandler``),
and calls the ``on_lost`` callback of a lock (a ``Lock``, or a ``Redlock``
with ``auto_renew``) its renewal found lost. A forced release is logged at
WARNING under ``ferrolock.lock`` with ``ferrolock_holder`` (the shortened
token of the hold it ended) and ``ferrolock_origin`` (``inspector`` or
``lock``) in the record.

Under gevent or eventlet the listener is a real OS thread (their patched
``threading`` would make it a greenlet, and its native wait would stall the
hub): a callback runs there, not in a greenlet. At exit (``atexit``) the
listener is woken and joined, so no thread of ours is inside native code while
the interpreter finalizes. A forked child starts its own on its first
``Lock`` or ``Queue``.
"""

from __future__ import annotations

import _thread
import atexit
import logging
import os
import weakref
from importlib import import_module
from typing import Any, Callable

from ferrolock import _native

__all__ = ["start", "watch_lost"]

_LEVELS = {"info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}

# The logger of each kind of event.
_AREAS = {
    "slow_acquire": "ferrolock.lock",
    "renewal_failed": "ferrolock.lock",
    "lock_lost": "ferrolock.lock",
    "forced_release": "ferrolock.lock",
    "dead_lettered": "ferrolock.queue",
    "settlement_deferred": "ferrolock.settle",
    "settlement_done": "ferrolock.settle",
    "settlement_expired": "ferrolock.settle",
}

# Lock object id -> (a weak reference to the lock, its on_lost callback).
_watched: dict[int, tuple[weakref.ReferenceType[Any], Callable[[Any], object]]] = {}
_state_lock = _thread.allocate_lock()  # made at import: before any monkey-patching, the OS kind
_started = False
_stopping = False
_done: Any = None  # set by the listener when it ends (a lock it holds while it runs)


def _os_thread(name: str) -> Any:
    """``_thread.<name>`` as the OS provides it, also after gevent or eventlet
    patched ``_thread`` (their versions make greenlets and greenlet locks)."""
    patched_by = getattr(_thread.get_ident, "__module__", None) or ""
    if patched_by.startswith("gevent"):
        return import_module("gevent.monkey").get_original("_thread", name)
    if patched_by.startswith("eventlet"):
        return getattr(import_module("eventlet.patcher").original("_thread"), name)
    return getattr(_thread, name)


def start() -> None:
    """Starts the listener, once per process (cheap when started)."""
    global _started, _done
    if _started:
        return
    with _state_lock:
        if _started or _stopping:
            return
        _native._enable_events(True)
        done = _os_thread("allocate_lock")()
        done.acquire()
        _done = done

        def run() -> None:
            try:
                _listen()
            finally:
                done.release()

        _os_thread("start_new_thread")(run, ())
        _started = True


def watch_lost(lock: Any, callback: Callable[[Any], object]) -> None:
    """Calls ``callback(lock)`` when the watchdog finds a hold of ``lock`` lost
    (once per hold), for as long as ``lock`` lives."""
    key = lock._id

    # Bound now: at interpreter exit the module's globals may be gone when
    # the last locks are collected.
    def forget(ref: object, watched: dict[int, Any] = _watched) -> None:
        entry = watched.get(key)
        if entry is not None and entry[0] is ref:
            del watched[key]

    _watched[key] = (weakref.ref(lock, forget), callback)
    start()


def _listen() -> None:
    while not _stopping:
        for event in _native._wait_events(3600.0):
            try:
                _handle(*event)
            except Exception:  # a broken handler must not end the listener
                logging.getLogger("ferrolock").exception("ferrolock: handling event %r failed", event)


def _handle(
    kind: str,
    level: str,
    message: str,
    name: str,
    lock_id: int,
    seconds: float,
    at: float,
    holder: str = "",
    origin: str = "",
) -> None:
    logger = logging.getLogger(_AREAS.get(kind, "ferrolock"))
    # `at`: when it happened (unix s); the record is made when it is logged,
    # up to a batch window later (see the core's ops/events.rs).
    extra: dict[str, object] = {"ferrolock_event": kind, "ferrolock_name": name, "ferrolock_at": at}
    if holder or origin:
        # A forced release: the (shortened) token of the hold it ended, and
        # where it came from ("inspector": the CLI's release --force; "lock").
        extra["ferrolock_holder"] = holder
        extra["ferrolock_origin"] = origin
    logger.log(_LEVELS.get(level, logging.WARNING), "%s", message, extra=extra)
    if kind == "lock_lost" and lock_id:
        watched = _watched.get(lock_id)
        lock = watched[0]() if watched else None
        if watched is not None and lock is not None:
            try:
                watched[1](lock)
            except Exception:
                logger.exception("on_lost callback of lock %r raised", name)


def _stop() -> None:
    """At exit: ends the listener (woken at once) and waits for it briefly."""
    global _stopping
    with _state_lock:
        _stopping = True
        done = _done if _started else None
    if done is not None:
        _native._wake_events()
        if done.acquire(timeout=2.0):
            done.release()


def _forget_in_child() -> None:
    # A forked child inherits no thread: its first Lock or Queue starts one.
    global _started, _stopping, _done, _state_lock
    _state_lock = _os_thread("allocate_lock")()
    _started = False
    _stopping = False
    _done = None


atexit.register(_stop)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
