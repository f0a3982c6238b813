"""Redlock contention worker: `rounds` non-atomic increments of a counter file.
Usage: redlock_increment.py <counter file> <rounds> <url> [<url> ...]"""

import sys

from ferrolock import Redlock

counter, rounds, urls = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
lock = Redlock("redlock-counter", urls, ttl=2.0, timeout=60)
for _ in range(rounds):
    with lock:
        with open(counter, "r+") as f:
            value = int(f.read())
            f.seek(0)
            f.write(str(value + 1))
            f.truncate()
