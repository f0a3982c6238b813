"""Demo worker (Python): takes jobs from the shared queue; for each one, holds
the shared lock while doing a deliberately non-atomic read-modify-write of a
counter file. Usage: demo_worker.py <worker name> <counter file>"""

import sys
import time

from ferrolock import Lock, Queue

name, counter = sys.argv[1], sys.argv[2]
queue = Queue("demo:jobs")
lock = Lock("demo:counter", ttl=10, timeout=30)
done = 0
while (task := queue.reserve(wait=1.0)) is not None:
    with task, lock:  # ack on success; the lock is shared with the PHP workers
        value = int(open(counter).read())
        time.sleep(0.005)  # widen the race window: without the lock, updates get lost
        open(counter, "w").write(str(value + 1))
        print(f"{name:<10} job {task.id:>3}  counter {value + 1:>3}  fence {lock.fencing_token}", flush=True)
        done += 1
print(f"{name:<10} done: {done} jobs", flush=True)
