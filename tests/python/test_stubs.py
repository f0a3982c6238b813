"""The hand-written stub matches the built module, and the package exports the API."""

from __future__ import annotations

import subprocess
import sys

import ferrolock


def test_stubtest_passes():
    proc = subprocess.run([sys.executable, "-m", "mypy.stubtest", "ferrolock"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_public_api():
    assert sorted(ferrolock.__all__) == sorted([
        "ConnectionError", "FerrolockError", "Lock", "LockError", "LockLostError",
        "LockNotOwnedError", "LockTimeout", "Queue", "Redlock", "Task", "__version__",
    ])
    assert issubclass(ferrolock.LockTimeout, TimeoutError)
    assert issubclass(ferrolock.LockTimeout, ferrolock.LockError)
    assert issubclass(ferrolock.ConnectionError, ConnectionError)
    for exc in (ferrolock.LockError, ferrolock.LockNotOwnedError, ferrolock.LockLostError,
                ferrolock.ConnectionError):
        assert issubclass(exc, ferrolock.FerrolockError)
