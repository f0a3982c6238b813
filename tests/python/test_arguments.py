"""Bad arguments (issue 26.5): every one raises TypeError or ValueError with a
short message that names the argument, and nothing reaches Redis."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest

from ferrolock import Lock, Queue, Redlock

HUGE_INT = 10**400


def lock_calls(name: str, url: str) -> list[tuple[str, object, type[Exception], str]]:
    """(label, call, exception, argument named in the message)."""
    return [
        ("Lock ttl str", lambda: Lock(name, ttl="5"), TypeError, "ttl"),
        ("Lock ttl None", lambda: Lock(name, ttl=None), TypeError, "ttl"),
        ("Lock ttl bool", lambda: Lock(name, ttl=True), TypeError, "ttl"),
        ("Lock ttl list", lambda: Lock(name, ttl=[5]), TypeError, "ttl"),
        ("Lock ttl 1e300", lambda: Lock(name, ttl=1e300), ValueError, "ttl"),
        ("Lock ttl -1e300", lambda: Lock(name, ttl=-1e300), ValueError, "ttl"),
        ("Lock ttl huge int", lambda: Lock(name, ttl=HUGE_INT), ValueError, "ttl"),
        ("Lock ttl nan", lambda: Lock(name, ttl=float("nan")), ValueError, "ttl"),
        ("Lock ttl 0", lambda: Lock(name, ttl=0), ValueError, "ttl"),
        ("Lock timeout str", lambda: Lock(name, timeout="1"), TypeError, "timeout"),
        ("Lock timeout -inf", lambda: Lock(name, timeout=float("-inf")), ValueError, "timeout"),
        ("Lock auto_renew str", lambda: Lock(name, auto_renew="yes"), TypeError, "auto_renew"),
        ("Lock reentrant None", lambda: Lock(name, reentrant=None), TypeError, "reentrant"),
        ("Lock fair int", lambda: Lock(name, fair=1), TypeError, "fair"),
        ("Lock url int", lambda: Lock(name, url=6379), TypeError, "url"),
        ("Lock url bytes", lambda: Lock(name, url=b"redis://x"), TypeError, "url"),
        ("Lock url http", lambda: Lock(name, url="http://127.0.0.1/"), ValueError, "URL"),
        ("Lock prefix None", lambda: Lock(name, prefix=None), TypeError, "prefix"),
        ("Lock prefix bytes", lambda: Lock(name, prefix=b"L:"), TypeError, "prefix"),
        ("Lock min_replicas float", lambda: Lock(name, min_replicas=1.5), TypeError, "min_replicas"),
        ("Lock min_replicas -1", lambda: Lock(name, min_replicas=-1), ValueError, "min_replicas"),
        ("Lock name int", lambda: Lock(5), TypeError, "name"),
        ("Lock name bytes", lambda: Lock(b"x"), TypeError, "name"),
        ("Lock name empty", lambda: Lock(""), ValueError, "name"),
        ("Lock name 5000", lambda: Lock("x" * 5000), ValueError, "name"),
        ("acquire timeout str", lambda: Lock(name).acquire(timeout="1"), TypeError, "timeout"),
        ("acquire timeout -1", lambda: Lock(name).acquire(timeout=-1), ValueError, "timeout"),
        ("acquire timeout 1e300", lambda: Lock(name).acquire(timeout=1e300), ValueError, "timeout"),
        ("acquire blocking str", lambda: Lock(name).acquire(blocking="no"), TypeError, "blocking"),
        ("acquire blocking None", lambda: Lock(name).acquire(blocking=None), TypeError, "blocking"),
        ("extend ttl str", lambda: Lock(name).extend("5"), TypeError, "ttl"),
        ("extend ttl -5", lambda: Lock(name).extend(-5), ValueError, "ttl"),
        ("Redlock urls str", lambda: Redlock(name, url), TypeError, "urls"),
        ("Redlock urls int", lambda: Redlock(name, 5), TypeError, "urls"),
        ("Redlock url int", lambda: Redlock(name, [url, 5]), TypeError, "url"),
        ("Redlock ttl str", lambda: Redlock(name, [url], ttl="5"), TypeError, "ttl"),
        ("Redlock timeout str", lambda: Redlock(name, [url], timeout="5"), TypeError, "timeout"),
        ("Redlock prefix int", lambda: Redlock(name, [url], prefix=1), TypeError, "prefix"),
    ]


def queue_calls(q: Queue, name: str) -> list[tuple[str, object, type[Exception], str]]:
    return [
        ("Queue visibility str", lambda: Queue(name, visibility="30"), TypeError, "visibility"),
        ("Queue visibility 1e300", lambda: Queue(name, visibility=1e300), ValueError, "visibility"),
        ("Queue url int", lambda: Queue(name, url=1), TypeError, "url"),
        ("Queue prefix None", lambda: Queue(name, prefix=None), TypeError, "prefix"),
        ("enqueue dict of int", lambda: q.enqueue({"a": 1}), TypeError, "ids"),
        ("enqueue dict of None", lambda: q.enqueue({"a": b"ok", "b": None}), TypeError, "ids"),
        ("enqueue dict int key", lambda: q.enqueue({1: b"x"}), TypeError, "id"),
        ("enqueue bytes", lambda: q.enqueue(b"abc"), TypeError, "ids"),
        ("enqueue bytearray", lambda: q.enqueue(bytearray(b"abc")), TypeError, "ids"),
        ("enqueue int", lambda: q.enqueue(5), TypeError, "ids"),
        ("enqueue None", lambda: q.enqueue(None), TypeError, "ids"),
        ("enqueue list of int", lambda: q.enqueue(["a", 2]), TypeError, "id"),
        ("enqueue list of bytes", lambda: q.enqueue([b"a"]), TypeError, "id"),
        ("enqueue empty id", lambda: q.enqueue(["a", ""]), ValueError, "id"),
        ("enqueue delay str", lambda: q.enqueue("a", delay="1"), TypeError, "delay"),
        ("enqueue delay None", lambda: q.enqueue("a", delay=None), TypeError, "delay"),
        ("enqueue delay 1e300", lambda: q.enqueue("a", delay=1e300), ValueError, "delay"),
        ("pop count str", lambda: q.pop("1"), TypeError, "count"),
        ("pop count float", lambda: q.pop(1.0), TypeError, "count"),
        ("pop count bool", lambda: q.pop(True), TypeError, "count"),
        ("pop count 0", lambda: q.pop(0), ValueError, "count"),
        ("pop count huge", lambda: q.pop(HUGE_INT), ValueError, "count"),
        ("pop wait str", lambda: q.pop(wait="1"), TypeError, "wait"),
        ("pop wait -1", lambda: q.pop(wait=-1), ValueError, "wait"),
        ("top count str", lambda: q.top("2"), TypeError, "count"),
        ("dequeue id int", lambda: q.dequeue(1, 1.0), TypeError, "id"),
        ("dequeue score str", lambda: q.dequeue("a", "1.0"), TypeError, "score"),
        ("dequeue score inf", lambda: q.dequeue("a", float("inf")), ValueError, "score"),
        ("reserve wait None", lambda: q.reserve(wait=None), TypeError, "wait"),
        ("reserve visibility str", lambda: q.reserve(visibility="5"), TypeError, "visibility"),
        ("reserve visibility -1", lambda: q.reserve(visibility=-1), ValueError, "visibility"),
    ]


def test_bad_lock_arguments_name_the_argument(url, name):
    for label, call, exc, argument in lock_calls(name, url):
        with pytest.raises(exc) as info:
            call()  # type: ignore[operator]
        message = str(info.value)
        assert argument in message, f"{label}: {message!r} does not name {argument!r}"
        assert len(message) < 160, f"{label}: {len(message)} characters: {message!r}"
    assert not Lock(name).locked(), "no bad call took the lock"


def test_bad_queue_arguments_name_the_argument(url, name, r):
    q = Queue(name)
    for label, call, exc, argument in queue_calls(q, name):
        with pytest.raises(exc) as info:
            call()  # type: ignore[operator]
        message = str(info.value)
        assert argument in message, f"{label}: {message!r} does not name {argument!r}"
        assert len(message) < 160, f"{label}: {len(message)} characters: {message!r}"
    assert len(q) == 0 and r("EXISTS", f"Queue:{name}") == 0, "no bad call enqueued anything"


def test_messages_are_short_and_say_what_was_given(url, name):
    cases = {
        "ttl must be a number of seconds, got str": lambda: Lock(name, ttl="5"),
        "ttl must be a number of seconds, got None": lambda: Lock(name, ttl=None),
        "timeout must be a number of seconds, got str": lambda: Lock(name).acquire(timeout="1"),
        "ttl must be at most 315360000 seconds (ten years), got 1e300": lambda: Lock(name, ttl=1e300),
        "ids: the payload of id 'a' must be str or bytes, got int": lambda: Queue(name).enqueue({"a": 1}),
    }
    for expected, call in cases.items():
        with pytest.raises((TypeError, ValueError)) as info:
            call()
        assert str(info.value) == expected


def test_numbers_of_any_numeric_type_are_accepted(url, name):
    """Anything float() takes as a number (not a str, not a bool) is a duration."""
    for ttl in (5, 5.5, Decimal("5.5"), Fraction(11, 2)):
        lock = Lock(name, ttl=ttl, timeout=Decimal("0.5"))
        assert lock.acquire(timeout=Fraction(1, 2))
        lock.extend(Decimal("7"))
        lock.release()
    q = Queue(name, visibility=Decimal(10))
    assert q.enqueue(iter(["a", "b"]), delay=Fraction(0)) == 2
    assert q.enqueue({"c", "d"}) == 2, "any iterable of str (a set here) is a list of ids"
    assert q.enqueue(x for x in ["e"]) == 1
    assert len(q) == 5


def test_a_mapping_is_never_read_as_its_keys(url, name):
    """Before payloads, ``enqueue({"a": 1})`` enqueued "a" and dropped the value."""
    q = Queue(name)
    with pytest.raises(TypeError, match="payload of id 'a'"):
        q.enqueue({"a": 1})
    assert len(q) == 0
