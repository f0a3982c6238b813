"""Awaiting a native call (``ferrolock._native._Op``) from a coroutine.

The native module runs each awaitable call off the event loop (see
``python/src/aio.rs``) and hands back an ``_Op`` whose ``future`` gets the
result. :func:`run` awaits it; when the awaiting task is cancelled there (by
``task.cancel()``, ``asyncio.timeout``, ``asyncio.wait_for``), it asks the
call to give back whatever it did or will do (a lock taken, tasks reserved, a
registration as a waiter) and waits until that is done before the
``CancelledError`` goes on, so a cancelled task leaves nothing held.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ferrolock import _native


async def abandon(op: _native._Op) -> None:
    """Gives back what ``op`` did or will do, and waits until it is given back
    (a second cancellation stops the waiting, not the giving back)."""
    settled = op.abandon()
    try:
        await asyncio.shield(settled)
    except asyncio.CancelledError:
        pass


async def run(op: _native._Op) -> Any:
    """The result of ``op``; on cancellation, :func:`abandon` it first."""
    try:
        return await op.future
    except asyncio.CancelledError:
        await abandon(op)
        raise
