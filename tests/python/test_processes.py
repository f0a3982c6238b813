"""Processes, signals and fork."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from ferrolock import Lock, LockNotOwnedError, Queue

CHILD = r"""
import os, sys
from ferrolock import Lock
from tests.support.resp import Resp
name, counter, port, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
raw = Resp(port)
lock = Lock(name, timeout=120)
for _ in range(rounds):
    with lock:
        v = int(raw.get(counter))
        raw("SET", counter, v + 1)
raw.close()
"""


def test_mutual_exclusion_4_processes_x_500(url, r, redis_server, name):
    counter = f"{name}:value"
    r("SET", counter, 0)
    procs = [
        subprocess.Popen([sys.executable, "-c", CHILD, name, counter, str(redis_server.port), "500"],
                         env={**os.environ, "REDIS_URL": url}, cwd=os.getcwd())
        for _ in range(4)
    ]
    for p in procs:
        assert p.wait(timeout=300) == 0
    assert int(r.get(counter)) == 2000


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="needs main thread")
def test_ctrl_c_interrupts_a_blocked_acquire(url, name):
    holder = Lock(name)
    assert holder.acquire()
    waiter = Lock(name)
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        waiter.acquire()  # forever
    elapsed = time.monotonic() - start
    assert elapsed < 0.3 + 3, elapsed  # the signal, not a timeout (there is none); a loaded CI is slow
    assert waiter.token is None and not waiter.owned()
    assert holder.owned(), "the holder is untouched"
    holder.release()
    assert waiter.acquire(blocking=False), "state clean: the waiter can lock afterwards"
    waiter.release()


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="needs main thread")
def test_ctrl_c_interrupts_a_queue_call_waiting_for_a_legacy_queue_lock(url, r, name):
    queue = Queue(name)
    queue.enqueue("t")
    task = queue.top()
    r("SET", f"Lock:Queue:{name}", "legacy", "EX", "60")  # a legacy client mid-operation
    for call in (lambda: queue.enqueue("u"), lambda: queue.dequeue("t", task.score), task.ack):
        timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
        timer.start()
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            call()  # would wait up to 10 s for the legacy lock
        assert time.monotonic() - start < 0.3 + 3, "interrupted well before the 10 s wait"
    r("DEL", f"Lock:Queue:{name}")
    assert [t.id for t in queue.pop(5)] == ["t"], "nothing was done"


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="needs main thread")
def test_ctrl_c_during_a_task_s_nack_on_error_is_not_swallowed(url, r, name):
    queue = Queue(name)
    queue.enqueue("t")
    task = queue.reserve()
    r("SET", f"Lock:Queue:{name}", "legacy", "EX", "60")  # the nack will wait for it
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        with task:
            raise ValueError("processing failed")  # -> nack, waiting for the legacy lock
    r("DEL", f"Lock:Queue:{name}")


def _child_after_fork(lock: Lock, conn) -> None:
    try:
        owned_locally = lock.token is not None
        try:
            lock.release()
            released = True
        except LockNotOwnedError:
            released = False
        other = Lock(lock.name + "-child")
        ok = other.acquire(blocking=False)
        other.release()
        conn.send((owned_locally, released, ok, lock.owned()))
    except Exception as e:
        conn.send(repr(e))


def test_fork_child_reconnects_and_does_not_own_the_parents_lock(url, name):
    lock = Lock(name)
    assert lock.acquire()
    assert lock.owned()  # the pool now has a connection the child inherits
    ctx = multiprocessing.get_context("fork")
    parent_end, child_end = ctx.Pipe()
    p = ctx.Process(target=_child_after_fork, args=(lock, child_end))
    p.start()
    result = parent_end.recv()
    p.join(30)
    assert result == (False, False, True, False), result
    # The parent's connection and lock are intact.
    assert lock.owned()
    for _ in range(50):
        assert lock.locked()
    lock.release()


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_fork_while_other_threads_work_never_hangs_the_child(url, name):
    # The watchdog renews 2000 short-lived leases (its bookkeeping runs every
    # few milliseconds) and a thread hammers the pool while the main thread
    # forks: a mutex held by either at the instant of fork() would stay locked
    # in the child. Before the fork handlers, 15 of 400 children hung here.
    # A TTL of 1 s (renewed every 1/3 s) leaves the parent's watchdog room on
    # a loaded machine: at 0.3 s, a stall of 200 ms while 2000 renewals and
    # 150 forks compete for two cores lost leases (also on an idle server).
    held = [Lock(f"{name}-{i}", ttl=1.0) for i in range(2000)]
    for lock in held:
        assert lock.acquire(blocking=False)
    stop = threading.Event()

    def churn() -> None:
        lock = Lock(name + "-churn", auto_renew=False)
        while not stop.is_set():
            lock.acquire()
            lock.release()

    t = threading.Thread(target=churn)
    t.start()
    hung = 0
    try:
        for _ in range(150):
            pid = os.fork()
            if pid == 0:  # child: a pool, the registry and the watchdog, at once
                try:
                    with Lock(name + "-child", ttl=5, timeout=5):
                        pass
                finally:
                    os._exit(0)
            deadline = time.monotonic() + 10
            while os.waitpid(pid, os.WNOHANG) == (0, 0):
                if time.monotonic() > deadline:
                    hung += 1
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    break
                time.sleep(0.001)
    finally:
        stop.set()
        t.join()
    assert hung == 0
    assert not any(lock.lost for lock in held), "the parent's renewals went on"
    for lock in held:
        lock.release()
