"""asyncio: awaitable locks and queues, with the semantics of the sync API.

>>> from ferrolock import aio
>>> async def main():                               # doctest: +SKIP
...     async with aio.Lock("orders", timeout=5) as lock:
...         token = await lock.fencing_token()
...     queue = aio.Queue("mails")
...     await queue.enqueue(["1", "2"])
...     async for task in queue:                    # waits for work
...         async with task:                        # ack on success, nack on error
...             ...

Each class here wraps its sync counterpart (``ferrolock.Lock``,
``ferrolock.Redlock``, ``ferrolock.Queue``: same constructor, same Redis
keys, same core calls), so async users, sync threads and PHP processes share
the same locks and queues. The methods that talk to Redis are coroutines;
their round trips run on a small bounded pool of native threads, never on the
event loop, and a waiting task costs no thread: it is woken by the release or
enqueue it waits for (see ``docs/python.md``, "asyncio").

Cancellation (``task.cancel()``, ``asyncio.timeout``, ``asyncio.wait_for``) is
safe at every ``await``: a lock acquired or a task reserved by the call that
was cancelled is given back before the ``CancelledError`` goes on, and a wait
in progress leaves no registration behind. Calls that end something
(``release``, ``ack``, ``nack``) are completed even when cancelled.

Why a module of its own rather than async methods on the sync classes:
``acquire``, ``release`` and the rest cannot be both a blocking method and a
coroutine under one name, and suffixed names (``acquire_async``) would double
the API. This mirrors ``redis.asyncio`` beside ``redis``. ``async with
ferrolock.Lock(...)`` keeps working, on the same machinery.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar, Union, final, overload

from ferrolock import _lock, _native, _queue
from ferrolock._aio_work import _next, _on_sigterm, _set_when
from ferrolock._ops import run as _run

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["Lock", "Queue", "Redlock", "Task"]

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])

log = logging.getLogger("ferrolock.worker")


class _AsyncForms:
    """What :class:`Lock` and :class:`Redlock` share: awaitable methods over
    the sync lock they wrap."""

    __slots__ = ("_aio", "_lock")

    _lock: _native._LockBase
    _aio: _native._AsyncLock

    def _wrap(self, lock: _native._LockBase) -> None:
        self._lock = lock
        self._aio = _native._AsyncLock(lock)

    @property
    def sync(self) -> _native._LockBase:
        """The sync lock this one wraps: the same hold (its token, its
        fencing token), for code that runs in threads."""
        return self._lock

    async def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Acquire the lock: ``True`` when acquired, ``False`` when the wait ran
        out (``blocking=False`` or ``timeout=0``: one try; ``timeout=None``: the
        lock's own ``timeout``, ``None`` there too: forever). Woken by the
        holder's release, no polling; no thread waits for it."""
        return bool(await _run(self._aio.acquire(blocking, timeout)))

    async def release(self) -> None:
        """Release the lock (:class:`~ferrolock.LockNotOwnedError` when this
        object does not hold it). Completed even if the awaiting task is
        cancelled."""
        await _run(self._aio.release())

    async def extend(self, ttl: float | None = None) -> None:
        """Set the remaining TTL to ``ttl`` seconds (default: the lock's ``ttl``)."""
        await _run(self._aio.extend(ttl))

    async def locked(self) -> bool:
        """``True`` when anyone holds the lock."""
        return bool(await _run(self._aio.locked()))

    async def owned(self) -> bool:
        """``True`` when this object holds the lock (checked in Redis)."""
        return bool(await _run(self._aio.owned()))

    async def fencing_token(self) -> int | None:
        """The fencing token of the current hold (``None`` when not held); the
        first read of a hold may ask Redis (see ``ferrolock.Lock.fencing_token``)."""
        token: int | None = await _run(self._aio.fencing_token())
        return token

    @property
    def token(self) -> str | None:
        """The random owner token of the current hold, or ``None``."""
        return self._lock.token

    @property
    def lost(self) -> bool:
        """``True`` once the lock was lost while held."""
        return self._lock.lost

    @property
    def name(self) -> str:
        """The lock name."""
        return self._lock.name

    @property
    def ttl(self) -> float:
        """The TTL in seconds."""
        return self._lock.ttl

    @property
    def timeout(self) -> float | None:
        """Default wait of ``acquire()`` and ``async with`` (``None``: forever)."""
        return self._lock.timeout

    async def __aenter__(self) -> Self:
        """Acquire (waiting up to ``timeout``) or raise :class:`~ferrolock.LockTimeout`."""
        await _run(self._aio.enter())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc: BaseException | None = None,
        tb: TracebackType | None = None,
    ) -> bool:
        """Release; :class:`~ferrolock.LockLostError` if the lock was lost inside
        the block (unless another exception is already propagating)."""
        await _run(self._aio.exit(exc_type is not None))
        return False

    def __call__(self, func: F) -> F:
        """Decorator form for coroutine functions: each call runs holding the lock."""
        if not inspect.iscoroutinefunction(func):
            raise TypeError(
                "an asyncio lock decorates coroutine functions (async def); "
                f"got {type(func).__name__} {getattr(func, '__name__', '')!r}: "
                "use ferrolock.Lock for plain functions"
            )

        @functools.wraps(func)
        async def locked(*args: Any, **kwargs: Any) -> Any:
            async with self:
                return await func(*args, **kwargs)

        return locked  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"<ferrolock.aio.{type(self).__name__} {self._lock!r}>"


