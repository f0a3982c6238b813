"""Redlock contention worker: `rounds` fenced increments of a shared counter file.
Usage: redlock_fenced.py <state dir> <rounds> <ttl> <hold> <url> [<url> ...]

Inside each hold (`hold` seconds long, so that faults hit holds): an exclusive marker file
(O_EXCL) shows that nobody else is inside; the counter file holds "<count> <last fencing
token>", and a token not above the last is a problem. Problems are appended to
<state dir>/problems. Errors of a round (too few masters answer or may vote, a release that
cannot be confirmed) are retried: the test kills and pauses masters."""

import os
import sys
import time

import ferrolock
from ferrolock import Redlock

state, rounds, ttl, hold = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
urls = sys.argv[5:]
counter = os.path.join(state, "counter")
inside = os.path.join(state, "inside")


def problem(text: str) -> None:
    with open(os.path.join(state, "problems"), "a") as f:
        f.write(f"{os.getpid()}: {text}\n")


lock = Redlock("redlock-fenced", urls, ttl=ttl, timeout=120)
done = 0
while done < rounds:
    try:
        with lock:
            fence = lock.fencing_token
            try:
                marker = os.open(inside, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                problem("entered while another client was inside")
                marker = None
            with open(counter, "r+") as f:
                count, last = map(int, f.read().split())
                if fence <= last:
                    problem(f"fencing token {fence} is not above the last one, {last}")
                time.sleep(hold)
                f.seek(0)
                f.write(f"{count + 1} {fence}")
                f.truncate()
            if lock.lost:
                problem("the hold's validity ran out inside the critical section")
            if marker is not None:
                os.close(marker)
                os.unlink(inside)
            done += 1
    except (ferrolock.ConnectionError, ferrolock.LockError):
        time.sleep(0.05)
