"""System calls per uncontended acquire+release, from Python and from PHP.

Runs `strace -c -f` on a process that makes N acquire+release pairs of one
lock (ferrolock's defaults: in Python the watchdog renews held locks; in PHP
auto-renewal is off), once with N pairs and once with none, and prints the
difference per pair for each system call: what the process start, the
imports and the warm-up cost drops out. The wire is one `sendto` and one
`recvfrom` per round trip, two round trips per pair.

  .venv/bin/python bench/syscalls.py [--pairs 10000] [--url redis://...]
      [--python PY] [--php-ext SO]

Without --url it starts a redis-server of its own on a free port. --python
and --php-ext point at another build (e.g. main's) to compare.
"""
from __future__ import annotations

import argparse
import os
import re
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
lock = Lock("bench-syscalls-py", url=url)
for _ in range(200):
    lock.acquire(); lock.release()
for _ in range(n):
    lock.acquire(); lock.release()
'''

PHP_CHILD = r'''<?php
[, $url, $n] = $argv;
$lock = new RedisLock($url);
for ($i = 0; $i < 200; $i++) { $lock->lock('bench-syscalls-php'); $lock->unlock('bench-syscalls-php'); }
for ($i = 0; $i < (int) $n; $i++) { $lock->lock('bench-syscalls-php'); $lock->unlock('bench-syscalls-php'); }
'''

LINE = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$")


def counts(cmd: list[str]) -> dict[str, int]:
    with tempfile.NamedTemporaryFile(suffix=".strace") as out:
        subprocess.run(["strace", "-c", "-f", "-o", out.name, *cmd], check=True, cwd="/",
                       stdout=subprocess.DEVNULL)
        found = {}
        for line in Path(out.name).read_text().splitlines():
            m = LINE.match(line)
            if m and m.group(2) != "total":
                found[m.group(2)] = int(m.group(1))
        return found


def per_pair(cmd: list[str], pairs: int) -> dict[str, float]:
    full, base = counts([*cmd, str(pairs)]), counts([*cmd, "0"])
    diff = {k: (full.get(k, 0) - base.get(k, 0)) / pairs for k in set(full) | set(base)}
    return {k: v for k, v in sorted(diff.items(), key=lambda kv: -kv[1]) if abs(v) >= 0.005}



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=10000)
    ap.add_argument("--url")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--php-ext", default=str(ROOT / "target" / "release" / "libferrolock_php.so"))
    args = ap.parse_args()
    with redis_url(args.url) as url:
        with tempfile.TemporaryDirectory() as d:
            php = Path(d) / "pairs.php"
            php.write_text(PHP_CHILD)
            env_note = os.environ.get("PYTHONPATH", "")
            rows = {
                "Python": per_pair([args.python, "-c", PY_CHILD, url], args.pairs),
                "PHP": per_pair(["php", "-n", "-d", f"extension={args.php_ext}", str(php), url], args.pairs),
            }
        print(f"system calls per acquire+release ({args.pairs} pairs, strace -c -f, "
              f"minus a run of 0 pairs){' PYTHONPATH=' + env_note if env_note else ''}")
        for who, row in rows.items():
            total = sum(row.values())
            print(f"  {who}: {total:.2f} per pair: " + ", ".join(f"{k} {v:.2f}" for k, v in row.items()))


if __name__ == "__main__":
    main()
