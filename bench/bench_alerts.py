"""Alerts (issue 36), measured end to end: a real `runservices` (mirror, evaluator, sender), a
real worker, its own redis-server and database, and a local webhook receiver that records
every call. Channels and rules are made with `manage.py alert`, as a user would.

1. one bug: N tasks of one handler fail with one bug (messages differing by numbers and
   names, one masked fingerprint): how many messages arrive (1), and how long after the
   first failure the first one left;
2. three bugs: three other bugs, a few hundred failures each: how many messages (3);
3. no live worker: the only worker of a queue with work is stopped (SIGTERM): how long
   after it exited the no-live-worker message arrived;
4. kill -9: five more bugs while the receiver takes 2 s to answer; `runservices` is killed
   with SIGKILL while a POST is in flight and started again, the worker too: every message
   of the outbox arrives (none lost), none with two ids, repeats carry the same id (the one
   in flight when it was killed, sent again after the sender's lease: 3 times
   --send-timeout), and the worker back sends one recovery message.

    .venv/bin/python bench/bench_alerts.py [--failures 10000] [--every 5] [--send-timeout 10]
    [--json-only] [--database-url postgres://...]   (default: a SQLite file in a temporary
    directory)

Prints one JSON object, then a table. Nothing outside its temporary directory is touched.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.queue import Queue, read, registry  # noqa: E402
from core.stack.redis_server import start_redis  # noqa: E402
from tests.alerts_support import Receiver, free_port  # noqa: E402
from tests.stack_support import migrated_sqlite  # noqa: E402

QUEUE, PREFIX = "alerts", "ba"
SECRET = "bench-secret-of-32-characters-ok"
WITHIN_S = 30.0  # the bound: an alert leaves within 30 s of its condition


@dataclass
class Stack:
    """What the benchmark started: the environment its processes share, the services
    process and the worker (each started again after a kill)."""

    env: dict[str, str]
    logs: Path
    database_url: str
    services: subprocess.Popen[bytes] | None = None
    worker: subprocess.Popen[bytes] | None = None
    starts: int = 0

    def manage(self, *argv: str) -> str:
        done = subprocess.run([sys.executable, "manage.py", *argv], cwd=ROOT, env=self.env,
                              capture_output=True, text=True, timeout=120)
        if done.returncode:
            raise RuntimeError(f"manage.py {' '.join(argv)}: {done.stderr.strip()}")
        return done.stdout

    def start(self, what: str) -> subprocess.Popen[bytes]:
        self.starts += 1
        argv = (["runservices", "--log-level", "WARNING"] if what == "services" else
                ["runworker", "-q", QUEUE, "--import", "bench.handlers", "--slots", "2",
                 "--log-level", "WARNING", "--name", f"w{self.starts}"])
        log = open(self.logs / f"{what}.log", "ab")  # noqa: SIM115 (the child keeps it)
        p = subprocess.Popen([sys.executable, "manage.py", *argv], cwd=ROOT, env=self.env,
                             stdout=log, stderr=subprocess.STDOUT)
        setattr(self, what, p)
        return p

    def stop(self, what: str, sig: int = signal.SIGTERM) -> float:
        """Signal it, wait for it; the time it was gone."""
        p = getattr(self, what)
        if p is not None and p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        setattr(self, what, None)
        return time.time()

    def sql(self, query: str) -> list[tuple[Any, ...]]:
        """Rows straight from the database the processes share (this process runs no
        Django: the test that runs this benchmark has its own)."""
        if self.database_url.startswith("sqlite"):
            import sqlite3

            with sqlite3.connect(self.database_url.removeprefix("sqlite:///"), timeout=30) as c:
                return c.execute(query).fetchall()
        import psycopg

        with psycopg.connect(self.database_url) as c:
            return c.execute(query).fetchall()

    def outbox(self) -> list[tuple[str, str, str, str]]:
        """(key, status, delivery, rule name) of every message but channel tests."""
        rows = self.sql("SELECT m.key, m.status, m.delivery, r.name FROM core_alertmessage m "
                        "JOIN core_alertrule r ON r.id = m.rule_id WHERE m.status != 'test' "
                        "ORDER BY m.id")
        return [(str(uuid.UUID(str(k))), s, d, n) for k, s, d, n in rows]


def wait_for(ok: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (got := ok()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:.0f}s for {what}")
        time.sleep(0.05)
    return got


def told(receiver: Receiver, rule: str, status: str = "firing") -> list[tuple[str, float]]:
    """(id, arrival time) of each distinct message of `rule` with `status` (first arrival)."""
    seen: dict[str, float] = {}
    for c in list(receiver.calls):
        b = c.json
        if b.get("rule") == rule and b.get("status") == status:
            seen.setdefault(str(b["id"]), c.at)
    return sorted(seen.items(), key=lambda kv: kv[1])


def fail(q: Queue, rid: str, bug: str, n: int) -> float:
    """n tasks of handler `bug` failing with `bug`, out of attempts at once; waits until all
    are dead letters; the time the first of them died (the condition's start)."""
    q.submit([{"bug": bug, "i": i} for i in range(n)], request_id=rid, handler="bug",
             max_attempts=1, concurrency=64)
    wait_for(lambda: (r := read.request(q, rid)) is not None and r.dead >= n, 300,
             f"{n} dead letters of {rid}")
    first = read.request_dead_letters(q, rid)[0]
    return first.ts_ms / 1000 if first.ts_ms else int(first.id.split("-")[0]) / 1000


def _epoch(value: Any) -> float:
    """A timestamp column as Unix seconds (SQLite gives text in UTC, PostgreSQL a datetime)."""
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value).replace(tzinfo=dt.UTC)
    return float(value.timestamp())


