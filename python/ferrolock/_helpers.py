"""Pure-Python glue of the native classes: the decorator form and asyncio support.

The native code does every Redis operation; this module only schedules the
blocking wait of ``async with`` on a worker thread so the event loop never
blocks, and cleans up when the waiting task is cancelled.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def _wait_executor() -> ThreadPoolExecutor:
    """Threads that wait for locks on behalf of coroutines (one per waiting task)."""
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=256, thread_name_prefix="ferrolock-wait")
        return _executor


def _forget_executor_in_child() -> None:
    # A forked child inherits no threads: start a fresh pool on first use.
    global _executor, _executor_lock
    _executor = None
    _executor_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_executor_in_child)


def decorate(lock: Any, func: F) -> F:
    """``@Lock("x")``: run each call of ``func`` while holding ``lock``."""
    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def async_locked(*args: Any, **kwargs: Any) -> Any:
            async with lock:
                return await func(*args, **kwargs)

        return async_locked  # type: ignore[return-value]

    @functools.wraps(func)
    def locked(*args: Any, **kwargs: Any) -> Any:
        with lock:
            return func(*args, **kwargs)

    return locked  # type: ignore[return-value]


def _release_quietly(lock: Any, future: asyncio.Future[None]) -> None:
    if future.cancelled() or future.exception() is not None:
        return  # the wait stopped without the lock
    try:
        lock.release()
    except Exception:
        pass


async def aenter(lock: Any) -> Any:
    """``async with lock``: acquire without blocking the event loop."""
    if lock._try_acquire_nowait():  # one round trip, the common uncontended case
        return lock
    from ferrolock._native import _Cancel

    cancel = _Cancel()
    loop = asyncio.get_running_loop()
    future = loop.run_in_executor(_wait_executor(), lock._enter_cancellable, cancel)
    try:
        await asyncio.shield(future)
    except asyncio.CancelledError:
        # Stop the waiting thread; if it got the lock anyway, give it back.
        cancel.set()
        future.add_done_callback(functools.partial(_release_quietly, lock))
        raise
    return lock


async def aexit(lock: Any, exc_type: Any, exc: Any, tb: Any) -> bool:
    """``async with`` exit: same semantics as ``__exit__`` (one round trip)."""
    return bool(lock.__exit__(exc_type, exc, tb))
