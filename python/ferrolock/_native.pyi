"""Type stubs of the native module (kept in step with python/src/*.rs; checked by
``python -m mypy.stubtest ferrolock``).

The public ``ferrolock.Lock`` and ``ferrolock.Redlock`` subclass the native
``Lock`` and ``Redlock`` here (``ferrolock/_lock.py`` adds the decorator and
``async with``); ``Queue``, ``Task`` and the exceptions are used as they are.
"""

import builtins
from collections.abc import Iterable
from types import TracebackType
from typing import Final, final, overload

from typing_extensions import Self, disjoint_base

__all__ = [
    "DEFAULT_LOCK_PREFIX",
    "DEFAULT_QUEUE_PREFIX",
    "DEFAULT_TTL",
    "DEFAULT_VISIBILITY",
    "ConnectionError",
    "FerrolockError",
    "Lock",
    "LockError",
    "LockLostError",
    "LockNotOwnedError",
    "LockTimeout",
    "Queue",
    "Redlock",
    "Task",
    "_Cancel",
    "_LockBase",
    "__version__",
]

__version__: str

DEFAULT_TTL: Final = 30.0
"""The core's default lock TTL, in seconds (``ferrolock::DEFAULT_TTL``)."""
DEFAULT_LOCK_PREFIX: Final = "Lock:"
"""The core's default lock key prefix (``ferrolock::DEFAULT_LOCK_PREFIX``)."""
DEFAULT_QUEUE_PREFIX: Final = "Queue:"
"""The core's default queue key prefix (``ferrolock::DEFAULT_QUEUE_PREFIX``)."""
DEFAULT_VISIBILITY: Final = 30.0
"""The core's default visibility timeout of reserved tasks, in seconds
(``ferrolock::DEFAULT_VISIBILITY``)."""

class FerrolockError(Exception):
    """Base class of every ferrolock error."""

class LockError(FerrolockError):
    """A lock operation failed."""

class LockTimeout(LockError, TimeoutError):
    """The lock (or a legacy queue lock) was not acquired within the timeout."""

class LockNotOwnedError(LockError):
    """Release or extend of a lock this object does not hold (never acquired,
    expired, or taken over by another owner)."""

class LockLostError(LockError):
    """The lock was lost while held: it expired or was taken over inside a
    ``with`` block, or the watchdog could not renew it."""

class ConnectionError(FerrolockError, builtins.ConnectionError):
    """Redis could not be reached, did not answer in time, or refused the
    credentials."""

@final
class _Cancel:
    """Stops a wait running on a worker thread (used by ``async with``)."""
    def __new__(cls) -> _Cancel: ...
    def set(self) -> None:
        """Ask the wait to stop (it notices within 50 ms)."""

@disjoint_base
class _LockBase:
    """Methods shared by :class:`Lock` and :class:`Redlock`."""

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Acquire the lock; ``True`` when acquired, ``False`` when the wait ran out.

        ``blocking=False`` tries once. ``timeout`` (seconds): ``None`` uses the
        lock's own ``timeout``; ``None`` there too waits forever; ``0`` tries once.
        The wait releases the GIL and raises ``KeyboardInterrupt`` on Ctrl-C. A
        :class:`Lock` is woken by the holder's release within about a millisecond
        (no polling); a :class:`Redlock` too, through the masters it registered
        on, and re-checks every 250 ms in case a release missed one of them.
        """
    def release(self) -> None:
        """Release the lock. Raises :class:`LockNotOwnedError` when this object
        does not hold it (never acquired, expired, or taken over)."""
    def extend(self, ttl: float | None = None) -> None:
        """Set the remaining TTL to ``ttl`` seconds (default: the lock's ``ttl``);
        replaces, does not add. :class:`LockNotOwnedError` if not held."""
    def locked(self) -> bool:
        """``True`` when anyone holds the lock (asks Redis)."""
    def owned(self) -> bool:
        """``True`` when this object holds the lock (asks Redis)."""
    @property
    def token(self) -> str | None:
        """The random owner token of the current hold, or ``None``."""
    @property
    def fencing_token(self) -> int | None:
        """Strictly increasing per lock name across all holders; pass it to the
        storage you protect so it can reject writes of a stale holder.

        ``None`` when this object does not hold the lock. An uncontended
        acquire of a non-fair :class:`Lock` draws no token (it is a plain
        ``SET NX PX``): the first read of that hold's token draws it, in one
        blocking round trip that also checks the lock is still ours
        (:class:`LockLostError`, and :attr:`lost` set, when it is gone;
        :class:`ConnectionError` when Redis cannot be reached). Later reads of
        the hold answer the same token without asking Redis, and later
        acquires of this name in this process draw it themselves. A
        :class:`Redlock`'s token comes with its acquire."""
    @property
    def lost(self) -> bool:
        """``True`` once the lock was lost while held: the watchdog found it gone
        or could not renew it in time, an ``extend`` or a release found it taken,
        or (Redlock) its validity ran out."""
    @property
    def name(self) -> str:
        """The lock name."""
    @property
    def ttl(self) -> float:
        """The TTL in seconds."""
    @property
    def timeout(self) -> float | None:
        """Default wait of ``acquire()`` and ``with`` (``None``: forever)."""
    def __enter__(self) -> Self:
        """Acquire (waiting up to ``timeout``) or raise :class:`LockTimeout`."""
    def __exit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc: BaseException | None = None,
        tb: TracebackType | None = None,
    ) -> bool:
        """Release; raise :class:`LockLostError` if the lock was lost inside the
        block (unless another exception is already propagating)."""
    def _try_acquire_nowait(self) -> bool: ...
    def _enter_cancellable(self, cancel: _Cancel) -> None: ...