def setup(stack: Stack, receiver: Receiver) -> None:
    if stack.database_url.startswith("sqlite:///"):
        migrated_sqlite(Path(stack.database_url.removeprefix("sqlite:///")))  # 3 s sooner
    else:
        stack.manage("migrate", "-v", "0")
    stack.manage("alert", "channel", "add", "hook", "--webhook", receiver.url(), "--secret",
                 SECRET, "--max-per-minute", "600")
    for name, when in (("bugs", "new-fingerprint"), ("stuck", "no-live-worker")):
        stack.manage("alert", "rule", "add", name, "--when", when, "--queue", QUEUE,
                     "--max-per-hour", "1000", "--quiet", "10s" if name == "stuck" else "1h",
                     "--channel", "hook")


def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-alerts-") as tmp:
        server = start_redis(Path(tmp) / "redis", port=free_port(), fsync="everysec")
        receiver = Receiver()
        db = args.database_url or f"sqlite:///{Path(tmp) / 'db.sqlite3'}"
        env = os.environ | {
            "REDIS_URL": server.url, "QUEUE_PREFIX": PREFIX, "DATABASE_URL": db,
            "QA_VAR_DIR": str(Path(tmp) / "var"), "DJANGO_SETTINGS_MODULE": "queueadmin.settings",
            "SECRET_KEY": "bench-alerts", "QA_ALERT_EVERY_S": str(args.every),
            "QA_ALERT_SEND_TIMEOUT_S": str(args.send_timeout),
            "QA_CONSOLE_URL": "http://console.bench:8000",
        }
        stack = Stack(env, Path(tmp), db)
        try:
            setup(stack, receiver)
            q = Queue.from_url(server.url, QUEUE, prefix=PREFIX)
            # In the registry before the services start, as a queue in use is: the mirror
            # follows it from its first pass, not within REGISTRY_EVERY_S (10 s).
            registry.touch([q])
            stack.start("services")
            wait_for(lambda: stack.sql("SELECT count(*) FROM core_alertrule WHERE evaluated_at "
                                       "IS NOT NULL")[0][0] == 2, 120, "runservices to be up")
            start_worker(stack, q)
            q.submit([{"s": 0}], request_id="warm", handler="nap")
            wait_for(lambda: stack.sql("SELECT count(*) FROM core_request WHERE request_id = "
                                       "'warm' AND state = 'done'")[0][0], 60, "the mirror")
            return measure(args, stack, q, receiver)
        finally:
            for what in ("worker", "services"):
                stack.stop(what)
            receiver.stop()
            server.stop()
            if args.keep_logs:
                import shutil

                for log in Path(tmp).glob("*.log"):
                    shutil.copy(log, Path(args.keep_logs) / log.name)


