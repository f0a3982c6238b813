"""Ferrolock\\Queue across processes and languages: one queue shared by PHP
(the modern class, the legacy-API RedisQueue) and Python; workers of both
draining one queue; a heartbeat seen from another process; the CLI worker
loop stopping on SIGTERM/SIGINT; exit() inside a handler."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ferrolock import Queue, Task
from tests.conftest import PHP_EXT, run_php


@pytest.fixture(scope="module", autouse=True)
def extension_built() -> None:
    assert PHP_EXT.exists(), f"{PHP_EXT} is missing: run `make php`"


def php_script(tmp_path: Path, name: str, code: str) -> Path:
    path = tmp_path / name
    path.write_text("<?php\nuse Ferrolock\\Queue;\nuse Ferrolock\\Task;\n" + code)
    return path


def php_popen(script: Path, *args: str, url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(["php", "-d", f"extension={PHP_EXT}", "-d", "zend.assertions=1",
                             "-d", "assert.exception=1", str(script), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "REDIS_URL": url})


def test_one_queue_php_modern_php_legacy_and_python(url: str, name: str, tmp_path: Path) -> None:
    produce = php_script(tmp_path, "produce.php", """
$q = new Queue($argv[1]);
assert($q->enqueue(['p1' => 'from php', 'p2' => "\\x00\\xff"]) === 2);
assert($q->enqueue(['plain']) === 1);
assert((new RedisQueue())->enqueue($argv[1], 'legacy') === true);
echo "ok\\n";
""")
    assert run_php(produce, name, env={"REDIS_URL": url}).stdout == "ok\n"

    q = Queue(name, backoff=0)
    tasks = {t.id: t for t in q.reserve(10)}
    assert set(tasks) == {"p1", "p2", "plain", "legacy"}
    assert tasks["p1"].payload == b"from php" and tasks["p2"].payload == b"\x00\xff"
    assert tasks["plain"].payload is None and tasks["legacy"].payload is None
    assert all(t.attempts == 1 for t in tasks.values())
    for tid in ("p1", "plain", "legacy"):
        assert tasks[tid].ack()
    assert tasks["p2"].nack()  # backoff 0: due again, its attempt counted
    assert q.enqueue({"py1": b"from python", "py2": "text"}) == 2
    assert q.enqueue("py3") == 1

    consume = php_script(tmp_path, "consume.php", """
$q = new Queue($argv[1]);
$out = [];
foreach ($q->reserve(10) as $t) {
    $p = $t->payload();
    $out[$t->id()] = [$t->attempts(), $p === null ? null : base64_encode($p)];
    assert($t->ack() === true);
}
$legacy = new RedisQueue();
$out['stats'] = $legacy->stats($argv[1]);
echo json_encode($out), "\\n";
""")
    got = json.loads(run_php(consume, name, env={"REDIS_URL": url}).stdout)
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    assert got.pop("stats") == {"due": 0, "delayed": 0, "in_flight": 0, "dead": 0, "oldest_due_age": 0}
    assert got == {"p2": [2, b64(b"\x00\xff")], "py1": [1, b64(b"from python")],
                   "py2": [1, b64(b"text")], "py3": [1, None]}
    assert q.stats() == {"due": 0, "delayed": 0, "in_flight": 0, "dead": 0, "oldest_due_age": 0.0}


def test_php_dead_letters_seen_and_retried_from_python(url: str, name: str, tmp_path: Path) -> None:
    poison = php_script(tmp_path, "poison.php", """
