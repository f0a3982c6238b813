"""A drop-in for redis-py's ``Lock``, on ferrolock's core.

Same constructor, methods, attributes and exceptions as ``redis.lock.Lock``,
so code written for redis-py keeps working::

    import redis
    import ferrolock.redis

    r = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    with r.lock("report", timeout=10, lock_class=ferrolock.redis.Lock):
        ...

What changes: waiters are woken by the holder's release (no polling every
``sleep`` seconds), and a lock without ``timeout`` is not immortal: it lives
``ferrolock.Lock``'s default ttl (30 s) and is renewed by the watchdog while
held, so it is held until released, as in redis-py, but frees itself 30 s
after its process dies instead of never. The key is the name itself (no
prefix), holding the owner token, as redis-py's: a redis-py ``Lock`` and this
one on the same name exclude each other. The connection is the client's:
host, port, db, credentials, TLS, unix socket, Sentinel master or Cluster
(``ferrolock._redispy.url_of``); redis-py's client itself is not used.

Needs redis-py (``pip install ferrolock[redis]``) for its exception classes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.util import find_spec
from types import TracebackType
from typing import Any, Literal, NoReturn

if find_spec("redis") is None:  # pragma: no cover - depends on the environment
    raise ImportError("ferrolock.redis needs redis-py: pip install 'ferrolock[redis]'")

import redis.exceptions as _redis_exceptions

import ferrolock
from ferrolock._redispy import url_of

__all__ = ["ConnectionError", "Lock", "LockError", "LockNotOwnedError"]

logger = logging.getLogger(__name__)


class LockError(_redis_exceptions.LockError, ferrolock.LockError):
    """redis-py's ``LockError`` (so ``except redis.exceptions.LockError`` catches
    it), and a ``ferrolock.LockError``."""

    def __init__(self, message: str | None = None, lock_name: str | None = None) -> None:
        try:
            super().__init__(message, lock_name=lock_name)
        except TypeError:  # redis-py < 5.1: no lock_name
            super().__init__(message)
            self.message = message
            self.lock_name = lock_name


class LockNotOwnedError(_redis_exceptions.LockNotOwnedError, LockError, ferrolock.LockNotOwnedError):
    """redis-py's ``LockNotOwnedError``, and a ``ferrolock.LockNotOwnedError``."""


class ConnectionError(_redis_exceptions.ConnectionError, ferrolock.ConnectionError):
    """redis-py's ``ConnectionError``, and a ``ferrolock.ConnectionError``."""


@contextmanager
def _as_redis_errors(name: str) -> Iterator[None]:
    """ferrolock's exceptions as redis-py raises them."""
    try:
        yield
    except LockError:
        raise  # already redis-py's
    except ferrolock.LockNotOwnedError as e:
        raise LockNotOwnedError(str(e), lock_name=name) from e
    except ferrolock.ConnectionError as e:
        raise ConnectionError(str(e)) from e
    except ferrolock.LockError as e:
        raise LockError(str(e), lock_name=name) from e


class _Holds:
    """The native lock of one owner (a thread, or with ``thread_local=False``
    the ``Lock`` object): its hold and token. ``token`` reads like redis-py's
    ``lock.local.token``: the bytes stored in Redis, or ``None``."""

    native: ferrolock.Lock | None = None

    @property
    def token(self) -> bytes | None:
        token = self.native.token if self.native is not None else None
        return token.encode() if token is not None else None

    @token.setter
    def token(self, value: object) -> NoReturn:
        raise AttributeError(
            "ferrolock.redis.Lock: local.token cannot be set (adopting another owner's hold is not "
            "supported); acquire(token=...) takes a lock with a token of your choice"
        )


class _ThreadHolds(_Holds, threading.local):
    """One :class:`_Holds` per thread (per greenlet under gevent/eventlet)."""


