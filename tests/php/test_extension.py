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
                                    "bad_input_test.php", "modern_test.php"])
def test_php_script(script: str, url: str) -> None:
    proc = run_php(PHP / script, env={"REDIS_URL": url})
    print(proc.stdout)
    assert "ok - " in proc.stdout


@pytest.mark.parametrize("legacy_classes", ["1", "0"])
def test_stubs_match_the_extension(legacy_classes: str) -> None:
    # With the global names off, the legacy classes have the same shape under
    # their namespaced names (reflect.php looks them up there).
    built = run_php(PHP / "reflect.php", ini=(f"ferrolock.legacy_classes={legacy_classes}",)).stdout
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


def test_legacy_class_file_and_extension_in_one_script_with_legacy_classes_off(url: str) -> None:
    """Issue 19.3: a codebase that still requires its RedisLock.php runs with
    ferrolock.legacy_classes=0 beside Ferrolock\\RedisLock & co."""
    proc = run_php(PHP / "migration_test.php", ini=("ferrolock.legacy_classes=0",), env={"REDIS_URL": url})
    print(proc.stdout)
    assert proc.stdout.count("ok - ") == 4, proc.stdout + proc.stderr


def test_with_legacy_classes_on_a_legacy_class_file_cannot_load(tmp_path: Path) -> None:
    """Why the setting exists: the default keeps the drop-in global names."""
    script = tmp_path / "require_legacy.php"
    script.write_text(f"<?php require {str(PHP / 'legacy' / 'RedisLock.php')!r}; echo 'loaded';")
    proc = run_php(script, check=False)
    assert proc.returncode != 0 and "loaded" not in proc.stdout
    assert "Cannot declare class" in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_with_legacy_classes_on_the_namespaced_names_are_the_same_classes(url: str, tmp_path: Path) -> None:
    script = tmp_path / "aliases.php"
    script.write_text("""<?php
$l = new Ferrolock\\RedisLock();
assert(get_class($l) === 'RedisLock' && $l instanceof RedisLock && new RedisLock() instanceof Ferrolock\\RedisLock);
assert(get_class(new Ferrolock\\RedisQueue()) === 'RedisQueue');
assert(RedisLock::instance() instanceof Ferrolock\\RedisLock);
try { new Ferrolock\\RedisLock(['port' => 0]); assert(false); }
catch (Ferrolock\\RedisLockException $e) { assert(get_class($e) === 'RedisLockException'); }
function typed(Ferrolock\\RedisLock $l): bool { return true; }
assert(typed(new RedisLock()));
assert(ini_get('ferrolock.legacy_classes') === '1');
echo "ok\\n";
""")
    assert run_php(script, env={"REDIS_URL": url}).stdout == "ok\n"


def test_connection_array_with_url_applies_or_refuses_its_other_settings(tmp_path: Path) -> None:
    """Issue 18.4: with 'url', 'database', 'password' and 'timeout' apply to that
    URL; 'host'/'port' besides it, or a database or password that differs from
    the URL's, are refused naming the keys: never another server or database."""
    with RedisServer("--enable-debug-command", "local", password="s3cret") as server:
        base = f"redis://127.0.0.1:{server.port}"
        script = tmp_path / "url_array.php"
        script.write_text(f"""<?php
$base = {base!r};
function attempt(array $param): string {{
    try {{ $l = new RedisLock($param); return $l->lock('url-array') && $l->unlock('url-array') ? 'ok' : 'busy'; }}
    catch (RedisLockException $e) {{ return 'error: ' . $e->getMessage(); }}
}}
echo attempt(['url' => $base, 'password' => 's3cret', 'database' => 3]), "\\n";
echo attempt(['url' => $base, 'password' => 'wrong']), "\\n";
echo attempt(['url' => $base]), "\\n";
echo attempt(['url' => "redis://:s3cret@127.0.0.1:{server.port}/2", 'database' => 3]), "\\n";
echo attempt(['url' => $base, 'host' => '127.0.0.1', 'port' => 6379]), "\\n";
// database 5 really is where the lock is taken
$l = new RedisLock(['url' => $base, 'password' => 's3cret', 'database' => 5]);
assert($l->lock('db-check', 0, 60));
echo "locked\\n";
flush();
fgets(STDIN);
// timeout: the server sleeps 2 s; the call fails after about 0.3 s
$l = new RedisLock(['url' => $base . '/0', 'password' => 's3cret', 'timeout' => 0.3]);
assert($l->lock('t-check') && $l->unlock('t-check')); // connected
exec($argv[1]); usleep(200000);
$t = microtime(true);
try {{ $l->lock('t-check'); echo "no error\\n"; }}
catch (RedisLockException $e) {{ printf("error after %.1f s\\n", microtime(true) - $t); }}
""")
        sleeper = f"redis-cli -p {server.port} -a s3cret --no-auth-warning DEBUG SLEEP 2 > /dev/null 2>&1 &"
        proc = subprocess.Popen(["php", "-d", f"extension={PHP_EXT}", "-d", "zend.assertions=1",
                                 "-d", "assert.exception=1", str(script), sleeper],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines = [proc.stdout.readline().strip() for _ in range(6)]
        assert lines[0] == "ok", lines
        assert lines[1].startswith("error: ") and "auth" in lines[1].lower(), lines[1]
        assert lines[2].startswith("error: ") and "auth" in lines[2].lower(), "no password: refused by the server"
        assert "'database' => 3" in lines[3] and '"2"' in lines[3], lines[3]
        assert "'url' cannot be combined with 'host', 'port'" in lines[4], lines[4]
        assert lines[5] == "locked"
        c = server.client()
        c("SELECT", 5)
        assert c("EXISTS", "Lock:db-check") == 1, "the lock is in database 5"
        c("SELECT", 0)
        assert c("EXISTS", "Lock:db-check") == 0
        c.close()
        out, err = proc.communicate("\n", timeout=60)
        assert proc.returncode == 0, out + err
        assert "error after 0." in out, out
