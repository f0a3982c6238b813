"""The ``ferrolock`` command: see and act on locks and queues.

``python -m ferrolock`` or the ``ferrolock`` console script::

    ferrolock locks [PREFIX]          locks held (names starting with PREFIX)
    ferrolock lock NAME               one lock: holder, TTL, fencing token, waiters
    ferrolock release --force NAME    free a lock whoever holds it (logged)
    ferrolock queues [PREFIX]         queues with their counts
    ferrolock queue NAME              one queue's counts and its tasks in flight
    ferrolock dead NAME               its dead tasks (--offset, --limit)
    ferrolock retry NAME [ID ...]     put dead tasks back (all without ids)
    ferrolock purge-dead NAME [ID ...]  delete dead tasks (all without ids)
    ferrolock watch                   a live view, refreshed every second

Options (before or after the command): ``--url`` (else ``$REDIS_URL``, else
``redis://127.0.0.1:6379/0``), ``--json`` (one JSON document; ``watch``: one
per refresh, a line each), ``--lock-prefix``, ``--queue-prefix``.

Exit codes: 0 done; 1 nothing found or nothing to do (no such lock held, an
empty listing, no dead task to retry...); 2 usage error; 3 Redis could not be
reached, did not answer in time or refused the credentials; 4 Redis answered
with an error. Every read is bounded (a ``SCAN`` of every master, never
``KEYS``; pages of at most 1000).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Callable, NoReturn, TextIO

import ferrolock
from ferrolock import _events
from ferrolock._native import DEFAULT_LOCK_PREFIX, DEFAULT_QUEUE_PREFIX
from ferrolock.ops import Inspector

__all__ = ["main"]

OK, NOT_FOUND, USAGE, CONNECTION, REDIS_ERROR = 0, 1, 2, 3, 4


class UsageError(Exception):
    """A command line that cannot be carried out as written."""


# ---------------------------------------------------------------- formatting


def duration(seconds: float | None) -> str:
    """``0.4s``, ``12s``, ``4m05s``, ``2h03m``, ``3d04h``; ``-`` for none."""
    if seconds is None:
        return "-"
    s = max(seconds, 0.0)
    if s < 10:
        return f"{s:.1f}s"
    if s < 60:
        return f"{s:.0f}s"
    s = int(s)
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], right: Sequence[int] = ()) -> list[str]:
    """Rows under headers in aligned columns (``right``: right-aligned ones)."""
    cells = [[str(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        out = [v.rjust(w) if i in right else v.ljust(w) for i, (v, w) in enumerate(zip(values, widths))]
        return "  ".join(out).rstrip()

    return [line(list(headers))] + [line(r) for r in cells]


def shown(name: str, width: int | None = None) -> str:
    """A name as a table shows it: control characters escaped; cut to
    ``width`` when given (names are shown whole: an operator acts on them)."""
    text = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if width is None or len(text) <= width else text[: width - 1] + "…"


def payload_text(payload: bytes | None, width: int = 40) -> str:
    if payload is None:
        return "-"
    return shown(payload.decode("utf-8", "backslashreplace"), width)


def redacted(url: str) -> str:
    """``url`` with its password masked."""
    return re.sub(r"(//[^/@:]*:)[^/@]*@", r"\1***@", url)


def lock_rows(locks: Sequence[Mapping[str, Any]]) -> list[list[object]]:
    return [[shown(lk["name"]), lk["holder"] or "-",
             duration(lk["ttl"]) if lk["expires"] or lk["holder"] is None else "no expiry",
             lk["fence"] if lk["fence"] is not None else "-", lk["waiting"]] for lk in locks]


LOCK_HEADERS = ("NAME", "HOLDER", "TTL", "FENCE", "WAITERS")
QUEUE_HEADERS = ("NAME", "DUE", "DELAYED", "IN FLIGHT", "DEAD", "OLDEST DUE")


def queue_rows(queues: Sequence[Mapping[str, Any]]) -> list[list[object]]:
    return [[shown(q["name"]), q["due"], q["delayed"], q["in_flight"], q["dead"],
             duration(q["oldest_due_age"]) if q["due"] else "-"] for q in queues]


# ------------------------------------------------------------------ commands


class Cli:
    """One run of the command: its options and where it writes."""

    def __init__(self, args: argparse.Namespace, out: TextIO) -> None:
        self.args = args
        self.out = out
        self.url: str = args.url or os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
        self.inspector = Inspector(self.url, lock_prefix=args.lock_prefix, queue_prefix=args.queue_prefix)

    def print(self, *lines: str) -> None:
        for line in lines:
            print(line, file=self.out)

    def emit(self, document: object) -> None:
        print(json.dumps(document, ensure_ascii=False), file=self.out)

    def queue(self, name: str) -> ferrolock.Queue:
        return ferrolock.Queue(name, url=self.url, prefix=self.args.queue_prefix)

    # -- locks

    def locks(self) -> int:
        found = self.inspector.locks(self.args.prefix or "", limit=self.args.limit)
        items = found["items"]
        if self.args.json:
            self.emit({"locks": items, "complete": found["complete"]})
        elif items:
            self.print(*table(LOCK_HEADERS, lock_rows(items), right=(4,)))
            if not found["complete"]:
                self.print(f"(the first {len(items)}: --limit shows more)")
        else:
            self.print("no lock held" + (f" under {self.args.prefix!r}" if self.args.prefix else ""))
        return OK if items else NOT_FOUND

    def lock(self) -> int:
        info = self.inspector.lock(self.args.name, waiters=self.args.waiters)
        found = info["holder"] is not None or info["waiting"] > 0
        if self.args.json:
            self.emit(info)
            return OK if found else NOT_FOUND
        title = f"lock {shown(info['name'])!r} (key {shown(info['key'])})"
        if info["holder"] is None:
            self.print(f"{title}: not held")
        else:
            ttl = duration(info["ttl"]) if info["expires"] else "no expiry (a legacy client's orphan)"
            self.print(title, f"  holder   {info['holder']}", f"  ttl      {ttl}")
        self.print(f"  fence    {info['fence'] if info['fence'] is not None else '-'} (last issued)",
                   f"  waiting  {info['waiting']}")
        if info["waiters"]:
            rows = [[i, w["id"], w["token"], duration(w["waited"]),
                     duration(w["lease"]) if w["lease"] is not None else "ran out", duration(w["ttl"])]
                    for i, w in enumerate(info["waiters"], 1)]
            self.print("", *table(("#", "WAITER", "TOKEN", "WAITED", "LEASE", "TTL ASKED"), rows, right=(0,)))
            if info["waiting"] > len(info["waiters"]):
                self.print(f"(the first {len(info['waiters'])} of {info['waiting']}: --waiters shows more)")
        return OK if found else NOT_FOUND

    def release(self) -> int:
        if not self.args.force:
            raise UsageError("release frees a lock whoever holds it: say --force to do it")
        name = self.args.name
        ended = self.inspector.force_release(name)
        after = self.inspector.lock(name, waiters=0)
        if self.args.json:
            self.emit({"name": name, "released": ended is not None, "holder": ended,
                       "now_held_by": after["holder"]})
        elif ended is None:
            self.print(f"lock {shown(name)!r}: not held, nothing released")
        else:
            next_holder = f"; now held by {after['holder']} (the next waiter)" if after["holder"] else ""
            self.print(f"lock {shown(name)!r}: released by force (was held by {ended}){next_holder}")
        return OK if ended is not None else NOT_FOUND

    # -- queues

    def queues(self) -> int:
        found = self.inspector.queues(self.args.prefix or "", limit=self.args.limit)
        items = found["items"]
        if self.args.json:
            self.emit({"queues": items, "complete": found["complete"]})
        elif items:
            self.print(*table(QUEUE_HEADERS, queue_rows(items), right=(1, 2, 3, 4, 5)))
            if not found["complete"]:
                self.print(f"(the first {len(items)}: --limit shows more)")
        else:
            self.print("no queue" + (f" under {self.args.prefix!r}" if self.args.prefix else ""))
        return OK if items else NOT_FOUND

    def queue_cmd(self) -> int:
        name = self.args.name
        info = self.inspector.queue(name)
        page = self.inspector.in_flight(name, offset=self.args.offset, count=self.args.limit)
        found = any(info[k] for k in ("due", "delayed", "in_flight", "dead"))
        if self.args.json:
            self.emit({**info, "in_flight_tasks": page})
            return OK if found else NOT_FOUND
        self.print(f"queue {shown(name)!r} (key {shown(info['key'])})",
                   f"  due {info['due']}   delayed {info['delayed']}   in flight {info['in_flight']}   "
                   f"dead {info['dead']}   oldest due {duration(info['oldest_due_age']) if info['due'] else '-'}")
        if page["items"]:
            rows = []
            for r in page["items"]:
                attempt = "-" if r["attempt"] is None else (
                    f"{r['attempt']}/{r['max_attempts']}" if r["max_attempts"] else f"{r['attempt']}/∞")
                left = duration(r["left"]) if r["left"] >= 0 else f"overdue {duration(-r['left'])}"
                rows.append([shown(r["id"]), attempt, left, duration(r["visibility"])])
            self.print("", f"IN FLIGHT ({page['total']})",
                       *table(("ID", "ATTEMPT", "DEADLINE IN", "VISIBILITY"), rows))
            shown_to = self.args.offset + len(page["items"])
            if page["total"] > shown_to:
                self.print(f"(showing {self.args.offset + 1}-{shown_to}: --offset, --limit show more)")
        return OK if found else NOT_FOUND

    def dead(self) -> int:
        name = self.args.name
        queue = self.queue(name)
        total = queue.stats()["dead"]
        tasks = queue.dead(self.args.limit, offset=self.args.offset)
        now = time.time()
        if self.args.json:
            self.emit({"name": name, "total": total, "offset": self.args.offset, "tasks": [
                {"id": t.id, "died_at": t.score, "attempts": t.attempts,
                 "payload": None if t.payload is None else t.payload.decode("utf-8", "backslashreplace"),
                 "payload_size": None if t.payload is None else len(t.payload)} for t in tasks]})
        elif tasks:
            rows = [[shown(t.id), f"{duration(now - t.score)} ago", t.attempts, payload_text(t.payload)]
                    for t in tasks]
            self.print(f"DEAD in queue {shown(name)!r}: {total}"
                       f" (showing {self.args.offset + 1}-{self.args.offset + len(tasks)})",
                       *table(("ID", "DIED", "ATTEMPTS", "PAYLOAD"), rows, right=(2,)))
        else:
            self.print(f"queue {shown(name)!r}: no dead task" + (" here" if self.args.offset else ""))
        return OK if tasks else NOT_FOUND

    def retry(self) -> int:
        n = self.queue(self.args.name).retry_dead(self.args.ids or None)
        return self.done("retried", n, "back in the queue, due now, attempts reset")

    def purge_dead(self) -> int:
        n = self.queue(self.args.name).purge_dead(self.args.ids or None)
        return self.done("purged", n, "deleted with their payloads")

    def done(self, what: str, n: int, meaning: str) -> int:
        name = self.args.name
        if self.args.json:
            self.emit({"name": name, what: n})
        else:
            self.print(f"queue {shown(name)!r}: {n} dead task{'s' if n != 1 else ''} {what}"
                       + (f" ({meaning})" if n else ""))
        return OK if n else NOT_FOUND

    # -- watch

    def watch(self) -> int:
        a = self.args
        tty = self.out.isatty() and not a.json
        known_locks: list[str] = []
        known_queues: list[str] = []
        scanned_at = float("-inf")
        frames = 0
        try:
            while True:
                started = time.monotonic()
                if started - scanned_at >= a.rescan:
                    locks = self.inspector.locks(a.locks or "", limit=a.limit)["items"]
                    queues = self.inspector.queues(a.queues or "", limit=a.limit)["items"]
                    known_locks = [lk["name"] for lk in locks]
                    known_queues = [q["name"] for q in queues]
                    scanned_at = started
                else:
                    locks = [lk for lk in self.inspector.locks_named(known_locks)
                             if lk["holder"] is not None or lk["waiting"]]
                    queues = self.inspector.queues_named(known_queues)
                if a.json:
                    self.emit({"at": time.time(), "locks": locks, "queues": queues})
                else:
                    frame = self.frame(locks, queues)
                    if tty:
                        self.out.write("\x1b[H\x1b[2J")
                    elif frames:
                        self.print("")
                    self.print(*frame)
                self.out.flush()
                frames += 1
                if a.count and frames >= a.count:
                    return OK
                time.sleep(max(0.0, a.interval - (time.monotonic() - started)))
        except KeyboardInterrupt:
            if tty:
                self.print("")
            return OK

    def frame(self, locks: Sequence[Mapping[str, Any]], queues: Sequence[Mapping[str, Any]]) -> list[str]:
        a = self.args
        when = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        lines = [f"ferrolock watch  {redacted(self.url)}  {when}  "
                 f"(every {a.interval:g} s, names rescanned every {a.rescan:g} s; Ctrl-C quits)", ""]
        held = sum(1 for lk in locks if lk["holder"] is not None)
        lines.append(f"LOCKS  {held} held, {sum(lk['waiting'] for lk in locks)} waiting")
        lines += table(LOCK_HEADERS, lock_rows(locks), right=(4,)) if locks else ["  (none)"]
        lines += ["", f"QUEUES  {len(queues)}"]
        lines += table(QUEUE_HEADERS, queue_rows(queues), right=(1, 2, 3, 4, 5)) if queues else ["  (none)"]
        return lines


# ------------------------------------------------------------------- parsing


def positive_int(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


def natural_int(text: str) -> int:
    n = int(text)
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {n}")
    return n


def positive_float(text: str) -> float:
    x = float(text)
    if not x > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return x


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: an option given before the command is not reset by the
    # command's own copy of it.
    common.add_argument("--url", default=argparse.SUPPRESS,
                        help="Redis URL (default: $REDIS_URL, else redis://127.0.0.1:6379/0)")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print JSON for scripts instead of tables")
    common.add_argument("--lock-prefix", default=argparse.SUPPRESS, metavar="PREFIX",
                        help=f"key prefix of locks (default {DEFAULT_LOCK_PREFIX!r})")
    common.add_argument("--queue-prefix", default=argparse.SUPPRESS, metavar="PREFIX",
                        help=f"key prefix of queues (default {DEFAULT_QUEUE_PREFIX!r})")

    p = argparse.ArgumentParser(
        prog="ferrolock", parents=[common],
        description="See and act on ferrolock's locks and queues in Redis.",
        epilog="Exit codes: 0 done, 1 nothing found or nothing to do, 2 usage error, "
               "3 Redis unreachable (or timed out, or refused the credentials), 4 Redis answered with an error.")
    p.add_argument("--version", action="version", version=f"ferrolock {ferrolock.__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, run: Callable[[Cli], int], help: str) -> argparse.ArgumentParser:
        c = sub.add_parser(name, parents=[common], help=help, description=help)
        c.set_defaults(run=run)
        return c

    def limit(c: argparse.ArgumentParser, default: int, what: str) -> None:
        c.add_argument("--limit", type=positive_int, default=default, help=f"{what} at most (default {default})")

    c = command("locks", Cli.locks, "list the locks held (a bounded SCAN of every master)")
    c.add_argument("prefix", nargs="?", metavar="PREFIX", help="only names starting with PREFIX")
    limit(c, 100, "locks listed")
    c = command("lock", Cli.lock, "one lock: holder, remaining TTL, last fencing token, waiters in order")
    c.add_argument("name", metavar="NAME")
    c.add_argument("--waiters", type=natural_int, default=20, help="waiters listed at most (default 20)")
    c = command("release", Cli.release, "free a lock whoever holds it (the next waiter gets it)")
    c.add_argument("name", metavar="NAME")
    c.add_argument("--force", action="store_true", help="required: this ends another process's hold")
    c = command("queues", Cli.queues, "list the queues with their counts")
    c.add_argument("prefix", nargs="?", metavar="PREFIX", help="only names starting with PREFIX")
    limit(c, 100, "queues listed")
    c = command("queue", Cli.queue_cmd, "one queue: counts and its tasks in flight")
    c.add_argument("name", metavar="NAME")
    limit(c, 20, "tasks in flight listed")
    c.add_argument("--offset", type=natural_int, default=0, help="skip that many tasks in flight")
    c = command("dead", Cli.dead, "a queue's dead tasks, oldest death first")
    c.add_argument("name", metavar="NAME")
    limit(c, 20, "tasks listed")
    c.add_argument("--offset", type=natural_int, default=0, help="skip that many dead tasks")
    c = command("retry", Cli.retry, "put dead tasks back in the queue (all of them without ids)")
    c.add_argument("name", metavar="NAME")
    c.add_argument("ids", nargs="*", metavar="ID")
    c = command("purge-dead", Cli.purge_dead, "delete dead tasks with their payloads (all without ids)")
    c.add_argument("name", metavar="NAME")
    c.add_argument("ids", nargs="*", metavar="ID")
    c = command("watch", Cli.watch, "a live view of locks and queues (Ctrl-C quits)")
    c.add_argument("--interval", type=positive_float, default=1.0, help="seconds between refreshes (default 1)")
    c.add_argument("--rescan", type=positive_float, default=10.0,
                   help="seconds between scans for new names (default 10; each refresh reads "
                        "the names found in one round trip)")
    c.add_argument("--locks", metavar="PREFIX", help="only locks whose names start with PREFIX")
    c.add_argument("--queues", metavar="PREFIX", help="only queues whose names start with PREFIX")
    limit(c, 20, "locks and queues shown")
    c.add_argument("--count", type=positive_int, help="stop after that many refreshes")
    return p


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Runs the command line ``argv`` (default: ``sys.argv[1:]``); returns
    the exit code."""
    p = parser()
    args = p.parse_args(argv)
    for name, default in (("url", None), ("json", False), ("lock_prefix", DEFAULT_LOCK_PREFIX),
                          ("queue_prefix", DEFAULT_QUEUE_PREFIX)):
        if not hasattr(args, name):
            setattr(args, name, default)
    # The core's warnings (a lost reply settled later, a forced release)
    # go to stderr; stdout stays the command's answer.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("ferrolock: %(levelname)s: %(message)s"))
    logger = logging.getLogger("ferrolock")
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    _events.start()
    try:
        return int(args.run(Cli(args, out or sys.stdout)))
    except UsageError as e:
        p.error(str(e))
    except (ValueError, TypeError) as e:
        fail(f"{args.command}: {e}", USAGE)
    except ferrolock.ConnectionError as e:
        fail(str(e), CONNECTION)
    except ferrolock.FerrolockError as e:
        fail(str(e), REDIS_ERROR)
    except BrokenPipeError:
        # `ferrolock locks | head`: the reader left; nothing more to say.
        sys.stderr.close()
        return OK
    finally:
        logger.removeHandler(handler)


def fail(message: str, code: int) -> NoReturn:
    print(f"ferrolock: error: {message}", file=sys.stderr)
    raise SystemExit(code)
