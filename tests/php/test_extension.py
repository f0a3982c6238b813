"""The PHP extension against real redis-servers: the PHP test scripts, the stub
check, multi-process mutual exclusion, persistent connections under `php -S`,
and Redis stopping mid-script."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import PHP_EXT, ROOT, run_php
from tests.support.servers import RedisServer, free_port, wait_port

PHP = Path(__file__).parent


@pytest.fixture(scope="module", autouse=True)
def extension_built() -> None:
    assert PHP_EXT.exists(), f"{PHP_EXT} is missing: run `make php` (the Makefile's test target does)"


@pytest.mark.parametrize("script", ["lock_test.php", "queue_test.php", "queue_production_test.php",
                                    "bad_input_test.php"])
def test_php_script(script: str, url: str) -> None:
    proc = run_php(PHP / script, env={"REDIS_URL": url})
    print(proc.stdout)
    assert "ok - " in proc.stdout


def test_stubs_match_the_extension() -> None:
    built = run_php(PHP / "reflect.php").stdout
    stub = subprocess.run(["php", "-n", str(PHP / "reflect.php"), str(ROOT / "php" / "ferrolock.stubs.php")],
                          capture_output=True, text=True, check=True).stdout
    assert json.loads(built) == json.loads(stub)
    subprocess.run(["php", "-n", "-l", str(ROOT / "php" / "ferrolock.stubs.php")], check=True,
                   capture_output=True)


def test_ini_and_env_choose_the_server(redis_server: RedisServer) -> None:
    script = "<?php $l = new RedisLock(); var_dump($l->lock('ini-check')); $l->unlock('ini-check');"
    path = PHP / "server" / "_ini_check.php"
    path.write_text(script)
    try:
        via_ini = run_php(path, ini=(f"ferrolock.url={redis_server.url}",), env={"REDIS_URL": "redis://127.0.0.1:1/0"})
        assert "bool(true)" in via_ini.stdout
        via_env = run_php(path, env={"REDIS_URL": redis_server.url})
        assert "bool(true)" in via_env.stdout
    finally:
        path.unlink()


def test_array_with_only_a_timeout_applies_it_to_the_default_server(tmp_path: Path) -> None:
    # ['timeout' => 0.3] names no server: the default one (here $REDIS_URL),
    # with a 0.3 s timeout. A server that sleeps 2 s must make the call fail
    # after about that long, not wait out the default timeout.
    with RedisServer("--enable-debug-command", "local") as server:
        script = tmp_path / "timeout.php"
        script.write_text("<?php $l = new RedisLock(['timeout' => 0.3, 'fair' => true]);\n"
                          "var_dump($l->lock('t-check')); $l->unlock('t-check');\n"
                          "exec($argv[1]); usleep(200000);\n"  # the server sleeps from now on
                          "$t = microtime(true);\n"
                          "try { $l->lock('t-check'); echo \"no error\\n\"; }\n"
                          "catch (RedisLockException $e) {\n"
                          "    printf(\"error after %.1f s\\n\", microtime(true) - $t);\n"
                          "}\n")
        sleeper = f"redis-cli -p {server.port} DEBUG SLEEP 2 > /dev/null 2>&1 &"
        out = run_php(script, sleeper, env={"REDIS_URL": server.url}).stdout
        assert "bool(true)" in out, out
        assert "error after 0." in out, out


def increments(url: str, r, mode: str, name: str, procs: int, rounds: int) -> int:
    counter = f"{name}:value"
    r("SET", counter, 0)
    cmd = lambda: ["php", "-d", f"extension={PHP_EXT}", str(PHP / "workers" / "increment.php"),  # noqa: E731
                   mode, name, counter, str(rounds)]
    workers = [subprocess.Popen(cmd(), env={**os.environ, "REDIS_URL": url}) for _ in range(procs)]
    try:
        codes = [w.wait(timeout=600) for w in workers]
    finally:
        for w in workers:
            w.kill()
            w.wait()
    assert codes == [0] * procs
    return int(r.get(counter))


def test_mutual_exclusion_8_php_processes(url: str, r, name: str) -> None:
    got = increments(url, r, "ferrolock", name, 8, 200)
    assert got == 1600, f"lost {1600 - got} updates"
    legacy = increments(url, r, "legacy", name + "-legacy", 8, 200)
    # Not a failure: the legacy SETNX-then-EXPIRE class is expected to lose some.
    print(f"legacy-style lock: {legacy}/1600 increments kept ({1600 - legacy} lost)")


def client_count(r) -> int:
    return len([line for line in r("CLIENT", "LIST").decode().splitlines() if line])


def test_one_worker_reuses_its_connection_across_requests(url: str, r, tmp_path: Path) -> None:
    port = free_port()
    server = subprocess.Popen(
        ["php", "-d", f"extension={PHP_EXT}", "-S", f"127.0.0.1:{port}", "-t", str(PHP / "server")],
        env={**{k: v for k, v in os.environ.items() if k != "PHP_CLI_SERVER_WORKERS"}, "REDIS_URL": url},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        def hit(i: int) -> str:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/index.php?n={i % 5}&i={i}", timeout=10) as resp:
                return resp.read().decode()
        pids = {hit(i).split()[1] for i in range(10)}
        base = client_count(r)
        pids |= {hit(i).split()[1] for i in range(200)}
        after = client_count(r)
        assert len(pids) == 1, "one php -S worker"
        assert after - base <= 1, f"connections grew from {base} to {after} over 200 requests"
    finally:
        server.terminate()
        server.wait()


def test_redis_stopped_mid_script_then_back(tmp_path: Path) -> None:
    """RedisLockException while Redis is down, same objects work after restart."""
    with RedisServer() as server:
        flag = tmp_path / "step"
        script = tmp_path / "midscript.php"
        script.write_text(f"""<?php
$flag = {str(flag)!r};
function step($s) {{
    global $flag;
    while (!file_exists($flag) || trim(file_get_contents($flag)) !== $s) usleep(10000);
}}
$l = new RedisLock('{server.url}?timeout=1&connect_timeout=1');
$q = new RedisQueue('{server.url}?timeout=1&connect_timeout=1');
assert($l->lock('a') && $l->unlock('a') && $q->enqueue('q', 'x'));
echo "ready\\n"; flush();
step('down');
$t = microtime(true);
foreach ([fn() => $l->lock('a'), fn() => $q->pop('q'), fn() => $q->enqueue('q', 'y')] as $f) {{
    try {{ $f(); echo "no exception\\n"; exit(1); }}
    catch (RedisLockException $e) {{ echo "down: ", get_class($e), "\\n"; }}
}}
assert(microtime(true) - $t < 5, 'bounded by the timeouts');
echo "down-ok\\n"; flush();
step('up');
assert($l->lock('a') === true && $l->unlock('a') === true);
assert($q->enqueue('q', 'z') === true && $q->pop('q')['id'] === 'z');
echo "up-ok\\n";
""")
        proc = subprocess.Popen(["php", "-d", f"extension={PHP_EXT}", "-d", "zend.assertions=1",
                                 "-d", "assert.exception=1", str(script)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        server.stop()
        flag.write_text("down")
        lines = [proc.stdout.readline().strip() for _ in range(4)]
        assert lines == ["down: RedisLockException"] * 3 + ["down-ok"], lines
        server.start()
        flag.write_text("up")
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, out + err
        assert "up-ok" in out
        proc.stdout.close()
        proc.stderr.close()
