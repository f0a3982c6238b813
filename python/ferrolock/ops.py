"""Operations: what an operator sees of locks and queues, and the knobs of
what this process reports.

>>> from ferrolock.ops import Inspector
>>> ins = Inspector("redis://127.0.0.1:6379/0")   # doctest: +SKIP
>>> ins.lock("orders")["holder"]                   # doctest: +SKIP
'3f2a1b4c…'

The command line (``python -m ferrolock``, ``ferrolock``) is built on
:class:`Inspector` and :class:`ferrolock.Queue`; see docs/operations.md.
Logging: the ``ferrolock`` logger (``ferrolock.lock``, ``ferrolock.queue``,
``ferrolock.settle``), quiet until the application configures logging.
Metrics: :mod:`ferrolock.metrics` (needs ``ferrolock[prometheus]``).
"""

from __future__ import annotations

from ferrolock._native import Inspector, set_slow_acquire

__all__ = ["Inspector", "set_slow_acquire"]