$q = new Queue($argv[1], maxAttempts: 2, backoff: 0);
$q->enqueue(['bad' => 'payload']);
$n = $q->work(function (Task $t) { throw new RuntimeException('always fails'); }, wait: 0);
echo "$n\\n";
""")
    proc = run_php(poison, name, env={"REDIS_URL": url})
    assert proc.stdout == "2\n", proc.stdout
    assert proc.stderr.count("always fails") == 2, "each failure is logged"
    q = Queue(name)
    dead = q.dead()
    assert [(t.id, t.attempts, t.payload) for t in dead] == [("bad", 2, b"payload")]
    assert q.retry_dead() == 1
    task = q.reserve()
    assert task is not None and task.id == "bad" and task.attempts == 1 and task.ack()


def test_php_and_python_workers_drain_one_queue(url: str, name: str, tmp_path: Path) -> None:
    """Ferrolock\\Queue::work, RedisQueue::work and Python's Queue.work on one
    queue: every task handled exactly once, nothing left in flight."""
    ids = [f"t{i}" for i in range(300)]
    q = Queue(name)
    q.enqueue(ids)
    modern = php_script(tmp_path, "modern.php", """
$log = fopen($argv[2], 'a');
$n = (new Queue($argv[1]))->work(function (Task $t) use ($log) {
    usleep(1000);
    fwrite($log, $t->id() . "\\n");
}, wait: 1);
echo "handled $n\\n";
""")
    legacy = php_script(tmp_path, "legacy.php", """
$log = fopen($argv[2], 'a');
$n = (new RedisQueue())->work($argv[1], function (array $t) use ($log) {
    usleep(1000);
    fwrite($log, $t['id'] . "\\n");
}, ['wait' => 1]);
echo "handled $n\\n";
""")
    logs = [tmp_path / "modern.log", tmp_path / "legacy.log"]
    procs = [php_popen(modern, name, str(logs[0]), url=url), php_popen(legacy, name, str(logs[1]), url=url)]
    seen: list[str] = []

    def handle(task: Task) -> None:
        time.sleep(0.001)
        seen.append(task.id)

    try:
        python_count = Queue(name).work(handle, wait=1)
        outs = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert [p.returncode for p in procs] == [0, 0], outs
    php_ids = [logs[i].read_text().split() if logs[i].exists() else [] for i in range(2)]
    counts = [int(out.split()[-1]) for out, _ in outs]
    assert counts == [len(php_ids[0]), len(php_ids[1])] and python_count == len(seen)
    everything = php_ids[0] + php_ids[1] + seen
    assert sorted(everything) == sorted(ids), "each task handled exactly once"
    print(f"modern PHP {counts[0]}, legacy PHP {counts[1]}, Python {python_count}")
    assert q.stats() == {"due": 0, "delayed": 0, "in_flight": 0, "dead": 0, "oldest_due_age": 0.0}


def test_run_keeps_a_reservation_from_another_process(url: str, name: str, tmp_path: Path) -> None:
    """Task::run() in PHP holds a 0.3 s reservation for 1.5 s (5x) while a
    Python consumer keeps asking for work: it never gets that task."""
    q = Queue(name, visibility=0.3)
    q.enqueue("long")
    holder = php_script(tmp_path, "holder.php", """
