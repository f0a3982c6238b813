#!/usr/bin/env python3
"""Waiters at scale (issue 26.4): 2,000 waiters x 1 ms holds in 4 processes.

Each process starts `--waiters / --procs` threads; at one agreed instant
every thread asks for the same lock once (acquire(timeout=120)), holds it
for `--hold` ms (spinning, so the hold is exact) and releases it. Before the
start each process warms up as the contention workers of bench/run.py do,
as a service that has run would be: one try-once and one short wait on a
lock of its own, so that its pooled connection and its wait subscription
exist (`--cold` leaves that out: then the first hand-overs in each process
also wait for those to be set up, 2-15 ms each). Reported:

- span efficiency vs ideal: waiters x hold / (last release - first acquire);
- hand-over: from one holder's release call to the next holder's acquire
  returning (any process; CLOCK_MONOTONIC is shared), p50 / p99 / max;
- server connections during the run (sampled every 50 ms with CLIENT LIST),
  the largest count, and how many were subscribed (the processes' hubs);
- scripts the server ran per acquisition, and their server time in all
  (`INFO commandstats`): what waiting costs Redis besides the hand-overs.

Cases: `plain` (prefix `bench:`: legacy interop off), `fair`, and `legacy`
(prefix `Lock:`: legacy interop on, so sustained contention leaves the key
free for legacy pollers now and then; the difference is its cost).

Usage: bench/scale.py [--waiters 2000] [--procs 4] [--hold 1] [--runs 1]
       [--rounds 1] [--cases plain,fair,legacy] [--cold] [--python PY]
`--waiters 8 --procs 8 --rounds 500 --hold 2` is the 8-process contention
case under sustained contention (the cost of legacy interop's turns).
Starts its own redis-server. Not a test: one run on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from throwaway import free_port

WORKER = r"""
import json, sys, threading, time
from ferrolock import Lock
url, name, prefix, fair, threads, hold, start_at, rounds, cold = sys.argv[1:10]
threads, hold, start_at, fair = int(threads), float(hold) / 1000, int(start_at), fair == "1"
if cold != "1":
    warm = Lock(f"{name}-warm-up-{threading.get_native_id()}", url=url, prefix=prefix)
    assert warm.acquire(blocking=False)
    assert not Lock(warm.name, url=url, prefix=prefix).acquire(timeout=0.05)
    warm.release()
events = []
failed = []
entered = []
def run():
    lock = Lock(name, url=url, prefix=prefix, fair=fair, ttl=30, auto_renew=False)
    while time.monotonic_ns() < start_at:
        time.sleep(0.0005)
    for _ in range(int(rounds)):
        entered.append(time.monotonic_ns())
        try:
            assert lock.acquire(timeout=120)
        except Exception as e:
            failed.append(repr(e))
            return
        got = time.monotonic_ns()
        until = time.perf_counter() + hold
        while time.perf_counter() < until:
            pass
        rel = time.monotonic_ns()
        lock.release()
        events.append((got, rel))
ts = [threading.Thread(target=run) for _ in range(threads)]
for t in ts: t.start()
for t in ts: t.join()
print(json.dumps({"events": events, "failed": failed, "entered": entered}))
"""


def command(port: int, *args: str) -> bytes:
    """One command on a connection of its own; the raw reply."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"".join([f"*{len(args)}\r\n".encode()]
                           + [f"${len(a)}\r\n{a}\r\n".encode() for a in args]))
        data = b""
        s.settimeout(5)
        while True:
            chunk = s.recv(65536)
            data += chunk
            if data.startswith(b"$"):
                size = int(data[1:data.index(b"\r\n")])
                if len(data) >= data.index(b"\r\n") + 2 + size + 2:
                    return data
            elif data.endswith(b"\r\n"):
                return data


def sample_connections(port: int, stop: threading.Event, out: list[tuple[int, int]]) -> None:
    """Every 50 ms: (client connections, of which subscribed), the sampler's own left out."""
    while not stop.is_set():
        listing = command(port, "CLIENT", "LIST").decode(errors="replace")
        clients = [dict(f.split("=", 1) for f in line.split() if "=" in f)
                   for line in listing.splitlines()[1:] if line.strip()]
        clients = [c for c in clients if not c.get("cmd", "").startswith("client")]
        subscribed = [c for c in clients if int(c.get("sub", 0)) + int(c.get("ssub", 0)) > 0]
        out.append((len(clients), len(subscribed)))
        time.sleep(0.05)


