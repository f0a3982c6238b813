"""The ``ferrolock`` command line against a real server (issue 21): every
command in table and JSON form, a lock held by a killed process shown then
force-released to its waiter, a queue with due, delayed, in-flight and dead
tasks, exit codes. ``tests/topology/cluster/test_cli.py`` runs the same
scenarios on a 3-master cluster."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ferrolock import Lock, Queue
from tests.support.servers import free_port

CONSOLE_SCRIPT = Path(sys.executable).parent / "ferrolock"


def cli(url: str, *args: str, console: bool = False, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Runs ``python -m ferrolock --url URL ARGS`` (or the console script)."""
    cmd = [str(CONSOLE_SCRIPT)] if console else [sys.executable, "-m", "ferrolock"]
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    return subprocess.run([*cmd, "--url", url, *args], capture_output=True, text=True, timeout=timeout, env=env)


def ok(proc: subprocess.CompletedProcess[str], code: int = 0) -> str:
    assert proc.returncode == code, f"exit {proc.returncode} (expected {code}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def short(token: str) -> str:
    return token if len(token) <= 12 else token[:8] + "…"


HOLDER = """
import sys, time
from ferrolock import Lock
locks = [Lock(n, url=sys.argv[1], ttl=60) for n in sys.argv[2:]]
for lock in locks:
    assert lock.acquire(blocking=False)
print(" ".join(lock.token for lock in locks), flush=True)
time.sleep(600)
"""


