"""Queue semantics through the Python API."""

from __future__ import annotations

import threading
import time

import pytest

from ferrolock import Queue, Task


def qkey(name: str) -> str:
    return f"Queue:{name}"


def test_return_shapes(url, name):
    q = Queue(name)
    assert q.pop() is None and q.top() is None
    assert q.pop(3) == [] and q.top(3) == []
    assert q.enqueue("a") == 1
    assert q.enqueue(["b", "c"]) == 2
    assert q.enqueue(iter(["c", "d"])) == 1
    one = q.top()
    assert isinstance(one, Task) and one.id == "a"
    many = q.top(10)
    assert [t.id for t in many] == ["a", "b", "c", "d"]
    assert len(q) == 4
    popped = q.pop()
    assert isinstance(popped, Task) and popped.id == "a"
    assert [t.id for t in q.pop(2)] == ["b", "c"]
    assert len(q) == 1


def test_dedup_keeps_the_first_score(url, r, name):
    q = Queue(name)
    q.enqueue("x", delay=5)
    first = float(r("ZSCORE", qkey(name), "x"))
    assert q.enqueue("x") == 0
    assert float(r("ZSCORE", qkey(name), "x")) == first
    assert q.top() is None, "still delayed: the first score won"


def test_delayed_tasks_and_blocking_pop(url, name):
    q = Queue(name)
    q.enqueue("later", delay=0.3)
    assert q.pop() is None
    assert len(q) == 1
    start = time.monotonic()
    task = q.pop(wait=5)
    assert task is not None and task.id == "later"
    assert 0.2 < time.monotonic() - start < 1.5
    start = time.monotonic()
    assert q.pop(wait=0.2) is None
    assert time.monotonic() - start >= 0.18


def test_enqueue_wakes_a_waiting_consumer(url, name):
    q = Queue(name)
    got = []

    def consumer():
        got.append((q.pop(wait=10), time.monotonic()))

    t = threading.Thread(target=consumer)
    t.start()
    time.sleep(0.3)
    sent = time.monotonic()
    q.enqueue("job")
    t.join()
    task, at = got[0]
    assert task.id == "job"
    assert at - sent < 0.5


def test_dequeue_exact_score_and_round_trip(url, r, name):
    q = Queue(name)
    r("ZADD", qkey(name), "1700000000.123456", "t")
    t = q.top()
    assert t.score == 1700000000.123456
    assert not q.dequeue("t", t.score + 1e-6)
    assert q.dequeue("t", t.score)
    assert len(q) == 0


def test_reserve_ack_nack_and_context_manager(url, name):
    q = Queue(name, visibility=0.3, backoff=0)
    q.enqueue(["a", "b", "c"])
    a = q.reserve()
    assert a.id == "a" and a.receipt and a.attempts == 1
    assert len(q) == 2
    assert q.top(5)[0].id == "b", "in-flight tasks are invisible"
    time.sleep(0.4)  # a's consumer is "dead"
    assert [t.id for t in q.top(5)] == ["b", "c", "a"], \
        "top shows what pop would take: the expired reservation is due again, behind the others"
    assert not a.ack(), "a late ack fails"
    with q.reserve() as b:
        assert b.id == "b"
    with pytest.raises(RuntimeError):
        with q.reserve() as c:
            assert c.id == "c"
            raise RuntimeError("processing failed")
    again = q.reserve()
    assert again.id == "a" and again.attempts == 2
    assert again.ack()
    assert [t.id for t in q.pop(5)] == ["c"], "nacked on error, acked on success"
    assert q.reserve(wait=0.1) is None


def test_task_ack_nack_for_popped_and_peeked(url, name):
    q = Queue(name)
    q.enqueue(["a", "b"])
    peek = q.top()
    assert peek.nack() is False
    assert peek.ack() is True  # dequeue(id, score)
    popped = q.pop()
    assert popped.id == "b" and popped.ack() is True
    assert popped.nack(delay=0) is True  # puts it back
    assert q.pop().id == "b"


def test_bad_arguments(url, name):
    q = Queue(name)
    with pytest.raises(TypeError, match="ids"):
        q.enqueue(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ids"):
        q.enqueue(5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        q.enqueue(["ok", 3])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="task id"):
        q.enqueue(["ok", ""])
    assert len(q) == 0, "a bad item enqueues nothing"
    for bad in (0, -1):
        with pytest.raises(ValueError, match="count"):
            q.pop(bad)
        with pytest.raises(ValueError, match="count"):
            q.top(bad)
    with pytest.raises(ValueError, match="wait"):
        q.pop(wait=-1)
    with pytest.raises(ValueError, match="delay"):
        q.enqueue("x", delay=float("nan"))
    with pytest.raises(ValueError, match="score"):
        q.dequeue("x", float("inf"))
    with pytest.raises(ValueError, match="queue name"):
        Queue("")


def test_unicode_and_odd_ids(url, name):
    q = Queue(name)
    ids = ["名字", "a b", "{brace}", "new\nline", "0", "\udcff-surrogate-escaped"]
    assert q.enqueue(ids) == len(ids)
    assert sorted(t.id for t in q.pop(10)) == sorted(ids)


def test_four_threads_drain_each_task_once(url, name):
    q = Queue(name)
    q.enqueue([f"t{i}" for i in range(10_000)])
    seen: list[str] = []
    lock = threading.Lock()

    def drain():
        while batch := q.pop(7):
            with lock:
                seen.extend(t.id for t in batch)

    threads = [threading.Thread(target=drain) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 10_000 and len(set(seen)) == 10_000
