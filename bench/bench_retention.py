"""Bounded, shown (issue 35, item 5): a sustained load of one-task requests with a short
retention, the history's tables sampled as it runs. With the pruner keeping up, each table's
rows and size rise for one retention and then stay flat; the pruner's longest lock (its
longest batch, PruneRun) stays under 100 ms; the mirror's lag (the age of the oldest event it
has not written yet, what queueadmin_mirror_lag_seconds exports) is sampled twice a second.

    .venv/bin/python bench/bench_retention.py [--seconds 120] [--rate 1000] [--retention 30s]
        [--prune-every 5] [--sample-every 10] [--workers 1]
        [--server postgres://postgres@127.0.0.1:5432/postgres | --sqlite] [--json-only]

--seconds 120 by default (two minutes of load, then up to a minute for the mirror to catch
up); give --seconds 900 or more for a longer soak.

What runs, as the stack runs it: a redis-server of its own, `manage.py runservices` (the
mirror and the pruner, every --prune-every s, with every kind's QA_RETAIN_ at --retention)
and --workers `manage.py runworker` processes (handler noop); this process submits --rate
requests a second for --seconds and samples, every --sample-every s, each table's rows
(count(*): a benchmark may) and size (PostgreSQL: pg_total_relation_size; SQLite: its
pages, indexes included, from dbstat), and the whole database's size. On PostgreSQL a
throwaway database is made and dropped; on SQLite a file in a temporary folder.

"Flat": once settled (past one retention, a pass and two samples), each table's mean count
over the last third of the samples is at most 1.5 times the first third's (`flat`); its size
grew by at most 20 % over the settled part's second half (`size_flat`). On PostgreSQL the
samples also hold each table's dead rows and vacuums (pg_stat_user_tables): deleted rows'
space is reused once a VACUUM has been over the table. A server whose autovacuum is off never
reuses it: the bench then runs VACUUM itself every 60 s (--vacuum-every), as autovacuum
would, and says so.
The whole database's size is judged the same way (`database_size`): on SQLite it is the
measure that counts, a table's pages going to the file's free list and back. Exit status 1
when a table's rows or the database's size are not flat, or a batch held its locks 100 ms or
more.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LAG_EVERY_S = 0.5
CATCH_UP_S = 60.0
TABLES = ("core_request", "core_requestevent", "core_searchdoc", "core_deadletter",
          "core_handlerminute", "core_handlerhour", "core_auditentry")
SHORT = {"core_request": "requests", "core_requestevent": "events", "core_searchdoc": "search",
         "core_deadletter": "dead", "core_handlerminute": "h. minutes",
         "core_handlerhour": "h. hours", "core_auditentry": "audit"}
QUEUE = "bench"
LOCK_CEILING_MS = 100.0


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=int, default=120,
                   help="seconds of load (default 120; more for a soak)")
    p.add_argument("--rate", type=int, default=1000, help="requests submitted a second")
    p.add_argument("--retention", default="30s", help="every kind's retention (QA_RETAIN_*)")
    p.add_argument("--prune-every", type=int, default=5)
    p.add_argument("--sample-every", type=float, default=10.0)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--server", default="postgres://postgres@127.0.0.1:5432/postgres")
    p.add_argument("--sqlite", action="store_true", help="SQLite instead of --server")
    p.add_argument("--vacuum-every", type=float, default=None, metavar="S",
                   help="PostgreSQL: VACUUM the pruned tables every S seconds from the bench, as "
                        "autovacuum would (default: 60 when the server's autovacuum is off, "
                        "else never; 0: never)")
    p.add_argument("--keep", action="store_true",
                   help="keep the run's folder (the processes' logs; SQLite: the database)")
    p.add_argument("--json-only", action="store_true")
    return p.parse_args()


def sizes(vendor: str) -> dict[str, int]:
    """Each table's bytes on disk, its indexes included."""
    from django.db import connection

    out: dict[str, int] = {}
    with connection.cursor() as cur:
        for table in TABLES:
            if vendor == "postgresql":
                cur.execute("SELECT pg_total_relation_size(%s)", [table])
            else:
                cur.execute("SELECT COALESCE(SUM(pgsize), 0) FROM dbstat WHERE name IN "
                            "(SELECT name FROM sqlite_master WHERE tbl_name = %s)", [table])
            out[table] = int(cur.fetchone()[0])
    return out