class Lock:
    """redis-py's ``Lock``, on ferrolock: see the module documentation.

    ``timeout``: the lock's life in seconds (ferrolock's ttl); ``None`` (or 0):
    held until released, renewed while held. ``sleep``: accepted and kept, not
    used (waits are woken by notification). ``blocking``, ``blocking_timeout``:
    the defaults of :meth:`acquire`. ``thread_local``: each thread has its own
    token (a thread cannot release another's hold). ``raise_on_release_error``:
    ``with`` raises :class:`LockError` when the lock was no longer held at exit
    (else logs a warning).
    """

    def __init__(
        self,
        redis: Any,
        name: str | bytes,
        timeout: float | None = None,
        sleep: float = 0.1,
        blocking: bool = True,
        blocking_timeout: float | None = None,
        thread_local: bool = True,
        raise_on_release_error: bool = True,
    ) -> None:
        self.redis = redis
        self.name = name
        self.timeout = timeout
        self.sleep = sleep
        self.blocking = blocking
        self.blocking_timeout = blocking_timeout
        self.thread_local = bool(thread_local)
        self.raise_on_release_error = raise_on_release_error
        self.local: _Holds = _ThreadHolds() if self.thread_local else _Holds()
        self._key = name.decode("utf-8", "surrogateescape") if isinstance(name, bytes) else name
        self._url = url_of(redis)
        self._native()  # check the name and timeout now, as the first acquire would

    def _native(self) -> ferrolock.Lock:
        """This owner's native lock (made on first use)."""
        native = self.local.native
        if native is None:
            if self.timeout:
                native = ferrolock.Lock(self._key, ttl=self.timeout, auto_renew=False, url=self._url, prefix="")
            else:
                native = ferrolock.Lock(self._key, url=self._url, prefix="")
            self.local.native = native
        return native

    def __enter__(self) -> Lock:
        if self.acquire():
            return self
        raise LockError("Unable to acquire lock within the time specified", lock_name=self._key)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            self.release()
        except LockError:
            if self.raise_on_release_error:
                raise
            logger.warning("Lock was unlocked or no longer owned when exiting context manager.")

    def acquire(
        self,
        sleep: float | None = None,
        blocking: bool | None = None,
        blocking_timeout: float | None = None,
        token: str | bytes | None = None,
    ) -> bool:
        """Take the lock: ``True`` once acquired; ``False`` when ``blocking`` is
        false and it is held, or when ``blocking_timeout`` seconds passed.
        ``token``: the owner token to store (default: a random one)."""
        del sleep  # waits are woken by the release, not by polling
        if blocking is None:
            blocking = self.blocking
        if blocking_timeout is None:
            blocking_timeout = self.blocking_timeout
        if blocking_timeout is not None:
            blocking_timeout = max(0.0, blocking_timeout)
        native = self._native()
        with _as_redis_errors(self._key):
            if token is None:
                return native.acquire(blocking=bool(blocking), timeout=blocking_timeout)
            return native._acquire_with_token(token, blocking=bool(blocking), timeout=blocking_timeout)

    def do_acquire(self, token: str | bytes) -> bool:
        """One attempt with ``token``."""
        return self.acquire(blocking=False, token=token)

    def locked(self) -> bool:
        """``True`` when anyone holds the lock."""
        with _as_redis_errors(self._key):
            return self._native().locked()

    def owned(self) -> bool:
        """``True`` when this owner (thread, with ``thread_local``) holds it."""
        native = self.local.native
        if native is None or native.token is None:
            return False
        with _as_redis_errors(self._key):
            return native.owned()

    def release(self) -> None:
        """Release the lock: :class:`LockError` when this owner does not hold
        it, :class:`LockNotOwnedError` when it expired or was taken over."""
        expected = self.local.token
        if expected is None:
            raise LockError("Cannot release a lock that's not owned or is already unlocked.", lock_name=self._key)
        self.do_release(expected)

    def do_release(self, expected_token: str | bytes) -> None:
        """Release the hold of ``expected_token`` (this owner's)."""
        if isinstance(expected_token, str):
            expected_token = expected_token.encode()
        native = self.local.native
        if native is None or self.local.token != expected_token:
            raise LockNotOwnedError("Cannot release a lock that's no longer owned", lock_name=self._key)
        try:
            with _as_redis_errors(self._key):
                native.release()
        except LockNotOwnedError as e:
            raise LockNotOwnedError("Cannot release a lock that's no longer owned", lock_name=self._key) from e

    def extend(self, additional_time: float, replace_ttl: bool = False) -> Literal[True]:
        """Add ``additional_time`` seconds to the lock's remaining life (or, with
        ``replace_ttl``, set it to that)."""
        if self.local.token is None:
            raise LockError("Cannot extend an unlocked lock", lock_name=self._key)
        if self.timeout is None:
            raise LockError("Cannot extend a lock with no timeout", lock_name=self._key)
        return self.do_extend(additional_time, replace_ttl)

    def do_extend(self, additional_time: float, replace_ttl: bool) -> Literal[True]:
        native = self._native()
        not_owned = LockNotOwnedError("Cannot extend a lock that's no longer owned", lock_name=self._key)
        with _as_redis_errors(self._key):
            if replace_ttl:
                ttl = float(additional_time)
            else:
                # remaining + additional, less the time the read took (never longer than redis-py's).
                started = time.monotonic()
                remaining = native._remaining()
                if remaining is None:
                    raise not_owned
                ttl = remaining + float(additional_time) - (time.monotonic() - started)
            try:
                native.extend(ttl)
            except ferrolock.LockNotOwnedError as e:
                raise not_owned from e
        return True

    def reacquire(self) -> Literal[True]:
        """Reset the remaining life to ``timeout``."""
        if self.local.token is None:
            raise LockError("Cannot reacquire an unlocked lock", lock_name=self._key)
        if self.timeout is None:
            raise LockError("Cannot reacquire a lock with no timeout", lock_name=self._key)
        return self.do_reacquire()

    def do_reacquire(self) -> Literal[True]:
        with _as_redis_errors(self._key):
            try:
                self._native().extend()
            except ferrolock.LockNotOwnedError as e:
                raise LockNotOwnedError("Cannot reacquire a lock that's no longer owned", lock_name=self._key) from e
        return True

    def __repr__(self) -> str:
        return f"<ferrolock.redis.Lock name={self._key!r} timeout={self.timeout!r}>"