@final
class Lock(_AsyncForms):
    """An asyncio lock on one Redis deployment: ``ferrolock.Lock`` with
    awaitable methods (same arguments, same keys; see there). ``on_lost`` is
    called with the sync lock it wraps (:attr:`sync`), from a background
    thread: to act on the loop, use ``loop.call_soon_threadsafe``."""

    __slots__ = ()

    def __init__(
        self,
        name: str,
        *,
        ttl: float = _native.DEFAULT_TTL,
        timeout: float | None = None,
        auto_renew: bool = True,
        reentrant: bool = False,
        fair: bool = False,
        url: str | None = None,
        prefix: str = _native.DEFAULT_LOCK_PREFIX,
        min_replicas: int = 0,
        legacy_interop: bool | None = None,
        on_lost: Callable[[_lock.Lock], object] | None = None,
    ) -> None:
        self._wrap(_lock.Lock(
            name, ttl=ttl, timeout=timeout, auto_renew=auto_renew, reentrant=reentrant,
            fair=fair, url=url, prefix=prefix, min_replicas=min_replicas,
            legacy_interop=legacy_interop, on_lost=on_lost,
        ))

    @classmethod
    def of(cls, lock: _lock.Lock) -> Lock:
        """The asyncio face of an existing ``ferrolock.Lock`` (one hold, two faces)."""
        if not isinstance(lock, _native.Lock):
            raise TypeError(f"lock must be a ferrolock.Lock, got {type(lock).__name__}")
        self = cls.__new__(cls)
        self._wrap(lock)
        return self

    @classmethod
    def from_redis(cls, client: Any, name: str, **kwargs: Any) -> Lock:
        """A lock on the Redis a redis-py (or ``redis.asyncio``) ``client``
        talks to: see ``ferrolock.Lock.from_redis``."""
        return cls.of(_lock.Lock.from_redis(client, name, **kwargs))


@final
class Redlock(_AsyncForms):
    """An asyncio lock over several independent masters: ``ferrolock.Redlock``
    with awaitable methods. Its round trips run off the loop as the others'
    do, and a waiting ``acquire`` costs no thread (the blocking one's
    attempts, step by step); a cancelled task leaves nothing held or
    registered. ``auto_renew`` and
    ``on_lost`` as ``ferrolock.Redlock``'s (the callback gets the sync
    ``ferrolock.Redlock``, from a background thread)."""

    __slots__ = ()

    def __init__(
        self,
        name: str,
        urls: Iterable[str],
        *,
        ttl: float = _native.DEFAULT_TTL,
        timeout: float | None = None,
        prefix: str = _native.DEFAULT_LOCK_PREFIX,
        auto_renew: bool = False,
        on_lost: Callable[[_lock.Redlock], object] | None = None,
    ) -> None:
        self._wrap(_lock.Redlock(name, urls, ttl=ttl, timeout=timeout, prefix=prefix,
                                 auto_renew=auto_renew, on_lost=on_lost))