def database_bytes(vendor: str) -> int:
    """The whole database's bytes on disk (SQLite: its file, free pages included; a table's
    dbstat pages above leave out the free pages its deleted rows left)."""
    from django.db import connection

    with connection.cursor() as cur:
        if vendor == "postgresql":
            cur.execute("SELECT pg_database_size(current_database())")
            return int(cur.fetchone()[0])
        cur.execute("PRAGMA page_count")
        pages = int(cur.fetchone()[0])
        cur.execute("PRAGMA page_size")
        return pages * int(cur.fetchone()[0])


def counts() -> dict[str, int]:
    from django.db import connection

    out: dict[str, int] = {}
    with connection.cursor() as cur:
        for table in TABLES:
            cur.execute(f"SELECT count(*) FROM {table}")
            out[table] = int(cur.fetchone()[0])
    return out


def submit_for(q: Any, seconds: float, rate: int, on_tick: Any) -> int:
    """Submit `rate` one-task requests a second for `seconds`, in steps of 50 ms; on_tick()
    between steps, also when the submits fall behind (a step submits one step's worth at most,
    so that the samples keep their times). Returns how many were submitted."""
    start = time.monotonic()
    sent = 0
    step = 0.05
    per_step = max(1, int(rate * step))
    while (elapsed := time.monotonic() - start) < seconds:
        due = min(int(elapsed * rate) + per_step, sent + per_step)
        while sent < due:
            q.submit([{"n": sent}], handler="noop")
            sent += 1
        on_tick()
        time.sleep(max(0.0, step - (time.monotonic() - start - elapsed)))
    return sent


