"""The benchmark's job, for every queue system: a no-op that appends one record
(enqueue instant, start instant; monotonic ns, 16 bytes, one O_APPEND write)
to the file named by $BENCH_JOBS_FILE, so the runner can count finished jobs
and time them without adding a Redis command."""

from __future__ import annotations

import os
import struct
import time

RECORD = struct.Struct("<qq")


def record(enqueued_ns: int = 0) -> None:
    started = time.monotonic_ns()
    fd = os.open(os.environ["BENCH_JOBS_FILE"], os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, RECORD.pack(enqueued_ns, started))
    finally:
        os.close(fd)


def read(path: str) -> list[tuple[int, int]]:
    """The records written so far."""
    with open(path, "rb") as f:
        data = f.read()
    return [RECORD.unpack_from(data, i) for i in range(0, len(data) - len(data) % RECORD.size, RECORD.size)]