class Lock(_LockBase):
    """A distributed lock on one Redis deployment: the native half of
    ``ferrolock.Lock`` (see there)."""

    def __new__(
        cls,
        name: str,
        *,
        ttl: float = 30.0,  # DEFAULT_TTL
        timeout: float | None = None,
        auto_renew: bool = True,
        reentrant: bool = False,
        fair: bool = False,
        url: str | None = None,
        prefix: str = "Lock:",  # DEFAULT_LOCK_PREFIX
        min_replicas: int = 0,
        legacy_interop: bool | None = None,
    ) -> Self:
        """Create a lock (nothing is sent to Redis yet)."""

class Redlock(_LockBase):
    """A lock over several independent Redis masters: the native half of
    ``ferrolock.Redlock`` (see there)."""

    def __new__(
        cls,
        name: str,
        urls: Iterable[str],
        *,
        ttl: float = 30.0,  # DEFAULT_TTL
        timeout: float | None = None,
        prefix: str = "Lock:",  # DEFAULT_LOCK_PREFIX
    ) -> Self: ...

@final
class Task:
    """A task id with its score (unix time it was due)."""

    @property
    def id(self) -> str: ...
    @property
    def score(self) -> float: ...
    @property
    def receipt(self) -> str | None:
        """For reserved tasks: the claim that ``ack``/``nack`` present."""
    def ack(self) -> bool:
        """Done with the task. Reserved: remove it if still ours (``False`` when
        the visibility timeout passed and it went back to the queue). Popped:
        nothing left to do, ``True``. From ``top()``: ``dequeue(id, score)``."""
    def nack(self, delay: float = 0.0) -> bool:
        """Give the task back, due after ``delay`` seconds. Reserved: return it
        to the queue. Popped: enqueue the id again. From ``top()``: ``False``."""
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc: BaseException | None = None,
        tb: TracebackType | None = None,
    ) -> bool:
        """``ack`` on success, ``nack`` when the block raised."""

@final
class Queue:
    """A task queue: the sorted set ``prefix + name`` (default ``Queue:<name>``,
    shared with legacy PHP ``RedisQueue``), score = due time in unix seconds.

    While a legacy PHP client holds the queue lock ``Lock:Queue:<name>`` (for
    the few round trips of its operation), calls that change the queue wait
    for it: up to 10 s, or ``wait`` if that is longer, then ``LockTimeout``.
    Ctrl-C interrupts that wait too."""

    def __new__(
        cls,
        name: str,
        *,
        url: str | None = None,
        prefix: str = "Queue:",  # DEFAULT_QUEUE_PREFIX
        visibility: float = 30.0,  # DEFAULT_VISIBILITY
    ) -> Queue: ...
    def enqueue(self, ids: str | Iterable[str], *, delay: float = 0.0) -> int:
        """Add one id or many in one round trip, due ``delay`` seconds from now.
        Ids already queued keep their score. Returns how many were new."""
    @overload
    def pop(self, count: None = None, *, wait: float = 0.0) -> Task | None:
        """Take due tasks, lowest score first (ties by id), waiting up to ``wait``
        seconds for work (woken by enqueues, no polling). ``count=None``: one
        ``Task`` or ``None``; an int: a list (maybe empty)."""
    @overload
    def pop(self, count: int, *, wait: float = 0.0) -> list[Task]: ...
    @overload
    def top(self, count: None = None) -> Task | None:
        """The tasks ``pop`` would take, without taking them."""
    @overload
    def top(self, count: int) -> list[Task]: ...
    def dequeue(self, id: str, score: float) -> bool:
        """Remove ``id`` if its score is still exactly ``score``."""
    def reserve(self, *, wait: float = 0.0, visibility: float | None = None) -> Task | None:
        """Take one due task for ``visibility`` seconds (default: the queue's):
        ``ack()`` it when done; if not acked in time it returns to the queue.
        ``None`` when no task came within ``wait``; a task is a context manager
        that acks on success and nacks on error::

            if (task := queue.reserve(wait=5)) is not None:
                with task:
                    ...
        """
    def __len__(self) -> int:
        """Queued tasks, due or delayed (reserved ones excluded)."""
    @property
    def name(self) -> str: ...
