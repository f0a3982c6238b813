"""Crash-test consumer (Python): reserves tasks, "processes" them, acks them,
logging each step unbuffered so a kill -9 leaves an exact record.

Usage: consumer.py <queue name> <log file> [work]   (REDIS_URL in the environment)
With `work`, the worker loop (Queue.work) does the reserving and acking."""

import os
import sys
import time

from ferrolock import Queue, Task

queue_name, log_path = sys.argv[1], sys.argv[2]
log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
queue = Queue(queue_name, visibility=1.0)


def handle(task: Task) -> None:
    os.write(log, f"S {task.id}\n".encode())
    time.sleep(0.001)  # the work


if sys.argv[3:] == ["work"]:
    queue.work(handle)
while True:
    task = queue.reserve(wait=1.0)
    if task is None:
        continue
    handle(task)
    os.write(log, f"A {task.id} {'ok' if task.ack() else 'late'}\n".encode())
