"""The huey application of the benchmark: one no-op task on a RedisHuey, made
the same way by the producer (bench/run.py) and the consumers, so the task's
registered name (``hueyapp.job``) matches."""

from __future__ import annotations

from collections.abc import Callable

import qjobs
from huey import RedisHuey


def make(url: str, name: str) -> tuple[RedisHuey, Callable[..., object]]:
    # results=False: a no-op has no result to keep.
    huey = RedisHuey(name, url=url, results=False)

    @huey.task()
    def job(enqueued_ns: int = 0) -> None:
        qjobs.record(enqueued_ns)

    return huey, job