def held_by_a_killed_process(url: str, *names: str) -> list[str]:
    """Acquires ``names`` in a child process (auto-renewed, TTL 60 s), kills
    it with SIGKILL, and returns the tokens it held."""
    child = subprocess.Popen([sys.executable, "-c", HOLDER, url, *names], stdout=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline() if child.stdout else ""
        tokens = line.split()
        assert len(tokens) == len(names), f"the holder did not start: {line!r}"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        if child.stdout:
            child.stdout.close()
    return tokens


def waiting_for(url: str, name: str) -> tuple[Lock, threading.Thread, dict[str, object]]:
    """A lock of this process waiting (in a thread) for ``name``."""
    lock = Lock(name, url=url, ttl=30)
    out: dict[str, object] = {}
    thread = threading.Thread(target=lambda: out.setdefault("got", lock.acquire(timeout=30)))
    thread.start()
    return lock, thread, out


def wait_until(check, what: str, timeout: float = 10.0) -> None:
    until = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < until, f"timed out waiting for {what}"
        time.sleep(0.05)


# ------------------------------------------------------------------ scenarios
# Plain functions (not tests): the cluster suite runs them too.


def scenario_locks(url: str, prefix: str, r_of) -> None:
    """Locks held by a killed process: listed, shown in detail with their
    waiter, released by force (table and JSON) to the waiter.

    ``r_of(key)`` is a raw connection callable for the node of ``key``."""
    names = [f"{prefix}{i}-orders" for i in range(6)]
    tokens = held_by_a_killed_process(url, *names)
    first, second = names[0], names[1]
    lock_a, thread_a, out_a = waiting_for(url, first)
    lock_b, thread_b, out_b = waiting_for(url, second)
    wait_until(lambda: r_of(f"Lock:{first}")("ZCARD", waiters_key(r_of, first)) == 1, "the waiter of " + first)
    wait_until(lambda: r_of(f"Lock:{second}")("ZCARD", waiters_key(r_of, second)) == 1, "the waiter of " + second)

    # locks PREFIX: a table of the six, by name.
    text = ok(cli(url, "locks", prefix))
    lines = text.splitlines()
    assert lines[0].split() == ["NAME", "HOLDER", "TTL", "FENCE", "WAITERS"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert sorted(rows) == sorted(names)
    for name, token in zip(names, tokens):
        assert rows[name][1] == short(token)
        assert re.fullmatch(r"\d+s", rows[name][2]), rows[name]
    assert rows[first][-1] == "1" and rows[names[2]][-1] == "0"
    # ... as JSON, and bounded by --limit.
    doc = json.loads(ok(cli(url, "locks", prefix, "--json")))
    assert doc["complete"] is True
    assert [lk["name"] for lk in doc["locks"]] == sorted(names)
    for lk in doc["locks"]:
        assert lk["holder"] == short(tokens[names.index(lk["name"])])
        assert 0 < lk["ttl"] <= 60 and lk["expires"] is True
        assert lk["key"] == f"Lock:{lk['name']}"
    assert {lk["name"]: lk["waiting"] for lk in doc["locks"]}[first] == 1
    doc = json.loads(ok(cli(url, "--json", "locks", prefix, "--limit", "2")))
    assert len(doc["locks"]) == 2 and doc["complete"] is False
    text = ok(cli(url, "locks", prefix, "--limit", "2"))
    assert "--limit shows more" in text

    # lock NAME: holder, TTL, fence, the waiter with its lease.
    text = ok(cli(url, "lock", first))
    assert f"holder   {short(tokens[0])}" in text
    assert re.search(r"ttl +\d+s", text), text
    assert "waiting  1" in text
    waiter_row = [line for line in text.splitlines() if line.startswith("1 ")]
    assert len(waiter_row) == 1 and "ran out" not in waiter_row[0], text
    info = json.loads(ok(cli(url, "lock", first, "--json")))
    assert info["holder"] == short(tokens[0]) and info["waiting"] == 1
    [w] = info["waiters"]
    assert w["lease"] is not None and w["lease"] > 0 and w["ttl"] == 30 and w["waited"] >= 0

    # release without --force is refused (usage), and changes nothing.
    proc = cli(url, "release", first)
    assert proc.returncode == 2 and "--force" in proc.stderr
    assert r_of(f"Lock:{first}")("GET", f"Lock:{first}") == tokens[0].encode()

    # release --force: the hold of the dead process ends, the waiter gets it.
    text = ok(cli(url, "release", "--force", first))
    assert f"released by force (was held by {short(tokens[0])})" in text
    thread_a.join(15)
    assert out_a.get("got") is True, out_a
    assert r_of(f"Lock:{first}")("GET", f"Lock:{first}") == lock_a.token.encode()
    doc = json.loads(ok(cli(url, "release", "--force", second, "--json")))
    assert doc["name"] == second and doc["released"] is True and doc["holder"] == short(tokens[1])
    thread_b.join(15)
    assert out_b.get("got") is True, out_b
    # The waiters hold them now: shown so.
    info = json.loads(ok(cli(url, "lock", first, "--json")))
    assert info["holder"] == short(lock_a.token) and info["waiting"] == 0
    lock_a.release()
    lock_b.release()

    # Nothing to do: exit code 1, table and JSON.
    proc = cli(url, "release", "--force", first)
    assert proc.returncode == 1 and "not held" in proc.stdout
    doc = json.loads(ok(cli(url, "release", "--force", first, "--json"), 1))
    assert doc["released"] is False
    proc = cli(url, "lock", first)
    assert proc.returncode == 1 and "not held" in proc.stdout
    assert json.loads(ok(cli(url, "lock", first, "--json"), 1))["holder"] is None
    proc = cli(url, "locks", prefix + "-none-")
    assert proc.returncode == 1 and "no lock held" in proc.stdout
    assert json.loads(ok(cli(url, "locks", prefix + "-none-", "--json"), 1)) == {"locks": [], "complete": True}
    for name in names[2:]:
        ok(cli(url, "release", "--force", name))
    assert json.loads(ok(cli(url, "locks", prefix, "--json"), 1))["locks"] == []


def waiters_key(r_of, name: str) -> str:
    """The waiters key of lock ``name`` (found by a SCAN of its node: the key
    layout puts a slot tag before it)."""
    r = r_of(f"Lock:{name}")
    cursor = "0"
    while True:
        cursor, keys = r("SCAN", cursor, "MATCH", f"*Lock:{name}:waiters", "COUNT", "1000")
        for k in keys:
            return k.decode()
        cursor = cursor.decode()
        if cursor == "0":
            return f"-no-waiters-key-{name}"


def scenario_queues(url: str, prefix: str) -> None:
    """A queue with due, delayed, in-flight and dead tasks: ``queues``,
    ``queue``, ``dead``, ``retry``, ``purge-dead``, ``watch``."""
    name = f"{prefix}mails"
    other = f"{prefix}reports"
    q = Queue(name, url=url, max_attempts=1, visibility=120)
    q.enqueue({"x1": "dies", "x2": b"\xff\x00binary"})
    for task in q.reserve(2):
        assert task.nack() is True  # the last attempt: dead
    q.enqueue(["r1", "r2"])
    reserved = q.reserve(2)
    assert sorted(t.id for t in reserved) == ["r1", "r2"]
    q.enqueue(["due1", "due2"])
    q.enqueue("later", delay=3600)
    Queue(other, url=url).enqueue(["a"])
    stats = q.stats()
    assert stats == {**stats, "due": 2, "delayed": 1, "in_flight": 2, "dead": 2}

    # queues PREFIX
    text = ok(cli(url, "queues", prefix))
    lines = text.splitlines()
    assert lines[0].split() == ["NAME", "DUE", "DELAYED", "IN", "FLIGHT", "DEAD", "OLDEST", "DUE"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert sorted(rows) == sorted([name, other])
    assert rows[name][1:5] == ["2", "1", "2", "2"]
    assert re.fullmatch(r"\d+\.\ds", rows[name][5]), rows[name]
    doc = json.loads(ok(cli(url, "queues", prefix, "--json")))
    by_name = {d["name"]: d for d in doc["queues"]}
    assert doc["complete"] is True and sorted(by_name) == sorted([name, other])
    assert {k: by_name[name][k] for k in ("due", "delayed", "in_flight", "dead")} == {
        "due": 2, "delayed": 1, "in_flight": 2, "dead": 2}
    assert by_name[name]["oldest_due_age"] >= 0 and by_name[other]["due"] == 1
    assert len(json.loads(ok(cli(url, "queues", prefix, "--json", "--limit", "1")))["queues"]) == 1

    # queue NAME: the counts and the reservations with deadline and attempts.
    text = ok(cli(url, "queue", name))
    assert re.search(r"due 2 +delayed 1 +in flight 2 +dead 2", text), text
    assert "IN FLIGHT (2)" in text
    flight = {line.split()[0]: line.split() for line in text.splitlines() if line.startswith("r")}
    assert sorted(flight) == ["r1", "r2"]
    assert flight["r1"][1] == "1/1" and re.fullmatch(r"\d+m\d\ds|\d+s", flight["r1"][2]), flight
    doc = json.loads(ok(cli(url, "queue", name, "--json")))
    assert doc["due"] == 2 and doc["in_flight"] == 2 and doc["in_flight_tasks"]["total"] == 2
    items = doc["in_flight_tasks"]["items"]
    assert sorted(i["id"] for i in items) == ["r1", "r2"]
    for i in items:
        assert i["attempt"] == 1 and i["max_attempts"] == 1 and 60 < i["left"] <= 120
        assert i["visibility"] == 120 and i["deadline"] > time.time()
    page = json.loads(ok(cli(url, "queue", name, "--json", "--limit", "1", "--offset", "1")))
    assert page["in_flight_tasks"]["total"] == 2 and len(page["in_flight_tasks"]["items"]) == 1

    # dead NAME
    text = ok(cli(url, "dead", name))
    assert f"DEAD in queue '{name}': 2" in text
    dead_rows = {line.split()[0]: line for line in text.splitlines() if line.startswith("x")}
    assert sorted(dead_rows) == ["x1", "x2"] and "dies" in dead_rows["x1"]
    assert re.search(r"ago +1 ", dead_rows["x1"]), dead_rows
    doc = json.loads(ok(cli(url, "dead", name, "--json")))
    assert doc["total"] == 2
    tasks = {t["id"]: t for t in doc["tasks"]}
    assert tasks["x1"]["payload"] == "dies" and tasks["x1"]["attempts"] == 1
    assert tasks["x2"]["payload_size"] == 8 and tasks["x2"]["died_at"] <= time.time()
    assert len(json.loads(ok(cli(url, "dead", name, "--json", "--offset", "1")))["tasks"]) == 1

    # retry NAME ID, then purge-dead NAME (table and JSON), then nothing to do.
    text = ok(cli(url, "retry", name, "x1"))
    assert "1 dead task retried" in text
    assert q.stats()["dead"] == 1 and q.stats()["due"] == 3
    assert json.loads(ok(cli(url, "retry", name, "x1", "--json"), 1)) == {"name": name, "retried": 0}
    assert json.loads(ok(cli(url, "purge-dead", name, "--json"))) == {"name": name, "purged": 1}
    proc = cli(url, "purge-dead", name)
    assert proc.returncode == 1 and "0 dead tasks purged" in proc.stdout
    proc = cli(url, "dead", name)
    assert proc.returncode == 1 and "no dead task" in proc.stdout
    assert q.stats()["dead"] == 0

    # watch: frames of the live view (table), and one JSON document a refresh.
    text = ok(cli(url, "watch", "--count", "2", "--interval", "0.2", "--queues", prefix, "--locks", prefix))
    frames = [f for f in text.split("ferrolock watch") if f.strip()]
    assert len(frames) == 2, text
    for frame in frames:
        assert "QUEUES  2" in frame and name in frame and other in frame
    docs = [json.loads(line) for line in ok(cli(url, "watch", "--count", "2", "--interval", "0.2",
                                                   "--json", "--queues", prefix, "--locks", prefix)).splitlines()]
    assert len(docs) == 2
    for d in docs:
        assert sorted(x["name"] for x in d["queues"]) == sorted([name, other]) and d["locks"] == []
    for t in reserved:
        t.ack()


# ---------------------------------------------------------------- standalone


def raw(redis_server):
    """``r_of`` of a standalone server: its one node for every key."""
    return lambda _key: redis_server.cmd


def test_lock_commands_on_a_lock_held_by_a_killed_process(redis_server, name):
    scenario_locks(redis_server.url, f"cli-{name[-8:]}-", raw(redis_server))


def test_queue_commands_on_a_queue_in_every_state(redis_server, name):
    scenario_queues(redis_server.url, f"cli-{name[-8:]}-")


def test_a_legacy_orphan_is_shown_without_expiry(redis_server, r, name):
    r("SET", f"Lock:{name}", "legacy-owner")
    text = ok(cli(redis_server.url, "lock", name))
    assert "holder   legacy-owner" in text and "no expiry" in text
    assert "no expiry" in ok(cli(redis_server.url, "locks", name))
    doc = json.loads(ok(cli(redis_server.url, "lock", name, "--json")))
    assert doc["expires"] is False and doc["ttl"] is None
    ok(cli(redis_server.url, "release", "--force", name))
    assert r("EXISTS", f"Lock:{name}") == 0


def test_watch_redraws_a_terminal_and_ends_on_ctrl_c(redis_server, name):
    # Under a pseudo-terminal the screen is cleared before each frame; SIGINT
    # ends the view with exit code 0.
    import pty
    import select

    lock_name = f"watch-{name[-8:]}"
    Lock(lock_name, url=redis_server.url, ttl=60, auto_renew=False).acquire()
    pid, fd = pty.fork()
    if pid == 0:  # the child: the command on the terminal
        os.execvp(sys.executable, [sys.executable, "-m", "ferrolock", "--url", redis_server.url,
                                   "watch", "--interval", "0.2", "--locks", lock_name])
    seen = b""
    status = None
    clear = b"\x1b[H\x1b[2J"
    try:
        until = time.monotonic() + 20
        while seen.count(clear) < 3 and time.monotonic() < until:
            if select.select([fd], [], [], 0.2)[0]:
                seen += os.read(fd, 65536)
        assert seen.count(clear) >= 3, seen[-2000:]
        assert lock_name.encode() in seen and b"1 held" in seen, seen[-2000:]
        os.kill(pid, signal.SIGINT)
        until = time.monotonic() + 20
        while status is None and time.monotonic() < until:
            if select.select([fd], [], [], 0.1)[0]:
                try:
                    seen += os.read(fd, 65536)
                except OSError:  # the terminal closed with the child
                    pass
            done, code = os.waitpid(pid, os.WNOHANG)
            if done:
                status = code
        assert status is not None, "watch did not end on SIGINT"
    finally:
        if status is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    assert b"Traceback" not in seen


def test_the_console_script_and_the_url_from_the_environment(redis_server, name):
    assert CONSOLE_SCRIPT.exists(), "pyproject.toml installs the ferrolock command"
    Queue(f"env-{name}", url=redis_server.url).enqueue("a")
    proc = subprocess.run([str(CONSOLE_SCRIPT), "queues", f"env-{name}"], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "REDIS_URL": redis_server.url})
    assert proc.returncode == 0, proc.stderr
    assert f"env-{name}" in proc.stdout
    assert "ferrolock" in ok(cli(redis_server.url, "--version", console=True))


def test_exit_codes_for_usage_and_connection_errors(redis_server):
    proc = cli(redis_server.url, "no-such-command")
    assert proc.returncode == 2 and "invalid choice" in proc.stderr
    proc = cli(redis_server.url, "locks", "--limit", "0")
    assert proc.returncode == 2 and "--limit" in proc.stderr
    proc = cli(redis_server.url, "queue", "q", "--limit", "5000")
    assert proc.returncode == 2 and "1000" in proc.stderr
    proc = cli("not-a-url", "locks")
    assert proc.returncode == 2, proc.stderr
    closed = f"redis://127.0.0.1:{free_port()}/0?connect_timeout=0.5"
    start = time.monotonic()
    proc = cli(closed, "locks")
    assert proc.returncode == 3 and proc.stderr.startswith("ferrolock: error:"), proc.stderr
    assert time.monotonic() - start < 30
    assert cli(closed, "queue", "q", "--json").returncode == 3
    helped = cli(redis_server.url, "--help")
    assert helped.returncode == 0 and "Exit codes" in helped.stdout


@pytest.mark.parametrize("command", ["lock", "release", "dead", "retry", "purge-dead", "queue"])
def test_commands_that_need_a_name_say_so(redis_server, command):
    proc = cli(redis_server.url, command)
    assert proc.returncode == 2 and "NAME" in proc.stderr