def flatness(series: list[dict[str, Any]], table: str, settle_s: float) -> dict[str, Any]:
    """The table once settled (past one retention and a pass): its counts' smallest, largest
    and last, and whether they are flat (no upward trend: the mean of the last third of the
    samples at most 1.5 times the first third's; the counts themselves swing with the rate
    the machine lets the load reach and with each pass); its bytes in the first and last
    sample of the settled part's second half, and whether they are flat (grew by 20 % at most:
    a file does not shrink, but stops growing once the space deleted rows leave is reused)."""
    late = [s for s in series if s["t"] >= settle_s]
    if len(late) < 2:
        return {"settled_samples": len(late), "flat": None, "size_flat": None}
    rows = [s["rows"][table] for s in late]
    lo, hi = min(rows), max(rows)
    third = max(1, len(rows) // 3)
    first, final = sum(rows[:third]) / third, sum(rows[-third:]) / third
    flat = final <= max(1.5 * first, first + 200)
    mid, last = late[len(late) // 2]["bytes"][table], late[-1]["bytes"][table]
    return {"settled_samples": len(late), "min": lo, "max": hi, "last": rows[-1],
            "mean_first_third": round(first), "mean_last_third": round(final), "flat": flat,
            "bytes_mid": mid, "bytes_last": last,
            "size_flat": last <= max(1.2 * mid, mid + 2**20)}


def database_flatness(series: list[dict[str, Any]], settle_s: float) -> dict[str, Any]:
    """The whole database's bytes over the settled part's second half: flat when they grew by
    20 % at most (the measure that counts on SQLite, whose tables' pages go to the file's
    free list when rows go, and come back from it)."""
    late = [s["database_bytes"] for s in series if s["t"] >= settle_s]
    if len(late) < 2:
        return {"flat": None}
    mid, last = late[len(late) // 2], late[-1]
    return {"bytes_mid": mid, "bytes_last": last, "flat": last <= max(1.2 * mid, mid + 2**20)}


def vacuums() -> dict[str, dict[str, int]]:
    """PostgreSQL: each table's dead rows not vacuumed yet, the vacuums over it (the space
    deleted rows leave is reused once vacuumed), and its heap's and indexes' bytes apart."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT relname, n_dead_tup, autovacuum_count + vacuum_count, "
                    "pg_relation_size(relid), pg_indexes_size(relid) "
                    "FROM pg_stat_user_tables WHERE relname = ANY(%s)", [list(TABLES)])
        return {name: {"dead_rows": int(dead), "vacuums": int(n), "heap_bytes": int(heap),
                       "index_bytes": int(index)}
                for name, dead, n, heap, index in cur.fetchall()}


def spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "manage.py", *args], cwd=ROOT, env=env,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


class Sampler:
    """What the run samples as it goes: the mirror's lag every LAG_EVERY_S, the tables every
    --sample-every s (counts and sizes), each sample with its time since the load began."""

    def __init__(self, args: argparse.Namespace, q: Any, vendor: str) -> None:
        self.args, self.q, self.vendor = args, q, vendor
        self.began = time.monotonic()
        self.series: list[dict[str, Any]] = []
        self.lags: list[tuple[float, float]] = []  # (t, seconds)
        self.next_sample = self.next_lag = 0.0

    def lag(self) -> float | None:
        from core.queue.follow import lag

        return lag(self.q, "mirror", now_ms=self.q.now_ms())

    def tick(self) -> None:
        t = time.monotonic() - self.began
        if t >= self.next_lag:
            seconds = self.lag()
            if seconds is not None:  # None: the mirror has not made its group yet
                self.lags.append((round(t, 2), seconds))
            self.next_lag = t + LAG_EVERY_S
        if t >= self.next_sample:
            recent = [s for at, s in self.lags if at >= t - self.args.sample_every]
            self.series.append({"t": round(t, 1), "rows": counts(), "bytes": sizes(self.vendor),
                                "lag_max_s": round(max(recent, default=0.0), 3),
                                "database_bytes": database_bytes(self.vendor)})
            if self.vendor == "postgresql":
                self.series[-1]["vacuum"] = vacuums()
            self.next_sample = t + self.args.sample_every
            if not self.args.json_only:
                print(f"{t:6.0f} s  lag {self.series[-1]['lag_max_s']:.2f} s  " + "  ".join(
                    f"{k[5:]} {v:,}" for k, v in self.series[-1]["rows"].items()),
                    file=sys.stderr)

    def catch_up(self) -> float | None:
        """Seconds after the load until the mirror has every event (None: not in CATCH_UP_S)."""
        done = time.monotonic()
        while time.monotonic() - done < CATCH_UP_S:
            if self.lag() == 0.0:
                return round(time.monotonic() - done, 2)
            time.sleep(0.1)
        return None

    def lag_stats(self) -> dict[str, Any]:
        ms = sorted(s for _, s in self.lags)
        if not ms:
            return {"samples": 0}

        def pct(p: float) -> float:
            return round(ms[min(len(ms) - 1, int(len(ms) * p))], 3)

        return {"samples": len(ms), "p50_s": pct(0.5), "p99_s": pct(0.99),
                "max_s": round(ms[-1], 3)}


class Vacuum:
    """PostgreSQL whose autovacuum is off (this project's test server has it off): a plain
    VACUUM of the tables the load fills, every --vacuum-every s, from a thread of the bench
    with its own connection, as autovacuum (on by default, its naptime 60 s) would; so that the
    sizes show what a server with autovacuum shows. Said in the JSON and the table."""

    def __init__(self, args: argparse.Namespace, vendor: str) -> None:
        self.every = 0.0
        self.autovacuum = ""
        if vendor == "postgresql":
            from django.db import connection

            with connection.cursor() as cur:
                cur.execute("SHOW autovacuum")
                self.autovacuum = str(cur.fetchone()[0])
            default = 60.0 if self.autovacuum == "off" else 0.0
            self.every = default if args.vacuum_every is None else args.vacuum_every
        self.done = threading.Event()
        self.runs: list[float] = []  # seconds each round of VACUUMs took
        self.thread = threading.Thread(target=self._loop, name="vacuum", daemon=True)

    def start(self) -> None:
        if self.every > 0:
            self.thread.start()

    def stop(self) -> None:
        self.done.set()
        if self.thread.is_alive():
            self.thread.join(120)

    def _loop(self) -> None:
        from django.db import connection

        try:
            while not self.done.wait(self.every):
                began = time.monotonic()
                with connection.cursor() as cur:
                    for table in ("core_request", "core_requestevent", "core_searchdoc"):
                        cur.execute(f"VACUUM {table}")
                self.runs.append(round(time.monotonic() - began, 2))
        finally:
            connection.close()

    def report(self) -> dict[str, Any]:
        return {"server_autovacuum": self.autovacuum or None,
                "bench_vacuum_every_s": self.every or None, "bench_vacuums_s": self.runs}


def run(args: argparse.Namespace, work: Path, url: str) -> dict[str, Any]:
    from core.stack.redis_server import start_redis

    redis = start_redis(work / "redis", appendonly=False)
    env = os.environ | {
        "DATABASE_URL": url, "REDIS_URL": redis.url, "QUEUE_PREFIX": "bench",
        "QA_VAR_DIR": str(work / "var"), "SECRET_KEY": "bench-retention", "QA_SPARK": "off",
        "DJANGO_SETTINGS_MODULE": "queueadmin.settings",
        "QA_PRUNE_EVERY_S": str(args.prune_every), "QA_AUDIT_EXPORT": "off",
        **{f"QA_RETAIN_{k}": args.retention for k in (
            "REQUESTS", "DEAD", "SEARCH", "AUDIT", "BULK", "DATAJOBS", "HANDLER_MINUTES",
            "HANDLER_HOURS")},
    }
    os.environ.update(env)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env,
                       check=True, timeout=300)
        import django

        django.setup()
        from django.db import connection

        from core.queue import Queue

        procs.append(spawn(["runservices"], env, work / "services.log"))
        for i in range(args.workers):
            procs.append(spawn(["runworker", "--queue", QUEUE, "--name", f"bench-w{i}"], env,
                               work / f"worker{i}.log"))
        from core.queue.errors import UnknownHandlerWarning

        # The workers announce noop as they start: the first submits may come before.
        warnings.simplefilter("ignore", UnknownHandlerWarning)
        q = Queue.from_url(redis.url, QUEUE, prefix="bench")
        sampler = Sampler(args, q, connection.vendor)
        vacuum = Vacuum(args, connection.vendor)
        vacuum.start()
        try:
            submitted = submit_for(q, args.seconds, args.rate, sampler.tick)
            caught_up = sampler.catch_up()
        finally:
            vacuum.stop()
        return summary(args, sampler, submitted, caught_up) | vacuum.report()
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
        from django.db import connections

        connections.close_all()
        redis.stop()


def summary(args: argparse.Namespace, sampler: Sampler, submitted: int,
            caught_up: float | None) -> dict[str, Any]:
    """The run's figures: the samples, whether each table stayed flat, the mirror's lag and
    the pruner's passes (PruneRun, as the services process recorded them)."""
    from core.mirror.retention import parse_duration
    from core.models import PruneRun

    runs = list(PruneRun.objects.order_by("started_at").values(
        "started_at", "seconds", "removed", "batches", "longest_ms", "longest_at", "error"))
    retention_s = parse_duration(args.retention) or 0
    settle = retention_s + args.prune_every + 2 * args.sample_every
    longest = max(runs, key=lambda r: r["longest_ms"], default=None)
    pruned: dict[str, int] = {}
    for r in runs:
        for k, n in r["removed"].items():
            pruned[k] = pruned.get(k, 0) + int(n)
    return {
        "database": sampler.vendor, "seconds": args.seconds, "rate": args.rate,
        "submitted": submitted, "submitted_per_s": round(submitted / args.seconds),
        "retention": args.retention, "prune_every_s": args.prune_every,
        "workers": args.workers, "load_average": os.getloadavg(),
        "samples": sampler.series,
        "flat": {t: flatness(sampler.series, t, settle) for t in TABLES},
        "database_size": database_flatness(sampler.series, settle),
        "mirror_lag": sampler.lag_stats(), "mirror_caught_up_after_s": caught_up,
        "prune_passes": len(runs), "pruned": pruned,
        "prune_batches": sum(r["batches"] for r in runs),
        "longest_lock_ms": round(longest["longest_ms"], 2) if longest else None,
        "passes_over_ceiling": sum(r["longest_ms"] >= LOCK_CEILING_MS for r in runs),
        "pass_longest_ms_p50": round(sorted(r["longest_ms"] for r in runs)[len(runs) // 2], 2)
        if runs else None,
        "longest_lock_at": longest["longest_at"] if longest else None,
        "longest_pass_s": round(max((r["seconds"] for r in runs), default=0.0), 3),
        "prune_errors": sorted({r["error"] for r in runs if r["error"]}),
    }


def table_of(out: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"retention {out['retention']} under {out['rate']:,} requests/s for "
                    f"{out['seconds']} s, {out['database']} (load {out['load_average'][0]:.1f}): "
                    "rows / MiB of each table")
    t.add_column("t, s", justify="right")
    t.add_column("lag, s", justify="right")
    t.add_column("db MiB", justify="right")
    for name in TABLES:
        t.add_column(SHORT[name], justify="right")
    for s in out["samples"]:
        t.add_row(str(s["t"]), f"{s['lag_max_s']:.2f}", f"{s['database_bytes'] / 2**20:.1f}",
                  *(f"{s['rows'][n]:,} / {s['bytes'][n] / 2**20:.1f}" for n in TABLES))
    for what, label in (("flat", "rows flat"), ("size_flat", "size flat")):
        t.add_row(label, "", "", *("yes" if out["flat"][n][what] else
                               "-" if out["flat"][n][what] is None else "NO" for n in TABLES))
    console = Console(stderr=True, width=max(160, Console(stderr=True).width))
    console.print(t)
    size = out["database_size"]
    if size["flat"] is not None:
        console.print(f"database: {size['bytes_mid'] / 2**20:.1f} MiB halfway through the "
                      f"settled samples, {size['bytes_last'] / 2**20:.1f} MiB at the end: "
                      f"{'flat' if size['flat'] else 'NOT flat'}")
    if out.get("server_autovacuum") == "off":
        console.print(f"the server's autovacuum is off: the bench ran VACUUM every "
                      f"{out['bench_vacuum_every_s']} s ({len(out['bench_vacuums_s'])} rounds, "
                      f"{max(out['bench_vacuums_s'], default=0)} s the longest)")
    if "vacuum" in out["samples"][-1]:
        v = out["samples"][-1]["vacuum"]
        console.print("at the end, dead rows / vacuums so far / heap MiB / indexes MiB: "
                      + ", ".join(f"{SHORT[n]} {v[n]['dead_rows']:,} / {v[n]['vacuums']} / "
                                  f"{v[n]['heap_bytes'] / 2**20:.1f} / "
                                  f"{v[n]['index_bytes'] / 2**20:.1f}"
                                  for n in TABLES if n in v))
    lag = out["mirror_lag"]
    if lag.get("samples"):
        console.print(f"mirror lag over {lag['samples']:,} samples: p50 {lag['p50_s']} s, "
                      f"p99 {lag['p99_s']} s, max {lag['max_s']} s; caught up "
                      f"{out['mirror_caught_up_after_s']} s after the load "
                      f"({out['submitted']:,} requests, {out['submitted_per_s']:,}/s)")
    console.print(f"pruner: {out['prune_passes']} passes, {out['prune_batches']:,} batches, "
                  f"longest lock {out['longest_lock_ms']} ms ({out['longest_lock_at']}); "
                  f"{out['passes_over_ceiling']} passes with a batch over "
                  f"{LOCK_CEILING_MS:g} ms, a pass's longest batch {out['pass_longest_ms_p50']} ms "
                  "at the median; "
                  f"longest pass {out['longest_pass_s']} s; removed {out['pruned']}")


def main() -> int:
    args = parse()
    work = Path(tempfile.mkdtemp(prefix="qa-bench-retention-"))
    admin = None
    dbname = f"qa_bench_retention_{os.getpid()}"
    if args.sqlite:
        url = f"sqlite:///{work / 'db.sqlite3'}"
    else:
        import psycopg

        admin = psycopg.connect(args.server, autocommit=True)
        admin.execute(f"CREATE DATABASE {dbname}")
        url = args.server.rsplit("/", 1)[0] + f"/{dbname}"
    try:
        out = run(args, work, url)
    finally:
        if admin is not None:
            admin.execute(f"DROP DATABASE IF EXISTS {dbname} WITH (FORCE)")
            admin.close()
        if args.keep:
            print(f"kept {work} (services.log, worker*.log)", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    if not args.json_only:
        table_of(out)
    print(json.dumps(out, indent=2, default=str))
    # Bounded: no table's rows trend up, and the database's files stop growing.
    bounded = (all(f["flat"] is not False for f in out["flat"].values())
               and out["database_size"]["flat"] is not False)
    locks_ok = (out["longest_lock_ms"] or 0) < LOCK_CEILING_MS
    return 0 if bounded and locks_ok and not out["prune_errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
