"""PHP waits ride out a killed and restarted server (issue 26.3): a
`lock($name, 10)` and a `reserve($name, 30, 40)` in progress when Redis is
killed end with the lock and the task once it is back."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from ferrolock import Lock, Queue
from tests.conftest import PHP_EXT
from tests.support.servers import RedisServer

LOCK = r"""<?php
$l = new RedisLock();
$t = microtime(true);
echo "waiting\n";
$ok = $l->lock('php-restart', 10);
printf("%s %.3f\n", $ok ? 'acquired' : 'timeout', microtime(true) - $t);
$l->unlock('php-restart');
"""

RESERVE = r"""<?php
$q = new RedisQueue();
echo "waiting\n";
echo json_encode($q->reserve('php-restart', 30, 40)), "\n";
"""


def start(code: str, path: Path, url: str) -> subprocess.Popen[str]:
    path.write_text(code)
    proc = subprocess.Popen(["php", "-d", f"extension={PHP_EXT}", str(path)], env={**os.environ, "REDIS_URL": url},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "waiting"
    return proc


def test_php_waits_ride_out_a_kill_and_a_restart(tmp_path: Path) -> None:
    with RedisServer() as server:
        url = server.url + "?timeout=1&connect_timeout=0.5"
        holder = Lock("php-restart", url=url, auto_renew=False)
        assert holder.acquire()
        locker = start(LOCK, tmp_path / "lock.php", url)
        consumer = start(RESERVE, tmp_path / "reserve.php", url)
        time.sleep(0.5)
        server.stop()  # kill -9
        time.sleep(2)
        server.start()
        Queue("php-restart", url=url).enqueue("job")
        out, err = locker.communicate(timeout=30)
        assert out.startswith("acquired"), (out, err)
        assert float(out.split()[1]) < 10
        out, err = consumer.communicate(timeout=60)
        task = json.loads(out)
        assert task and task["id"] == "job", (out, err)
