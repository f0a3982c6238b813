"""Type stubs of the native module (kept in step with python/src/*.rs; checked by
``python -m mypy.stubtest ferrolock``).

The public ``ferrolock.Lock`` and ``ferrolock.Redlock`` subclass the native
``Lock`` and ``Redlock`` here (``ferrolock/_lock.py`` adds the decorator and
``async with``); ``Queue``, ``Task`` and the exceptions are used as they are.
"""

import asyncio
import builtins
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, Final, Protocol, TypedDict, final, overload

from typing_extensions import Self, disjoint_base

__all__ = [
    "DEFAULT_LOCK_PREFIX",
    "DEFAULT_QUEUE_PREFIX",
    "DEFAULT_TTL",
    "DEFAULT_VISIBILITY",
    "ConnectionError",
    "FerrolockError",
    "Inspector",
    "Lock",
    "LockError",
    "LockLostError",
    "LockNotOwnedError",
    "LockTimeout",
    "Queue",
    "Redlock",
    "Task",
    "_AsyncLock",
    "_AsyncQueue",
    "_AsyncWorker",
    "_Bridge",
    "_LockBase",
    "_Op",
    "_Worker",
    "__version__",
    "_aio_stats",
    "_caller_id",
    "_enable_events",
    "_metrics",
    "_set_green_hook",
    "_wait_events",
    "_wake_events",
    "set_slow_acquire",
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

def _set_green_hook(hook: Callable[[], Callable[[int], object] | None]) -> None:
    """Registers the package's gevent/eventlet hook (``ferrolock/_green.py``):
    called when ``threading`` is patched, it answers how the current greenlet
    waits for a file descriptor, or ``None`` when it must not yield."""

def _caller_id() -> int:
    """``threading.get_ident()`` as it is now: the OS thread's id, or under
    gevent/eventlet the current greenlet's."""

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

        Ends within ``timeout`` plus one command timeout (the URL's
        ``timeout``), whatever Redis does; a try-once within one command
        timeout. A wait rides out connection errors (Redis restarting, a
        failover) until its deadline, then raises :class:`ConnectionError`
        saying for how long it tried. When a reply is lost and the call gives
        up, the hold it may have taken is undone once Redis answers again:
        no lock is left held under a token nobody has.

        A thread that already holds this (non-reentrant) :class:`Lock` gets
        :class:`LockError` instead of waiting for itself (a try-once answers
        ``False``); other threads sharing the object wait as usual.
        """
    def release(self) -> None:
        """Release the lock. Raises :class:`LockNotOwnedError` when this object
        does not hold it (never acquired, expired, taken over, or lost in a
        failover: the message says when the master changed).

        Renewal stops first, whatever happens next. When Redis does not
        answer within one command timeout, this object no longer holds the
        lock (a new ``acquire()`` works at once), the release is completed in
        the background once Redis answers (the key expires by its TTL at the
        latest), and :class:`ConnectionError` says so."""
    def extend(self, ttl: float | None = None) -> None:
        """Set the remaining TTL to ``ttl`` seconds (default: the lock's ``ttl``);
        replaces, does not add. :class:`LockNotOwnedError` if not held. A try
        whose reply is lost is sent again within one command timeout."""
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

@disjoint_base
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
        on_lost: Callable[[Lock], object] | None = None,
    ) -> Self:
        """Create a lock (nothing is sent to Redis yet). ``on_lost`` is checked
        here and wired by ``ferrolock.Lock.__init__``."""
    @property
    def _id(self) -> int:
        """This object's id in the core's events (``ferrolock/_events.py``)."""
    def _acquire_with_token(
        self, token: str | bytes, blocking: bool = True, timeout: float | None = None
    ) -> bool:
        """``acquire`` with the caller's owner token (UTF-8) instead of a random
        one (``ferrolock.redis.Lock.acquire(token=...)``)."""
    def _remaining(self) -> float | None:
        """Remaining TTL of the key in seconds, whoever holds it (``None``: not
        held, or no TTL)."""

@disjoint_base
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
        auto_renew: bool = False,
        on_lost: Callable[[Redlock], object] | None = None,
    ) -> Self:
        """Create a Redlock (nothing is sent yet). ``auto_renew``: a thread of
        each hold extends it every ttl/3 on every master. ``on_lost`` is checked
        here and wired by ``ferrolock.Redlock.__init__``."""
    @property
    def _id(self) -> int:
        """This object's id in the core's events (``ferrolock/_events.py``)."""

@final
class Task:
    """A task id with its score (unix time it was due), and for a reserved
    task its receipt, attempts and deadline. A reserved task is a context
    manager: ``with task:`` keeps the reservation alive in the background
    until the block ends, then acks (or nacks when the block raised)."""

    @property
    def id(self) -> str: ...
    @property
    def score(self) -> float:
        """When it was due (unix s); for a task from ``dead()``, when it died."""
    @property
    def receipt(self) -> str | None:
        """For reserved tasks: the claim that ``ack``/``nack``/``touch``
        present (it names the task: another task's receipt is refused)."""
    @property
    def deadline(self) -> float | None:
        """For reserved tasks: unix time at which the reservation runs out
        (as of the reserve; ``touch`` moves it)."""
    @property
    def attempts(self) -> int:
        """How many times it has been reserved, this reservation included
        (popped, listed and dead tasks: the reservations they had)."""
    @property
    def payload(self) -> bytes | None:
        """The data enqueued with it (a ``str`` payload comes back UTF-8
        encoded), or ``None``."""
    def ack(self) -> bool:
        """Done with the task. Reserved: remove it if still ours (``False`` when
        the visibility timeout passed and it went back to the queue); an id
        enqueued again while in flight is queued now. Popped: nothing left to
        do, ``True``. From ``top()``: ``dequeue(id, score)``. Dead: ``False``
        (see ``Queue.retry_dead``/``purge_dead``)."""
    def nack(self, delay: float | None = None) -> bool:
        """Give the task back. Reserved: due again after ``delay`` seconds, or
        after its backoff when ``None``; at its last attempt it goes to the dead
        set instead (``True`` either way; ``False`` when the reservation was
        lost). Popped: enqueue the id again (``delay`` default 0). From
        ``top()`` or ``dead()``: ``False``."""
    def touch(self, visibility: float | None = None) -> bool:
        """Extend the reservation: it now runs out ``visibility`` seconds from
        now (default: the visibility it was reserved with). ``False`` when it
        is no longer ours (or the task was not reserved)."""
    def __enter__(self) -> Self:
        """Reserved: keep the reservation alive in the background (a touch
        every third of its visibility) until the block ends."""
    def __exit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc: BaseException | None = None,
        tb: TracebackType | None = None,
    ) -> bool:
        """Stop the heartbeat; ``ack`` on success, ``nack()`` (backoff) when the
        block raised."""

class _QueueStats(TypedDict):
    """What ``Queue.stats()`` answers."""

    due: int
    """Queued tasks due now."""
    delayed: int
    """Queued tasks due later."""
    in_flight: int
    """Reservations not yet acked (expired ones included until the next take)."""
    dead: int
    """Tasks in the dead set."""
    oldest_due_age: float
    """Seconds the oldest due task has been due (0.0 when none is)."""

@disjoint_base
class Queue:
    """A task queue: the native half of ``ferrolock.Queue`` (see there)."""

    def __new__(
        cls,
        name: str,
        *,
        url: str | None = None,
        prefix: str = "Queue:",  # DEFAULT_QUEUE_PREFIX
        visibility: float = 30.0,  # DEFAULT_VISIBILITY
        max_attempts: int | None = 10,  # DEFAULT_MAX_ATTEMPTS
        backoff: float = 1.0,  # DEFAULT_BACKOFF
        backoff_cap: float = 300.0,  # DEFAULT_BACKOFF_CAP
        backoff_jitter: float = 0.5,  # DEFAULT_BACKOFF_JITTER
        min_replicas: int = 0,
    ) -> Self: ...
    def enqueue(
        self, ids: str | Iterable[str] | Mapping[str, str | bytes], *, delay: float = 0.0
    ) -> int:
        """Add one id or many in one round trip, due ``delay`` seconds from now.
        Ids already queued keep their score. A mapping gives each id a payload
        (``str`` or ``bytes``), which replaces the one it had; ids without
        payloads keep theirs. An id in flight is not handed to a second
        consumer: it is queued again when its reservation ends (after an ack,
        as a new task). Returns how many were new (such an id counts)."""
    @overload
    def pop(self, count: None = None, *, wait: float = 0.0) -> Task | None:
        """Take due tasks, lowest score first (ties by id), waiting up to ``wait``
        seconds for work (woken by enqueues, no polling). ``count=None``: one
        ``Task`` or ``None``; an int: a list (maybe empty). Popped tasks are
        gone from the queue, payloads included."""
    @overload
    def pop(self, count: int, *, wait: float = 0.0) -> list[Task]: ...
    @overload
    def top(self, count: None = None) -> Task | None:
        """The tasks ``pop`` would take, without taking them."""
    @overload
    def top(self, count: int) -> list[Task]: ...
    def dequeue(self, id: str, score: float) -> bool:
        """Remove ``id`` (and its payload) if its score is still exactly ``score``."""
    @overload
    def reserve(
        self, count: None = None, *, wait: float = 0.0, visibility: float | None = None
    ) -> Task | None:
        """Take due tasks for ``visibility`` seconds (default: the queue's):
        ``ack()`` each when done; one not acked in time returns to the queue
        after its backoff. Each reserve counts an attempt. ``count=None``: one
        ``Task`` or ``None`` when none came within ``wait``; an int: a list of
        up to that many (one round trip). A task is a context manager that
        keeps the reservation alive, acks on success and nacks on error::

            if (task := queue.reserve(wait=5)) is not None:
                with task:
                    ...
        """
    @overload
    def reserve(
        self, count: int, *, wait: float = 0.0, visibility: float | None = None
    ) -> list[Task]: ...
    def dead(self, count: int = 100, *, offset: int = 0) -> list[Task]:
        """Up to ``count`` dead tasks from ``offset`` on, the oldest death first
        (``score``: when it died; ``attempts`` and ``payload`` kept)."""
    def retry_dead(self, ids: str | Iterable[str] | None = None) -> int:
        """Put dead tasks back into the queue, due now, attempts reset, payloads
        kept: those of ``ids`` that are dead, or all (``None``), a thousand per
        round trip. Returns how many."""
    def purge_dead(self, ids: str | Iterable[str] | None = None) -> int:
        """Delete dead tasks and their payloads: those of ``ids`` that are dead,
        or all (``None``). Returns how many."""
    def stats(self) -> _QueueStats:
        """Due, delayed, in-flight and dead counts, and the age of the oldest due
        task: one round trip, never a scan."""
    def __len__(self) -> int:
        """Queued tasks, due or delayed (reserved ones excluded)."""
    @property
    def name(self) -> str: ...

@final
class _Worker:
    """One consumer of ``Queue.work``: each ``next`` ends the task handed out
    last and reserves the next in one round trip, keeping it alive while it
    is handled; connection trouble is logged and ridden out."""

    def __new__(
        cls,
        queue: Queue,
        *,
        wait: float | None = None,
        visibility: float | None = None,
        heartbeat: bool = True,
    ) -> _Worker: ...
    def next(self, outcome: bool | float, stop: _IsSet) -> Task | None:
        """End the current task (``True``: ack; ``False``: nack, backoff; a
        number: nack, due after that many seconds) and reserve the next.
        ``None`` when ``wait`` ran out, or ``stop.is_set()`` turned true."""
    def finish(self, outcome: bool | float) -> None:
        """End the current task, taking no other (one try)."""

class _IsSet(Protocol):
    def is_set(self) -> bool: ...

class _LockWaiter(TypedDict):
    id: str
    """The waiter's id, shortened."""
    token: str
    """The owner token it asks to hold the lock with, shortened."""
    ttl: float | None
    """The TTL it asks for (seconds)."""
    waited: float
    """How long it has been waiting (seconds)."""
    lease: float | None
    """Time left on its lease (seconds); ``None``: run out (a waiter that
    stopped, dropped at the next hand-over)."""

class _LockInfo(TypedDict):
    name: str
    key: str
    holder: str | None
    """The holder's owner token, shortened (``3f2a1b4c…``); ``None``: not held."""
    ttl: float | None
    """Remaining TTL (seconds); ``None`` when not held or without expiry."""
    expires: bool
    """``False`` for a hold without expiry (a legacy client's orphan)."""
    fence: int | None
    """The last fencing token issued for the name."""
    waiting: int
    """Waiters registered."""
    waiters: list[_LockWaiter]
    """The first of them, in the order they are served."""

class _LockListing(TypedDict):
    items: list[_LockInfo]
    complete: bool
    """``False`` when the limit cut the listing short."""

class _QueueInfo(TypedDict):
    name: str
    key: str
    due: int
    delayed: int
    in_flight: int
    dead: int
    oldest_due_age: float

class _QueueListing(TypedDict):
    items: list[_QueueInfo]
    complete: bool

class _InFlight(TypedDict):
    id: str
    deadline: float
    """Visibility deadline (unix s)."""
    left: float
    """Seconds until the deadline (negative: overdue)."""
    attempt: int | None
    max_attempts: int | None
    """``None``: unlimited (or not recorded)."""
    visibility: float | None

class _InFlightPage(TypedDict):
    total: int
    items: list[_InFlight]

@final
class Inspector:
    """What an operator sees of locks and queues on one deployment, and the
    forced release (``ferrolock.ops.Inspector``). Every read is bounded: a
    ``SCAN`` of every master (never ``KEYS``), pages of at most 1000."""

    def __new__(
        cls,
        url: str | None = None,
        *,
        lock_prefix: str = "Lock:",  # DEFAULT_LOCK_PREFIX
        queue_prefix: str = "Queue:",  # DEFAULT_QUEUE_PREFIX
    ) -> Inspector: ...
    def lock(self, name: str, *, waiters: int = 10) -> _LockInfo:
        """One lock as it is now, with its first ``waiters`` waiters: one round trip."""
    def locks(self, prefix: str | None = None, *, limit: int = 100) -> _LockListing:
        """The locks held whose names start with ``prefix``, at most ``limit``,
        by name (waiters counted, not listed)."""
    def locks_named(self, names: Iterable[str]) -> list[_LockInfo]:
        """The locks ``names``, held or not, in that order: one pipelined round trip."""
    def force_release(self, name: str) -> str | None:
        """Free the lock whoever holds it (an operator's action, logged): it goes
        to the next waiter as on any release; the holder's next release or
        extend fails, and its watchdog reports it lost. Returns the shortened
        token of the hold it ended, ``None`` when it was free."""
    def queues(self, prefix: str | None = None, *, limit: int = 100) -> _QueueListing:
        """The queues whose names start with ``prefix``, at most ``limit``, by
        name, with their counts (queues whose tasks are all in flight or dead
        included)."""
    def queues_named(self, names: Iterable[str]) -> list[_QueueInfo]:
        """The counts of the queues ``names``: one pipelined round trip."""
    def queue(self, name: str) -> _QueueInfo:
        """One queue's counts: one round trip."""
    def in_flight(self, name: str, *, offset: int = 0, count: int = 100) -> _InFlightPage:
        """A page of the queue's reservations, earliest deadline first."""

def set_slow_acquire(seconds: float | None) -> None:
    """Log (``ferrolock.lock``, WARNING) acquires that waited longer than
    ``seconds`` (default 1.0); ``None`` turns it off."""

def _enable_events(on: bool) -> None:
    """Start (or stop) keeping this process's events for ``_wait_events``."""

def _wait_events(timeout: float) -> list[tuple[str, str, str, str, int, float, float]]:
    """Wait up to ``timeout`` s (GIL released) for events:
    ``(kind, level, message, name, lock_id, seconds, at)`` each."""

def _wake_events() -> None:
    """End a ``_wait_events`` under way."""

class _Histogram(TypedDict):
    cumulative: list[int]
    count: int
    sum: float

class _Metrics(TypedDict):
    buckets: list[float]
    lock_wait: _Histogram
    lock_hold: _Histogram
    acquires_missed: int
    locks_lost: int
    forced_releases: int
    dead_lettered: int
    settlements_pending: int
    events_dropped: int

def _metrics() -> _Metrics:
    """This process's lock figures (``ferrolock.metrics``)."""

# -- asyncio (python/src/aio.rs; the public API is ferrolock.aio) -------------------------

class _AioStats(TypedDict):
    """What ``_aio_stats()`` answers."""

    threads: int
    """Executor threads now."""
    threads_peak: int
    """Most executor threads at once so far."""
    max_threads: int
    """The executor's bound (``$FERROLOCK_AIO_THREADS``, default 8)."""
    jobs: int
    """Round-trip jobs run so far."""
    timers: int
    """Pending timer entries (re-checks and deadlines of waits)."""

def _aio_stats() -> _AioStats:
    """Threads and timers of the asyncio executor (for tests and benchmarks)."""

@final
class _Op:
    """An awaitable core call running off the event loop."""

    @property
    def future(self) -> asyncio.Future[Any]:
        """The future of the call's result, on the loop that started it."""
    def abandon(self) -> asyncio.Future[None]:
        """The awaiting task was cancelled: give back what the call did or will
        do; the returned future is done once that is done."""

@final
class _Bridge:
    """Where finished calls wait for their event loop (one per loop)."""

    def _drain(self) -> None:
        """Set the futures of every finished call (the loop's reader callback)."""

@final
class _AsyncLock:
    """The awaitable face of a lock (``ferrolock.aio.Lock`` calls it)."""

    def __new__(cls, lock: _LockBase) -> _AsyncLock: ...
    def acquire(self, blocking: bool = True, timeout: float | None = None) -> _Op: ...
    def enter(self) -> _Op:
        """``async with``'s entry: the lock's timeout, ``LockTimeout`` if not acquired."""
    def release(self) -> _Op: ...
    def exit(self, propagating: bool) -> _Op:
        """``async with``'s exit: ``__exit__``'s rules."""
    def extend(self, ttl: float | None = None) -> _Op: ...
    def locked(self) -> _Op: ...
    def owned(self) -> _Op: ...
    def fencing_token(self) -> _Op: ...

@final
class _AsyncQueue:
    """The awaitable face of a queue (``ferrolock.aio.Queue`` calls it)."""

    def __new__(cls, queue: Queue) -> _AsyncQueue: ...
    def enqueue(
        self, ids: str | Iterable[str] | Mapping[str, str | bytes], *, delay: float = 0.0
    ) -> _Op: ...
    def pop(self, count: int | None = None, *, wait: float = 0.0) -> _Op: ...
    def top(self, count: int | None = None) -> _Op: ...
    def dequeue(self, id: str, score: float) -> _Op: ...
    def reserve(
        self, count: int | None = None, *, wait: float = 0.0, visibility: float | None = None
    ) -> _Op: ...
    def reserve_next(self, wait: float | None = None, visibility: float | None = None) -> _Op:
        """``reserve()`` of one task, waiting forever when ``wait`` is None."""
    def ack(self, task: Task) -> _Op: ...
    def nack(self, task: Task, delay: float | None = None) -> _Op: ...
    def touch(self, task: Task, visibility: float | None = None) -> _Op: ...
    def dead(self, count: int = 100, *, offset: int = 0) -> _Op: ...
    def retry_dead(self, ids: str | Iterable[str] | None = None) -> _Op: ...
    def purge_dead(self, ids: str | Iterable[str] | None = None) -> _Op: ...
    def len(self) -> _Op: ...
    def stats(self) -> _Op: ...

@final
class _AsyncWorker:
    """One consumer of ``ferrolock.aio.Queue.work``: ``_Worker`` with awaitable steps."""

    def __new__(
        cls,
        queue: Queue,
        *,
        wait: float | None = None,
        visibility: float | None = None,
        heartbeat: bool = True,
    ) -> _AsyncWorker: ...
    def next(self, outcome: bool | float) -> _Op:
        """End the current task as ``outcome`` says and reserve the next (a
        ``Task``, or ``None`` when the wait ran out)."""
    def finish(self, outcome: bool | float) -> _Op:
        """End the current task, taking no other (one try)."""
