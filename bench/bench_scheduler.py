"""Recurring schedules, exactly once under chaos: 3 scheduler processes, 1,000 schedules firing
every minute for N minutes, schedulers killed (SIGKILL or SIGTERM) and restarted at random,
never all at once. Checks that every slot fired once and none twice, and reports the
lateness of each run (its request's creation time, on the Redis clock, minus its slot) and
the schedulers' CPU per tick.

    .venv/bin/python bench/bench_scheduler.py [--minutes 10] [--schedules 1000] [--json-only]

Runs its own redis-server in a temporary directory; nothing else is touched.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.stack.redis_server import start_redis  # noqa: E402

QUEUE = "bench"
PREFIX = "bs"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def child(url: str, log: str) -> int:
    """One scheduler process: ticks each second, one JSON line per tick into `log`."""
    from core.queue.connect import connect
    from core.queue.schedule.scheduler import Scheduler

    client = connect(url, cluster=False)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    sch = Scheduler(client, prefix=PREFIX, queues=[QUEUE])
    with open(log, "a", buffering=1) as out:
        cpu = [time.process_time()]

        def on_tick(report: Any) -> None:
            now = time.process_time()
            out.write(json.dumps({"cpu_ms": round((now - cpu[0]) * 1000, 3), "due": report.due,
                                  "fired": report.fired, "lost": report.lost,
                                  "recovered": report.recovered}) + "\n")
            cpu[0] = now

        sch.run(stop, on_tick=on_tick)
    return 0


def proc_cpu_s(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return 0.0


class Fleet:
    """The scheduler processes, killed and restarted at random, at least one always alive."""

    def __init__(self, url: str, logdir: Path, n: int, rng: random.Random) -> None:
        self.url, self.logdir, self.rng = url, logdir, rng
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * n
        self.starts = self.kills = self.sigkills = 0
        self.cpu_s = 0.0
        self.alive_s = 0.0
        self.born: dict[int, float] = {}

    def start(self, i: int) -> None:
        log = self.logdir / f"sched-{i}-{self.starts}.jsonl"
        p = subprocess.Popen([sys.executable, __file__, "--child", self.url, str(log)],
                             cwd=ROOT)
        self.procs[i], self.born[p.pid] = p, time.monotonic()
        self.starts += 1

    def stop(self, i: int, sig: int) -> None:
        p = self.procs[i]
        if p is None:
            return
        self.cpu_s += proc_cpu_s(p.pid)
        p.send_signal(sig)
        p.wait()
        self.alive_s += time.monotonic() - self.born.pop(p.pid)
        self.procs[i] = None

    def chaos(self, until: float) -> None:
        while time.monotonic() < until:
            time.sleep(self.rng.uniform(3, 15))
            alive = [i for i, p in enumerate(self.procs) if p is not None]
            dead = [i for i, p in enumerate(self.procs) if p is None]
            if dead and (len(alive) < 2 or self.rng.random() < 0.5):
                self.start(self.rng.choice(dead))
            elif len(alive) >= 2:
                sig = self.rng.choice([signal.SIGKILL, signal.SIGTERM])
                self.sigkills += sig == signal.SIGKILL
                self.kills += 1
                self.stop(self.rng.choice(alive), sig)


def percentile(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


def run(args: argparse.Namespace) -> dict[str, Any]:
    from core.queue import Queue
    from core.queue.connect import connect
    from core.queue.schedule.api import cron, declare

    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        server = start_redis(Path(tmp) / "redis", appendonly=False)
        try:
            q = Queue(connect(server.url, cluster=False), QUEUE, prefix=PREFIX)
            names = [f"b{i:04d}" for i in range(args.schedules)]
            declare(q, *(cron(n, "* * * * *", handler="noop", tasks=[{"n": i}],
                              overlap="allow") for i, n in enumerate(names)))
            t0 = q.now_ms()
            first = (t0 // 60_000 + 1) * 60_000
            slots = [first + k * 60_000 for k in range(args.minutes)]
            fleet = Fleet(server.url, Path(tmp), 3, rng)
            for i in range(3):
                fleet.start(i)
            end = time.monotonic() + (slots[-1] - t0) / 1000 + 5
            fleet.chaos(end)
            for i in range(3):
                fleet.stop(i, signal.SIGTERM)
            return measure(q, names, slots, fleet, Path(tmp), args)
        finally:
            server.stop()


def measure(q: Any, names: list[str], slots: list[int], fleet: Fleet,
            logdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    from core.queue import read

    rids = [f"sched.{n}.{s // 1000}" for n in names for s in slots]
    found = read.requests_many(q, rids)
    created = [found[rid].created_ms if rid in found else None for rid in rids]
    expected = len(names) * len(slots)
    missing = sum(1 for c in created if c is None)
    # Read schedule by schedule, slot by slot: each value pairs with its own slot.
    late = [(int(c) - slots[i % len(slots)]) / 1000 for i, c in enumerate(created)
            if c is not None]
    submitted = read.totals(q).get("submitted", 0)
    ticks: list[dict[str, Any]] = []
    for log in logdir.glob("sched-*.jsonl"):
        for line in log.read_text().splitlines():
            try:
                ticks.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # the last line of a process killed mid-write
    busy = [t["cpu_ms"] for t in ticks if t["due"]]
    idle = [t["cpu_ms"] for t in ticks if not t["due"]]
    return {
        "schedules": len(names), "minutes": len(slots), "slots_expected": expected,
        "slots_fired": expected - missing, "slots_missing": missing,
        "requests_submitted": submitted, "fired_twice": submitted - (expected - missing),
        "lateness_s": {"p50": round(percentile(late, 50), 3),
                       "p99": round(percentile(late, 99), 3),
                       "max": round(max(late, default=0.0), 3)},
        "scheduler_starts": fleet.starts, "scheduler_kills": fleet.kills,
        "of_which_sigkill": fleet.sigkills,
        "ticks": len(ticks),
        "cpu_ms_per_tick": {"all": round(statistics.mean(t["cpu_ms"] for t in ticks), 3)
                            if ticks else 0.0,
                            "idle_p50": round(percentile(idle, 50), 3),
                            "due_p50": round(percentile(busy, 50), 1),
                            "due_max": round(max(busy, default=0.0), 1)},
        "claims_lost_to_another": sum(t["lost"] for t in ticks),
        "claims_taken_over": sum(t["recovered"] for t in ticks),
        "ok": missing == 0 and submitted == expected,
    }


def table(r: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{r['schedules']:,} schedules x {r['minutes']} minutes, 3 schedulers "
                    f"killed {r['scheduler_kills']} times ({r['of_which_sigkill']} SIGKILL)")
    t.add_column("measure")
    t.add_column("value", justify="right")
    rows = [
        ("slots expected", f"{r['slots_expected']:,}"),
        ("fired once", f"{r['slots_fired']:,}"),
        ("missing", f"{r['slots_missing']:,}"),
        ("fired twice", f"{r['fired_twice']:,}"),
        ("lateness p50 / p99 / max (s)",
         f"{r['lateness_s']['p50']} / {r['lateness_s']['p99']} / {r['lateness_s']['max']}"),
        ("CPU per tick, idle p50 (ms)", str(r["cpu_ms_per_tick"]["idle_p50"])),
        ("CPU per tick with slots due, p50 / max (ms)",
         f"{r['cpu_ms_per_tick']['due_p50']} / {r['cpu_ms_per_tick']['due_max']}"),
        ("CPU per tick, mean (ms)", str(r["cpu_ms_per_tick"]["all"])),
        ("claims lost to another scheduler", f"{r['claims_lost_to_another']:,}"),
        ("claims of a killed scheduler taken over", f"{r['claims_taken_over']:,}"),
    ]
    for row in rows:
        t.add_row(*row)
    Console(stderr=True).print(t)


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        return child(sys.argv[2], sys.argv[3])
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=int, default=10)
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=19)
    parser.add_argument("--json-only", action="store_true")
    args = parser.parse_args()
    if args.minutes < 1 or args.schedules < 1:
        parser.error("--minutes and --schedules must be at least 1")
    result = run(args)
    if not args.json_only:
        table(result)
    print(json.dumps(result, indent=2))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
