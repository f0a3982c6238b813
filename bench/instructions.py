"""Client instructions per uncontended acquire+release, from Rust, Python and PHP.

Runs each client under `valgrind --tool=callgrind` twice, with N and with
N + DELTA acquire+release pairs of one lock, and prints the difference per
pair: the process start, the imports, the connect and the warm-up drop out.
Instructions, not time: the count does not move with the machine's load, so
two builds compare on a shared machine (the server's work is not counted:
it runs in another process). Every thread of the client counts (the
watchdog's included).

  .venv/bin/python bench/instructions.py [--pairs 500] [--delta 3000] [--url redis://...]
      [--python PY] [--php-ext SO] [--rust BIN]

The clients: Python `Lock(name)` with its defaults (the watchdog on) and
`acquire(blocking=False)` + `release()`, as bench/run.py's uncontended
section; PHP `RedisLock::lock()` + `unlock()`; Rust `Lock::acquire(Wait::Try)`
+ `release()` (`cargo build --release -p ferrolock --example uncontended`,
run without and with the watchdog). A client left out (no --rust binary, no
PHP) is skipped. Without --url it starts a redis-server of its own.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from throwaway import redis_url

ROOT = Path(__file__).resolve().parent.parent

PY_CHILD = r'''
import sys
from ferrolock import Lock
url, n = sys.argv[1], int(sys.argv[2])
lock = Lock("bench-instructions-py", url=url)
for _ in range(200):
    lock.acquire(blocking=False); lock.release()
for _ in range(n):
    lock.acquire(blocking=False); lock.release()
'''

PHP_CHILD = r'''<?php
[, $url, $n] = $argv;
$lock = new RedisLock($url);
for ($i = 0; $i < 200; $i++) { $lock->lock('bench-instructions-php'); $lock->unlock('bench-instructions-php'); }
for ($i = 0; $i < (int) $n; $i++) { $lock->lock('bench-instructions-php'); $lock->unlock('bench-instructions-php'); }
'''

COLLECTED = re.compile(r"Collected : (\d+)")


def instructions(cmd: list[str], env: dict[str, str] | None = None) -> int:
    with tempfile.TemporaryDirectory() as d:
        out = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={d}/cg.out", *cmd],
                             capture_output=True, text=True, check=True, cwd="/", env=env)
    m = COLLECTED.search(out.stderr)
    assert m, out.stderr[-2000:]
    return int(m.group(1))


def per_pair(cmd: list[str], pairs: int, delta: int, env: dict[str, str] | None = None) -> float:
    return (instructions([*cmd, str(pairs + delta)], env) - instructions([*cmd, str(pairs)], env)) / delta



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=500)
    ap.add_argument("--delta", type=int, default=3000)
    ap.add_argument("--url")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--php-ext", default=str(ROOT / "target" / "release" / "libferrolock_php.so"))
    ap.add_argument("--rust", default=str(ROOT / "target" / "release" / "examples" / "uncontended"))
    args = ap.parse_args()
    rows: dict[str, float] = {}
    with redis_url(args.url) as url:
        if Path(args.rust).exists():
            for renew in ("0", "1"):
                env = {**os.environ, "RENEW": renew}
                label = f"Rust (watchdog {'on' if renew == '1' else 'off'})"
                rows[label] = per_pair([args.rust, url], args.pairs, args.delta, env)
        rows["Python"] = per_pair([args.python, "-c", PY_CHILD, url], args.pairs, args.delta)
        if shutil.which("php") and Path(args.php_ext).exists():
            with tempfile.TemporaryDirectory() as d:
                php = Path(d) / "pairs.php"
                php.write_text(PHP_CHILD)
                rows["PHP"] = per_pair(["php", "-n", "-d", f"extension={args.php_ext}", str(php), url],
                                       args.pairs, args.delta)
    print(f"client instructions per acquire+release (callgrind, {args.pairs + args.delta} pairs "
          f"minus {args.pairs}, every thread)")
    for who, n in rows.items():
        print(f"  {who}: {n:,.0f}")


if __name__ == "__main__":
    main()
