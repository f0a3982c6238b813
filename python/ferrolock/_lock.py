"""The public lock classes: the native ones plus the decorator and ``async with``.

``Lock`` and ``Redlock`` subclass ``ferrolock._native.Lock``/``Redlock``, so
``acquire``, ``release``, ``with`` and the rest are the native methods
themselves, with no Python frame in between. This module adds only what is
Python by nature: the decorator form and the asyncio form (``async with``),
which awaits the native asyncio calls of ``ferrolock.aio`` (``_ops.run``).
Calls go one way: from here into ``_native``, never back.
"""

from __future__ import annotations

import functools
import inspect
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, TypeVar, final

from ferrolock import _events, _native, _ops

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["Lock", "Redlock"]

F = TypeVar("F", bound=Callable[..., Any])


class _Forms(_native._LockBase):
    """The decorator and ``async with`` forms, shared by :class:`Lock` and :class:`Redlock`."""

    __slots__ = ()

    def __call__(self, func: F) -> F:
        """Decorator form: every call of ``func`` runs while holding the lock
        (coroutine functions use ``async with``)."""
        if not callable(func):
            raise TypeError(f"the decorated object must be callable, not {type(func).__name__}")
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_locked(*args: Any, **kwargs: Any) -> Any:
                async with self:
                    return await func(*args, **kwargs)

            return async_locked  # type: ignore[return-value]

        @functools.wraps(func)
        def locked(*args: Any, **kwargs: Any) -> Any:
            with self:
                return func(*args, **kwargs)

        return locked  # type: ignore[return-value]

    async def __aenter__(self) -> Self:
        """``async with``: acquire (waiting up to ``timeout``) or raise
        :class:`LockTimeout`. Every round trip runs off the loop, and the wait
        costs no thread (see :mod:`ferrolock.aio`); a task cancelled while it
        waits leaves the lock free."""
        await _ops.run(_native._AsyncLock(self).enter())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc: BaseException | None = None,
        tb: TracebackType | None = None,
    ) -> bool:
        """Same as ``__exit__``, off the loop."""
        await _ops.run(_native._AsyncLock(self).exit(exc_type is not None))
        return False


@final
class Lock(_native.Lock, _Forms):
    """A distributed lock on one Redis deployment.

    The key is ``prefix + name`` (default ``Lock:<name>``, shared with legacy PHP
    ``RedisLock``). The owner is this object, not a thread. Use it with
    ``acquire()``/``release()``, ``with``, ``async with`` or as a decorator.

    Creating one sends nothing to Redis. ttl: seconds the key lives without
    renewal (default: the core's ``DEFAULT_TTL``, 30). timeout: default wait of
    ``acquire()`` and ``with`` (``None``: forever). auto_renew: a background
    watchdog renews the TTL every ttl/3 while held. reentrant: nested acquires
    by this object count; Redis is touched on the first acquire and the last
    release. fair: waiters are served in arrival order. url: Redis URL
    (default ``$REDIS_URL`` or ``redis://127.0.0.1:6379/0``). prefix: key
    prefix (default ``Lock:``). min_replicas: after each acquire, wait
    (``WAIT``, up to 4/5 of the URL's command timeout or of the time the call
    has left) until that many replicas have it, else release at once and raise
    :class:`LockError`; while the master has fewer replicas connected, acquires
    fail at once with :class:`LockError` naming the count, writing nothing.
    legacy_interop: give legacy ``SETNX`` pollers (the hand-rolled PHP
    ``RedisLock``) a turn now and then under sustained contention (``None``,
    the default: on for the legacy prefix ``Lock:``; see ``docs/migration.md``).
    on_lost: called as ``on_lost(lock)``, once per hold, from a background
    thread, when the watchdog finds the lock lost (expired or taken while
    held, or no renewal succeeded within its TTL); keep it short (set a flag,
    cancel the work). A hold found lost by ``release()`` or ``extend()``
    raises there instead.

    A thread waiting again for a non-reentrant lock it holds gets
    :class:`LockError` (it would wait for itself); ``async with`` tasks on one
    loop are not told apart and wait.
    """

    __slots__ = ("__weakref__",)
    __module__ = "ferrolock"

    def __init__(
        self,
        name: str,
        *,
        on_lost: Callable[[Lock], object] | None = None,
        **settings: Any,
    ) -> None:
        # The settings were read by the native __new__; this only wires
        # on_lost, and starts the listener of the core's events (logs).
        if on_lost is not None:
            _events.watch_lost(self, on_lost)
        else:
            _events.start()

    # What help() and inspect show: the native constructor's settings and
    # defaults (the core's), not this __init__'s catch-all.
    try:
        __signature__ = inspect.signature(_native.Lock)
    except ValueError:  # Python 3.9 reads no signature of a native class
        pass

    @classmethod
    def from_redis(cls, client: Any, name: str, **kwargs: Any) -> Lock:
        """A lock on the Redis that the redis-py ``client`` talks to (its host,
        port, db, credentials, TLS, unix socket, Sentinel master or Cluster):
        ``Lock.from_redis(redis.Redis(db=3), "orders", ttl=10)``. ``kwargs`` are
        :class:`Lock`'s (all but ``url``). Only the client's settings are read."""
        if "url" in kwargs:
            raise TypeError("from_redis() takes the connection from the client: url must not be given")
        from ferrolock._redispy import url_of

        return cls(name, url=url_of(client), **kwargs)


@final
class Redlock(_native.Redlock, _Forms):
    """A lock over several independent Redis masters (the Redlock algorithm):
    acquired when a majority (N//2+1) granted it and the validity left,
    ``ttl - elapsed - drift``, is positive. Same methods and forms as
    :class:`Lock`.

    Each master has a tenth of the ttl (at least 50 ms) to answer each
    request, so a hung master does not hold the others up; the validity is
    checked again right before ``acquire()`` returns. ``urls`` must name
    distinct servers. A waiter is woken by the release on its masters
    (re-checking every 250 ms). auto_renew (off by default): a background
    thread of each hold extends it every ttl/3 on every master, with the same
    quorum and validity checks as ``extend()``; without it, ``extend()``
    before the ttl runs out. on_lost: called as ``on_lost(lock)``, once per
    hold, from a background thread, when the renewal (``auto_renew``) finds
    the hold lost: fewer than a majority of masters still have it (its keys
    expired or were deleted), or no renewal succeeded within its validity;
    the hold is then released everywhere. A hold found lost by
    ``release()`` or ``extend()`` raises there instead. When fewer than a
    majority of masters answer, a try-once raises :class:`ConnectionError`;
    a wait asks again (backing off up to 1 s) until its timeout, then raises
    it. A master that restarted less than one ttl ago (or that this
    process first meets less than one ttl after it started) has no vote for
    that long: while fewer than a majority may vote, a try-once or a wait that
    would end first raises :class:`LockError` saying so (docs/deployment.md).
    """

    __slots__ = ("__weakref__",)
    __module__ = "ferrolock"

    def __init__(
        self,
        name: str,
        urls: Any,
        *,
        on_lost: Callable[[Redlock], object] | None = None,
        **settings: Any,
    ) -> None:
        # As Lock.__init__: the settings were read by the native __new__.
        if on_lost is not None:
            _events.watch_lost(self, on_lost)
        else:
            _events.start()

    try:
        __signature__ = inspect.signature(_native.Redlock)
    except ValueError:  # Python 3.9 reads no signature of a native class
        pass