@final
class Task:
    """A task from an asyncio :class:`Queue`: ``ferrolock.Task`` with awaitable
    ``ack``, ``nack`` and ``touch``. ``async with task:`` keeps a reservation
    alive in the background while the block runs, then acks it (or nacks it,
    with backoff, when the block raised)."""

    __slots__ = ("_aio", "_task")

    def __init__(self, task: _native.Task, aio: _native._AsyncQueue) -> None:
        self._task = task
        self._aio = aio

    @property
    def sync(self) -> _native.Task:
        """The sync ``ferrolock.Task``."""
        return self._task

    @property
    def id(self) -> str:
        return self._task.id

    @property
    def score(self) -> float:
        return self._task.score

    @property
    def receipt(self) -> str | None:
        return self._task.receipt

    @property
    def deadline(self) -> float | None:
        return self._task.deadline

    @property
    def attempts(self) -> int:
        return self._task.attempts

    @property
    def payload(self) -> bytes | None:
        return self._task.payload

    async def ack(self) -> bool:
        """Done with the task (see ``ferrolock.Task.ack``)."""
        return bool(await _run(self._aio.ack(self._task)))

    async def nack(self, delay: float | None = None) -> bool:
        """Give the task back (see ``ferrolock.Task.nack``)."""
        return bool(await _run(self._aio.nack(self._task, delay)))

    async def touch(self, visibility: float | None = None) -> bool:
        """Extend the reservation (see ``ferrolock.Task.touch``)."""
        return bool(await _run(self._aio.touch(self._task, visibility)))

    async def __aenter__(self) -> Self:
        self._task.__enter__()  # starts the heartbeat: no round trip
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc: BaseException | None = None,
        tb: TracebackType | None = None,
    ) -> bool:
        if exc_type is None:
            await self.ack()
            return False
        try:
            await self.nack()
        except Exception as e:  # best effort: the reservation runs out by itself
            log.warning("could not nack task %r: %s (it returns when its reservation "
                        "runs out)", self.id, e)
        return False

    def __repr__(self) -> str:
        return repr(self._task)


_Handler = Callable[[Task], Union[Awaitable[object], object]]