def script_calls(port: int) -> tuple[int, int]:
    """Scripts the server ran so far (EVAL/EVALSHA/FCALL): (calls, usec)."""
    stats = command(port, "INFO", "commandstats").decode(errors="replace")
    calls = usec = 0
    for m in re.finditer(r"cmdstat_(?:evalsha|eval|fcall):calls=(\d+),usec=(\d+)", stats):
        calls += int(m.group(1))
        usec += int(m.group(2))
    return calls, usec


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def one(python: str, port: int, case: str, waiters: int, procs: int, hold: float, run: int,
        rounds: int = 1, cold: bool = False) -> dict:
    url = f"redis://127.0.0.1:{port}/0"
    name = f"scale-{case}-{run}"
    prefix = "Lock:" if case == "legacy" else "bench:"
    fair = "1" if case == "fair" else "0"
    start_at = time.monotonic_ns() + int(3e9)
    per = waiters // procs
    ps = [subprocess.Popen([python, "-c", WORKER, url, name, prefix, fair, str(per), str(hold), str(start_at),
                            str(rounds), "1" if cold else "0"],
                           stdout=subprocess.PIPE, text=True) for _ in range(procs)]
    calls_before = script_calls(port)
    stop, conns = threading.Event(), []
    sampler = threading.Thread(target=sample_connections, args=(port, stop, conns))
    sampler.start()
    outs = [json.loads(p.communicate(timeout=600)[0]) for p in ps]
    stop.set()
    sampler.join()
    calls_after = script_calls(port)
    events = sorted(e for o in outs for e in o["events"])
    failed = [f for o in outs for f in o["failed"]]
    span = (events[-1][1] - events[0][0]) / 1e9
    ideal = len(events) * hold / 1000
    handovers = [(b[0] - a[1]) / 1e3 for a, b in zip(events, events[1:])]
    if os.environ.get("SCALE_GAPS"):  # where the long hand-overs were (debugging)
        t0 = events[0][0]
        for a, b in zip(events, events[1:]):
            if b[0] - a[1] > 20e6:
                print(f"  gap {(b[0] - a[1]) / 1e6:.1f} ms at {(a[1] - t0) / 1e9:.3f} s", file=sys.stderr)
    if os.environ.get("SCALE_PROFILE"):  # where the time goes (debugging)
        tenth = max(1, len(handovers) // 10)
        print("  hand-over mean per tenth (us): " + " ".join(
            f"{statistics.mean(handovers[i:i + tenth]):.0f}" for i in range(0, len(handovers), tenth)),
            file=sys.stderr)
        step = max(1, tenth // 10)
        print("  first tenth, mean per tenth of it (us): " + " ".join(
            f"{statistics.mean(handovers[i:i + step]):.0f}" for i in range(0, tenth, step)), file=sys.stderr)
        ms = sorted((t - start_at) / 1e6 for o in outs for t in o["entered"])
        print(f"  into acquire (ms after the start): half the threads {ms[len(ms) // 2]:.0f}, "
              f"all {ms[-1]:.0f}; first acquire returned {(events[0][0] - start_at) / 1e6:.0f}, "
              f"20th {(events[min(20, len(events) - 1)][0] - start_at) / 1e6:.0f}", file=sys.stderr)
    return {
        "case": case, "waiters": waiters, "procs": procs, "rounds": rounds, "hold_ms": hold,
        "done": len(events),
        "failed": len(failed), "span_s": round(span, 3), "efficiency": round(ideal / span, 3),
        "handover_p50_us": round(pct(handovers, 0.5), 1), "handover_p99_us": round(pct(handovers, 0.99), 1),
        "handover_max_us": round(max(handovers), 1),
        "connections_max": max(c for c, _ in conns), "subscribed_max": max(s for _, s in conns),
        "scripts_per_acquire": round((calls_after[0] - calls_before[0]) / max(1, len(events)), 2),
        "server_script_ms": round((calls_after[1] - calls_before[1]) / 1000, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--waiters", type=int, default=2000)
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--hold", type=float, default=1.0)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=1, help="acquisitions per waiter (sustained contention)")
    ap.add_argument("--cases", default="plain,fair,legacy")
    ap.add_argument("--cold", action="store_true", help="no warm-up before the start (see above)")
    args = ap.parse_args()
    port = free_port()
    d = tempfile.mkdtemp(prefix="ferrolock-scale-")
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", d, "--maxclients", "10000"],
                              stdout=subprocess.DEVNULL)
    try:
        for _ in range(500):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.01)
        results = []
        for run in range(args.runs):
            for case in args.cases.split(","):
                r = one(args.python, port, case, args.waiters, args.procs, args.hold, run, args.rounds, args.cold)
                print(json.dumps(r), flush=True)
                results.append(r)
        if args.runs > 1:
            for case in args.cases.split(","):
                rs = [r for r in results if r["case"] == case]
                print(json.dumps({"case": case, "median_efficiency": statistics.median(r["efficiency"] for r in rs),
                                  "median_p99_us": statistics.median(r["handover_p99_us"] for r in rs)}))
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
