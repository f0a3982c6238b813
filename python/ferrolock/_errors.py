"""Exceptions raised by ferrolock (defined in Python so they can have several bases)."""

from __future__ import annotations

import builtins

__all__ = [
    "ConnectionError",
    "FerrolockError",
    "LockError",
    "LockLostError",
    "LockNotOwnedError",
    "LockTimeout",
]


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