def start_worker(stack: Stack, q: Queue) -> None:
    """A worker, once it runs the benchmark's handlers (before that, work would wait for
    none: a no-live-worker alert of its own)."""
    stack.start("worker")
    def up() -> bool:
        s = read.stats(q)
        return s.workers >= 1 and {"bug", "nap"} <= s.handlers_run

    wait_for(up, 60, "the worker to start")


def settle(stack: Stack) -> None:
    """Two more evaluation passes of every rule, begun after now, and the outbox sent: what
    would come late has come (each pass counts in the rule's version)."""
    def versions() -> dict[str, int]:
        return {str(n): int(v) for n, v in stack.sql("SELECT name, version FROM core_alertrule")}

    before = versions()
    wait_for(lambda: all(v >= before[n] + 2 for n, v in versions().items()), 120,
             "two more evaluation passes")
    wait_for(lambda: not stack.sql("SELECT count(*) FROM core_alertmessage WHERE delivery IN "
                                   "('pending', 'sending') AND status != 'test'")[0][0], 120,
             "the outbox to be sent")


def measure(args: argparse.Namespace, stack: Stack, q: Queue,
            receiver: Receiver) -> dict[str, Any]:
    out: dict[str, Any] = {"failures": args.failures, "every_s": args.every,
                           "database": stack.database_url.split(":", 1)[0]}
    # 1. One bug, N failures: one message.
    started = fail(q, "one-bug", "parse", args.failures)
    out["one_bug_all_dead_after_s"] = round(time.time() - started, 2)
    [(_, at)] = wait_for(lambda: told(receiver, "bugs"), 120, "the first bug's message")
    out["first_bug_latency_s"] = round(at - started, 2)
    # Where that time went: the mirror and an evaluation pass (the incident fired), the send.
    [(fired,)] = stack.sql("SELECT i.fired_at FROM core_alertincident i JOIN core_alertrule r "
                           "ON r.id = i.rule_id WHERE r.name = 'bugs' ORDER BY i.id LIMIT 1")
    fired_s = _epoch(fired)
    out["first_bug_fired_after_s"] = round(fired_s - started, 2)
    out["first_bug_sent_after_firing_s"] = round(at - fired_s, 2)
    wait_for(lambda: stack.sql("SELECT count(*) FROM core_deadletter")[0][0] >= args.failures,
             300, "the mirror to copy every dead letter")
    settle(stack)
    out["one_bug_messages"] = len(told(receiver, "bugs"))
    [(count,)] = stack.sql("SELECT count FROM core_alertincident WHERE status = 'firing'")
    out["one_bug_incident_count"] = count

    # 2. Three other bugs: three messages.
    starts = [fail(q, f"bug-{b}", b, args.others) for b in ("key", "timeout", "zero")]
    wait_for(lambda: len(told(receiver, "bugs")) >= 4, 120, "three more bugs' messages")
    settle(stack)
    three = told(receiver, "bugs")[1:]
    out["three_bugs_messages"] = len(three)
    out["three_bugs_latency_max_s"] = round(max(a for _, a in three) - min(starts), 2)

    # 3. The only worker of a queue with work stops.
    q.submit([{"s": 0.2}] * 300, request_id="work", handler="nap", concurrency=1)
    wait_for(lambda: (r := read.request(q, "work")) is not None and r.done >= 2, 60,
             "the worker to be busy")
    stopped = time.time()  # it leaves the registry at once; it exits once its task is done
    stack.stop("worker")
    [(_, at)] = wait_for(lambda: told(receiver, "stuck"), 120, "the no-live-worker message")
    out["no_worker_latency_s"] = round(at - stopped, 2)

    # 4. Killed mid-send: none lost, none with two ids, one recovery.
    out.update(killed_mid_send(args, stack, q, receiver))
    return out