@final
class Queue:
    """An asyncio task queue: ``ferrolock.Queue`` with awaitable methods (same
    arguments, same keys; see there). ``async for task in queue`` reserves
    tasks as they come (ack each, or use ``async with task``), and
    :meth:`work` runs a worker loop."""

    __slots__ = ("_aio", "_queue")

    def __init__(
        self,
        name: str,
        *,
        url: str | None = None,
        prefix: str = _native.DEFAULT_QUEUE_PREFIX,
        visibility: float = _native.DEFAULT_VISIBILITY,
        max_attempts: int | None = 10,
        backoff: float = 1.0,
        backoff_cap: float = 300.0,
        backoff_jitter: float = 0.5,
        min_replicas: int = 0,
    ) -> None:
        self._queue = _queue.Queue(
            name, url=url, prefix=prefix, visibility=visibility, max_attempts=max_attempts,
            backoff=backoff, backoff_cap=backoff_cap, backoff_jitter=backoff_jitter,
            min_replicas=min_replicas,
        )
        self._aio = _native._AsyncQueue(self._queue)

    @classmethod
    def of(cls, queue: _queue.Queue) -> Queue:
        """The asyncio face of an existing ``ferrolock.Queue``."""
        if not isinstance(queue, _native.Queue):
            raise TypeError(f"queue must be a ferrolock.Queue, got {type(queue).__name__}")
        self = cls.__new__(cls)
        self._queue = queue
        self._aio = _native._AsyncQueue(queue)
        return self

    @property
    def sync(self) -> _queue.Queue:
        """The sync ``ferrolock.Queue`` (same queue, blocking methods)."""
        return self._queue

    @property
    def name(self) -> str:
        return self._queue.name

    def _tasks(self, got: Any) -> Any:
        if got is None:
            return None
        if isinstance(got, list):
            return [Task(t, self._aio) for t in got]
        return Task(got, self._aio)

    async def enqueue(
        self, ids: str | Iterable[str] | Mapping[str, str | bytes], *, delay: float = 0.0
    ) -> int:
        """Add one id, many, or ids with payloads in one round trip (see
        ``ferrolock.Queue.enqueue``); returns how many were new."""
        return int(await _run(self._aio.enqueue(ids, delay=delay)))

    @overload
    async def pop(self, count: None = None, *, wait: float = 0.0) -> Task | None: ...
    @overload
    async def pop(self, count: int, *, wait: float = 0.0) -> list[Task]: ...
    async def pop(self, count: int | None = None, *, wait: float = 0.0) -> Task | list[Task] | None:
        """Take due tasks for good, waiting up to ``wait`` seconds for work."""
        return self._tasks(await _run(self._aio.pop(count, wait=wait)))  # type: ignore[no-any-return]

    @overload
    async def top(self, count: None = None) -> Task | None: ...
    @overload
    async def top(self, count: int) -> list[Task]: ...
    async def top(self, count: int | None = None) -> Task | list[Task] | None:
        """The tasks ``pop`` would take, left in place."""
        return self._tasks(await _run(self._aio.top(count)))  # type: ignore[no-any-return]

    async def dequeue(self, id: str, score: float) -> bool:
        """Remove ``id`` if its score is still exactly ``score``."""
        return bool(await _run(self._aio.dequeue(id, score)))

    @overload
    async def reserve(
        self, count: None = None, *, wait: float = 0.0, visibility: float | None = None
    ) -> Task | None: ...
    @overload
    async def reserve(
        self, count: int, *, wait: float = 0.0, visibility: float | None = None
    ) -> list[Task]: ...
    async def reserve(
        self, count: int | None = None, *, wait: float = 0.0, visibility: float | None = None
    ) -> Task | list[Task] | None:
        """Reserve due tasks (one, or a list of up to ``count`` in one round
        trip), waiting up to ``wait`` seconds for work (woken by enqueues, no
        polling, no thread); ack each when done (see ``ferrolock.Queue.reserve``)."""
        got = await _run(self._aio.reserve(count, wait=wait, visibility=visibility))
        return self._tasks(got)  # type: ignore[no-any-return]

    async def dead(self, count: int = 100, *, offset: int = 0) -> list[Task]:
        """Up to ``count`` dead tasks from ``offset`` on, the oldest death first
        (``score``: when it died; ``attempts`` and ``payload`` kept): see
        ``ferrolock.Queue.dead``."""
        return self._tasks(await _run(self._aio.dead(count, offset=offset)))  # type: ignore[no-any-return]

    async def retry_dead(self, ids: str | Iterable[str] | None = None) -> int:
        """Put dead tasks back into the queue, due now, attempts reset, payloads
        kept: those of ``ids`` that are dead, or all (``None``). Returns how
        many. Once sent it finishes, even if the awaiting task is cancelled."""
        return int(await _run(self._aio.retry_dead(ids)))

    async def purge_dead(self, ids: str | Iterable[str] | None = None) -> int:
        """Delete dead tasks and their payloads: those of ``ids`` that are dead,
        or all (``None``). Returns how many (finishes as :meth:`retry_dead`)."""
        return int(await _run(self._aio.purge_dead(ids)))

    async def len(self) -> int:
        """Queued tasks, due or delayed (``len(queue)`` of the sync queue)."""
        return int(await _run(self._aio.len()))

    async def stats(self) -> _native._QueueStats:
        """Due, delayed, in-flight and dead counts (see ``ferrolock.Queue.stats``)."""
        stats: _native._QueueStats = await _run(self._aio.stats())
        return stats

    async def tasks(
        self, *, wait: float | None = None, visibility: float | None = None
    ) -> AsyncIterator[Task]:
        """Reserved tasks, one at a time, as they come; stops when none came
        within ``wait`` seconds (``None``: never). Ack each (or ``async with
        task:``): one left unacked comes back after its visibility."""
        while True:
            got = await _run(self._aio.reserve_next(wait, visibility))
            if got is None:
                return
            yield Task(got, self._aio)

    def __aiter__(self) -> AsyncIterator[Task]:
        """``async for task in queue``: :meth:`tasks` waiting forever."""
        return self.tasks()

    async def work(
        self,
        handler: _Handler,
        *,
        concurrency: int = 1,
        wait: float | None = None,
        stop: asyncio.Event | _queue._Stop | None = None,
        visibility: float | None = None,
        heartbeat: bool = True,
    ) -> int:
        """Run ``handler(task)`` (a coroutine function, or a plain function
        run on the loop) for each task until stopped; returns how many tasks
        were handled. The semantics of ``ferrolock.Queue.work``: each step is
        one round trip that acks (the handler returned) or nacks (it raised)
        the task just handled and reserves the next; the reservation is kept
        alive while the handler runs; connection trouble is logged (logger
        ``ferrolock.worker``) and ridden out.

        concurrency: handlers running at once (each its own consumer, all on
        this loop). wait: how long to wait for work before returning
        (``None``: until stopped; ``0``: drain what is due). stop: an
        ``asyncio.Event`` (or, looked at every 50 ms, any object with
        ``is_set()``, such as a ``threading.Event``) that ends the loop: the tasks at hand are finished
        and acked, waits are given up. SIGTERM does the same when the loop
        runs in the main thread. Cancelling the task running ``work`` stops it
        too: a task being handled is nacked, a task being waited for is given
        back.
        """
        if not callable(handler):
            raise TypeError(f"handler must be callable, not {type(handler).__name__}")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int):
            raise TypeError(f"concurrency must be an int, not {type(concurrency).__name__}")
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        # Checks wait and visibility before anything starts.
        _native._AsyncWorker(self._queue, wait=wait, visibility=visibility, heartbeat=heartbeat)
        stopping = asyncio.Event()
        watchers: list[asyncio.Future[Any]] = []
        if stop is not None:
            watchers.append(asyncio.ensure_future(_set_when(stop, stopping)))
        restore = _on_sigterm(stopping)
        slots = [asyncio.ensure_future(
            self._slot(handler, stopping, wait, visibility, heartbeat))
            for _ in range(concurrency)]
        try:
            counts = await asyncio.gather(*slots)
        except BaseException:
            stopping.set()
            for s in slots:
                s.cancel()
            await asyncio.gather(*slots, return_exceptions=True)
            raise
        finally:
            restore()
            for w in watchers:
                w.cancel()
        return sum(counts)

    async def _slot(self, handler: _Handler, stopping: asyncio.Event, wait: float | None,
                    visibility: float | None, heartbeat: bool) -> int:
        worker = _native._AsyncWorker(self._queue, wait=wait, visibility=visibility,
                                      heartbeat=heartbeat)
        handled = 0
        outcome = True
        try:
            while not stopping.is_set():
                got = await _next(worker, outcome, stopping)
                if got is None:
                    break
                task = Task(got, self._aio)
                try:
                    result = handler(task)
                    if inspect.isawaitable(result):
                        await result
                    outcome = True
                except Exception:
                    log.exception("queue worker: task %r failed (attempt %d)", task.id,
                                  task.attempts)
                    outcome = False
                except BaseException:
                    outcome = False
                    raise
                handled += 1
        finally:
            # The task at hand, when the loop stopped or a BaseException flies.
            op = worker.finish(outcome)
            try:
                await _run(op)
            except asyncio.CancelledError:
                pass  # finished all the same (a finish is never abandoned)
            except Exception as e:
                log.warning("queue worker: could not finish the last task: %s "
                            "(it returns when its reservation runs out)", e)
        return handled
