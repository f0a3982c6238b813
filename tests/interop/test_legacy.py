"""Legacy-style PHP classes and ferrolock on the same keys: locks that exclude
each other, one queue shared, legacy and extension workers draining it."""

from __future__ import annotations

import os
import subprocess
import time
from collections import Counter
from pathlib import Path

from tests.conftest import PHP_EXT, run_php

HERE = Path(__file__).parent


def test_legacy_php_script(url: str) -> None:
    proc = run_php(HERE / "legacy_test.php", env={"REDIS_URL": url})
    print(proc.stdout)
    assert "ok - " in proc.stdout


def test_legacy_and_extension_workers_drain_one_queue_exactly_once(url: str, r, name: str) -> None:
    ids = [f"task-{i}" for i in range(3000)]
    for chunk in range(0, len(ids), 500):
        r("ZADD", f"Queue:{name}", *[x for i in ids[chunk:chunk + 500] for x in ("1", i)])
    # All four begin at one instant, 1 s from now (PHP starts in tens of ms;
    # one that started late could find the queue drained by the others).
    start_at = f"{time.time() + 1.0:.3f}"
    cmd = lambda mode, batch: ["php", "-d", f"extension={PHP_EXT}", str(HERE / "workers" / "drain.php"),  # noqa: E731
                               mode, name, str(batch), start_at]
    # One legacy worker (two legacy workers can race each other: their bug, not ours).
    workers = [subprocess.Popen(cmd(mode, batch), env={**os.environ, "REDIS_URL": url},
                                stdout=subprocess.PIPE, text=True)
               for mode, batch in [("legacy", 5), ("ferrolock", 1), ("ferrolock", 7), ("ferrolock", 3)]]
    seen: Counter[str] = Counter()
    per_worker = []
    for w in workers:
        out, _ = w.communicate(timeout=600)
        assert w.returncode == 0
        got = out.split()
        per_worker.append(len(got))
        seen.update(got)
    assert sum(seen.values()) == 3000, f"duplicates: {[k for k, v in seen.items() if v > 1][:5]}"
    assert set(seen) == set(ids)
    assert per_worker[0] > 0 and sum(per_worker[1:]) > 0, per_worker
    print(f"tasks per worker (legacy, ferrolock x3): {per_worker}")
