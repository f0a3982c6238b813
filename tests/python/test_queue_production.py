"""The production queue through the Python API: attempts, backoff, dead
letters, heartbeats, payloads, batch reserve, one id never in flight twice,
stats, and the worker loop."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import ferrolock
from ferrolock import Queue, Task
from tests.support.servers import RedisServer


def evalsha_calls(r) -> int:
    info = r("INFO", "commandstats")
    for line in (info.decode() if isinstance(info, bytes) else info).splitlines():
        if line.startswith("cmdstat_evalsha:"):
            return int(line.split("calls=")[1].split(",")[0])
    return 0


def test_a_poison_task_backs_off_while_good_ones_are_served_then_dies(url, name):
    # The case: visibility 0.2 s, `bad` first, a consumer that acks
    # everything but `bad` (its reservations time out).
    q = Queue(name, visibility=0.2, backoff=0.3, backoff_jitter=0, max_attempts=3)
    q.enqueue("bad", delay=-1)
    q.enqueue(["good1", "good2"])
    served: list[tuple[str, int]] = []
    until = time.monotonic() + 10
    while q.stats()["dead"] == 0 and time.monotonic() < until:
        task = q.reserve(wait=0.3)
        if task is None:
            continue
        served.append((task.id, task.attempts))
        if task.id != "bad":
            assert task.ack()
    assert [n for n, _ in served[:3]] == ["bad", "good1", "good2"], served
    assert [a for n, a in served if n == "bad"] == [1, 2, 3], served
    dead = q.dead()
    assert [t.id for t in dead] == ["bad"] and dead[0].attempts == 3
    assert q.stats() == {"due": 0, "delayed": 0, "in_flight": 0, "dead": 1, "oldest_due_age": 0.0}


def test_nack_backs_off_unless_given_a_delay(url, name, r):
    q = Queue(name, backoff=5, backoff_jitter=0)
    q.enqueue("t")
    t = q.reserve()
    assert t.nack()  # after its backoff: 5 s
    assert q.top() is None and q.stats()["delayed"] == 1
    (due,) = [float(s) for s in r("ZRANGE", f"Queue:{name}", 0, -1, "WITHSCORES")[1::2]]
    assert 4 < due - time.time() <= 5.1
    q.dequeue("t", due)
    q.enqueue("u")
    u = q.reserve()
    assert u.nack(delay=0)
    again = q.reserve()
    assert again.id == "u" and again.attempts == 2


def test_dead_letters_are_listed_retried_and_purged(url, name):
    q = Queue(name, max_attempts=1)
    q.enqueue({"a": b"A"}, delay=-2)
    q.enqueue(["b", "c"], delay=-1)
    for t in q.reserve(10):
        assert t.nack()
    dead = q.dead()
    assert [t.id for t in dead] == ["a", "b", "c"]
    assert dead[0].payload == b"A" and dead[0].attempts == 1
    assert not dead[0].ack() and not dead[0].nack(), "a dead task is handled through the queue"
    assert [t.id for t in q.dead(1, offset=1)] == ["b"]
    assert q.retry_dead("a") == 1
    a = q.reserve()
    assert (a.id, a.attempts, a.payload) == ("a", 1, b"A")
    assert a.ack()
    assert q.purge_dead(["b", "nope"]) == 1
    assert q.retry_dead() == 1  # all: c
    assert q.reserve().id == "c"
    assert q.purge_dead() == 0
    for bad in (0, -1):
        with pytest.raises(ValueError, match="count"):
            q.dead(bad)
    with pytest.raises(ValueError, match="offset"):
        q.dead(offset=-1)
    with pytest.raises(TypeError, match="ids"):
        q.retry_dead(5)  # type: ignore[arg-type]


def test_a_heartbeat_keeps_a_task_five_times_its_visibility(url, name):
    q = Queue(name, visibility=0.3)
    q.enqueue("long")
    stolen: list[Task] = []
    stop = threading.Event()

    def other_consumer():
        other = Queue(name)
        while not stop.is_set():
            if (t := other.reserve(wait=0.1)) is not None:
                stolen.append(t)

    task = q.reserve()
    thread = threading.Thread(target=other_consumer)
    thread.start()
    try:
        with task:
            time.sleep(1.5)  # 5 times the visibility
            assert task.touch(), "still ours"
    finally:
        stop.set()
        thread.join()
    assert stolen == [], "handed out twice"
    assert q.stats()["in_flight"] == 0, "acked at the end of the block"
    assert not task.touch(), "no longer ours once acked"


def test_touch_extends_a_reservation(url, name):
    q = Queue(name, visibility=0.3, backoff=0)
    q.enqueue("t")
    t = q.reserve()
    for _ in range(3):
        time.sleep(0.2)
        assert t.touch()
    assert t.touch(visibility=5)
    time.sleep(0.5)
    assert q.reserve() is None
    assert t.ack()
    with pytest.raises(ValueError, match="visibility"):
        t.touch(visibility=-1)
    assert not t.touch(), "acked: no longer ours"


def test_reenqueue_during_a_reservation_runs_again_after_it(url, name):
    q = Queue(name)
    q.enqueue("job")
    first = q.reserve()
    assert q.enqueue("job") == 1, "remembered"
    assert q.reserve() is None, "one consumer at a time"
    assert len(q) == 0
    assert first.ack()
    second = q.reserve()
    assert second is not None and second.id == "job" and second.attempts == 1
    assert second.ack()
    assert q.reserve() is None


def test_payloads(url, name):
    q = Queue(name)
    assert q.enqueue({"a": b"\x00\xff", "b": "héllo", "c": ""}) == 3
    q.enqueue("plain")
    tasks = q.top(10)
    assert [(t.id, t.payload) for t in tasks] == [
        ("a", b"\x00\xff"), ("b", "héllo".encode()), ("c", b""), ("plain", None)]
    a = q.reserve()
    assert a.payload == b"\x00\xff" and a.ack()
    assert q.enqueue({"b": b"v2"}) == 0, "a queued id keeps its score, takes the new payload"
    assert [(t.id, t.payload) for t in q.pop(3)] == [("b", b"v2"), ("c", b""), ("plain", None)]
    with pytest.raises(TypeError, match=r"ids: the payload of id 'x' must be str or bytes, got int"):
        q.enqueue({"x": 5})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="payload"):
        q.enqueue({"x": None})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="each id"):
        q.enqueue({5: b"x"})  # type: ignore[dict-item]
    assert len(q) == 0, "a bad call enqueues nothing"
    q.enqueue({"r": b"12"})
    assert repr(q.top()).endswith("payload=<2 bytes>)")


def test_batch_reserve(url, name):
    q = Queue(name)
    q.enqueue([f"t{i}" for i in range(7)])
    got = q.reserve(5)
    assert [t.id for t in got] == [f"t{i}" for i in range(5)]
    assert len({t.receipt for t in got}) == 5
    assert all(t.attempts == 1 and t.deadline > time.time() for t in got)
    assert [t.id for t in q.reserve(5)] == ["t5", "t6"]
    assert q.reserve(3) == []
    assert q.reserve(3, wait=0.1) == []
    for bad in (0, -3):
        with pytest.raises(ValueError, match="count"):
            q.reserve(bad)
    with pytest.raises(ValueError, match="visibility"):
        q.reserve(visibility=-1)
    assert all(t.ack() for t in got)


def test_stats(url, name):
    q = Queue(name)
    q.enqueue("old", delay=-3)
    q.enqueue(["a", "b"])
    q.enqueue("later", delay=60)
    q.reserve()
    s = q.stats()
    assert {k: s[k] for k in ("due", "delayed", "in_flight", "dead")} == \
        {"due": 2, "delayed": 1, "in_flight": 1, "dead": 0}
    assert 0 <= s["oldest_due_age"] < 2


def test_queue_options_are_checked(url, name):
    for kwargs, word in [({"max_attempts": 0}, "max_attempts"), ({"backoff": -1}, "backoff"),
                         ({"backoff_cap": float("nan")}, "backoff_cap"),
                         ({"backoff_jitter": 2}, "backoff_jitter"), ({"visibility": -1}, "visibility")]:
        with pytest.raises(ValueError, match=word):
            Queue(name, **kwargs)  # type: ignore[arg-type]
    assert Queue(name, max_attempts=None, backoff=0, backoff_jitter=0) is not None


# ------------------------------------------------------------------ worker loop

def test_work_drains_with_one_round_trip_per_job():
    with RedisServer() as server:
        q = Queue("jobs", url=server.url)
        q.enqueue([f"t{i}" for i in range(300)])
        assert Queue("empty", url=server.url).reserve() is None  # loads the scripts
        seen: list[str] = []
        with server.client() as r:
            before = evalsha_calls(r)
            assert q.work(lambda t: seen.append(t.id), wait=0) == 300
            calls = evalsha_calls(r) - before
        assert sorted(seen) == sorted(f"t{i}" for i in range(300))
        # One script per job, one for the final empty take.
        assert calls == 301, calls
        assert q.stats()["in_flight"] == 0


def test_work_nacks_what_fails_and_the_dead_set_gets_the_hopeless(url, name, caplog):
    q = Queue(name, backoff=0.01, max_attempts=3)
    q.enqueue(["ok", "flaky", "hopeless"])
    runs: list[tuple[str, int]] = []

    def handler(task: Task) -> None:
        runs.append((task.id, task.attempts))
        if task.id == "hopeless" or (task.id == "flaky" and task.attempts < 2):
            raise RuntimeError(f"{task.id} failed")

    with caplog.at_level(logging.ERROR, logger="ferrolock.worker"):
        q.work(handler, wait=1)
    assert sorted(runs) == [("flaky", 1), ("flaky", 2), ("hopeless", 1), ("hopeless", 2),
                            ("hopeless", 3), ("ok", 1)]
    assert [t.id for t in q.dead()] == ["hopeless"]
    assert "hopeless failed" in caplog.text


def test_work_runs_handlers_concurrently_each_task_once(url, name):
    q = Queue(name)
    q.enqueue([f"t{i}" for i in range(40)])
    seen: list[str] = []
    lock = threading.Lock()
    active, most = 0, 0

    def handler(task: Task) -> None:
        nonlocal active, most
        with lock:
            active += 1
            most = max(most, active)
        time.sleep(0.05)
        with lock:
            active -= 1
            seen.append(task.id)

    assert q.work(handler, concurrency=4, wait=0) == 40
    assert sorted(seen) == sorted(f"t{i}" for i in range(40))
    assert most > 1, "ran side by side"


def test_work_stops_when_asked(url, name):
    q = Queue(name)
    q.enqueue([f"t{i}" for i in range(10)])
    stop = threading.Event()

    def handler(task: Task) -> None:
        if task.id == "t2":
            stop.set()

    assert q.work(handler, stop=stop) == 3, "the task at hand is finished, then it returns"
    assert len(q) == 7 and q.stats()["in_flight"] == 0
    # A stop while it waits for work.
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    start = time.monotonic()
    assert Queue(name + "-empty").work(lambda t: None, stop=stop) == 0
    assert time.monotonic() - start < 2


def test_work_checks_its_arguments(url, name):
    q = Queue(name)
    with pytest.raises(TypeError, match="handler"):
        q.work(5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="concurrency"):
        q.work(print, concurrency=0)
    with pytest.raises(ValueError, match="wait"):
        q.work(print, wait=-1)
    with pytest.raises(ValueError, match="visibility"):
        q.work(print, visibility=0)


def test_work_stops_on_sigterm_after_finishing_the_task_at_hand(url, name, tmp_path: Path):
    q = Queue(name)
    q.enqueue([f"t{i}" for i in range(5)])
    log = tmp_path / "log"
    script = textwrap.dedent(f"""
        import sys, time
        from ferrolock import Queue
        def handler(task):
            with open({str(log)!r}, "a") as f:
                f.write("start " + task.id + "\\n")
            time.sleep(1.0)
            with open({str(log)!r}, "a") as f:
                f.write("done " + task.id + "\\n")
        n = Queue({name!r}).work(handler)
        print("handled", n, flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "REDIS_URL": url})
    until = time.monotonic() + 10
    while not (log.exists() and "start t0" in log.read_text()):
        assert time.monotonic() < until
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert "handled 1" in out
    assert log.read_text().split("\n")[:2] == ["start t0", "done t0"]
    assert len(q) == 4 and q.stats()["in_flight"] == 0, "t0 acked, nothing else taken"


def test_work_rides_out_a_server_restart(caplog):
    with RedisServer() as server:
        url = server.url + "?timeout=0.5"
        q = Queue("jobs", url=url)
        q.enqueue("a")
        seen: list[str] = []
        stop = threading.Event()

        def restart_and_enqueue() -> None:
            server.start()
            until = time.monotonic() + 20
            while time.monotonic() < until:  # the machine may be slow: try until it answers
                try:
                    Queue("jobs", url=url).enqueue("b")
                    return
                except ferrolock.ConnectionError:
                    time.sleep(0.1)

        def handler(task: Task) -> None:
            seen.append(task.id)
            if task.id == "a":
                server.stop()  # the ack of `a` (and the next take) fail
                threading.Timer(1.0, restart_and_enqueue).start()
            else:
                stop.set()

        guard = threading.Timer(60, stop.set)  # never hang the suite
        guard.daemon = True
        guard.start()
        with caplog.at_level(logging.WARNING, logger="ferrolock.worker"):
            q.work(handler, stop=stop)
        guard.cancel()
        assert seen == ["a", "b"]
        assert "trying again" in caplog.text
