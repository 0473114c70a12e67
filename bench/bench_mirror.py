"""The mirror at the engine's speed (issue 35, item 1): how fast `runmirror` writes a backlog of
one-task requests into the database with their search rows and timeline events (catch-up),
and how far behind the engine it stays under a sustained load (lag p50/p99/max).

    .venv/bin/python bench/bench_mirror.py [--only catchup,sustain] [--db sqlite,postgres]
        [--requests 30000] [--runs 3] [--shape live,backlog] [--batch 4000] [--profile]
        [--rate 20000] [--seconds 300] [--mirrors 1] [--producers 2] [--consumers 1]
        [--server postgres://postgres@127.0.0.1:5432/postgres] [--json-only]

Catch-up: a redis-server of its own; --requests one-task requests submitted and done (each
leaves a `submitted` and a `completed` event), then the mirror of a child process (Django
set up before the clock starts) applies them in burst mode, timed; --runs times, each on a
new queue of the same database (the tables grow as they would). `--profile` runs the
mirror under cProfile once more and prints where its time goes.

Sustain: --producers processes submit --rate one-task requests a second in all for
--seconds, --consumers processes lease and ack them (one round trip per 200), --mirrors
`manage.py runmirror` processes (consumers of one group when more than one) follow the
queue; the group's lag (core.queue.read.lag: the age of the oldest event it has not
acknowledged) is sampled every 0.5 s, and after the load stops, how long the mirror takes to
catch up. The rate reached (what the producers could submit on this machine) is reported
beside the rate asked for.

On PostgreSQL a throwaway database is made (and dropped); on SQLite a file in a temporary
folder. Prints JSON (stdout) and a table (stderr; not with --json-only).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET = {"sqlite": 10_000, "postgresql": 30_000}  # requests/s, issue 35
LAG_TARGET_S = 5.0
LAG_EVERY_S = 0.5


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="catchup,sustain")
    p.add_argument("--db", default="sqlite,postgres")
    p.add_argument("--requests", type=int, default=30_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--shape", default="live,backlog",
                   help="live: each request's events close together; backlog: far apart")
    from core.management.commands.runmirror import BATCH  # no Django set-up needed

    p.add_argument("--batch", type=int, default=BATCH, help="runmirror --batch (its default)")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--rate", type=int, default=20_000)
    p.add_argument("--seconds", type=int, default=300)
    p.add_argument("--mirrors", type=int, default=1)
    p.add_argument("--producers", type=int, default=2)
    p.add_argument("--consumers", type=int, default=1)
    p.add_argument("--server", default="postgres://postgres@127.0.0.1:5432/postgres")
    p.add_argument("--json-only", action="store_true")
    p.add_argument("--child", nargs=3, metavar=("DB", "REDIS", "QUEUE"), help=argparse.SUPPRESS)
    return p.parse_args()


def env_for(db: str, tmp: Path, redis_url: str = "", prefix: str = "qa") -> dict[str, str]:
    return os.environ | {
        "DATABASE_URL": db, "DJANGO_SETTINGS_MODULE": "queueadmin.settings",
        "SECRET_KEY": "bench-mirror", "QA_VAR_DIR": str(tmp / "var"),
        "REDIS_URL": redis_url, "QUEUE_PREFIX": prefix,
    }


@contextmanager
def database(kind: str, server: str, tmp: Path) -> Iterator[str]:
    """A migrated database of its own: a SQLite file, or a throwaway PostgreSQL database."""
    if kind == "sqlite":
        url = f"sqlite:///{tmp / 'mirror.sqlite3'}"
        subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT,
                       check=True, env=env_for(url, tmp))
        yield url
        return
    import psycopg

    name = f"qa_bench_mirror_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    url = f"{server.rsplit('/', 1)[0]}/{name}"
    try:
        subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT,
                       check=True, env=env_for(url, tmp))
        yield url
    finally:
        with psycopg.connect(server, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def fill(q: Any, n: int, shape: str) -> None:
    """n one-task requests, submitted and done. `live`: 500 at a time, each step's done before
    the next is submitted, so a request's two events are a few hundred entries apart (as when
    the mirror follows the engine); `backlog`: all submitted, then all done, so its events are
    n entries apart (a mirror that was down while they ran)."""
    step = 500 if shape == "live" else n
    for start in range(0, n, step):
        for i in range(start, min(n, start + step)):
            q.submit([{"n": i, "note": f"order {i} for customer c{i % 997}"}], handler="noop",
                     tenant=f"t{i % 13}")
        while leases := q.dequeue("bench", count=1000):
            q.ack_many(leases)


def child(args: argparse.Namespace) -> None:
    """In a child process: set Django up, then time the mirror's burst over one queue."""
    db, redis_url, name = args.child
    os.environ.update(DATABASE_URL=db, DJANGO_SETTINGS_MODULE="queueadmin.settings")
    import django

    django.setup()
    from core.mirror import MirrorConfig, run_mirror
    from core.queue import Queue
    from core.queue.read.lag import events_lag

    warnings.simplefilter("ignore")
    q = Queue.from_url(redis_url, name)
    events = events_lag(q, "mirror").behind
    config = MirrorConfig(queues=(name,), batch=args.batch, burst=True)

    def go() -> Any:
        return run_mirror(config, lambda n: Queue.from_url(redis_url, n))

    cpu = Cpu()
    started = time.perf_counter()
    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        totals = prof.runcall(go)
        elapsed = time.perf_counter() - started
        stats = pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime")
        stats.print_stats(25)
        stats.sort_stats("cumulative").print_stats(40)
    else:
        totals = go()
        elapsed = time.perf_counter() - started
    print(json.dumps({"seconds": round(elapsed, 3), "requests": totals.requests,
                      "events": events, "profiled": args.profile, **cpu.spent()}))


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) process `pid` has spent (Linux's /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Cpu:
    """CPU seconds spent from now on by this process, its database server process (PostgreSQL's
    backend of this connection; SQLite runs in this process) and the Redis server: what the
    catch-up costs whatever else the machine runs (the wall clock depends on that too)."""

    def __init__(self) -> None:
        from django.db import connection

        self.backend = 0
        if connection.vendor == "postgresql":
            with connection.cursor() as cur:
                cur.execute("SELECT pg_backend_pid()")
                self.backend = int(cur.fetchone()[0])
        self.start = self.now()

    def now(self) -> tuple[float, float, float]:
        import resource

        me = resource.getrusage(resource.RUSAGE_SELF)
        db = proc_cpu(self.backend) if self.backend else 0.0
        return me.ru_utime + me.ru_stime, db, proc_cpu(int(os.environ["BENCH_REDIS_PID"]))

    def spent(self) -> dict[str, float]:
        end = self.now()
        mine, db, redis_cpu = (b - a for a, b in zip(self.start, end, strict=True))
        return {"cpu_mirror_s": round(mine, 2), "cpu_database_s": round(db, 2),
                "cpu_redis_s": round(redis_cpu, 2),
                "cpu_total_s": round(mine + db + redis_cpu, 2)}


def catch_up(args: argparse.Namespace, kind: str, shape: str, tmp: Path) -> dict[str, Any]:
    from core.queue import Queue
    from core.stack.redis_server import start_redis

    tmp.mkdir(parents=True)
    server = start_redis(tmp / "redis-catchup", appendonly=False)
    runs = []
    try:
        with database(kind, args.server, tmp) as db:
            extra = ["--profile"] if args.profile else []
            for i in range(args.runs + (1 if args.profile else 0)):
                profiled = args.profile and i == args.runs
                name = f"c{i}"
                fill(Queue.from_url(server.url, name), args.requests, shape)
                out = subprocess.run(
                    [sys.executable, __file__, "--child", db, server.url, name,
                     "--batch", str(args.batch), *(extra if profiled else [])],
                    cwd=ROOT, env=env_for(db, tmp) | {"BENCH_REDIS_PID": str(server.pid)},
                    capture_output=True, text=True, check=True)
                got = json.loads(out.stdout.strip().splitlines()[-1])
                if profiled:
                    print(out.stderr, file=sys.stderr)
                    continue
                got["requests_per_s"] = round(args.requests / got["seconds"])
                got["requests_per_cpu_s"] = round(args.requests / got["cpu_total_s"])
                runs.append(got)
    finally:
        server.stop()
    rates = [r["requests_per_s"] for r in runs]
    per_cpu = [r["requests_per_cpu_s"] for r in runs]
    return {"requests": args.requests, "shape": shape, "runs": runs,
            "requests_per_s_median": round(statistics.median(rates)),
            "requests_per_cpu_s_median": round(statistics.median(per_cpu)),
            "requests_per_s_best": max(rates), "target_per_s": TARGET[vendor(kind)],
            "load_before": os.getloadavg()}


def vendor(kind: str) -> str:
    return "sqlite" if kind == "sqlite" else "postgresql"


def produce(redis_url: str, name: str, rate: float, seconds: float, counter: Any) -> None:
    """Submit `rate` one-task requests a second for `seconds` (as many as it can if fewer)."""
    from core.queue import Queue

    warnings.simplefilter("ignore")  # UnknownHandlerWarning: the consumers run no worker
    q = Queue.from_url(redis_url, name)
    start, sent, step = time.monotonic(), 0, 0.02
    while (elapsed := time.monotonic() - start) < seconds:
        due = int((elapsed + step) * rate)
        while sent < due and time.monotonic() - start < seconds:
            q.submit([{"n": sent}], handler="noop")
            sent += 1
        time.sleep(max(0.0, step - (time.monotonic() - start - elapsed)))
    with counter.get_lock():
        counter.value += sent


def consume(redis_url: str, name: str, stop: Any) -> None:
    from core.queue import Queue

    q = Queue.from_url(redis_url, name)
    acks: list[str] = []
    while not stop.is_set():
        _, leases, _ = q.ack_and_dequeue(f"c{os.getpid()}", 200, acks)
        acks = [lease.lease for lease in leases]
        if not leases:
            time.sleep(0.005)
    if acks:
        q.ack_and_dequeue(f"c{os.getpid()}", 1, acks)


def spawn_mirror(db: str, tmp: Path, redis_url: str, name: str, i: int, n: int
                 ) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "manage.py", "runmirror", "-q", name]
    if n > 1:
        argv += ["--consumer", f"m{i}"] + ([] if i == 0 else ["--no-housekeeping"])
    with open(tmp / f"mirror{i}.log", "ab") as log:
        return subprocess.Popen(argv, cwd=ROOT, env=env_for(db, tmp, redis_url),
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def percentile(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))] if xs else 0.0


