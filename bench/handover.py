#!/usr/bin/env python3
"""Two-process hand-over latency (ping-pong), ferrolock from Python.

Two processes take turns on one lock: each holds it for `--hold` ms while the
other waits, then releases; the release hands the lock to the waiter. The
hand-over latency is the time from the holder's release call to the waiter's
acquire returning (both read CLOCK_MONOTONIC, which all processes share).
The round trip of one command (EXISTS, through the same client) is measured
alongside as the yardstick: the target is a hand-over of about one round
trip.

Usage: bench/handover.py [--python PY] [--rounds N] [--hold MS] [--runs R]
`--python` picks the interpreter (and so the ferrolock build) of the
workers: a before/after comparison runs this twice with two virtualenvs.
Starts its own redis-server on a free loopback port. Not a test: one run on
a shared machine, medians of `--runs` interleaved runs.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from throwaway import free_port

WORKER = r"""
import json, sys, time
from ferrolock import Lock
url, name, rounds, hold, start_at = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
lock = Lock(name, url=url, ttl=30, auto_renew=False)
rtt = []
for _ in range(200):
    t = time.monotonic_ns(); lock.locked(); rtt.append(time.monotonic_ns() - t)
while time.monotonic_ns() < start_at:
    time.sleep(0.0005)
events = []
for _ in range(rounds):
    assert lock.acquire(timeout=30)
    events.append(("acq", time.monotonic_ns()))
    until = time.monotonic_ns() + int(hold * 1e6)
    while time.monotonic_ns() < until:
        pass
    events.append(("rel", time.monotonic_ns()))
    lock.release()
print(json.dumps({"events": events, "rtt": rtt}))
"""


def one_run(python: str, url: str, rounds: int, hold: float, run: int) -> tuple[list[int], list[int]]:
    name = f"handover-{os.getpid()}-{run}"
    start_at = time.monotonic_ns() + int(1.5e9)
    procs = [subprocess.Popen([python, "-c", WORKER, url, name, str(rounds), str(hold), str(start_at)],
                              stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [json.loads(p.communicate(timeout=300)[0]) for p in procs]
    events = sorted((t, kind, who) for who, o in enumerate(outs) for kind, t in o["events"])
    handovers = []
    last_release: tuple[int, int] | None = None
    for t, kind, who in events:
        if kind == "rel":
            last_release = (t, who)
        elif last_release is not None and last_release[1] != who:
            handovers.append(t - last_release[0])
            last_release = None
    return handovers, outs[0]["rtt"] + outs[1]["rtt"]


def pct(xs: list[int], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] / 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--rounds", type=int, default=500)
    ap.add_argument("--hold", type=float, default=1.0, help="ms each process holds the lock")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    port = free_port()
    d = tempfile.mkdtemp(prefix="ferrolock-handover-")
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", d], stdout=subprocess.DEVNULL)
    try:
        for _ in range(500):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.01)
        url = f"redis://127.0.0.1:{port}/0"
        p50s, p99s, rtts = [], [], []
        for run in range(args.runs):
            h, rtt = one_run(args.python, url, args.rounds, args.hold, run)
            p50s.append(pct(h, 0.5))
            p99s.append(pct(h, 0.99))
            rtts.append(pct(rtt, 0.5))
        print(json.dumps({
            "python": args.python, "rounds": args.rounds, "hold_ms": args.hold,
            "handover_p50_us": statistics.median(p50s), "handover_p99_us": statistics.median(p99s),
            "round_trip_p50_us": statistics.median(rtts),
            "runs": {"p50": p50s, "p99": p99s, "rtt": rtts},
        }, indent=1))
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
