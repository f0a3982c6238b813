#!/usr/bin/env python3
# ruff: noqa: RUF001  (the tables use the multiplication sign and dashes)
"""ferrolock benchmark suite (`make bench`, or `bench/run.py --only SECTIONS --runs N`).

Starts its own server (Debian's redis-server, or Valkey with `--server valkey`
/ `BENCH_SERVER=valkey`) on a free loopback port and measures, side by side in
one run, ferrolock and the libraries a user would pick instead. Sections
(`--only` takes a comma-separated list of them):

uncontended  acquire+release per second, as a share of the round-trip limit
             (`redis-benchmark -c 1` SET rate / 2), each run of every lock
             interleaved with a run of the limit: ferrolock (Python, PHP),
             redis-py Lock, python-redis-lock, the legacy PHP class.
contention   8 processes x 25 critical sections on one lock, each = sleep 2 ms +
             GET + SET of a counter through the language's usual client
             (redis-py, phpredis), started at one instant, against the SAME
             worker run serially (1 process x 200 sections): relative
             efficiency = serial span / 8-process span; p50/p99 acquire wait
             against the ideal FIFO wait (7 sections x the mean section time);
             lost updates of the counter.
busy         the same 8 x 25 shape with busy-wait sections of 2 ms (a file
             counter): efficiency = ideal busy time / span; mixed Python+PHP.
wakeup       release -> waiter wake-up latency (waiter thread, same process),
             and a two-process ping-pong hand-over (release call -> the other
             process's acquire returning).
queue        batch enqueue ids/s; single pops from PHP against the legacy class.
drain        worker loops draining no-op jobs with 1 and 4 consumer processes:
             ferrolock reserve+ack, huey, RQ (SimpleWorker and the default
             forking Worker): jobs/s, share of the round-trip limit, server
             commands and CPU per 1000 jobs (INFO commandstats / INFO cpu),
             client commands per job (MONITOR), enqueue->start latency with an
             idle worker.
scale        2,000 waiters (4 processes x 500 threads) x 1 ms holds (spinning)
             on one lock, plain, fair and plain with legacy interop on (the
             default prefix Lock:, whose turns for legacy pollers are its
             cost) taking turns, --runs times: efficiency, hand-over p99,
             server connections during the run (medians; the connections and
             failures of the worst run).
asyncio      one task's acquire+release cycles per second (share of the
             round-trip limit, interleaved with it), and 100 tasks of one
             process x 5 critical sections (sleep 2 ms + GET + SET through
             redis.asyncio) on one lock against the same worker run serially:
             ferrolock.aio (fair and not) next to redis.asyncio's Lock.

Every section runs `--runs` rounds (cases take turns inside a round, so a
noisy minute hits them all alike) and reports medians. A full run writes
bench/results/results.md (the headline table; the README shows a few of its
rows), results.json, results.png (the README's chart), details.md (every
table) and the raw measurements of every run to
bench/results/runs/<date>-<server>.json, and refreshes the marked blocks of
README.md and docs/benchmarks.md from them
(Valkey: results-valkey.*, docs only). A partial run (`--only`) prints its
tables and keeps its raw data in bench/results/runs/partial-*.json (ignored
by git).

ferrolock runs with its defaults: in Python the watchdog renews every held
lock (auto_renew=True); in PHP auto-renewal is opt-in and off. The limit, the
uncontended runs, the batch enqueue, the one-consumer pops and the
one-consumer drains pin the server to one CPU and the clients to the others
(see `one_cpu_each`), so that the limit and what is compared with it see the
same placement. Nothing here is a test: the machine is shared and noisy; the
numbers are what one run of the suite measured.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORKERS = HERE / "workers"
RESULTS = HERE / "results"
PHP_EXT = ROOT / "target" / "release" / "libferrolock_php.so"
PHP = ["php", "-d", f"extension={PHP_EXT}"]
SECTIONS = ["uncontended", "contention", "busy", "wakeup", "queue", "drain", "scale", "asyncio"]

sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(WORKERS))

import qjobs  # noqa: E402
from throwaway import free_port  # noqa: E402

from tests.support.servers import server_binaries  # noqa: E402


def log(msg: str) -> None:
    print(msg, flush=True)


def percentile(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def median(values: list[float]) -> float:
    return statistics.median(values)


class Server:
    """The server under test, persistence off, on a free loopback port."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.binary, self.cli = server_binaries(kind)
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="ferrolock-bench-")
        # maxclients: the scale section opens thousands of connections.
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.dir, "--maxclients", "20000"], stdout=subprocess.DEVNULL)
        for _ in range(500):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.01)
        else:
            raise RuntimeError(f"{self.binary} did not start")
        import redis

        self.r = redis.Redis(port=self.port)
        info = self.r.info("server")
        self.version = str(info.get("valkey_version") or info["redis_version"])

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def info(self, section: str) -> dict[str, Any]:
        return self.r.info(section)

    def close(self) -> None:
        self.r.close()
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def one_cpu_each(server: Server) -> Iterator[None]:
    """The server on one CPU, this process and its children on the others.

    Left to the scheduler, a client sometimes shares the server's CPU, where a
    round trip costs a third of a cross-CPU one on this kind of VM (no wake-up
    of another CPU): one run measured PHP at 227 % of a limit that
    redis-benchmark had measured across CPUs. Pinned, the limit and every lock
    see the same placement, the one of a deployment where client and server do
    not share a CPU."""
    cpus = os.sched_getaffinity(0)
    if len(cpus) < 2:
        yield
        return
    server_cpu = min(cpus)
    os.sched_setaffinity(server.proc.pid, {server_cpu})
    os.sched_setaffinity(0, cpus - {server_cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, cpus)
        os.sched_setaffinity(server.proc.pid, cpus)


# ------------------------------------------------------------ worker processes
class Workers:
    """Worker processes that print `ready`, get a start instant on stdin,
    report one JSON line and stay until their stdin closes (see contend.py)."""

    def __init__(self, cmds: list[list[str]], timeout: float, env: dict[str, str] | None = None) -> None:
        self.procs = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                       env={**os.environ, **(env or {})}) for cmd in cmds]
        # A worker that hangs must not hang the suite.
        self.timer = threading.Timer(timeout, self.kill)
        self.timer.daemon = True
        self.timer.start()
        for p, cmd in zip(self.procs, cmds):
            if p.stdout.readline().strip() != "ready":
                self.kill()
                raise RuntimeError(f"worker failed to start: {' '.join(cmd)}")

    def go(self, delay: float = 0.05) -> int:
        start_at = time.monotonic_ns() + int(delay * 1e9)
        for p in self.procs:
            p.stdin.write(f"{start_at}\n")
            p.stdin.flush()
        return start_at

    def reports(self) -> list[dict]:
        lines = [p.stdout.readline() for p in self.procs]
        self.close()
        if not all(line.strip() for line in lines):
            raise RuntimeError("a worker failed (see its error above)")
        return [json.loads(line) for line in lines]

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()

    def close(self) -> None:
        self.timer.cancel()
        for p in self.procs:
            with contextlib.suppress(BrokenPipeError, OSError):
                p.stdin.close()
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def host_of(url: str) -> tuple[str, int]:
    m = re.match(r"redis://([^:/]+):(\d+)", url)
    assert m, url
    return m.group(1), int(m.group(2))


# ------------------------------------------------------------ 1. uncontended
def round_trip_limit(server: Server, requests: int) -> float:
    """redis-benchmark -c 1 SET rate / 2: a lock is at least one round trip to
    acquire and one to release."""
    out = subprocess.run(["redis-benchmark", "-p", str(server.port), "-c", "1", "-n", str(requests),
                          "-t", "set", "-q", "--csv"], capture_output=True, text=True, check=True).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith('"SET"'))  # "SET","41152.26",...
    return float(line.split(",")[1].strip('"')) / 2


def uncontended_python(url: str, impl: str, seconds: float) -> float:
    import redis

    name = f"bench-uncontended-{impl}"
    if impl == "ferrolock":
        from ferrolock import Lock

        lock = Lock(name, url=url)  # the defaults: the watchdog on
        acquire, release = (lambda: lock.acquire(blocking=False)), lock.release
    elif impl == "redis-py":
        lock = redis.Redis.from_url(url).lock(name, timeout=30)
        acquire, release = (lambda: lock.acquire(blocking=False)), lock.release
    else:
        import redis_lock

        lock = redis_lock.Lock(redis.Redis.from_url(url), name, expire=30)
        acquire, release = (lambda: lock.acquire(blocking=False)), lock.release
    for _ in range(1000):
        assert acquire()
        release()
    n = 0
    start = time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        for _ in range(100):
            acquire()
            release()
        n += 100
    return n / (time.perf_counter() - start)


def uncontended_php(url: str, impl: str, seconds: float) -> float:
    out = subprocess.run([*PHP, str(WORKERS / "uncontended.php"), impl, url, str(seconds)],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)["pairs_per_s"]


UNCONTENDED = [("ferrolock (Python)", uncontended_python, "ferrolock"),
               ("redis-py Lock", uncontended_python, "redis-py"),
               ("python-redis-lock", uncontended_python, "python-redis-lock"),
               ("ferrolock (PHP)", uncontended_php, "ferrolock"),
               ("legacy PHP (SETNX+EXPIRE)", uncontended_php, "legacy")]