def sustain(args: argparse.Namespace, kind: str, tmp: Path) -> dict[str, Any]:
    from core.queue import Queue
    from core.queue.read.lag import events_lag
    from core.stack.redis_server import start_redis

    tmp.mkdir(parents=True)
    server = start_redis(tmp / "redis-sustain", appendonly=False)
    name = "s"
    q = Queue.from_url(server.url, name)
    q.submit([0], handler="noop", request_id="first")
    ctx = multiprocessing.get_context("spawn")
    stop, counter = ctx.Event(), ctx.Value("q", 0)
    mirrors: list[subprocess.Popen[bytes]] = []
    try:
        with database(kind, args.server, tmp) as db:
            mirrors += [spawn_mirror(db, tmp, server.url, name, i, args.mirrors)
                       for i in range(args.mirrors)]
            deadline = time.monotonic() + 60  # the mirrors up, and caught up
            while (not (lag := events_lag(q)).group_exists or lag.behind) \
                    and time.monotonic() < deadline:
                time.sleep(0.2)
            consumers = [ctx.Process(target=consume, args=(server.url, name, stop))
                         for _ in range(args.consumers)]
            producers = [ctx.Process(target=produce, args=(
                server.url, name, args.rate / args.producers, args.seconds, counter))
                for _ in range(args.producers)]
            for p in (*consumers, *producers):
                p.start()
            began = time.monotonic()
            lags: list[float] = []
            load = []
            while any(p.is_alive() for p in producers):
                lags.append(events_lag(q).seconds)
                if len(lags) % 20 == 0:
                    load.append(os.getloadavg()[0])
                time.sleep(LAG_EVERY_S)
            loaded_s = time.monotonic() - began
            stop.set()
            for p in (*producers, *consumers):
                p.join(30)
            ended = time.monotonic()
            while (lag := events_lag(q)).behind and time.monotonic() - ended < 600:
                time.sleep(0.1)
            caught_up_s = time.monotonic() - ended
            for m in mirrors:
                m.send_signal(signal.SIGTERM)
            for m in mirrors:
                m.wait(30)
            from core.queue import read

            done = read.stats(q).totals.get("done", 0)
    finally:
        for m in mirrors:
            if m.poll() is None:
                m.kill()
        server.stop()
    submitted = counter.value
    return {"rate_asked": args.rate, "seconds": args.seconds, "mirrors": args.mirrors,
            "submitted": submitted, "rate_reached": round(submitted / loaded_s),
            "tasks_done": done, "lag_samples": len(lags),
            "lag_p50_s": round(percentile(lags, 50), 2),
            "lag_p99_s": round(percentile(lags, 99), 2), "lag_max_s": round(max(lags), 2),
            "lag_target_s": LAG_TARGET_S, "caught_up_after_load_s": round(caught_up_s, 1),
            "behind_at_end": lag.behind, "load_1min_during": load}