def killed_mid_send(args: argparse.Namespace, stack: Stack, q: Queue,
                    receiver: Receiver) -> dict[str, Any]:
    receiver.delay_s = 2.0
    before = len(receiver.calls)
    start_worker(stack, q)  # the nap work has a worker again: its recovery message
    names = ("alpha", "bravo", "charlie", "delta", "echo")
    for name in names:
        q.submit([{"bug": name}], request_id=f"late-{name}", handler="bug", max_attempts=1)
    wait_for(lambda: len(receiver.calls) >= before + 2, 120, "two POSTs of the burst")
    sending = stack.sql("SELECT count(*) FROM core_alertmessage WHERE delivery = 'sending'")
    stack.stop("services", signal.SIGKILL)
    killed = time.time()
    receiver.delay_s = 0.0
    stack.start("services")
    expect = 1 + 3 + len(names) + 2  # the bugs' messages, stuck's firing and recovery
    wait_for(lambda: len(told(receiver, "bugs")) >= 4 + len(names)
             and told(receiver, "stuck", "resolved"), 180, "every message after the kill")
    wait_for(lambda: all(d == "sent" for _, _, d, _ in stack.outbox()), 120,
             "the outbox to be sent")
    settle(stack)
    rows = stack.outbox()
    arrived = Counter(str(c.json.get("id")) for c in list(receiver.calls)
                      if c.json.get("status") != "test")
    keys = {k for k, _, _, _ in rows}
    resent = [k for k, n in arrived.items() if n > 1]
    return {
        "mid_send_rows_sending_at_kill": sending[0][0],
        "messages_expected": expect, "outbox_rows": len(rows),
        "received_distinct": len(arrived), "received_calls": sum(arrived.values()),
        "lost": len(keys - set(arrived)), "unknown_ids": len(set(arrived) - keys),
        "repeats_same_id": sum(arrived[k] - 1 for k in resent),
        "repeat_after_kill_s": _repeat_after(receiver, resent, killed),
        "recovery_messages": len(told(receiver, "stuck", "resolved")),
        "stuck_told": [(c.json["status"], c.json["subject"], round(c.at - killed, 1))
                       for c in list(receiver.calls) if c.json.get("rule") == "stuck"],
        "all_signed": all(c.signed_by(SECRET, tolerance_s=3600) for c in list(receiver.calls)),
    }


def _repeat_after(receiver: Receiver, resent: list[str], killed: float) -> float | None:
    last = [c.at for c in list(receiver.calls) if str(c.json.get("id")) in resent]
    return round(max(last) - killed, 1) if last else None


def table(r: dict[str, Any]) -> None:
    rows = [
        ("failures of one bug", f"{r['failures']:,}", ""),
        ("messages for them", r["one_bug_messages"], "1"),
        ("  count in that incident", f"{r['one_bug_incident_count']:,}", ""),
        ("messages for 3 other bugs", r["three_bugs_messages"], "3"),
        ("first bug: failure -> message", f"{r['first_bug_latency_s']} s", f"< {WITHIN_S:g} s"),
        ("  of which: failure -> fired", f"{r['first_bug_fired_after_s']} s", ""),
        ("  of which: fired -> received", f"{r['first_bug_sent_after_firing_s']} s", ""),
        ("3 bugs: first failure -> last message", f"{r['three_bugs_latency_max_s']} s",
         f"< {WITHIN_S:g} s"),
        ("worker stopped -> no-live-worker", f"{r['no_worker_latency_s']} s",
         f"< {WITHIN_S:g} s"),
        ("kill -9 mid-send: rows sending", r["mid_send_rows_sending_at_kill"], ">= 1"),
        ("  outbox rows / distinct received", f"{r['outbox_rows']} / {r['received_distinct']}",
         "equal"),
        ("  lost", r["lost"], "0"),
        ("  repeats (same id)", r["repeats_same_id"], "<= 1"),
        ("  recovery messages", r["recovery_messages"], "1"),
        ("  every call signed", r["all_signed"], "True"),
    ]
    print(f"\nalerts (evaluation every {r['every_s']} s, {r['database']}):")
    for name, value, want in rows:
        print(f"  {name:<40} {value!s:>14}   {want}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--failures", type=int, default=10_000)
    p.add_argument("--others", type=int, default=300, help="failures of each other bug")
    p.add_argument("--every", type=float, default=5.0, help="QA_ALERT_EVERY_S")
    p.add_argument("--send-timeout", type=int, default=10, help="QA_ALERT_SEND_TIMEOUT_S")
    p.add_argument("--database-url", default="")
    p.add_argument("--keep-logs", metavar="DIR", help="copy the processes' logs there")
    p.add_argument("--json-only", action="store_true")
    args = p.parse_args()
    started = time.monotonic()
    r = run(args)
    r["took_s"] = round(time.monotonic() - started, 1)
    r["at"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    print(json.dumps(r))
    if not args.json_only:
        table(r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
