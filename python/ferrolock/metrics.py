"""Prometheus metrics: queue figures read from Redis at each scrape, and this
process's lock figures (``pip install ferrolock[prometheus]``).

>>> from prometheus_client import start_http_server        # doctest: +SKIP
>>> from ferrolock.metrics import register
>>> register(queues=["mails", "reports"])                   # doctest: +SKIP
>>> start_http_server(9100)                                 # doctest: +SKIP

Queues (those the application registers; each scrape reads each in one
round trip, O(log n), no scan)::

    ferrolock_queue_due{queue}                   tasks due now
    ferrolock_queue_delayed{queue}               tasks due later
    ferrolock_queue_in_flight{queue}             reservations not yet acked
    ferrolock_queue_dead{queue}                  tasks in the dead set
    ferrolock_queue_oldest_due_age_seconds{queue}  how long the oldest due task waits
    ferrolock_queue_up{queue}                    1 when its figures could be read, else 0

This process (counted in the core as they happen; a forked child starts at 0)::

    ferrolock_lock_wait_seconds                  histogram: acquire calls that got the lock
    ferrolock_lock_hold_seconds                  histogram: acquire to release
    ferrolock_lock_acquires_missed_total         acquires that gave up (timeout, busy try-once)
    ferrolock_locks_lost_total                   holds found lost (watchdog, release, extend)
    ferrolock_lock_forced_releases_total         locks freed by force from this process
    ferrolock_queue_dead_lettered_total          tasks this process's nacks sent to the dead set
    ferrolock_settlements_pending                lost replies not yet put right

Lock figures are per process, not per lock name: names are unbounded, and
a label per name would be too.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Union

if importlib.util.find_spec("prometheus_client") is None:  # pragma: no cover - depends on the environment
    raise ImportError("ferrolock.metrics needs prometheus_client: pip install 'ferrolock[prometheus]'")

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import REGISTRY

import ferrolock
from ferrolock import _native

__all__ = ["FerrolockCollector", "register"]

log = logging.getLogger("ferrolock.metrics")

QueueLike = Union[str, ferrolock.Queue]


class FerrolockCollector:
    """A custom collector (``registry.register(collector)``): the figures of
    the registered ``queues`` (names, read with ``url`` and ``prefix``, or
    :class:`ferrolock.Queue` objects) and of this process's locks."""

    def __init__(self, queues: Iterable[QueueLike] = (), *, url: str | None = None,
                 prefix: str = _native.DEFAULT_QUEUE_PREFIX) -> None:
        self._url = url
        self._prefix = prefix
        self._queues: dict[str, ferrolock.Queue] = {}
        self._lock = threading.Lock()
        for q in queues:
            self.add_queue(q)

    def add_queue(self, queue: QueueLike) -> None:
        """Adds a queue to report (a name, or a :class:`ferrolock.Queue`)."""
        if isinstance(queue, str):
            queue = ferrolock.Queue(queue, url=self._url, prefix=self._prefix)
        elif not isinstance(queue, _native.Queue):
            raise TypeError(f"queue must be a str or a ferrolock.Queue, not {type(queue).__name__}")
        with self._lock:
            self._queues[queue.name] = queue

    def remove_queue(self, name: str) -> None:
        """Stops reporting the queue ``name``."""
        with self._lock:
            self._queues.pop(name, None)

    def describe(self) -> list[Any]:
        # No round trip when the collector is registered (see collect()).
        return []

    def collect(self) -> Iterator[Any]:
        yield from self._queue_metrics()
        yield from self._process_metrics()

    def _queue_metrics(self) -> Iterator[Any]:
        labels = ["queue"]
        families = {
            "due": GaugeMetricFamily("ferrolock_queue_due", "Tasks due now.", labels=labels),
            "delayed": GaugeMetricFamily("ferrolock_queue_delayed", "Tasks due later.", labels=labels),
            "in_flight": GaugeMetricFamily("ferrolock_queue_in_flight",
                                           "Reservations not yet acked.", labels=labels),
            "dead": GaugeMetricFamily("ferrolock_queue_dead", "Tasks in the dead set.", labels=labels),
            "oldest_due_age": GaugeMetricFamily("ferrolock_queue_oldest_due_age_seconds",
                                                "How long the oldest due task has been due.", labels=labels),
        }
        up = GaugeMetricFamily("ferrolock_queue_up", "1 when the queue's figures could be read.", labels=labels)
        with self._lock:
            queues = list(self._queues.items())
        for name, queue in queues:
            try:
                stats: Mapping[str, Any] = queue.stats()
            except ferrolock.FerrolockError as e:
                log.warning("metrics: queue %r: %s", name, e)
                up.add_metric([name], 0)
                continue
            up.add_metric([name], 1)
            for key, family in families.items():
                family.add_metric([name], stats[key])
        yield from families.values()
        yield up

    def _process_metrics(self) -> Iterator[Any]:
        m: Mapping[str, Any] = _native._metrics()
        bounds = [*(format(b, "g") for b in m["buckets"]), "+Inf"]
        for key, name, doc in (
            ("lock_wait", "ferrolock_lock_wait_seconds", "Acquire calls of this process that got the lock."),
            ("lock_hold", "ferrolock_lock_hold_seconds", "Holds of this process, acquire to release."),
        ):
            h = m[key]
            yield HistogramMetricFamily(name, doc, buckets=list(zip(bounds, h["cumulative"])), sum_value=h["sum"])
        for key, name, doc in (
            ("acquires_missed", "ferrolock_lock_acquires_missed",
             "Acquires of this process that gave up (the wait ran out, or a try-once found the lock held)."),
            ("locks_lost", "ferrolock_locks_lost", "Holds of this process found lost."),
            ("forced_releases", "ferrolock_lock_forced_releases", "Locks freed by force from this process."),
            ("dead_lettered", "ferrolock_queue_dead_lettered",
             "Tasks this process's nacks sent to the dead set."),
        ):
            yield CounterMetricFamily(name, doc, value=m[key])
        yield GaugeMetricFamily("ferrolock_settlements_pending",
                                "Lost replies of this process not yet put right.", value=m["settlements_pending"])


def register(queues: Iterable[QueueLike] = (), *, url: str | None = None,
             prefix: str = _native.DEFAULT_QUEUE_PREFIX, registry: Any = REGISTRY) -> FerrolockCollector:
    """Registers a :class:`FerrolockCollector` of ``queues`` with ``registry``
    (default: prometheus_client's global one) and returns it."""
    collector = FerrolockCollector(queues, url=url, prefix=prefix)
    registry.register(collector)
    return collector