$q = new Queue($argv[1], visibility: 0.3);
$t = $q->reserve();
assert($t !== null && $t->id() === 'long');
echo "reserved\\n";
flush();
echo $t->run(function (Task $t) { usleep(1500000); return 'done'; }), "\\n";
""")
    proc = php_popen(holder, name, url=url)
    try:
        assert proc.stdout.readline().strip() == "reserved"
        got = []
        until = time.monotonic() + 1.2
        while time.monotonic() < until:
            task = q.reserve(wait=0.1)
            if task is not None:
                got.append(task.id)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, err
    assert out.strip() == "done"
    assert got == [], "the task kept alive was handed out again"
    assert q.stats()["in_flight"] == 0 and len(q) == 0, "acked at the end of run()"


WORKER = """
$log = $argv[2];
$n = (new Queue($argv[1]))->work(function (Task $task) use ($log) {
    file_put_contents($log, "start {$task->id()}\\n", FILE_APPEND);
    $end = microtime(true) + 1.0;  // busy for a second, whatever signals come
    while (microtime(true) < $end) {
        usleep(10000);
    }
    file_put_contents($log, "done {$task->id()}\\n", FILE_APPEND);
});
echo "handled $n\\n";
"""


def start_worker(tmp_path: Path, url: str, name: str) -> tuple[subprocess.Popen[str], Path]:
    script = php_script(tmp_path, "worker.php", WORKER)
    log = tmp_path / "log"
    proc = php_popen(script, name, str(log), url=url)
    until = time.monotonic() + 10
    while not (log.exists() and "start t0" in log.read_text()):
        assert time.monotonic() < until, "the worker did not start"
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    return proc, log


def test_sigterm_stops_the_worker_after_the_task_at_hand(url: str, name: str, tmp_path: Path) -> None:
    q = Queue(name)
    q.enqueue([f"t{i}" for i in range(5)])
    proc, log = start_worker(tmp_path, url, name)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    assert "handled 1" in out
    assert log.read_text().splitlines() == ["start t0", "done t0"]
    assert len(q) == 4 and q.stats()["in_flight"] == 0, "t0 acked, nothing else taken"


def test_sigterm_while_waiting_for_work(url: str, name: str, tmp_path: Path) -> None:
    q = Queue(name)
    q.enqueue("t0")
    proc, _ = start_worker(tmp_path, url, name)
    time.sleep(1.5)  # t0 is done; the worker waits for work (wait: null)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=5)
    assert proc.returncode == 0 and "handled 1" in out
    assert q.stats() == {"due": 0, "delayed": 0, "in_flight": 0, "dead": 0, "oldest_due_age": 0.0}


def test_a_second_sigint_kills(url: str, name: str, tmp_path: Path) -> None:
    q = Queue(name)
    q.enqueue([f"t{i}" for i in range(3)])
    proc, _ = start_worker(tmp_path, url, name)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=5)
    assert proc.returncode != 0, "killed by the second SIGINT"
    # Its task comes back when the reservation runs out: nothing is lost.
    assert len(q) + q.stats()["in_flight"] == 3


@pytest.mark.parametrize("how", ["modern work", "legacy work", "run"])
def test_exit_in_a_handler_nacks_its_task_and_exits(how: str, url: str, name: str, tmp_path: Path) -> None:
    """exit() unwinds through the extension: the task is given back (not
    acked, not stuck in flight), the exit status is kept, nothing crashes."""
    body = {
        "modern work": "(new Queue($argv[1], backoff: 0))->work(function (Task $t) { exit(3); }, wait: 0);",
        "legacy work": "(new RedisQueue(['backoff' => 0]))->work($argv[1], function (array $t) { exit(3); });",
        "run": "(new Queue($argv[1], backoff: 0))->reserve()->run(function (Task $t) { exit(3); });",
    }[how]
    script = php_script(tmp_path, "exit.php", body + '\necho "not reached\\n";\n')
    q = Queue(name)
    q.enqueue(["a", "b"])
    proc = run_php(script, name, env={"REDIS_URL": url}, check=False)
    assert proc.returncode == 3, (proc.returncode, proc.stdout, proc.stderr)
    assert "not reached" not in proc.stdout and proc.stderr == "", proc.stderr
    stats = q.stats()
    assert stats["in_flight"] == 0 and stats["due"] == 2, stats
    # a, nacked with backoff 0, is due again now (after b): its attempt counted.
    tasks = {t.id: t.attempts for t in q.reserve(2)}
    assert tasks == {"a": 2, "b": 1}, tasks


def test_stop_ends_the_work_loops_of_either_class(url: str, name: str, tmp_path: Path) -> None:
    """Queue::stop() and RedisQueue::stop() stop every work() loop of their
    process, whichever class runs it."""
    script = php_script(tmp_path, "stop.php", """
$q = new Queue($argv[1]);
$q->enqueue(['a', 'b', 'c']);
$n = $q->work(function (Task $t) { RedisQueue::stop(); }, wait: 0);
$m = (new RedisQueue())->work($argv[1], function (array $t) { Queue::stop(); }, ['wait' => 0]);
echo "$n $m ", count($q), "\\n";
""")
    assert run_php(script, name, env={"REDIS_URL": url}).stdout == "1 1 1\n"
