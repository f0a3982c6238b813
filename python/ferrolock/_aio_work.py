"""The worker loop's helpers of :mod:`ferrolock.aio`: the next task or a stop,
a stop event watched, SIGTERM as a graceful stop. Apart so ``aio.py`` stays
one screenful of classes; nothing here imports ``ferrolock.aio``."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from typing import Callable

from ferrolock import _native, _ops, _queue

log = logging.getLogger("ferrolock.worker")


async def _next(worker: _native._AsyncWorker, outcome: bool,
                stopping: asyncio.Event) -> _native.Task | None:
    """The worker's next task, or ``None`` when its wait ran out or
    ``stopping`` was set meanwhile (then the wait is given up, and the task
    just handled is still ended)."""
    op = worker.next(outcome)
    stopped = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait((op.future, stopped), return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        stopped.cancel()
        await _ops.abandon(op)
        raise
    stopped.cancel()
    if op.future.done():
        got: _native.Task | None = op.future.result()
        return got
    await _ops.abandon(op)
    return None


async def _set_when(stop: asyncio.Event | _queue._Stop, stopping: asyncio.Event) -> None:
    """Sets ``stopping`` once ``stop`` is set: awaited if it is an
    ``asyncio.Event``, else (a ``threading.Event``, any ``is_set()``) looked at
    every 50 ms."""
    if isinstance(stop, asyncio.Event):
        await stop.wait()
    else:
        while not stop.is_set():
            await asyncio.sleep(0.05)
    stopping.set()


def _on_sigterm(stopping: asyncio.Event) -> Callable[[], None]:
    """SIGTERM stops the loop gracefully while :meth:`Queue.work` runs (when
    the event loop runs in the main thread and SIGTERM has no handler yet)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
        return lambda: None
    loop = asyncio.get_running_loop()

    def on_term() -> None:
        log.info("queue worker: SIGTERM: finishing the tasks at hand, then stopping")
        stopping.set()

    try:
        loop.add_signal_handler(signal.SIGTERM, on_term)
    except (NotImplementedError, RuntimeError, ValueError):
        return lambda: None

    def restore() -> None:
        loop.remove_signal_handler(signal.SIGTERM)

    return restore
