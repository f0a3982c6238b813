"""Lost replies (issue 18, faults-design §3): Redis paused (SIGSTOP, DEBUG
SLEEP) past the client's timeout in the middle of pop, reserve and ack, from
Python and PHP: no task missing, none left reserved by nobody."""

from __future__ import annotations

import signal
import threading
import time

import pytest

import ferrolock
from ferrolock import Queue
from tests.conftest import PHP_EXT, run_php
from tests.support.servers import RedisServer


def settled(q: Queue, due: int, timeout: float = 10.0) -> dict:
    """Polls ``q.stats()`` (each answer wakes the keeper) until ``due`` tasks
    are queued and none is in flight."""
    until = time.monotonic() + timeout
    while True:
        s = q.stats()
        if (s["due"], s["in_flight"]) == (due, 0) or time.monotonic() > until:
            return s
        time.sleep(0.05)


def connected(url: str, name: str) -> Queue:
    q = Queue(name, url=url, visibility=60)
    len(q)
    return q


def test_a_pause_in_the_middle_of_pop_reserve_and_ack_loses_nothing():
    with RedisServer() as server:
        # A client (pool) of its own for each call: a distinct URL each.
        popper, reserver, acker = (connected(f"{server.url}?timeout=0.{n}", "jobs") for n in (2, 21, 22))
        popper.enqueue([f"t{i}" for i in range(20)])
        task = acker.reserve()
        assert server.proc is not None
        server.proc.send_signal(signal.SIGSTOP)
        errors: list[BaseException] = []

        def call(f):
            try:
                f()
            except BaseException as e:  # collected, checked below
                errors.append(e)

        started = time.monotonic()
        threads = [threading.Thread(target=call, args=(f,)) for f in
                   (lambda: popper.pop(3), lambda: reserver.reserve(), task.ack)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert time.monotonic() - started < 2, "each call ended within its timeout"
        assert len(errors) == 3 and all(isinstance(e, ferrolock.ConnectionError) for e in errors), errors
        time.sleep(0.3)
        server.proc.send_signal(signal.SIGCONT)
        s = settled(popper, 19)
        assert (s["due"], s["in_flight"]) == (19, 0), f"task acked, the rest queued: {s}"


def test_a_debug_sleep_while_a_worker_loop_runs_loses_nothing():
    with RedisServer("--enable-debug-command", "local") as server:
        url = f"{server.url}?timeout=0.2"
        q = Queue("jobs", url=url, backoff=0)
        q.enqueue([f"t{i}" for i in range(30)])
        seen: list[str] = []

        def handler(task):
            seen.append(task.id)
            if len(seen) in (5, 15):  # the server sleeps past the client's timeout
                threading.Thread(target=lambda: server.cmd("DEBUG", "SLEEP", "0.6")).start()
                time.sleep(0.05)

        q.work(handler, wait=1.5)
        assert sorted(set(seen)) == sorted(f"t{i}" for i in range(30)), "every task handled"
        assert len(seen) == 30, f"and once: {sorted(seen)}"
        assert settled(q, 0)["in_flight"] == 0


PHP_PAUSE = """<?php
$url = getenv('REDIS_URL');
$pid = (int) $argv[1];
// A client (pool) of its own for each call: a distinct URL each, connected.
[$p, $r, $q] = array_map(fn($t) => new RedisQueue("$url?timeout=$t"), ['0.2', '0.21', '0.22']);
foreach ([$p, $r, $q] as $c) {
    $c->len('jobs');
}
$q->enqueue('jobs', array_map(fn($i) => "t$i", range(0, 19)));
$t = $q->reserve('jobs', 60);
posix_kill($pid, SIGSTOP);
foreach ([fn() => $p->pop('jobs', 3), fn() => $r->reserve('jobs', 60),
          fn() => $q->ack('jobs', $t['id'], $t['receipt'])] as $call) {
    try {
        $call();
        echo "no error\\n";
    } catch (RedisLockException $e) {
        echo "error\\n";
    }
}
posix_kill($pid, SIGCONT);
$until = microtime(true) + 10;
do {
    usleep(50000);
    $s = $q->stats('jobs');
} while (($s['due'] !== 19 || $s['in_flight'] !== 0) && microtime(true) < $until);
echo json_encode($s), "\\n";
"""


def test_a_pause_in_the_middle_of_pop_reserve_and_ack_from_php(tmp_path):
    if not PHP_EXT.exists():
        pytest.skip("the PHP extension is not built")
    with RedisServer() as server:
        script = tmp_path / "pause.php"
        script.write_text(PHP_PAUSE)
        assert server.proc is not None
        out = run_php(script, str(server.proc.pid), env={"REDIS_URL": server.url}).stdout
        lines = out.splitlines()
        assert lines[:3] == ["error"] * 3, out
        assert '"due":19' in lines[3] and '"in_flight":0' in lines[3], out


def attach_replica(master: RedisServer) -> RedisServer:
    replica = RedisServer("--replicaof", "127.0.0.1", str(master.port))
    until = time.monotonic() + 20
    while b"connected_slaves:1" not in master.cmd("INFO", "replication") or \
            b"master_link_status:up" not in replica.cmd("INFO", "replication"):
        assert time.monotonic() < until, "the replica did not attach and sync"
        time.sleep(0.05)
    return replica


PHP_REPLICAS = """<?php
$q = new RedisQueue(['url' => getenv('REDIS_URL'), 'min_replicas' => 1]);
try {
    $q->enqueue('jobs', 'a');
    echo "no error\\n";
} catch (RedisLockException $e) {
    echo $e->getMessage(), "\\n";
}
"""


def test_min_replicas_from_python_and_php(tmp_path):
    # No diskless-sync delay (5 s by default): the replica's first sync would
    # end just about when the 5 s recovery loop below gives up.
    with RedisServer("--repl-diskless-sync-delay", "0") as master:
        q = Queue("jobs", url=master.url, min_replicas=1)
        with pytest.raises(ferrolock.LockError, match=r"0 connected replicas.*nothing was enqueued"):
            q.enqueue("a")
        script = tmp_path / "replicas.php"
        script.write_text(PHP_REPLICAS)
        if PHP_EXT.exists():
            out = run_php(script, env={"REDIS_URL": master.url}).stdout
            assert "nothing was enqueued" in out, out
        replica = attach_replica(master)
        try:
            until = time.monotonic() + 5
            while True:
                try:
                    q.enqueue(["a", "b"])
                    break
                except ferrolock.LockError:
                    assert time.monotonic() < until, "never recovered"
                    time.sleep(0.1)
            assert replica.cmd("ZCARD", "Queue:jobs") == 2, "confirmed by the replica"
            assert q.work(lambda t: None, wait=0) == 2, "acks confirmed too"
            if PHP_EXT.exists():
                out = run_php(script, env={"REDIS_URL": master.url}).stdout
                assert "no error" in out, out
        finally:
            replica.close()
