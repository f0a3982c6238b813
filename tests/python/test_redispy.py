"""``ferrolock.redis.Lock``, the redis-py drop-in (issue 20.2), and
``ferrolock.Lock.from_redis``.

The behaviours of redis-py's own lock tests (``tests/test_lock.py`` in
redis-py), against the drop-in: tokens, thread-local ownership, additive
extend, ``blocking_timeout``, reacquire, ``lock_class=``, errors as redis-py's.
Where ferrolock differs by design (no polling; a lock without ``timeout`` has
a renewed TTL instead of none), the test says so.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest

redis = pytest.importorskip("redis")

from redis.exceptions import LockError, LockNotOwnedError  # noqa: E402

import ferrolock  # noqa: E402
import ferrolock.redis  # noqa: E402
from ferrolock._redispy import url_of  # noqa: E402
from tests.support.servers import RedisServer, TlsRedisServer, make_tls_files  # noqa: E402


@pytest.fixture
def rc(url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(url)
    yield client
    client.close()


def get_lock(rc: redis.Redis, name: str, **kwargs) -> ferrolock.redis.Lock:
    lock = rc.lock(name, lock_class=ferrolock.redis.Lock, **kwargs)
    assert type(lock) is ferrolock.redis.Lock
    return lock


def test_lock(rc, name):
    lock = get_lock(rc, name)
    assert lock.acquire(blocking=False)
    assert rc.get(name) == lock.local.token
    assert isinstance(lock.local.token, bytes)
    # redis-py leaves a lock without timeout immortal (ttl -1); the drop-in
    # gives it ferrolock's ttl and renews it while held.
    assert 25 < rc.ttl(name) <= 30
    lock.release()
    assert rc.get(name) is None
    assert lock.local.token is None


def test_lock_token(rc, name):
    lock = get_lock(rc, name)
    assert lock.acquire(blocking=False, token="test")
    assert rc.get(name) == b"test"
    assert lock.local.token == b"test"
    lock.release()
    assert rc.get(name) is None and lock.local.token is None
    assert lock.acquire(blocking=False, token=b"bytes-token")
    assert rc.get(name) == b"bytes-token"
    assert lock.owned()
    lock.release()


def test_locked(rc, name):
    lock = get_lock(rc, name)
    assert lock.locked() is False
    lock.acquire(blocking=False)
    assert lock.locked() is True
    lock.release()
    assert lock.locked() is False
    lock2 = get_lock(rc, name)
    assert lock2.acquire(blocking=False)
    assert lock.locked() is True and lock.owned() is False and lock2.owned() is True
    lock2.release()
    assert lock.locked() is False and lock2.locked() is False


def test_competing_locks(rc, name):
    lock1 = get_lock(rc, name)
    lock2 = get_lock(rc, name)
    assert lock1.acquire(blocking=False)
    assert not lock2.acquire(blocking=False)
    lock1.release()
    assert lock2.acquire(blocking=False)
    assert not lock1.acquire(blocking=False)
    lock2.release()


def test_timeout_is_the_ttl(rc, name):
    lock = get_lock(rc, name, timeout=10)
    assert lock.acquire(blocking=False)
    assert 8 < rc.ttl(name) <= 10
    lock.release()
    lock = get_lock(rc, name, timeout=9.5)
    assert lock.acquire(blocking=False)
    assert 8000 < rc.pttl(name) <= 9500
    lock.release()


def test_a_lock_with_timeout_expires_unrenewed(rc, name):
    lock = get_lock(rc, name, timeout=0.3)
    assert lock.acquire(blocking=False)
    time.sleep(0.6)
    assert rc.get(name) is None, "no watchdog when a timeout is given (redis-py semantics)"
    with pytest.raises(LockNotOwnedError):
        lock.release()


def test_a_lock_without_timeout_is_held_until_released(rc, name):
    """redis-py: no TTL at all. The drop-in: ferrolock's ttl, renewed every
    ttl/3 while held, so the key outlives any ttl."""
    lock = get_lock(rc, name)
    assert lock.acquire()
    assert lock.local.native.ttl == ferrolock._native.DEFAULT_TTL
    assert rc.pttl(name) > 0
    lock.release()


def test_blocking_timeout(rc, name):
    lock1 = get_lock(rc, name)
    assert lock1.acquire(blocking=False)
    lock2 = get_lock(rc, name, blocking_timeout=0.2)
    start = time.monotonic()
    assert not lock2.acquire()
    took = time.monotonic() - start
    assert 0.2 <= took < 5, took
    start = time.monotonic()
    assert not lock2.acquire(blocking_timeout=0)
    assert not lock2.acquire(blocking=False)
    assert time.monotonic() - start < 5
    lock1.release()


def test_blocking_false_in_the_constructor(rc, name):
    holder = get_lock(rc, name)
    assert holder.acquire()
    assert get_lock(rc, name, blocking=False).acquire() is False
    assert get_lock(rc, name, blocking=False).acquire(blocking=True, blocking_timeout=0.1) is False
    holder.release()


def test_context_manager(rc, name):
    with get_lock(rc, name, blocking_timeout=0.2) as lock:
        assert rc.get(name) == lock.local.token
    assert rc.get(name) is None


def test_context_manager_raises_when_locked_not_acquired(rc, name):
    rc.set(name, "bar")
    with pytest.raises(LockError) as e, get_lock(rc, name, blocking_timeout=0.1):
        pass
    assert type(e.value) is ferrolock.redis.LockError
    assert rc.get(name) == b"bar"


def test_context_manager_raise_on_release_error(rc, name, caplog):
    with pytest.raises(LockNotOwnedError), get_lock(rc, name, timeout=10):
        rc.set(name, "taken over")
    rc.delete(name)
    with caplog.at_level(logging.WARNING, logger="ferrolock.redis"), \
            get_lock(rc, name, timeout=10, raise_on_release_error=False):
        rc.set(name, "taken over")
    assert "no longer owned" in caplog.text


def test_releasing_unlocked_lock_raises_error(rc, name):
    lock = get_lock(rc, name)
    with pytest.raises(LockError) as e:
        lock.release()
    assert not isinstance(e.value, LockNotOwnedError)
    assert e.value.lock_name == name


def test_releasing_lock_no_longer_owned_raises_error(rc, name):
    lock = get_lock(rc, name)
    lock.acquire(blocking=False)
    rc.set(name, "a")  # manually change the token
    with pytest.raises(LockNotOwnedError):
        lock.release()
    assert lock.local.token is None, "even though it raised, the token is cleared"
    assert rc.get(name) == b"a", "the other owner's key is untouched"


def test_extend_adds_to_the_remaining_time(rc, name):
    lock = get_lock(rc, name, timeout=10)
    assert lock.acquire(blocking=False)
    assert 8000 < rc.pttl(name) <= 10000
    assert lock.extend(10) is True
    assert 16000 < rc.pttl(name) <= 20000
    assert lock.extend(10.0) is True
    assert 26000 < rc.pttl(name) <= 30000
    lock.release()


def test_extend_replace_ttl(rc, name):
    lock = get_lock(rc, name, timeout=10)
    assert lock.acquire(blocking=False)
    assert lock.extend(3, replace_ttl=True) is True
    assert 2000 < rc.pttl(name) <= 3000
    lock.release()


def test_extending_errors(rc, name):
    lock = get_lock(rc, name, timeout=10)
    with pytest.raises(LockError):
        lock.extend(10)  # not held
    no_timeout = get_lock(rc, name)
    assert no_timeout.acquire(blocking=False)
    with pytest.raises(LockError, match="no timeout"):
        no_timeout.extend(10)
    no_timeout.release()
    assert lock.acquire(blocking=False)
    rc.set(name, "a")
    with pytest.raises(LockNotOwnedError):
        lock.extend(10)
    with pytest.raises(LockNotOwnedError):
        lock.extend(10, replace_ttl=True)
    assert rc.get(name) == b"a"


def test_reacquire_lock(rc, name):
    lock = get_lock(rc, name, timeout=10)
    assert lock.acquire(blocking=False)
    assert rc.pexpire(name, 5000)
    assert rc.pttl(name) <= 5000
    assert lock.reacquire() is True
    assert 8000 < rc.pttl(name) <= 10000
    lock.release()


def test_reacquiring_errors(rc, name):
    lock = get_lock(rc, name, timeout=10)
    with pytest.raises(LockError):
        lock.reacquire()
    no_timeout = get_lock(rc, name)
    assert no_timeout.acquire(blocking=False)
    with pytest.raises(LockError):
        no_timeout.reacquire()
    no_timeout.release()
    assert lock.acquire(blocking=False)
    rc.set(name, "a")
    with pytest.raises(LockNotOwnedError):
        lock.reacquire()


def test_thread_local_tokens(rc, name):
    """A thread sees only its own token: another thread can neither release
    nor extend the hold, and waits for it."""
    lock = get_lock(rc, name, timeout=10)
    assert lock.acquire(blocking=False)
    seen: dict[str, object] = {}

    def other() -> None:
        seen["token"] = lock.local.token
        seen["owned"] = lock.owned()
        seen["locked"] = lock.locked()
        seen["acquired"] = lock.acquire(blocking=False)
        try:
            lock.release()
        except LockError as e:
            seen["release"] = type(e)
        try:
            lock.extend(5)
        except LockError as e:
            seen["extend"] = type(e)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen == {"token": None, "owned": False, "locked": True, "acquired": False,
                    "release": ferrolock.redis.LockError, "extend": ferrolock.redis.LockError}
    assert lock.owned()
    lock.release()


def test_thread_local_false_shares_the_token(rc, name):
    lock = get_lock(rc, name, timeout=10, thread_local=False)
    assert lock.acquire(blocking=False)
    token = lock.local.token
    done: list[bytes | None] = []

    def other() -> None:
        done.append(lock.local.token)
        lock.release()  # another thread may release a shared-token lock

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert done == [token]
    assert rc.get(name) is None


def test_local_token_cannot_be_set(rc, name):
    lock = get_lock(rc, name)
    with pytest.raises(AttributeError, match="token"):
        lock.local.token = b"someone-else"


def test_a_waiter_is_woken_by_the_release_not_by_polling(rc, name):
    """redis-py polls every ``sleep`` seconds; the drop-in ignores ``sleep``
    and is woken by the release."""
    holder = get_lock(rc, name)
    assert holder.acquire()
    woke: list[float] = []

    def waiter() -> None:
        lock = get_lock(rc, name, sleep=10)
        assert lock.acquire(blocking_timeout=30)
        woke.append(time.monotonic())
        lock.release()

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.3)
    released = time.monotonic()
    holder.release()
    t.join(30)
    assert woke and woke[0] - released < 5, "woken long before the 10 s poll interval"


def test_redis_py_lock_and_drop_in_exclude_each_other(rc, name):
    """Same key (the name, no prefix) and the same value shape (a token)."""
    theirs = rc.lock(name, timeout=10, thread_local=False)
    ours = get_lock(rc, name, timeout=10)
    assert theirs.acquire(blocking=False)
    assert not ours.acquire(blocking=False)
    # A ferrolock waiter gets it once redis-py's lock is released (DEL, no
    # notification: it re-checks within a second).
    releaser = threading.Timer(0.2, theirs.release)
    releaser.start()
    assert ours.acquire(blocking_timeout=20)
    releaser.join()
    assert rc.get(name) == ours.local.token
    assert not theirs.acquire(blocking=False)
    assert not rc.lock(name).acquire(blocking=False), "a redis-py lock without timeout too"
    ours.release()
    assert theirs.acquire(blocking=False)
    theirs.release()


def test_a_redis_py_lock_without_timeout_is_not_taken_over(rc, name):
    theirs = rc.lock(name)  # no timeout: no TTL
    assert theirs.acquire(blocking=False)
    ours = get_lock(rc, name)
    assert not ours.acquire(blocking_timeout=0.3)
    assert rc.ttl(name) == -1, "redis-py's hold keeps no TTL"
    theirs.release()


def test_lock_class_is_passed_every_setting(rc, name):
    lock = rc.lock(name, timeout=7, sleep=0.5, blocking=False, blocking_timeout=3,
                   lock_class=ferrolock.redis.Lock, thread_local=False, raise_on_release_error=False)
    assert (lock.redis, lock.name, lock.timeout, lock.sleep, lock.blocking, lock.blocking_timeout,
            lock.thread_local, lock.raise_on_release_error) == (rc, name, 7, 0.5, False, 3, False, False)


def test_the_constructor_is_redis_py_s(rc, name):
    import inspect

    import redis.lock

    ours = inspect.signature(ferrolock.redis.Lock.__init__).parameters
    theirs = inspect.signature(redis.lock.Lock.__init__).parameters
    assert list(ours) == list(theirs)
    assert [p.default for p in ours.values()] == [p.default for p in theirs.values()]
    ours = inspect.signature(ferrolock.redis.Lock.acquire).parameters
    theirs = inspect.signature(redis.lock.Lock.acquire).parameters
    assert list(ours) == list(theirs)
    for method in ("release", "do_release", "extend", "reacquire", "locked", "owned", "__enter__", "__exit__"):
        assert list(inspect.signature(getattr(ferrolock.redis.Lock, method)).parameters) == \
            list(inspect.signature(getattr(redis.lock.Lock, method)).parameters), method


def test_bytes_names_and_the_exceptions_hierarchy(rc, name):
    lock = get_lock(rc, name.encode(), timeout=5)
    assert lock.acquire(blocking=False)
    assert rc.get(name) == lock.local.token
    lock.release()
    for ours, theirs, base in ((ferrolock.redis.LockError, redis.exceptions.LockError, ferrolock.LockError),
                               (ferrolock.redis.LockNotOwnedError, redis.exceptions.LockNotOwnedError,
                                ferrolock.LockNotOwnedError),
                               (ferrolock.redis.ConnectionError, redis.exceptions.ConnectionError,
                                ferrolock.ConnectionError)):
        assert issubclass(ours, theirs) and issubclass(ours, base)
    assert issubclass(ferrolock.redis.LockError, ValueError), "redis-py's LockError is a ValueError"


def test_connection_errors_are_redis_py_s(name):
    client = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5)
    lock = ferrolock.redis.Lock(client, name)
    with pytest.raises(redis.exceptions.ConnectionError):
        lock.acquire(blocking=False)


def test_database_and_password_come_from_the_client(name):
    with RedisServer(password="s3cret word") as server:
        client = redis.Redis(host="127.0.0.1", port=server.port, db=3, password="s3cret word")
        lock = ferrolock.redis.Lock(client, name, timeout=10)
        assert lock.acquire(blocking=False)
        assert client.get(name) == lock.local.token, "in db 3"
        assert redis.Redis(host="127.0.0.1", port=server.port, password="s3cret word").get(name) is None
        native = ferrolock.Lock.from_redis(client, name, timeout=0, prefix="")
        assert not native.acquire(), "from_redis: the same server and db"
        lock.release()
        assert native.acquire() and client.get(name) == native.token.encode()
        native.release()
        wrong = redis.Redis(host="127.0.0.1", port=server.port, password="wrong")
        with pytest.raises(redis.exceptions.ConnectionError):
            ferrolock.redis.Lock(wrong, name).acquire(blocking=False)


def test_unix_socket_client(tmp_path, name):
    sock = tmp_path / "redis.sock"
    with RedisServer("--unixsocket", str(sock), "--unixsocketperm", "700") as server:
        client = redis.Redis(unix_socket_path=str(sock), db=2)
        assert url_of(client).startswith(f"unix://{sock}?db=2")
        lock = client.lock(name, timeout=10, lock_class=ferrolock.redis.Lock)
        with lock:
            assert redis.Redis(port=server.port, db=2).get(name) == lock.local.token


def test_tls_client(tmp_path, name):
    files = make_tls_files(tmp_path)
    with TlsRedisServer(files) as server:
        client = redis.Redis(host="localhost", port=server.tls_port, ssl=True, ssl_ca_certs=str(files["ca"]))
        assert url_of(client).startswith(f"rediss://localhost:{server.tls_port}/0?")
        with client.lock(name, timeout=10, lock_class=ferrolock.redis.Lock) as lock:
            assert client.get(name) == lock.local.token
        with pytest.raises(ValueError, match="ssl_certfile"):
            url_of(redis.Redis(ssl=True, ssl_certfile="/x.pem", ssl_keyfile="/x.key"))


def test_urls_of_clients():
    """Settings read from the client objects (no connection made)."""
    from redis.sentinel import Sentinel

    assert url_of(redis.Redis(host="h", port=7000, db=5, username="u", password="p@ss:/",
                              socket_timeout=2.5, socket_connect_timeout=1)) == \
        "redis://u:p%40ss%3A%2F@h:7000/5?connect_timeout=1.0&timeout=2.5"
    assert url_of(redis.Redis(host="::1")).startswith("redis://[::1]:6379/0")
    assert "tls_insecure=1" in url_of(redis.Redis(ssl=True, ssl_cert_reqs="none"))
    sentinel = Sentinel([("s1", 26379), ("s2", 26380)], sentinel_kwargs={"password": "sp"},
                        password="mp", db=2)
    assert url_of(sentinel.master_for("my master")) == \
        "redis+sentinel://:mp@s1:26379,s2:26380/my%20master/2?sentinel_password=sp"
    with pytest.raises(ValueError, match="replica"):
        url_of(sentinel.slave_for("mymaster"))

    class Provider(redis.CredentialProvider):
        def get_credentials(self):
            return ("user", "from provider")

    assert url_of(redis.Redis(credential_provider=Provider())).startswith("redis://user:from%20provider@")
    with pytest.raises(TypeError, match="redis-py client"):
        url_of(object())
    with pytest.raises(TypeError, match="url"):
        ferrolock.Lock.from_redis(redis.Redis(), "x", url="redis://elsewhere")


def test_sentinel_client(name):
    from redis.sentinel import Sentinel

    from tests.support.servers import SentinelSetup

    with SentinelSetup() as setup:
        sentinel = Sentinel([("127.0.0.1", s.port) for s in setup.sentinels])
        master = sentinel.master_for("mymaster")
        with master.lock(name, timeout=10, lock_class=ferrolock.redis.Lock) as lock:
            assert master.get(name) == lock.local.token


def test_cluster_client(name):
    from redis.cluster import RedisCluster

    from tests.support.servers import RedisCluster as Cluster

    with Cluster() as cluster:
        client = RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
        assert url_of(client).startswith("redis+cluster://")
        for key in (name, f"{name}-{{tag}}", f"other-{name}"):
            with client.lock(key, timeout=10, lock_class=ferrolock.redis.Lock) as lock:
                assert client.get(key) == lock.local.token
                assert not client.lock(key, timeout=10).acquire(blocking=False)
        client.close()