def table(results: dict[str, Any]) -> str:
    lines = []
    for kind, got in results.items():
        for c in (v for k, v in got.items() if k.startswith("catchup")):
            rates = ", ".join(f"{r['requests_per_s']:,}" for r in c["runs"])
            lines.append(f"{kind:10} catch-up ({c['shape']}) of {c['requests']:,} requests: "
                         f"median {c['requests_per_s_median']:,}/s (runs {rates}; target "
                         f"{c['target_per_s']:,}/s); per CPU second (mirror + database + "
                         f"Redis) {c['requests_per_cpu_s_median']:,}")
        if s := got.get("sustain"):
            lines.append(f"{kind:10} sustained {s['rate_reached']:,} requests/s "
                         f"(asked {s['rate_asked']:,}) for {s['seconds']} s, {s['mirrors']} "
                         f"mirror(s): lag p50 {s['lag_p50_s']} s, p99 {s['lag_p99_s']} s, "
                         f"max {s['lag_max_s']} s; caught up {s['caught_up_after_load_s']} s "
                         "after the load")
    return "\n".join(lines)


def main() -> None:
    args = parse()
    warnings.simplefilter("ignore")  # UnknownHandlerWarning: no worker runs "noop" here
    if args.child:
        child(args)
        return
    only = set(args.only.split(","))
    results: dict[str, Any] = {}
    for kind in args.db.split(","):
        if kind not in ("sqlite", "postgres"):
            sys.exit(f"--db: sqlite or postgres, not {kind!r}")
        results[kind] = {}
        with tempfile.TemporaryDirectory(prefix="bench-mirror-") as tmp:
            if "catchup" in only:
                for shape in args.shape.split(","):
                    results[kind][f"catchup_{shape}"] = catch_up(args, kind, shape,
                                                                 Path(tmp) / f"c-{shape}")
            if "sustain" in only:
                results[kind]["sustain"] = sustain(args, kind, Path(tmp) / "s")
    results["machine"] = {"cpus": os.cpu_count(), "load_after": os.getloadavg(),
                          "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    print(json.dumps(results, indent=2))
    if not args.json_only:
        print(table({k: v for k, v in results.items() if k != "machine"}), file=sys.stderr)


if __name__ == "__main__":
    main()