def section_uncontended(server: Server, args: argparse.Namespace) -> dict:
    """Every run of a lock sits between two runs of the limit and is compared
    with their mean: on a shared machine the limit drifts within a minute."""
    raw: list[dict] = []
    with one_cpu_each(server):
        for i in range(args.runs):
            limits = [round_trip_limit(server, args.limit_requests)]
            run: dict[str, Any] = {}
            for label, fn, impl in UNCONTENDED:
                rate = fn(server.url, impl, args.seconds)
                limits.append(round_trip_limit(server, args.limit_requests))
                run[label] = {"pairs_per_s": rate, "limit": (limits[-2] + limits[-1]) / 2}
            run["limits"] = limits
            raw.append(run)
            log(f"   [{i + 1}/{args.runs}] limit {min(limits):,.0f} to {max(limits):,.0f}/s; share  " + "  ".join(
                f"{label} {run[label]['pairs_per_s'] / run[label]['limit']:.2f}" for label, _, _ in UNCONTENDED))
    summary = {"limit": median([x for r in raw for x in r["limits"]]), "locks": {}}
    for label, _, _ in UNCONTENDED:
        shares = [r[label]["pairs_per_s"] / r[label]["limit"] for r in raw]
        summary["locks"][label] = {"pairs_per_s": median([r[label]["pairs_per_s"] for r in raw]),
                                   "share": median(shares),
                                   "share_range": [min(shares), max(shares)]}
    return {"runs": raw, "summary": summary}


# ------------------------------------------------------------ 2./3. contention
def contend(url: str, workers: list[tuple[str, str]], rounds: int, mode: str, cs_ms: float,
            pause_ms: float = 0.0) -> dict:
    """Runs contend.py/contend.php workers (language, impl) on one fresh lock;
    returns every wait and critical section, and the lost updates."""
    import redis

    name = f"bench-{mode}-{time.monotonic_ns()}"
    tmp = None
    if mode == "sleep":
        counter = f"bench:counter:{name}"
        redis.Redis.from_url(url).set(counter, 0)
    else:
        # On tmpfs when there is one: a disk file's write would lengthen every
        # critical section and be charged to the lock.
        shm = Path("/dev/shm")
        tmp = Path(tempfile.mkdtemp(prefix="ferrolock-bench-", dir=shm if shm.is_dir() else None))
        counter = str(tmp / "counter")
        Path(counter).write_text("0")
    cmds = []
    for lang, impl in workers:
        worker = [sys.executable, str(WORKERS / "contend.py")] if lang == "python" else \
            [*PHP, str(WORKERS / "contend.php")]
        cmds.append([*worker, impl, url, name, str(rounds), mode, str(cs_ms), str(pause_ms), counter])
    procs = Workers(cmds, timeout=300, env={"REDIS_URL": url})
    procs.go()
    reports = procs.reports()
    if mode == "sleep":
        done = int(redis.Redis.from_url(url).get(counter))
    else:
        done = int(Path(counter).read_text())
        shutil.rmtree(tmp, ignore_errors=True)
    holds = sorted((s, e, i) for i, r in enumerate(reports) for s, e in r["spans"])
    return {"waits": [w for r in reports for w in r["waits"]], "holds": holds,
            "lost": len(workers) * rounds - done}


def span_ns(c: dict) -> int:
    return max(e for _, e, _ in c["holds"]) - min(s for s, _, _ in c["holds"])


def handovers_ns(c: dict) -> list[int]:
    """Gaps between consecutive holds by different processes (release call -> the
    next holder's acquire returning)."""
    h = c["holds"]
    return [h[k + 1][0] - h[k][1] for k in range(len(h) - 1) if h[k + 1][2] != h[k][2]]


SLEEP_CASES = {  # label: (language, impl); 8 processes of it, and 1 for the serial baseline
    "ferrolock (Python)": ("python", "ferrolock"),
    "ferrolock fair (Python)": ("python", "ferrolock-fair"),
    "ferrolock (PHP)": ("php", "ferrolock"),
    "ferrolock fair (PHP)": ("php", "ferrolock-fair"),
    "redis-py Lock": ("python", "redis-py"),
    "python-redis-lock": ("python", "python-redis-lock"),
    "legacy PHP (100 ms polling)": ("php", "legacy"),
}


def section_contention(server: Server, args: argparse.Namespace) -> dict:
    procs, rounds, cs = 8, args.rounds, 2.0
    raw: dict[str, list[dict]] = {label: [] for label in SLEEP_CASES}
    for i in range(args.runs):
        for label, worker in SLEEP_CASES.items():
            # The serial baseline runs before and after the 8 processes; their
            # mean span is the reference (the machine drifts).
            before = contend(server.url, [worker], procs * rounds, "sleep", cs)
            par = contend(server.url, [worker] * procs, rounds, "sleep", cs)
            after = contend(server.url, [worker], procs * rounds, "sleep", cs)
            serial_span = (span_ns(before) + span_ns(after)) / 2
            section = median([e - s for s, e, _ in par["holds"]])
            ideal_wait = (procs - 1) * statistics.mean(e - s for s, e, _ in par["holds"])
            n = procs * rounds
            run = {
                "relative_efficiency": serial_span / span_ns(par),
                "serial_span_s": serial_span / 1e9, "span_s": span_ns(par) / 1e9,
                "serial_spans_s": [span_ns(before) / 1e9, span_ns(after) / 1e9],
                "section_ms": section / 1e6,
                "ideal_wait_ms": ideal_wait / 1e6,
                "p50_wait_ms": percentile(par["waits"], 50) / 1e6,
                "p99_wait_ms": percentile(par["waits"], 99) / 1e6,
                "max_wait_ms": max(par["waits"]) / 1e6,
                "p99_over_ideal": percentile(par["waits"], 99) / ideal_wait,
                "loss_per_handover_ms": (span_ns(par) - serial_span) / (n - 1) / 1e6,
                "handovers": len(handovers_ns(par)),
                "lost": before["lost"] + par["lost"] + after["lost"],
            }
            raw[label].append(run)
            log(f"   [{i + 1}/{args.runs}] {label:<30} rel.eff {run['relative_efficiency']:.2f}  "
                f"p50 {run['p50_wait_ms']:6.1f}  p99 {run['p99_wait_ms']:6.1f} ms "
                f"({run['p99_over_ideal']:.2f}x ideal {run['ideal_wait_ms']:.1f})  "
                f"+{run['loss_per_handover_ms']:.2f} ms/hand-over  lost {run['lost']}")
    summary = {}
    for label, runs in raw.items():
        s = {k: median([r[k] for r in runs]) for k in runs[0] if k not in ("lost", "serial_spans_s")}
        s["relative_efficiency_range"] = [min(r["relative_efficiency"] for r in runs),
                                          max(r["relative_efficiency"] for r in runs)]
        s["lost"] = sum(r["lost"] for r in runs)
        summary[label] = s
    return {"shape": f"{procs} processes x {rounds} sections (sleep {cs:g} ms + GET + SET) vs 1 x {procs * rounds}",
            "runs": raw, "summary": summary}


BUSY_CASES = {
    "ferrolock (Python)": [("python", "ferrolock")] * 8,
    "ferrolock fair (Python)": [("python", "ferrolock-fair")] * 8,
    "redis-py Lock": [("python", "redis-py")] * 8,
    "python-redis-lock": [("python", "python-redis-lock")] * 8,
    "ferrolock (PHP)": [("php", "ferrolock")] * 8,
    "ferrolock fair (PHP)": [("php", "ferrolock-fair")] * 8,
    "legacy PHP (100 ms polling)": [("php", "legacy")] * 8,
    "mixed 4 Python + 4 PHP ferrolock": [("python", "ferrolock")] * 4 + [("php", "ferrolock")] * 4,
    "mixed 4 Python + 4 PHP ferrolock fair": [("python", "ferrolock-fair")] * 4 + [("php", "ferrolock-fair")] * 4,
}


def section_busy(server: Server, args: argparse.Namespace) -> dict:
    rounds, cs = args.rounds, 2.0
    raw: dict[str, list[dict]] = {label: [] for label in BUSY_CASES}
    for i in range(args.runs):
        for label, workers in BUSY_CASES.items():
            c = contend(server.url, workers, rounds, "busy", cs)
            span = span_ns(c)
            run = {"efficiency": len(workers) * rounds * cs * 1e6 / span,
                   "occupancy": sum(e - s for s, e, _ in c["holds"]) / span,
                   "p50_wait_ms": percentile(c["waits"], 50) / 1e6,
                   "p99_wait_ms": percentile(c["waits"], 99) / 1e6,
                   "max_wait_ms": max(c["waits"]) / 1e6, "lost": c["lost"]}
            raw[label].append(run)
            log(f"   [{i + 1}/{args.runs}] {label:<40} eff {run['efficiency']:.2f}  occ {run['occupancy']:.2f}"
                f"  p50 {run['p50_wait_ms']:7.1f}  p99 {run['p99_wait_ms']:7.1f} ms  lost {run['lost']}")
    summary = {}
    for label, runs in raw.items():
        s = {k: median([r[k] for r in runs]) for k in runs[0] if k != "lost"}
        s["efficiency_range"] = [min(r["efficiency"] for r in runs), max(r["efficiency"] for r in runs)]
        s["lost"] = sum(r["lost"] for r in runs)
        summary[label] = s
    return {"shape": f"8 processes x {rounds} busy-wait sections of {cs:g} ms", "runs": raw, "summary": summary}


# ------------------------------------------------------------ 4. wake-up
def wakeup(url: str, impl: str, samples: int) -> list[float]:
    """A waiter thread blocks; the main thread releases; latency = release call
    start -> the waiter's acquire returning (same clock). Milliseconds."""
    import redis

    name = f"bench-wake-{impl}-{time.monotonic_ns()}"

    def make() -> tuple[Callable[[], bool], Callable[[], None]]:
        if impl.startswith("ferrolock"):
            from ferrolock import Lock

            lk = Lock(name, url=url, fair=impl.endswith("fair"))
            return (lambda: lk.acquire(timeout=30)), lk.release
        if impl == "redis-py":
            lk = redis.Redis.from_url(url).lock(name, timeout=30, blocking_timeout=30, thread_local=False)
            return lk.acquire, lk.release
        import redis_lock

        lk2 = redis_lock.Lock(redis.Redis.from_url(url), name, expire=30)
        return (lambda: lk2.acquire(timeout=30)), lk2.release

    holder_acquire, holder_release = make()
    waiter_acquire, waiter_release = make()
    lat = []
    for _ in range(samples):
        assert holder_acquire()
        woke: list[int] = []

        def wait_for_it(woke: list[int] = woke) -> None:
            waiter_acquire()
            woke.append(time.monotonic_ns())

        t = threading.Thread(target=wait_for_it)
        t.start()
        time.sleep(0.02)  # the waiter is blocked by now
        t0 = time.monotonic_ns()
        holder_release()
        t.join()
        lat.append((woke[0] - t0) / 1e6)
        waiter_release()
    return lat


