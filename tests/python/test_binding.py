"""The shape of the binding: calls go one way, defaults come from the core,
and the public classes still read as one class each."""

from __future__ import annotations

import inspect
import pickle
import pydoc
import subprocess
import sys
import textwrap

import pytest

import ferrolock
from ferrolock import Lock, Queue, Redlock, _native


def test_the_native_module_works_without_the_package(url, name):
    """Load the extension on its own, with every ``ferrolock`` import refused:
    it must construct, lock, time out and raise its own exception classes
    without importing any module of the package."""
    script = textwrap.dedent(f"""
        import importlib.machinery, importlib.util, sys

        class Refuse:
            def find_spec(self, fullname, path=None, target=None):
                if fullname == "ferrolock" or fullname.startswith("ferrolock."):
                    raise ImportError("the native module imported " + fullname)
                return None

        sys.meta_path.insert(0, Refuse())
        spec = importlib.util.spec_from_file_location(
            "_native", {_native.__file__!r},
            loader=importlib.machinery.ExtensionFileLoader("_native", {_native.__file__!r}))
        native = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(native)

        a = native.Lock({name!r}, url={url!r}, timeout=0)
        b = native.Lock({name!r}, url={url!r}, timeout=0)
        assert a.acquire()
        try:
            with b:
                raise AssertionError("entered a held lock")
        except native.LockTimeout as e:
            assert isinstance(e, TimeoutError) and isinstance(e, native.FerrolockError)
        a.release()
        try:
            a.release()
        except native.LockNotOwnedError:
            pass
        try:
            native.Lock("x", url="redis://127.0.0.1:1/0").acquire(blocking=False)
        except native.ConnectionError as e:
            assert isinstance(e, ConnectionError)
        assert not any(m == "ferrolock" or m.startswith("ferrolock.") for m in sys.modules)
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr


def test_defaults_are_the_core_s(url, name):
    """The signatures show the core's defaults, and the objects use them."""
    assert (_native.DEFAULT_TTL, _native.DEFAULT_VISIBILITY) == (30.0, 30.0)
    assert (_native.DEFAULT_LOCK_PREFIX, _native.DEFAULT_QUEUE_PREFIX) == ("Lock:", "Queue:")
    for cls in (Lock, Redlock):
        params = inspect.signature(cls).parameters
        assert params["ttl"].default == _native.DEFAULT_TTL
        assert params["prefix"].default == _native.DEFAULT_LOCK_PREFIX
    params = inspect.signature(Queue).parameters
    assert params["visibility"].default == _native.DEFAULT_VISIBILITY
    assert params["prefix"].default == _native.DEFAULT_QUEUE_PREFIX
    assert Lock(name).ttl == _native.DEFAULT_TTL
    assert Redlock(name, [url]).ttl == _native.DEFAULT_TTL


def test_range_checks_are_the_core_s(url, name):
    """One check, one message, whichever door the value comes in by."""
    messages = set()
    for call in (lambda: Lock(name, ttl=0), lambda: Redlock(name, [url], ttl=0),
                 lambda: Lock(name).extend(0)):
        with pytest.raises(ValueError) as e:
            call()
        messages.add(str(e.value))
    assert messages == {"ttl must be between 0.001 and 315360000 seconds (ten years), got 0"}
    messages.clear()
    for call in (lambda: Queue(name, visibility=-1), lambda: Queue(name).reserve(visibility=-1)):
        with pytest.raises(ValueError) as e:
            call()
        messages.add(str(e.value))
    assert messages == {"visibility must be >= 0 seconds, got -1"}


def test_public_classes_read_as_one_class(url, name):
    lock = Lock(name)
    assert isinstance(lock, Lock) and isinstance(lock, _native.Lock)
    assert isinstance(Redlock(name, [url]), _native.Redlock)
    assert (Lock.__module__, Lock.__name__, Redlock.__module__) == ("ferrolock", "Lock", "ferrolock")
    assert repr(lock) == f'<ferrolock.Lock name="{name}" ttl=30.0 not held>'
    with pytest.raises(TypeError, match="pickle"):
        pickle.dumps(lock)
    with pytest.raises(AttributeError):
        lock.anything = 1  # type: ignore[attr-defined]
    # The decorator and `async with` are the package's, in Python, over the native methods.
    assert not {"__call__", "__aenter__", "__aexit__"} & set(vars(_native._LockBase))
    page = pydoc.render_doc(Lock, renderer=pydoc.plaintext)
    for text in ("ttl=30.0", "A distributed lock", "acquire(", "release(", "__aenter__", "__call__"):
        assert text in page, text
    for exc in (ferrolock.FerrolockError, ferrolock.LockTimeout, ferrolock.ConnectionError):
        assert exc.__module__ == "ferrolock" and exc.__doc__
        again = pickle.loads(pickle.dumps(exc("why")))
        assert type(again) is exc and str(again) == "why"

