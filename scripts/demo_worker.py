"""Demo worker (Python): runs the queue's worker loop on the shared queue; for
each job, holds the shared lock while doing a deliberately non-atomic
read-modify-write of a counter file. Job 7 fails on its first attempt: the
loop nacks it, and it comes back after its backoff (to any worker, Python or
PHP). Usage: demo_worker.py <worker name> <counter file>"""

import sys
import time

from ferrolock import Lock, Queue, Task

name, counter = sys.argv[1], sys.argv[2]
queue = Queue("demo:jobs", backoff=0.2)
lock = Lock("demo:counter", ttl=10, timeout=30)


def handle(task: Task) -> None:
    if task.id == "7" and task.attempts == 1:
        print(f"{name:<10} job {task.id:>3}  failed (attempt 1): it will be retried after its backoff",
              flush=True)
        raise RuntimeError("job 7 fails the first time")
    with lock:  # shared with the PHP workers
        value = int(open(counter).read())
        time.sleep(0.005)  # widen the race window: without the lock, updates get lost
        open(counter, "w").write(str(value + 1))
        print(f"{name:<10} job {task.id:>3}  counter {value + 1:>3}  fence {lock.fencing_token}"
              f"  attempt {task.attempts}", flush=True)


done = queue.work(handle, wait=1.0)  # acks each job as it reserves the next; stops after 1 s idle
print(f"{name:<10} done: {done} jobs", flush=True)
