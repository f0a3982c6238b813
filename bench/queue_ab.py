"""Interleaved A/B of one consumer draining no-op jobs, each run a fresh
process (one queue of <jobs> ids, drained by one loop, timed in-process):

  work     ferrolock's worker loop (Queue.work), this build
  reserve  reserve() then ack() (two round trips per job), this build
  main     reserve() then ack() with another build (e.g. main's), run by
           the Python given as the first argument
  nohb     the worker loop without heartbeats

Rounds take turns (work, reserve, main, nohb, work, ...), so a machine whose
speed drifts moves all four; the ratio work/main is taken round by round.
Pin the server and the client to one CPU each for steadier figures:

  taskset -c 0 redis-server --port 6390 --save "" &
  REDIS_URL=redis://127.0.0.1:6390/0 taskset -c 1 .venv/bin/python bench/queue_ab.py /path/to/main/python 9 3000

and the server's commands per job of each (INFO commandstats; a server of
its own):

  REDIS_URL=redis://127.0.0.1:6390/0 .venv/bin/python bench/queue_ab.py --commands /path/to/main/python 2000
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

CHILD = r'''
import sys, time, json
from ferrolock import Queue
mode, name, jobs = sys.argv[1], sys.argv[2], int(sys.argv[3])
q = Queue(name)
q.enqueue([f"t{i}" for i in range(jobs)])
len(q)
t0 = time.perf_counter()
if mode == "work":
    n = q.work(lambda t: None, wait=0)
elif mode == "work-nohb":
    n = q.work(lambda t: None, wait=0, heartbeat=False)
else:
    n = 0
    while (t := q.reserve()) is not None:
        t.ack(); n += 1
dt = time.perf_counter() - t0
assert n == jobs, n
print(json.dumps({"jobs_per_s": jobs / dt}))
'''

def run(python, mode, jobs):
    name = f"ab-{mode}-{time.monotonic_ns()}"
    out = subprocess.run([python, "-c", CHILD, mode, name, str(jobs)], capture_output=True, text=True,
                         check=True, cwd="/").stdout
    return json.loads(out)["jobs_per_s"]

def commandstats() -> dict[str, int]:
    import redis  # redis-py: the runner's own view of the server
    info = redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")).info("commandstats")
    return {k.removeprefix("cmdstat_"): v["calls"] for k, v in info.items()}


def commands_per_job(python: str, mode: str, jobs: int) -> dict[str, float]:
    """Server commands per job (script-internal ones included) of one drain,
    from INFO commandstats before and after (the enqueue, len() and the
    runner's INFO calls left out)."""
    before = commandstats()
    run(python, mode, jobs)
    after = commandstats()
    calls = {k: v - before.get(k, 0) for k, v in after.items()}
    for k, n in (("info", 1), ("evalsha", 1), ("zcard", 1), ("script|load", 0)):
        calls[k] = calls.get(k, 0) - n  # the child's enqueue script and len()
    per = {k: v / jobs for k, v in calls.items() if v > 0}
    return dict(sorted(per.items(), key=lambda kv: -kv[1]))


if len(sys.argv) > 1 and sys.argv[1] == "--commands":
    # queue_ab.py --commands /path/to/main/python <jobs>: commands per job of
    # each mode (on a server of its own: nothing else may run on it).
    main_py, jobs = sys.argv[2], int(sys.argv[3])
    for label, py, m in (("work", sys.executable, "work"), ("reserve", sys.executable, "reserve"),
                         ("main reserve", main_py, "reserve"), ("main work", main_py, "work")):
        try:
            per = commands_per_job(py, m, jobs)
        except subprocess.CalledProcessError:
            print(f"{label}: failed (a build before the worker loop has no work())")
            continue
        print(f"{label}: {sum(per.values()):.2f} per job: " + ", ".join(f"{k} {v:.2f}" for k, v in per.items()))
    sys.exit(0)

main_py, rounds, jobs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
here = sys.executable
res = {"work": [], "reserve": [], "main": [], "nohb": []}
for r in range(rounds):
    for mode, py, m in (("work", here, "work"), ("reserve", here, "reserve"), ("main", main_py, "reserve"),
                        ("nohb", here, "work-nohb")):
        res[mode].append(run(py, m, jobs))
    print(f"round {r + 1}: " + "  ".join(f"{k} {v[-1]:,.0f}" for k, v in res.items()), flush=True)
med = {k: statistics.median(v) for k, v in res.items()}
pairs = [w / m for w, m in zip(res["work"], res["main"])]
print("median jobs/s:", {k: round(v) for k, v in med.items()})
print("work/main per round:", [round(p, 2) for p in pairs], "median", round(statistics.median(pairs), 2))
print("work/reserve(this) median", round(statistics.median([w / r for w, r in zip(res["work"], res["reserve"])]), 2))
