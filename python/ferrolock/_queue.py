"""The public ``Queue``: the native one plus the worker loop.

``Queue`` subclasses ``ferrolock._native.Queue``, so every queue operation is
the native method itself. This module adds only the loop of
:meth:`Queue.work`, which is Python by nature: it calls the handler, runs
handlers on threads when asked for concurrency, and turns SIGTERM/SIGINT
into a graceful stop. Each step of the loop (end the task just handled,
reserve the next, in one round trip; keep the reservation alive while the
handler runs) is the native ``_Worker``. Calls go one way: from here into
``_native``, never back.
"""

from __future__ import annotations

import inspect
import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any, Protocol, final

from ferrolock import _events, _native

__all__ = ["Queue"]

log = logging.getLogger("ferrolock.worker")


class _Stop(Protocol):
    def is_set(self) -> bool: ...


class _Stopping:
    """The loop's stop flag: set by a signal, by a failed slot, or by the
    caller's own ``stop`` object."""

    __slots__ = ("_event", "_theirs")

    def __init__(self, theirs: _Stop | None) -> None:
        self._event = threading.Event()
        self._theirs = theirs

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set() or (self._theirs is not None and bool(self._theirs.is_set()))


def _on_signals(stopping: _Stopping) -> Callable[[], None]:
    """SIGTERM and SIGINT stop the loop gracefully (a second SIGINT raises
    KeyboardInterrupt). Returns what restores the previous handlers. Only the
    main thread may set handlers: elsewhere, nothing is changed."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous: dict[int, Any] = {}

    def handler(signum: int, frame: FrameType | None) -> None:
        if stopping.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        log.info("queue worker: %s: finishing the tasks at hand, then stopping",
                 signal.Signals(signum).name)
        stopping.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        previous[sig] = signal.signal(sig, handler)

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore


@final
class Queue(_native.Queue):
    """A task queue: the sorted set ``prefix + name`` (default ``Queue:<name>``,
    shared with legacy PHP ``RedisQueue``), score = due time in unix seconds.
    Reserved tasks count attempts, back off when they fail, go to a dead set
    after ``max_attempts``, and can carry a payload (docs/queue.md).

    Creating one sends nothing to Redis. visibility: how long a reservation
    lasts without an ack or a touch (default 30 s). max_attempts: reservations
    a task gets before it goes to the dead set (default 10; ``None``:
    unlimited). backoff, backoff_cap, backoff_jitter: a failed task is due
    again after ``min(backoff_cap, backoff * 2**(attempts - 1))`` seconds, cut
    by a random fraction of up to ``backoff_jitter`` (defaults 1 s, 300 s,
    0.5). These settings travel with each reservation. min_replicas: an
    enqueue or ack returns once that many replicas confirmed it (``WAIT``);
    a master with fewer refuses at once (:class:`LockError`), writing nothing
    (default 0: don't wait). url: Redis URL
    (default ``$REDIS_URL`` or ``redis://127.0.0.1:6379/0``). prefix: key
    prefix (default ``Queue:``).

    While a legacy PHP client holds the queue lock ``Lock:Queue:<name>`` (for
    the few round trips of its operation), calls that change the queue wait
    for it: up to 10 s, or ``wait`` if that is longer, then ``LockTimeout``.
    Ctrl-C interrupts that wait too.
    """

    __slots__ = ()
    __module__ = "ferrolock"

    def __init__(self, name: str, **settings: Any) -> None:
        # The settings were read by the native __new__; this starts the
        # listener of the core's events (dead letters are logged).
        _events.start()

    # What help() and inspect show: the native constructor's settings and
    # defaults (the core's), not this __init__'s catch-all.
    try:
        __signature__ = inspect.signature(_native.Queue)
    except ValueError:  # Python 3.9 reads no signature of a native class
        pass

    def work(
        self,
        handler: Callable[[_native.Task], object],
        *,
        concurrency: int = 1,
        wait: float | None = None,
        stop: _Stop | None = None,
        visibility: float | None = None,
        heartbeat: bool = True,
    ) -> int:
        """Run ``handler(task)`` for each task, until stopped; returns how many
        tasks were handled.

        Each step is one round trip: the task just handled is acked (the
        handler returned) or nacked (it raised: the task backs off, or goes
        to the dead set at its last attempt), and the next is reserved.
        While the handler runs, the reservation is kept alive in the
        background (``heartbeat``), so a slow task is never handed out twice.

        concurrency: handlers running at once, on threads (each its own
        consumer). wait: how long to wait for work when none is due before
        returning (``None``: until stopped; ``0``: drain what is due and
        return). stop: an object with ``is_set()`` (a ``threading.Event``)
        that ends the loop. SIGTERM and SIGINT (when called from the main
        thread) stop taking tasks: the tasks at hand are finished and acked,
        then ``work`` returns; a second SIGINT raises ``KeyboardInterrupt``.
        Connection errors never end the loop: they are logged (logger
        ``ferrolock.worker``) and the step is tried again after a pause.
        """
        if not callable(handler):
            raise TypeError(f"handler must be callable, not {type(handler).__name__}")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int):
            raise TypeError(f"concurrency must be an int, not {type(concurrency).__name__}")
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        # Checks wait and visibility before anything starts.
        _native._Worker(self, wait=wait, visibility=visibility, heartbeat=heartbeat)
        stopping = _Stopping(stop)
        restore = _on_signals(stopping)
        try:
            if concurrency == 1:
                return self._slot(handler, stopping, wait, visibility, heartbeat)
            return self._slots(handler, stopping, concurrency, wait, visibility, heartbeat)
        finally:
            restore()

    def _slot(self, handler: Callable[[_native.Task], object], stopping: _Stopping,
              wait: float | None, visibility: float | None, heartbeat: bool) -> int:
        worker = _native._Worker(self, wait=wait, visibility=visibility, heartbeat=heartbeat)
        handled = 0
        outcome: bool = True
        try:
            task = None if stopping.is_set() else worker.next(True, stopping)
            while task is not None:
                try:
                    handler(task)
                    outcome = True
                except Exception:
                    log.exception("queue worker: task %r failed (attempt %d)", task.id, task.attempts)
                    outcome = False
                except BaseException:
                    outcome = False
                    raise
                handled += 1
                if stopping.is_set():
                    break
                task = worker.next(outcome, stopping)
        finally:
            # The task at hand, when the loop stopped or a BaseException flies.
            try:
                worker.finish(outcome)
            except Exception as e:
                log.warning("queue worker: could not finish the last task: %s "
                            "(it returns when its reservation runs out)", e)
        return handled

    def _slots(self, handler: Callable[[_native.Task], object], stopping: _Stopping, n: int,
               wait: float | None, visibility: float | None, heartbeat: bool) -> int:
        counts: list[int] = []
        errors: list[BaseException] = []
        lock = threading.Lock()

        def run() -> None:
            try:
                done = self._slot(handler, stopping, wait, visibility, heartbeat)
                with lock:
                    counts.append(done)
            except BaseException as e:  # re-raised by the calling thread
                with lock:
                    errors.append(e)
                stopping.set()

        threads = [threading.Thread(target=run, name=f"ferrolock-worker-{i}", daemon=True)
                   for i in range(n)]
        for t in threads:
            t.start()
        try:
            for t in threads:
                while t.is_alive():
                    t.join(0.1)  # short, so that signal handlers run
        except BaseException:
            stopping.set()
            for t in threads:
                t.join()
            raise
        if errors:
            raise errors[0]
        return sum(counts)
