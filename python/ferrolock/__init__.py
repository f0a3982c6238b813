"""ferrolock: distributed locks and a task queue on Redis, shared with PHP.

>>> from ferrolock import Lock
>>> with Lock("orders"):          # doctest: +SKIP
...     ...

Connection: the ``url`` argument, else ``$REDIS_URL``, else
``redis://127.0.0.1:6379/0``.

Logging goes to the ``ferrolock`` logger, quiet unless the application
configures logging. Operators' tools: ``python -m ferrolock`` (the
``ferrolock`` command), :mod:`ferrolock.ops`, :mod:`ferrolock.metrics`.
"""

import logging as _logging

from ferrolock import _green  # noqa: F401  (waits under gevent/eventlet yield to the hub)
from ferrolock._lock import Lock, Redlock
from ferrolock._native import (
    ConnectionError,
    FerrolockError,
    LockError,
    LockLostError,
    LockNotOwnedError,
    LockTimeout,
    Task,
    __version__,
)
from ferrolock._queue import Queue

__all__ = [
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
    "__version__",
]

# A library logs, the application decides where to: quiet by default.
_logging.getLogger("ferrolock").addHandler(_logging.NullHandler())
