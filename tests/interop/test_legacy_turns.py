"""A fleet migrating file by file: a legacy `RedisLock` client (SETNX every
100 ms) beside a busy pool of 12 ferrolock PHP workers on the same lock gets
its turn (issue 26.6; the cost is measured in docs/migration.md)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.conftest import PHP_EXT

HERE = Path(__file__).parent


def php(*args: str, url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(["php", "-d", f"extension={PHP_EXT}", *args], env={**os.environ, "REDIS_URL": url},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_legacy_poller_gets_the_lock_beside_a_busy_ferrolock_pool(url: str, name: str, tmp_path: Path) -> None:
    stop = tmp_path / "stop"
    pool = [php(str(HERE / "workers" / "busy.php"), name, str(stop), "5000", url=url) for _ in range(12)]
    try:
        legacy = php(str(HERE / "workers" / "legacy_poll.php"), name, "5", "5", url=url)
        out, err = legacy.communicate(timeout=60)
        assert legacy.returncode == 0, err
        tries = [line.split() for line in out.splitlines()]
        got = [float(t) for kind, t in tries if kind == "got"]
        print(f"legacy poller: {len(got)} of {len(tries)} tries, waits {[round(g, 2) for g in got]}")
        assert len(tries) == 5
        assert len(got) >= 4, out
        assert all(t < 5 for t in got)
    finally:
        stop.touch()
        held = [int(w.communicate(timeout=60)[0].strip() or 0) for w in pool]
    print(f"the 12 ferrolock workers held it {sum(held)} times meanwhile")
    assert all(held), held