WAKEUP = [("ferrolock", "ferrolock", 1), ("ferrolock fair", "ferrolock-fair", 1),
          ("python-redis-lock", "python-redis-lock", 1), ("redis-py Lock (sleep=0.1)", "redis-py", 10)]
PINGPONG = {"ferrolock (Python)": ("python", "ferrolock"), "ferrolock fair (Python)": ("python", "ferrolock-fair"),
            "ferrolock (PHP)": ("php", "ferrolock"), "ferrolock fair (PHP)": ("php", "ferrolock-fair"),
            "python-redis-lock": ("python", "python-redis-lock")}


def section_wakeup(server: Server, args: argparse.Namespace) -> dict:
    raw: dict[str, list[dict]] = {label: [] for label, _, _ in WAKEUP}
    pp: dict[str, list[dict]] = {label: [] for label in PINGPONG}
    for i in range(args.runs):
        for label, impl, fewer in WAKEUP:
            lat = wakeup(server.url, impl, max(10, args.samples // fewer))
            raw[label].append({"p50_ms": percentile(lat, 50), "p99_ms": percentile(lat, 99), "samples": lat})
        # Ping-pong: two processes, 1 ms holds, each pausing 1 ms after its
        # release, so that the other (already waiting) takes the lock.
        for label, worker in PINGPONG.items():
            c = contend(server.url, [worker] * 2, args.pingpong, "sleep", 1.0, pause_ms=1.0)
            h = [x / 1e6 for x in handovers_ns(c)]
            pp[label].append({"p50_ms": percentile(h, 50), "p99_ms": percentile(h, 99), "handovers": len(h)})
        log(f"   [{i + 1}/{args.runs}] wake-up p50 " + "  ".join(
            f"{label} {runs[-1]['p50_ms']:.3f}" for label, runs in raw.items()) + " ms; ping-pong p50 " + "  ".join(
            f"{label} {runs[-1]['p50_ms']:.3f}" for label, runs in pp.items()) + " ms")
    return {"runs": {"wakeup": raw, "pingpong": pp}, "summary": {
        "wakeup": {label: {k: median([r[k] for r in runs]) for k in ("p50_ms", "p99_ms")}
                   for label, runs in raw.items()},
        "pingpong": {label: {k: median([r[k] for r in runs]) for k in ("p50_ms", "p99_ms", "handovers")}
                     for label, runs in pp.items()}}}


# ------------------------------------------------------------ 5. queue: enqueue, pops
def batch_enqueue(url: str, ids: int, batch: int) -> float:
    from ferrolock import Queue

    q = Queue(f"bench-enqueue-{time.monotonic_ns()}", url=url)
    names = [f"task-{i}" for i in range(ids)]
    start = time.perf_counter()
    for i in range(0, ids, batch):
        q.enqueue(names[i:i + batch])
    return ids / (time.perf_counter() - start)


def single_pops(url: str, impl: str, seconds: float, consumers: int) -> dict:
    """`consumers` PHP processes popping one task at a time from one queue,
    all starting together: total pops/s, and tasks handed out twice."""
    from ferrolock import Queue

    name = f"bench-pop-{impl}-{time.monotonic_ns()}"
    q = Queue(name, url=url)
    for i in range(0, 200_000, 20_000):
        q.enqueue([f"t{j}" for j in range(i, i + 20_000)])
    start_at = time.monotonic_ns() + int(1.0e9)
    procs = [subprocess.Popen([*PHP, str(WORKERS / "queue_pop.php"), impl, url, name, str(seconds),
                               str(start_at)], stdout=subprocess.PIPE, text=True)
             for _ in range(consumers)]
    reports = []
    for p in procs:
        out, _ = p.communicate(timeout=seconds + 60)
        if p.returncode != 0:
            raise RuntimeError(f"pop worker ({impl}) failed")
        reports.append(json.loads(out))
    ids = [i for r in reports for i in r["ids"]]
    return {"pops_per_s": sum(r["pops_per_s"] for r in reports), "twice": len(ids) - len(set(ids))}


def section_queue(server: Server, args: argparse.Namespace) -> dict:
    raw: list[dict] = []
    for i in range(args.runs):
        # One client: pinned like the limit. Four consumers: left to the
        # scheduler, like the contention cases.
        with one_cpu_each(server):
            run: dict[str, Any] = {"enqueue_ids_per_s": batch_enqueue(server.url, 200_000, 10_000)}
            for impl in ("ferrolock", "legacy"):
                run[f"pop_{impl}_1"] = single_pops(server.url, impl, args.pop_seconds, 1)
        for impl in ("ferrolock", "legacy"):
            run[f"pop_{impl}_4"] = single_pops(server.url, impl, args.pop_seconds, 4)
        raw.append(run)
        log(f"   [{i + 1}/{args.runs}] enqueue {run['enqueue_ids_per_s']:,.0f} ids/s; pops/s " + "  ".join(
            f"{k[4:]} {v['pops_per_s']:,.0f}" for k, v in run.items() if k.startswith("pop_")))
    summary: dict[str, Any] = {"enqueue_ids_per_s": median([r["enqueue_ids_per_s"] for r in raw])}
    for k in raw[0]:
        if k.startswith("pop_"):
            summary[k] = {"pops_per_s": median([r[k]["pops_per_s"] for r in raw]),
                          "twice": sum(r[k]["twice"] for r in raw)}
    return {"runs": raw, "summary": summary}


# ------------------------------------------------------------ 6. queue: worker loops
# A producer: (url, queue name) -> push(count, first, stamped). push enqueues
# `count` jobs (ids from `first` on); stamped: each carries the monotonic
# instant taken just before its enqueue (for the latency), else 0.
Push = Callable[[int, int, bool], None]


def producer_ferrolock(url: str, name: str) -> Push:
    from ferrolock import Queue

    q = Queue(name, url=url)

    def push(count: int, first: int, stamped: bool) -> None:
        if stamped:
            for i in range(first, first + count):
                q.enqueue(f"{i}:{time.monotonic_ns()}")
        else:
            q.enqueue([f"{i}:0" for i in range(first, first + count)])

    return push


def producer_ferrolock_payload(url: str, name: str) -> Push:
    """As producer_ferrolock, each job with a 1 KB payload."""
    from ferrolock import Queue

    q = Queue(name, url=url)
    payload = os.urandom(1024)

    def push(count: int, first: int, stamped: bool) -> None:
        if stamped:
            for i in range(first, first + count):
                q.enqueue({f"{i}:{time.monotonic_ns()}": payload})
        else:
            q.enqueue({f"{i}:0": payload for i in range(first, first + count)})

    return push


def producer_huey(url: str, name: str) -> Push:
    import hueyapp

    _, job = hueyapp.make(url, name)

    def push(count: int, first: int, stamped: bool) -> None:
        for _ in range(count):
            job(time.monotonic_ns() if stamped else 0)

    return push


def producer_rq(url: str, name: str) -> Push:
    import redis
    from rq import Queue

    q = Queue(name, connection=redis.Redis.from_url(url))

    def push(count: int, first: int, stamped: bool) -> None:
        if stamped:
            for _ in range(count):
                q.enqueue("qjobs.record", time.monotonic_ns())
        else:
            q.enqueue_many([Queue.prepare_data("qjobs.record", args=(0,)) for _ in range(count)])

    return push


# label: (queue_worker.py system, producer, jobs per drain run).
QUEUE_SYSTEMS: dict[str, tuple[str, Callable[[str, str], Push], int]] = {
    "ferrolock work()": ("ferrolock-work", producer_ferrolock, 6000),
    "ferrolock work(), 1 KB payloads": ("ferrolock-work", producer_ferrolock_payload, 6000),
    "ferrolock work() (PHP)": ("ferrolock-work-php", producer_ferrolock, 6000),
    "ferrolock reserve+ack": ("ferrolock-reserve", producer_ferrolock, 4000),
    "ferrolock reserve(16)+ack": ("ferrolock-batch", producer_ferrolock, 6000),
    "legacy RedisQueue pop (PHP)": ("legacy-pop-php", producer_ferrolock, 2000),
    "huey": ("huey", producer_huey, 3000),
    "RQ SimpleWorker": ("rq", producer_rq, 1000),
    "RQ Worker (fork per job)": ("rq-fork", producer_rq, 150),
}


class Consumers:
    """`n` queue_worker.py processes of one system on one queue, connected and
    waiting for the start instant; their jobs append records to a file."""

    def __init__(self, system: str, url: str, name: str, n: int) -> None:
        shm = Path("/dev/shm")
        fd, self.file = tempfile.mkstemp(prefix="ferrolock-bench-jobs-", dir=shm if shm.is_dir() else None)
        os.close(fd)
        env = {**os.environ, "BENCH_JOBS_FILE": self.file}
        self.procs = [subprocess.Popen([sys.executable, str(WORKERS / "queue_worker.py"), system, url, name],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
                      for _ in range(n)]
        for p in self.procs:
            if p.stdout.readline().strip() != "ready":
                self.close()
                raise RuntimeError(f"{system} consumer failed to start")

    def go(self, delay: float = 0.05) -> int:
        start_at = time.monotonic_ns() + int(delay * 1e9)
        for p in self.procs:
            p.stdin.write(f"{start_at}\n")
            p.stdin.flush()
        return start_at

    def wait_for(self, jobs: int, timeout: float) -> list[tuple[int, int]]:
        until = time.monotonic() + timeout
        while True:
            recs = qjobs.read(self.file)
            if len(recs) >= jobs:
                return recs
            if time.monotonic() > until or any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"{len(recs)} of {jobs} jobs done when the consumers stopped or timed out")
            time.sleep(0.002)

    def close(self) -> None:
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()
        with contextlib.suppress(OSError):
            os.unlink(self.file)


def commandstats(server: Server) -> dict[str, int]:
    return {k.removeprefix("cmdstat_"): v["calls"] for k, v in server.info("commandstats").items()}


def server_cpu(server: Server) -> float:
    i = server.info("cpu")
    return float(i["used_cpu_sys"]) + float(i["used_cpu_user"])


def drain(server: Server, label: str, consumers: int) -> dict:
    """Fills a fresh queue, then `consumers` processes (started, connected,
    idle) drain it from one instant: jobs/s from that instant to the start of
    the last job; server commands (script-internal ones included) and server
    CPU per 1000 jobs over the drain (INFO commandstats / INFO cpu, the
    runner's own INFO calls left out)."""
    system, producer, jobs = QUEUE_SYSTEMS[label]
    name = f"bench-drain-{system}-{time.monotonic_ns()}"
    producer(server.url, name)(jobs, 0, False)
    cons = Consumers(system, server.url, name, consumers)
    try:
        stats0, cpu0 = commandstats(server), server_cpu(server)
        start_at = cons.go()
        recs = cons.wait_for(jobs, timeout=300)
        stats1, cpu1 = commandstats(server), server_cpu(server)
    finally:
        cons.close()
    calls = {k: v - stats0.get(k, 0) for k, v in stats1.items() if k != "info" and v - stats0.get(k, 0) > 0}
    span = max(s for _, s in recs) - start_at
    return {"jobs": jobs, "jobs_per_s": jobs / (span / 1e9),
            "commands_per_1000": 1000 * sum(calls.values()) / jobs,
            "commands": dict(sorted(calls.items(), key=lambda kv: -kv[1])),
            "cpu_ms_per_1000": 1000 * 1000 * (cpu1 - cpu0) / jobs}


def latency(server: Server, label: str, samples: int) -> list[float]:
    """Enqueue -> job start with one idle consumer, one job at a time (ms)."""
    system, producer, _ = QUEUE_SYSTEMS[label]
    name = f"bench-latency-{system}-{time.monotonic_ns()}"
    push = producer(server.url, name)
    cons = Consumers(system, server.url, name, 1)
    try:
        cons.go(0)
        time.sleep(0.3)  # idle: blocked in its wait for work
        for i in range(samples):
            push(1, i, True)
            cons.wait_for(i + 1, timeout=30)
            time.sleep(0.01)
        recs = qjobs.read(cons.file)
    finally:
        cons.close()
    return [(s - e) / 1e6 for e, s in recs]


def monitor_commands(server: Server, label: str, jobs: int) -> dict:
    """Commands per job that MONITOR sees while one consumer drains `jobs`
    jobs (enqueued before MONITOR starts, so only the consumer's commands are
    seen): those its client sends (each a round trip unless pipelined) and
    those run inside scripts ("lua")."""
    system, producer, _ = QUEUE_SYSTEMS[label]
    name = f"bench-monitor-{system}-{time.monotonic_ns()}"
    producer(server.url, name)(jobs, 0, False)
    cons = Consumers(system, server.url, name, 1)
    lines: list[bytes] = []
    try:
        mon = socket.create_connection(("127.0.0.1", server.port))
        mon.sendall(b"MONITOR\r\n")
        buf = b""
        while b"\r\n" not in buf:
            buf += mon.recv(65536)
        buf = buf.split(b"\r\n", 1)[1]  # after +OK
        stop = threading.Event()

        def read() -> None:
            nonlocal buf
            mon.settimeout(0.05)
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    buf += mon.recv(1 << 20)
                    *done, buf = buf.split(b"\r\n")
                    lines.extend(done)

        t = threading.Thread(target=read)
        t.start()
        cons.go()
        cons.wait_for(jobs, timeout=120)
        time.sleep(0.1)
        stop.set()
        t.join()
        mon.close()
    finally:
        cons.close()
    counts = {"client": 0, "lua": 0}
    per_command: dict[str, int] = {}
    for line in lines:
        m = re.match(rb"\+?[\d.]+ \[\d+ ([^\]]+)\] \"([^\"]*)\"", line)
        if m:
            kind = "lua" if m.group(1) == b"lua" else "client"
            counts[kind] += 1
            if kind == "client":
                cmd = m.group(2).decode().lower()
                per_command[cmd] = per_command.get(cmd, 0) + 1
    return {"client_per_job": counts["client"] / jobs, "lua_per_job": counts["lua"] / jobs,
            "client_commands": dict(sorted(per_command.items(), key=lambda kv: -kv[1]))}


def section_drain(server: Server, args: argparse.Namespace) -> dict:
    raw: dict[str, list[dict]] = {label: [] for label in QUEUE_SYSTEMS}
    for i in range(args.runs):
        with one_cpu_each(server):
            limit = round_trip_limit(server, args.limit_requests)
        for label in QUEUE_SYSTEMS:
            # One consumer pinned, like the limit; four left to the scheduler.
            with one_cpu_each(server):
                one = drain(server, label, 1)
            four = drain(server, label, 4)
            raw[label].append({"limit": limit, "consumers_1": one, "consumers_4": four})
        log(f"   [{i + 1}/{args.runs}] limit {limit:,.0f}/s; jobs/s (1 / 4 consumers) " + "  ".join(
            f"{label} {runs[-1]['consumers_1']['jobs_per_s']:,.0f} / {runs[-1]['consumers_4']['jobs_per_s']:,.0f}"
            for label, runs in raw.items()))
    summary: dict[str, dict] = {}
    for label, runs in raw.items():
        lat = latency(server, label, args.latency_samples)
        mon = monitor_commands(server, label, min(args.monitor_jobs, QUEUE_SYSTEMS[label][2]))
        one = sorted(runs, key=lambda r: r["consumers_1"]["jobs_per_s"])[len(runs) // 2]["consumers_1"]
        s = {
            "jobs_per_s_1": median([r["consumers_1"]["jobs_per_s"] for r in runs]),
            "jobs_per_s_4": median([r["consumers_4"]["jobs_per_s"] for r in runs]),
            # k client commands per job, each a round trip: the limit is SET rate / k
            "share_of_limit": median([r["consumers_1"]["jobs_per_s"] * mon["client_per_job"] / (2 * r["limit"])
                                      for r in runs]),
            "commands_per_1000": median([r["consumers_1"]["commands_per_1000"] for r in runs]),
            "cpu_ms_per_1000": median([r["consumers_1"]["cpu_ms_per_1000"] for r in runs]),
            "commands": one["commands"],
            "latency_p50_ms": percentile(lat, 50), "latency_p99_ms": percentile(lat, 99),
            **mon,
        }
        summary[label] = s
        log(f"   {label:<26} enqueue->start p50 {s['latency_p50_ms']:.2f} ms p99 {s['latency_p99_ms']:.2f} ms; "
            f"client commands/job {s['client_per_job']:.2f} (+{s['lua_per_job']:.2f} in scripts); "
            f"server: {s['commands_per_1000']:,.0f} commands, {s['cpu_ms_per_1000']:.0f} ms CPU per 1000 jobs")
    return {"runs": raw, "summary": summary}


# ------------------------------------------------------------ 7. scale
def client_counts(server: Server) -> dict[str, int]:
    clients = server.r.client_list()
    return {"connections": len(clients),
            "subscribers": sum(1 for c in clients if int(c.get("sub", 0)) + int(c.get("psub", 0))
                               + int(c.get("ssub", 0)) > 0),
            "blocked": int(server.info("clients").get("blocked_clients", 0))}


SCALE_CASES = [("ferrolock (Python)", "bench:", False), ("ferrolock fair (Python)", "bench:", True),
               ("ferrolock, legacy interop on (Python, prefix Lock:)", "Lock:", False)]


def section_scale(server: Server, args: argparse.Namespace) -> dict:
    procs, hold_ms = 4, 1.0
    threads = args.scale_waiters // procs
    out: dict[str, Any] = {"shape": f"{procs * threads} waiters ({procs} processes x {threads} threads) x "
                                    f"{hold_ms:g} ms holds on one lock", "runs": {}, "summary": {}}
    # The target cases use a prefix of their own (legacy interop off): at the
    # default `Lock:` a run that lasts past 2 s of contention also leaves the
    # key free for legacy pollers (one turn of 150 ms), which the third case
    # measures as its own cost (docs/migration.md).
    for i, (label, prefix, fair) in [(i, case) for i in range(args.runs) for case in SCALE_CASES]:
        if "error" in out["summary"].get(label, {}):
            continue
        name = f"bench-scale-{time.monotonic_ns()}"
        cmd = [sys.executable, str(WORKERS / "scale.py"), server.url, name, str(threads), "1" if fair else "0",
               str(hold_ms), str(args.scale_timeout), prefix]
        try:
            w = Workers([cmd] * procs, timeout=args.scale_timeout + 60)
        except RuntimeError as e:
            out["summary"][label] = {"error": str(e)}
            continue
        idle = client_counts(server)
        samples: list[dict[str, int]] = []
        stop = threading.Event()

        def sample(samples: list[dict[str, int]] = samples, stop: threading.Event = stop) -> None:
            while not stop.wait(0.2):
                with contextlib.suppress(Exception):
                    samples.append(client_counts(server))

        t = threading.Thread(target=sample)
        t.start()
        t0 = time.monotonic()
        try:
            w.go(0.2)
            reports = w.reports()
        except RuntimeError as e:
            reports = []
            out["summary"][label] = {"error": f"{e} after {time.monotonic() - t0:.0f} s"}
        finally:
            stop.set()
            t.join()
        if not reports:
            continue
        holds = sorted((s, e) for r in reports for s, e in r["spans"])
        waits = [x for r in reports for x in r["waits"]]
        failures = [f for r in reports for f in r["failures"]]
        span = holds[-1][1] - holds[0][0] if holds else 1
        gaps = [(holds[k + 1][0] - holds[k][1]) / 1e6 for k in range(len(holds) - 1)]
        s = {"waiters": procs * threads, "done": len(holds), "failures": len(failures),
             "failure_kinds": sorted(set(failures))[:5], "span_s": span / 1e9,
             "efficiency": sum(e - s for s, e in holds) / span,
             "efficiency_nominal": len(holds) * hold_ms * 1e6 / span,
             "handover_p50_ms": percentile(gaps, 50) if gaps else None,
             "handover_p99_ms": percentile(gaps, 99) if gaps else None,
             "handover_max_ms": max(gaps) if gaps else None,
             "wait_p99_ms": percentile(waits, 99) / 1e6 if waits else None,
             "connections_idle": idle["connections"],
             "connections_max": max([x["connections"] for x in samples], default=idle["connections"]),
             "subscribers_max": max([x["subscribers"] for x in samples], default=idle["subscribers"]),
             "blocked_max": max([x["blocked"] for x in samples], default=idle["blocked"])}
        out["runs"].setdefault(label, []).append(s)
        log(f"   [{i + 1}/{args.runs}] {label}: {s['done']}/{s['waiters']} done, {s['failures']} failed, "
            f"span {s['span_s']:.1f} s, "
            f"efficiency {s['efficiency']:.2f} (nominal {s['efficiency_nominal']:.2f}), hand-over p50 "
            f"{f2(s['handover_p50_ms'])} p99 {f2(s['handover_p99_ms'])} max {f2(s['handover_max_ms'])} ms, "
            f"connections {s['connections_idle']} idle / "
            f"{s['connections_max']} max, subscribers max {s['subscribers_max']}")
    for label, runs in out["runs"].items():
        if "error" in out["summary"].get(label, {}):
            continue  # a run that failed is the result
        # Medians of the runs; failures and connections: the worst run.
        m: dict[str, Any] = {k: median([r[k] for r in runs]) for k in runs[0]
                             if k not in ("failure_kinds", "failures", "done") and runs[0][k] is not None}
        m.update({k: max(r[k] for r in runs) for k in ("failures", "connections_max", "subscribers_max",
                                                           "blocked_max")})
        m["done"] = min(r["done"] for r in runs)
        m["failure_kinds"] = sorted({f for r in runs for f in r["failure_kinds"]})[:5]
        m["efficiency_range"] = [min(r["efficiency"] for r in runs), max(r["efficiency"] for r in runs)]
        m["runs"] = len(runs)
        out["summary"][label] = m
    return out


# ------------------------------------------------------------ the record
# ------------------------------------------------------------ 8. asyncio
AIO_UNCONTENDED = ["ferrolock.aio", "redis.asyncio"]
AIO_CONTENTION = ["ferrolock.aio", "ferrolock.aio-fair", "redis.asyncio"]


def aio_case(*args: str) -> dict:
    out = subprocess.run([sys.executable, str(WORKERS / "aio_cases.py"), *args],
                         capture_output=True, text=True, check=True, timeout=600).stdout
    return json.loads(out)


def section_asyncio(server: Server, args: argparse.Namespace) -> dict:
    """Uncontended runs interleaved with the limit (as `uncontended`); the
    contended run of each lock between two serial runs of it (as `contention`)."""
    tasks, rounds, cs = 100, 5, 2.0
    raw: dict[str, Any] = {"uncontended": [], "contention": {k: [] for k in AIO_CONTENTION}}
    for i in range(args.runs):
        with one_cpu_each(server):
            limits = [round_trip_limit(server, args.limit_requests)]
            run: dict[str, Any] = {}
            for impl in AIO_UNCONTENDED:
                rate = aio_case("uncontended", impl, server.url, str(args.seconds))["pairs_per_s"]
                limits.append(round_trip_limit(server, args.limit_requests))
                run[impl] = {"pairs_per_s": rate, "limit": (limits[-2] + limits[-1]) / 2}
            raw["uncontended"].append(run)
        for impl in AIO_CONTENTION:
            before = aio_case("contention", impl, server.url, "1", str(tasks * rounds), str(cs))
            par = aio_case("contention", impl, server.url, str(tasks), str(rounds), str(cs))
            after = aio_case("contention", impl, server.url, "1", str(tasks * rounds), str(cs))
            serial = (before["span_s"] + after["span_s"]) / 2
            par["relative_efficiency"] = serial / par["span_s"]
            par["serial_span_s"] = serial
            par["lost_updates"] += before["lost_updates"] + after["lost_updates"]
            raw["contention"][impl].append(par)
        log(f"   [{i + 1}/{args.runs}] uncontended share  " + "  ".join(
            f"{k} {run[k]['pairs_per_s'] / run[k]['limit']:.2f}" for k in AIO_UNCONTENDED)
            + ";  contention rel.eff  " + "  ".join(
            f"{k} {raw['contention'][k][-1]['relative_efficiency']:.2f}" for k in AIO_CONTENTION))
    summary: dict[str, Any] = {"uncontended": {}, "contention": {}}
    for impl in AIO_UNCONTENDED:
        shares = [r[impl]["pairs_per_s"] / r[impl]["limit"] for r in raw["uncontended"]]
        summary["uncontended"][impl] = {
            "pairs_per_s": median([r[impl]["pairs_per_s"] for r in raw["uncontended"]]),
            "share": median(shares), "share_range": [min(shares), max(shares)]}
    for impl, runs in raw["contention"].items():
        s = {k: median([r[k] for r in runs]) for k in runs[0] if k != "lost_updates"}
        s["lost_updates"] = sum(r["lost_updates"] for r in runs)
        summary["contention"][impl] = s
    return {"shape": f"{tasks} tasks of one process x {rounds} sections (sleep {cs:g} ms + GET + SET "
                     f"through redis.asyncio) vs 1 task x {tasks * rounds}",
            "runs": raw, "summary": summary}


def sh(*cmd: str) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def metadata(server: Server, args: argparse.Namespace, sections: list[str]) -> dict:
    from importlib.metadata import PackageNotFoundError, version

    def v(pkg: str) -> str:
        try:
            return version(pkg)
        except PackageNotFoundError:
            return "-"

    model = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                  if ln.startswith("model name")), platform.processor() or "?")
    dirty = sh("git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/results")
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": sh("git", "rev-parse", "--short=10", "HEAD") + ("+dirty" if dirty else ""),
        "machine": {"cores": os.cpu_count(), "cpu": model, "arch": platform.machine(), "kernel": platform.release(),
                    "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30)},
        "server": {"kind": server.kind, "binary": server.binary, "version": server.version},
        "software": {"python": platform.python_version(), "php": sh("php", "-r", "echo PHP_VERSION;"),
                     "phpredis": sh("php", "-r", "echo phpversion('redis');"), "redis-py": v("redis"),
                     "python-redis-lock": v("python-redis-lock"), "huey": v("huey"), "rq": v("rq")},
        "args": {k: str(x) if isinstance(x, Path) else x for k, x in vars(args).items()},
        # The machine is shared: the load when the run started (and ended, see main).
        "load_start": [round(x, 2) for x in os.getloadavg()],
        "sections": sections,
    }


def describe(meta: dict) -> str:
    m, s = meta["machine"], meta["server"]
    return (f"{meta['date']}, commit `{meta['commit']}`, {m['cores']} cores ({m['cpu']}), "
            f"{s['kind']}-server {s['version']} on loopback, Python {meta['software']['python']}, "
            f"PHP {meta['software']['php']}; medians of {meta['args']['runs']} interleaved runs; load average "
            f"{meta['load_start'][0]:.1f} at the start" + (f", {meta['load_end'][0]:.1f} at the end"
                                                            if "load_end" in meta else "") + busy(meta))


def busy(meta: dict) -> str:
    """A warning when other work loaded the machine: the CPU time used by
    processes not of this run (and stolen by the hypervisor) above a quarter
    of the machine's, or, for runs recorded before that was measured, a load
    average above the cores at the start (the end's includes this run)."""
    cores = meta["machine"]["cores"]
    if "other_cpu_share" in meta:
        share = meta["other_cpu_share"]
        if share <= 0.25:
            return f"; other work on the machine used {100 * share:.0f} % of its CPU time during the run"
        why = f"other work used {100 * share:.0f} % of its CPU time"
    elif meta["load_start"][0] > cores:
        why = f"load average {meta['load_start'][0]:.1f} on {cores} cores before it started"
    else:
        return ""
    return (f". **The machine was busy with other work during this run ({why}): its numbers are disturbed; "
            "rerun on a quiet machine to compare**")


def cpu_clock() -> tuple[float, float]:
    """(busy CPU seconds of the whole machine, steal included; CPU seconds of
    this process and its reaped children)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    # user nice system idle iowait irq softirq steal guest guest_nice
    busy_ticks = sum(fields[:3]) + sum(fields[5:8])
    t = os.times()
    return busy_ticks / os.sysconf("SC_CLK_TCK"), t.user + t.system + t.children_user + t.children_system


# ------------------------------------------------------------ report
def f2(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def headline(res: dict) -> str:
    """The one table of the README: every target of DESIGN.md §8 with what
    ferrolock and the others measured in this run."""
    sec = res["sections"]
    rows: list[tuple[str, str, str, str, str]] = []
    rtt_ms = None
    if "uncontended" in sec and "summary" in sec["uncontended"]:
        u = sec["uncontended"]["summary"]
        rtt_ms = 1000 / (2 * u["limit"])
        lk = u["locks"]
        rows.append((f"uncontended acquire+release, share of the round-trip limit ({u['limit']:,.0f} pairs/s)",
                     f2(lk["ferrolock (Python)"]["share"]), f2(lk["ferrolock (PHP)"]["share"]),
                     ", ".join(f"{n} {f2(x['share'])}" for n, x in lk.items() if not n.startswith("ferrolock")),
                     "≥ 0.90"))
    if "contention" in sec and "summary" in sec["contention"]:
        c = sec["contention"]["summary"]
        peers = [n for n in c if not n.startswith("ferrolock")]
        rows.append(("8 processes × 25 × (sleep 2 ms + GET + SET): efficiency vs the same worker serially",
                     f2(c["ferrolock (Python)"]["relative_efficiency"]),
                     f2(c["ferrolock (PHP)"]["relative_efficiency"]),
                     ", ".join(f"{n} {f2(c[n]['relative_efficiency'])}" for n in peers), "≥ 0.90"))
        rows.append(("… the same, fair mode", f2(c["ferrolock fair (Python)"]["relative_efficiency"]),
                     f2(c["ferrolock fair (PHP)"]["relative_efficiency"]), "", "≥ 0.90"))
        ideal = c["ferrolock fair (Python)"]["ideal_wait_ms"]
        rows.append((f"… fair mode: p99 wait ÷ ideal FIFO wait (7 sections ≈ {ideal:.1f} ms)",
                     f2(c["ferrolock fair (Python)"]["p99_over_ideal"]),
                     f2(c["ferrolock fair (PHP)"]["p99_over_ideal"]),
                     ", ".join(f"{n} {f2(c[n]['p99_over_ideal'])}" for n in peers) + " (not fair)", "≤ 1.5"))
        rows.append(("… lost updates of the counter, all runs",
                     str(c["ferrolock (Python)"]["lost"] + c["ferrolock fair (Python)"]["lost"]),
                     str(c["ferrolock (PHP)"]["lost"] + c["ferrolock fair (PHP)"]["lost"]),
                     ", ".join(f"{n} {c[n]['lost']}" for n in peers), "0"))
    if "busy" in sec and "summary" in sec["busy"]:
        b = sec["busy"]["summary"]
        rows.append(("8 processes × 25 × 2 ms busy-wait: efficiency (ideal busy time ÷ span)",
                     f2(b["ferrolock (Python)"]["efficiency"]), f2(b["ferrolock (PHP)"]["efficiency"]),
                     ", ".join(f"{n} {f2(x['efficiency'])}" for n, x in b.items() if not n.startswith("ferrolock")
                               and not n.startswith("mixed")), ""))
    if "wakeup" in sec and "summary" in sec["wakeup"]:
        w, pp = sec["wakeup"]["summary"]["wakeup"], sec["wakeup"]["summary"]["pingpong"]
        rows.append(("release → waiter wake-up, p50 / p99 (ms)",
                     f"{w['ferrolock']['p50_ms']:.3f} / {w['ferrolock']['p99_ms']:.3f}", "",
                     ", ".join(f"{n} {x['p50_ms']:.3f} / {x['p99_ms']:.3f}" for n, x in w.items()
                               if not n.startswith("ferrolock")), "p50 ≤ 0.3"))
        rows.append(("two-process ping-pong hand-over, p50 (ms)", f"{pp['ferrolock (Python)']['p50_ms']:.3f}",
                     f"{pp['ferrolock (PHP)']['p50_ms']:.3f}",
                     ", ".join(f"{n} {x['p50_ms']:.3f}" for n, x in pp.items() if not n.startswith("ferrolock")),
                     f"≈ one round trip ({rtt_ms:.3f})" if rtt_ms else "≈ one round trip"))
    if "queue" in sec and "summary" in sec["queue"]:
        q = sec["queue"]["summary"]
        rows.append(("queue: batch enqueue, ids/s", f"{q['enqueue_ids_per_s']:,.0f}", "", "", "≥ 200,000"))
        rows.append(("queue: single pops/s, 1 / 4 PHP consumers", "",
                     f"{q['pop_ferrolock_1']['pops_per_s']:,.0f} / {q['pop_ferrolock_4']['pops_per_s']:,.0f}",
                     f"legacy PHP {q['pop_legacy_1']['pops_per_s']:,.0f} / {q['pop_legacy_4']['pops_per_s']:,.0f}",
                     ""))
    if "drain" in sec and "summary" in sec["drain"]:
        d = sec["drain"]["summary"]
        ours = [n for n in d if n.startswith("ferrolock")]
        theirs = [n for n in d if not n.startswith("ferrolock")]

        def cells(fmt: Callable[[dict], str]) -> tuple[str, str]:
            return ("; ".join(f"{n.removeprefix('ferrolock ')} {fmt(d[n])}" for n in ours),
                    ", ".join(f"{n} {fmt(d[n])}" for n in theirs))

        for title, fmt, target in [
            ("queue drain, no-op jobs, 1 consumer process (jobs/s)", lambda x: f"{x['jobs_per_s_1']:,.0f}",
             "≥ 1.5 × reserve+ack, ahead of huey and RQ"),
            ("… 4 consumer processes (jobs/s)", lambda x: f"{x['jobs_per_s_4']:,.0f}", ""),
            ("… client commands per job (MONITOR)", lambda x: f"{x['client_per_job']:.2f}", "1"),
            ("… share of its round-trip limit, 1 consumer (each client command a round trip)",
             lambda x: f2(x["share_of_limit"]), "≥ 0.85"),
            ("… server: commands / CPU ms per 1000 jobs",
             lambda x: f"{x['commands_per_1000']:,.0f} / {x['cpu_ms_per_1000']:.0f}", ""),
            ("… enqueue → start with an idle worker, p50 / p99 (ms)",
             lambda x: f"{x['latency_p50_ms']:.2f} / {x['latency_p99_ms']:.2f}", "")]:
            ours_cell, theirs_cell = cells(fmt)
            if "share" in title:  # the peers pipeline: their commands are not each a round trip
                theirs_cell = ""
            rows.append((title, ours_cell, "", theirs_cell, target))
    if "scale" in sec and "summary" in sec["scale"]:
        for label, s in sec["scale"]["summary"].items():
            legacy = "legacy" in label
            mode = "fair" if "fair" in label else "non-fair, legacy interop on" if legacy else "non-fair"
            if "error" in s:
                rows.append((f"scale, {mode}: 2,000 waiters × 1 ms in 4 processes", s["error"], "", "", ""))
                continue
            rows.append((f"scale, {mode}: {s['waiters']:,.0f} waiters × 1 ms in 4 processes: efficiency / hand-over "
                         f"p99 ms / max connections", f"{f2(s['efficiency'])} / {f2(s['handover_p99_ms'])} / "
                         f"{s['connections_max']}" + (f" ({s['failures']} failed)" if s["failures"] else ""),
                         "", "", "its cost (docs/migration.md)" if legacy else "≥ 0.7 / ≤ 5 / bounded"))
    lines = [f"Measured {describe(res['meta'])}.", "",
             "| measure | ferrolock (Python) | ferrolock (PHP) | others, same run | target |",
             "|---|---:|---:|---|---|"]
    lines += [f"| {' | '.join(r)} |" for r in rows]
    return "\n".join(lines) + "\n"


def readme_table(res: dict) -> str:
    """The README's short table: a few headline rows (lock throughput, contention,
    lost updates, wake-up, queue drain and pops), without targets; the full
    `headline` table is in docs/benchmarks.md."""
    sec = res["sections"]

    def has(name: str) -> bool:
        return name in sec and "summary" in sec[name]

    def others(items: dict[str, Any], fmt: Callable[[Any], str]) -> str:
        return ", ".join(f"{n} {fmt(x)}" for n, x in items.items() if not n.startswith("ferrolock"))

    rows: list[tuple[str, str, str, str]] = []
    if has("uncontended"):
        u = sec["uncontended"]["summary"]["locks"]
        rows.append(("acquire+release, share of the round-trip limit", f2(u["ferrolock (Python)"]["share"]),
                     f2(u["ferrolock (PHP)"]["share"]), others(u, lambda x: f2(x["share"]))))
    if has("contention"):
        c = sec["contention"]["summary"]
        rows.append(("8 processes contending: efficiency vs one process",
                     f2(c["ferrolock (Python)"]["relative_efficiency"]),
                     f2(c["ferrolock (PHP)"]["relative_efficiency"]),
                     others(c, lambda x: f2(x["relative_efficiency"]))))
        rows.append(("… lost updates of a counter",
                     str(c["ferrolock (Python)"]["lost"] + c["ferrolock fair (Python)"]["lost"]),
                     str(c["ferrolock (PHP)"]["lost"] + c["ferrolock fair (PHP)"]["lost"]),
                     others(c, lambda x: str(x["lost"]))))
    if has("wakeup"):
        w = sec["wakeup"]["summary"]["wakeup"]
        rows.append(("release → waiter wake-up, p50 ms", f"{w['ferrolock']['p50_ms']:.3f}", "",
                     others(w, lambda x: f"{x['p50_ms']:.3f}")))
    if has("drain"):
        d = sec["drain"]["summary"]
        rows.append(("queue worker loop (`work()`), 1 consumer, jobs/s",
                     f"{d['ferrolock work()']['jobs_per_s_1']:,.0f}",
                     f"{d['ferrolock work() (PHP)']['jobs_per_s_1']:,.0f}",
                     others(d, lambda x: f"{x['jobs_per_s_1']:,.0f}")))
    if has("queue"):
        q = sec["queue"]["summary"]
        rows.append(("queue pops/s, 4 PHP consumers", "", f"{q['pop_ferrolock_4']['pops_per_s']:,.0f}",
                     f"legacy PHP {q['pop_legacy_4']['pops_per_s']:,.0f}"))
    lines = [f"Measured {describe(res['meta'])}.", "",
             "| measure | ferrolock (Python) | ferrolock (PHP) | others, same run |", "|---|---:|---:|---|"]
    lines += [f"| {' | '.join(r)} |" for r in rows]
    return "\n".join(lines) + "\n"


def details(res: dict) -> str:
    """Every table of the run: docs/benchmarks.md's raw numbers."""
    sec = res["sections"]
    out = [f"Measured {describe(res['meta'])}.", ""]
    for name, s in sec.items():
        if "error" in s:
            out += [f"**{name}**: failed: `{s['error']}`", ""]
    if "uncontended" in sec and "summary" in sec["uncontended"]:
        u = sec["uncontended"]
        out += ["**Uncontended acquire+release** against the round-trip limit (redis-benchmark -c 1 SET rate / 2); "
                "every run of a lock sits between two runs of the limit and is compared with their mean.", "",
                "| | " + " | ".join(f"run {i + 1}" for i in range(len(u["runs"]))) + " | median | share of limit "
                "(median, range) |", "|---|" + "---:|" * (len(u["runs"]) + 2)]
        out.append("| round-trip limit, pairs/s (lowest–highest of the run) | " + " | ".join(
            f"{min(r['limits']):,.0f}–{max(r['limits']):,.0f}" for r in u["runs"])
                   + f" | {u['summary']['limit']:,.0f} | |")
        for n, x in u["summary"]["locks"].items():
            out.append(f"| {n} | " + " | ".join(f"{r[n]['pairs_per_s']:,.0f}" for r in u["runs"])
                       + f" | {x['pairs_per_s']:,.0f} | "
                       f"{x['share']:.2f} ({x['share_range'][0]:.2f}–{x['share_range'][1]:.2f}) |")
        out.append("")
    if "contention" in sec and "summary" in sec["contention"]:
        c = sec["contention"]
        out += [f"**Contention, sleep-based**: {c['shape']}. Relative efficiency = serial span ÷ 8-process span; "
                "ideal FIFO wait = 7 × the mean section time of the 8-process run; loss per hand-over = (8-process "
                "span − serial span) ÷ 199; the serial run goes before and after the 8 processes, and the mean of its "
                "two spans is the reference. Medians of the runs; lost updates summed over all runs.", "",
                "| lock | rel. efficiency (range) | section ms | p50 wait ms | p99 wait ms | ideal FIFO wait ms "
                "| p99 ÷ ideal | max wait ms | loss per hand-over ms | lost updates |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for n, x in c["summary"].items():
            lo, hi = x["relative_efficiency_range"]
            out.append(f"| {n} | {x['relative_efficiency']:.2f} ({lo:.2f}–{hi:.2f}) | {x['section_ms']:.2f} | "
                       f"{x['p50_wait_ms']:.1f} | {x['p99_wait_ms']:.1f} | {x['ideal_wait_ms']:.1f} | "
                       f"{x['p99_over_ideal']:.2f} | {x['max_wait_ms']:.1f} | {x['loss_per_handover_ms']:.3f} | "
                       f"{x['lost']} |")
        out.append("")
    if "asyncio" in sec and "summary" in sec["asyncio"]:
        a = sec["asyncio"]["summary"]
        out += ["**asyncio, uncontended**: one task's `await acquire(blocking=False)` + `await release()` "
                "cycles per second, against the round-trip limit (interleaved as above).", "",
                "| lock | pairs/s | share of limit (median, range) |", "|---|---:|---:|"]
        for n, x in a["uncontended"].items():
            out.append(f"| {n} | {x['pairs_per_s']:,.0f} | {x['share']:.2f} "
                       f"({x['share_range'][0]:.2f}–{x['share_range'][1]:.2f}) |")
        out += ["", f"**asyncio, contention**: {sec['asyncio']['shape']}; relative efficiency = serial "
                "span ÷ contended span (the serial run before and after, their mean). redis.asyncio's Lock polls "
                "every 0.1 s (its default `sleep`). Medians; lost updates summed.", "",
                "| lock | rel. efficiency | span s | p50 wait ms | p99 wait ms | peak threads | lost updates |",
                "|---|---:|---:|---:|---:|---:|---:|"]
        for n, x in a["contention"].items():
            out.append(f"| {n} | {x['relative_efficiency']:.2f} | {x['span_s']:.2f} | {x['wait_p50_ms']:.1f} | "
                       f"{x['wait_p99_ms']:.1f} | {x['peak_threads']:.0f} | {x['lost_updates']} |")
        out.append("")
    if "busy" in sec and "summary" in sec["busy"]:
        b = sec["busy"]
        out += [f"**Contention, busy-wait**: {b['shape']} (a file counter). Efficiency = ideal busy time ÷ span; "
                "occupancy = measured section time ÷ span.", "",
                "| lock | efficiency (range) | occupancy | p50 wait ms | p99 wait ms | max wait ms | lost updates |",
                "|---|---:|---:|---:|---:|---:|---:|"]
        for n, x in b["summary"].items():
            lo, hi = x["efficiency_range"]
            out.append(f"| {n} | {x['efficiency']:.2f} ({lo:.2f}–{hi:.2f}) | {x['occupancy']:.2f} | "
                       f"{x['p50_wait_ms']:.1f} | {x['p99_wait_ms']:.1f} | {x['max_wait_ms']:.1f} | {x['lost']} |")
        out.append("")
    if "wakeup" in sec and "summary" in sec["wakeup"]:
        w = sec["wakeup"]["summary"]
        out += ["**Wake-up**: release call → a waiting thread's acquire returning (same process), and a two-process "
                "ping-pong (1 ms holds, 1 ms pause after each release): release call → the other process's acquire "
                "returning.", "", "| | p50 ms | p99 ms |", "|---|---:|---:|"]
        out += [f"| wake-up, {n} | {x['p50_ms']:.3f} | {x['p99_ms']:.3f} |" for n, x in w["wakeup"].items()]
        out += [f"| ping-pong, {n} | {x['p50_ms']:.3f} | {x['p99_ms']:.3f} |" for n, x in w["pingpong"].items()]
        out.append("")
    if "queue" in sec and "summary" in sec["queue"]:
        q = sec["queue"]["summary"]
        out += [f"**Queue**: batch enqueue (Python, batches of 10 000 ids): {q['enqueue_ids_per_s']:,.0f} ids/s. "
                "Single pops (one task per call) from PHP processes on one queue: ferrolock's `RedisQueue` (one "
                "script) and the legacy class (queue lock + ZRANGEBYSCORE + ZREM + unlock).", "",
                "| consumers | ferrolock pops/s | legacy pops/s | tasks handed out twice (ferrolock / legacy) |",
                "|---:|---:|---:|---:|"]
        for n in (1, 4):
            f, g = q[f"pop_ferrolock_{n}"], q[f"pop_legacy_{n}"]
            out.append(f"| {n} | {f['pops_per_s']:,.0f} | {g['pops_per_s']:,.0f} | {f['twice']} / {g['twice']} |")
        out.append("")
    if "drain" in sec and "summary" in sec["drain"]:
        d = sec["drain"]["summary"]
        out += ["**Queue worker loops**: no-op jobs drained from a filled queue by 1 and 4 consumer processes; "
                "commands and CPU are the server's over the 1-consumer drain (INFO commandstats, script-internal "
                "commands included; INFO cpu); client commands per job from MONITOR (pipelined ones count "
                "each); latency = enqueue → job start with one idle consumer.", "",
                "| system | jobs/s, 1 consumer | jobs/s, 4 | share of its round-trip limit | client commands "
                "per job | in scripts per job | server commands per 1000 jobs | server CPU ms per 1000 jobs | "
                "latency p50 ms | latency p99 ms |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for n, x in d.items():
            out.append(f"| {n} | {x['jobs_per_s_1']:,.0f} | {x['jobs_per_s_4']:,.0f} | {x['share_of_limit']:.2f} | "
                       f"{x['client_per_job']:.2f} | {x['lua_per_job']:.2f} | {x['commands_per_1000']:,.0f} | "
                       f"{x['cpu_ms_per_1000']:.0f} | {x['latency_p50_ms']:.2f} | {x['latency_p99_ms']:.2f} |")
        out += ["", "Commands per job by name (1-consumer drain, server side):", ""]
        for n, x in d.items():
            jobs = sec["drain"]["runs"][n][0]["consumers_1"]["jobs"]
            top = ", ".join(f"{k} {v / jobs:.2f}" for k, v in list(x["commands"].items())[:10])
            out.append(f"- {n}: {top}")
        out.append("")
    if "scale" in sec and "summary" in sec["scale"]:
        s = sec["scale"]
        out += [f"**Scale**: {s['shape']}. Efficiency = sum of holds ÷ span (nominal: waiters × 1 ms ÷ span; "
                "the holds spin, so the two agree); hand-over = gap between consecutive holds; connections from "
                "CLIENT LIST every 0.2 s. Medians of the runs (efficiency: range in brackets); connections and "
                "failures: the worst run.", "",
                "| lock | done | failed | span s | efficiency (nominal) | hand-over p50 / p99 / max ms | wait p99 ms | "
                "connections idle / max | subscribers max | blocked max |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for n, x in s["summary"].items():
            if "error" in x:
                out.append(f"| {n} | {x['error']} | | | | | | | | |")
                continue
            out.append(f"| {n} | {x['done']} | {x['failures']} | {x['span_s']:.1f} | {f2(x['efficiency'])} "
                       f"({f2(x['efficiency_nominal'])}) [{f2(x['efficiency_range'][0])}–"
                       f"{f2(x['efficiency_range'][1])}] | {f2(x['handover_p50_ms'])} / {f2(x['handover_p99_ms'])} / "
                       f"{f2(x.get('handover_max_ms'))} | "
                       f"{f2(x['wait_p99_ms'])} | {x['connections_idle']} / {x['connections_max']} | "
                       f"{x['subscribers_max']} | {x['blocked_max']} |")
        out.append("")
    return "\n".join(out)


def chart(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sec = res["sections"]
    panels = [p for p in ("uncontended", "contention", "contention-p99", "drain")
              if "summary" in sec.get(p.split("-")[0], {})]
    if not panels:
        return
    cols = min(2, len(panels))
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(6.4 * cols, 3.9 * rows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)

    def bars(ax: Any, data: dict[str, float], title: str, target: float | None, label: str | None = None) -> None:
        names = list(data)
        ax.barh(names, [data[n] for n in names],
                color=["#c0392b" if n.startswith("ferrolock") else "#7f8c8d" for n in names])
        if target is not None:
            ax.axvline(target, color="k", ls=":", label=label)
            ax.legend(loc="lower right", fontsize=8)
        ax.invert_yaxis()
        ax.set_title(title, fontsize=10)
        ax.tick_params(axis="y", labelsize=8)

    for ax, p in zip(axes.flat, panels):
        if p == "uncontended":
            s = sec["uncontended"]["summary"]
            bars(ax, {n: x["share"] for n, x in s["locks"].items()},
                 f"uncontended acquire+release\nshare of the round-trip limit ({s['limit']:,.0f}/s)", 0.9, "target 0.9")
        elif p == "contention":
            c = sec["contention"]["summary"]
            bars(ax, {n: x["relative_efficiency"] for n, x in c.items()},
                 "8 × 25 × (sleep 2 ms + GET + SET)\nefficiency vs the same worker serially", 0.9, "target 0.9")
            ax.set_xlim(0, 1.05)
        elif p == "contention-p99":
            c = sec["contention"]["summary"]
            bars(ax, {n: x["p99_over_ideal"] for n, x in c.items()},
                 "p99 acquire wait ÷ ideal FIFO wait\n(log scale)", 1.5, "fair-mode target 1.5")
            ax.set_xscale("log")
        else:
            d = sec["drain"]["summary"]
            names = list(d)
            y = range(len(names))
            ax.barh([i - 0.2 for i in y], [d[n]["jobs_per_s_1"] for n in names], height=0.4, label="1 consumer",
                    color=["#c0392b" if n.startswith("ferrolock") else "#7f8c8d" for n in names])
            ax.barh([i + 0.2 for i in y], [d[n]["jobs_per_s_4"] for n in names], height=0.4, label="4 consumers",
                    color=["#e6a19a" if n.startswith("ferrolock") else "#c8cfd0" for n in names])
            ax.set_yticks(list(y), names, fontsize=8)
            ax.invert_yaxis()
            ax.legend(loc="lower right", fontsize=8)
            ax.set_xscale("log")
            ax.set_title("queue drain, no-op jobs (jobs/s, log scale)", fontsize=10)
    meta = res["meta"]
    fig.suptitle(f"ferrolock on {meta['server']['kind']} {meta['server']['version']}, {meta['machine']['cores']} "
                 f"cores, commit {meta['commit']}, {meta['date']} (red: ferrolock)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def replace_block(path: Path, marker: str, text: str) -> bool:
    """Replaces what stands between `<!-- marker -->` and `<!-- /marker -->`."""
    if not path.exists():
        return False
    s = path.read_text()
    begin, end = f"<!-- {marker} -->", f"<!-- /{marker} -->"
    if begin not in s or end not in s:
        return False
    head, rest = s.split(begin, 1)
    _, tail = rest.split(end, 1)
    path.write_text(f"{head}{begin}\n{text.rstrip()}\n{end}{tail}")
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", choices=["redis", "valkey"], default=os.environ.get("BENCH_SERVER") or "redis")
    ap.add_argument("--only", default="", help=f"comma-separated sections (default all): {','.join(SECTIONS)}")
    ap.add_argument("--runs", type=int, default=3, help="interleaved runs of every case (medians are reported)")
    ap.add_argument("--seconds", type=float, default=2.0, help="duration of each uncontended run")
    ap.add_argument("--limit-requests", type=int, default=15_000, help="SETs per redis-benchmark run")
    ap.add_argument("--rounds", type=int, default=25, help="critical sections per contending process")
    ap.add_argument("--samples", type=int, default=100, help="wake-up samples per lock and run")
    ap.add_argument("--pingpong", type=int, default=60, help="holds per ping-pong process and run")
    ap.add_argument("--pop-seconds", type=float, default=2.0, help="duration of each single-pop run")
    ap.add_argument("--latency-samples", type=int, default=50, help="enqueue->start samples per queue system")
    ap.add_argument("--monitor-jobs", type=int, default=200, help="jobs drained under MONITOR per queue system")
    ap.add_argument("--scale-waiters", type=int, default=2000)
    ap.add_argument("--scale-timeout", type=float, default=120.0, help="acquire timeout of each scale waiter (s)")
    ap.add_argument("--out", type=Path, default=RESULTS, help="where results.* and runs/ go")
    ap.add_argument("--render", type=Path, metavar="RAW_JSON",
                    help="measure nothing: write results.* again from a kept full run (runs/*.json)")
    args = ap.parse_args()
    if args.render:
        return render(args.render, args.out)
    sections = [s for s in args.only.split(",") if s] or SECTIONS
    if unknown := set(sections) - set(SECTIONS):
        ap.error(f"unknown sections {sorted(unknown)}; known: {','.join(SECTIONS)}")
    full = sections == SECTIONS
    if not PHP_EXT.exists():
        sys.exit(f"{PHP_EXT} missing: run `make php python` (or `make bench`)")
    t_start = time.monotonic()
    clock_start = cpu_clock()
    server = Server(args.server)
    res: dict[str, Any] = {"meta": metadata(server, args, sections), "sections": {}}
    log(f"ferrolock bench: {describe(res['meta'])}")
    os.environ["REDIS_URL"] = server.url
    try:
        for name in sections:
            # Every section starts on an empty server: what one leaves (the
            # drain section, some 15,000 keys) is not the next one's to pay
            # for.
            left = server.r.dbsize()
            server.r.flushall()
            log(f"{name} ..." + (f" ({left:,} keys left by the sections before: flushed)" if left else ""))
            t0 = time.monotonic()
            try:
                res["sections"][name] = globals()[f"section_{name}"](server, args)
            except Exception as e:  # recorded and shown: the other sections still run
                log(f"   {name} FAILED: {e!r}")
                res["sections"][name] = {"error": repr(e)}
            res["sections"][name]["seconds"] = round(time.monotonic() - t0, 1)
    finally:
        server.close()
    res["meta"]["seconds"] = round(time.monotonic() - t_start, 1)
    res["meta"]["load_end"] = [round(x, 2) for x in os.getloadavg()]
    # Every worker and the server are reaped by now: their CPU time is in
    # this process's children times; what else the machine did is others'.
    (busy0, ours0), (busy1, ours1) = clock_start, cpu_clock()
    wall = time.monotonic() - t_start
    res["meta"]["other_cpu_share"] = round(max(0.0, (busy1 - busy0) - (ours1 - ours0)) / (wall * os.cpu_count()), 3)

    runs_dir = args.out / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d-%H%M%S")
    raw_path = runs_dir / (f"{stamp}-{args.server}.json" if full else f"partial-{stamp}-{args.server}.json")
    raw_path.write_text(json.dumps(res, indent=1) + "\n")
    if full:
        write_results(res, args.out)
        log(f"wrote {raw_path}")
    else:
        log(f"\nwrote {raw_path} (a partial run: results.* untouched)")
    log(f"took {res['meta']['seconds']:.0f} s\n")
    log(headline(res))
    log(details(res))
    return 0


def write_results(res: dict, out: Path) -> None:
    """results{,-valkey}.{md,json,png} and details{,-valkey}.md from a full
    run, and (into bench/results only) the marked blocks of README.md (Redis:
    `readme_table`, a few headline rows) and docs/benchmarks.md (`headline`
    and `details`)."""
    server = res["meta"]["server"]["kind"]
    suffix = "" if server == "redis" else f"-{server}"
    table, more = headline(res), details(res)
    summary = {"meta": res["meta"], "sections": {k: v.get("summary", v) for k, v in res["sections"].items()}}
    (out / f"results{suffix}.json").write_text(json.dumps(summary, indent=1) + "\n")
    (out / f"results{suffix}.md").write_text(table)
    (out / f"details{suffix}.md").write_text(more)
    chart(res, out / f"results{suffix}.png")
    if out.resolve() == RESULTS:
        if server == "redis":
            replace_block(ROOT / "README.md", "bench:results", readme_table(res))
        replace_block(ROOT / "docs" / "benchmarks.md", f"bench:headline:{server}", table)
        replace_block(ROOT / "docs" / "benchmarks.md", f"bench:details:{server}", more)
    log(f"\nwrote {out}/results{suffix}.{{md,json,png}}, details{suffix}.md")


def render(raw: Path, out: Path) -> int:
    """`--render RAW`: writes the results of a kept full run again (after a change
    of the tables or the chart); the numbers are that run's."""
    res = json.loads(raw.read_text())
    # Runs kept from before the asyncio section was added are still full runs.
    if not set(SECTIONS) - {"asyncio"} <= set(res["meta"]["sections"]):
        sys.exit(f"{raw} is a partial run")
    write_results(res, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
