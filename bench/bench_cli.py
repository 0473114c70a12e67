"""How fast the command line answers (issue 33, item 16): each command run as a person runs it,
`python manage.py ...` in a new process, from its start to its exit. Prints a table and JSON.

    .venv/bin/python bench/bench_cli.py [--runs 11] [--no-bytecode-cache] [--json-only]
                                        [--checkout DIR] [--served]

The measures, each the median (and the fastest) of --runs runs, wall time and the CPU time of
the process (user + system; on a loaded machine the wall time waits for a core, the CPU time
does not):

- help: `manage.py help` (Django's start, the project's settings and apps);
- datajob submit --help: a command's own options;
- submit: one task submitted, from the command's start to its exit, the request queued;
- datajob submit: a data job checked (its SQL against a small Parquet file's columns) and
  queued; no Spark is needed to queue one;
- queuestat: the depths of the default queue, as a table.

Everything runs against a redis-server, a SQLite database (migrated once) and data roots of the
bench's own, in a temporary directory. The handlers are announced as a worker would, so that
`submit` checks its handler as it does for real. By default the commands run with their
bytecode cached (a first, uncounted run writes it to a directory of the bench's own), as after
any first run of an installed wheel or a checkout; --no-bytecode-cache measures them compiling
the project's modules at every start (PYTHONDONTWRITEBYTECODE, as some environments set it).
--checkout runs another checkout's manage.py (an earlier commit's, from `git worktree add`
or `git archive`) with this bench and this interpreter, to compare the two.
--served runs `manage.py runstack` (no Spark) on the same Redis, database and folders first,
so that the commands it serves (all but `help`) are run by a fork of its supervisor
(core/stack/commands.py, docs/operations.md); their CPU column is then the command's own
process only, not the fork's.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.queue import Queue, read  # noqa: E402
from core.stack.redis_server import start_redis  # noqa: E402

# The targets, on an idle machine (seconds, wall).
TARGETS = {"help": 0.3, "datajob submit --help": 0.3, "submit": 0.4, "datajob submit": 0.6,
           "queuestat": 0.3}
PREFIX = "benchcli"
SERVED_NOTE = "; run by the stack: CPU of the command's process only"
ANNOUNCE = """import sys
from core.pipeline.jobs import HANDLER
from core.queue import Queue, handlers
handlers.announce(Queue.from_url(sys.argv[1], "default", prefix=sys.argv[2]), "bench-worker",
                  ["noop", HANDLER])
"""


@dataclass
class Run:
    wall_s: float
    cpu_s: float


def run_once(argv: list[str], env: dict[str, str], cwd: Path) -> Run:
    """One process: wall time from its spawn to its exit, and its own CPU time."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        process = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=err)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(argv[2:])} exited {process.returncode}:\n"
                             f"{err.read().decode(errors='replace')}")
    return Run(wall, usage.ru_utime + usage.ru_stime)


def measure(name: str, make_argv: Any, runs: int, env: dict[str, str], cwd: Path
            ) -> dict[str, Any]:
    run_once(make_argv(-1), env, cwd)  # the first run writes the bytecode; not counted
    got = [run_once(make_argv(i), env, cwd) for i in range(runs)]
    walls = [r.wall_s for r in got]
    cpus = [r.cpu_s for r in got]
    return {
        "command": name, "runs": runs,
        "wall_median_s": round(statistics.median(walls), 3), "wall_min_s": round(min(walls), 3),
        "cpu_median_s": round(statistics.median(cpus), 3), "cpu_min_s": round(min(cpus), 3),
        "target_s": TARGETS[name],
    }


def served_by(python: str, env: dict[str, str], root: Path, var_dir: Path
              ) -> subprocess.Popen[bytes]:
    """`manage.py runstack` on the bench's Redis and folders (no Spark), once it listens for
    the commands it runs."""
    log = (var_dir.parent / "runstack.log").open("wb")
    stack = subprocess.Popen(
        [python, "manage.py", "runstack", "--workers", "1"], cwd=root, stdout=log,
        stderr=subprocess.STDOUT, env={**env, "QA_ADMIN_PASSWORD": "bench"})
    deadline = time.monotonic() + 60
    while not (var_dir / "run" / "commands.sock").exists():
        if stack.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"runstack did not start: {var_dir.parent / 'runstack.log'}")
        time.sleep(0.1)
    return stack


def write_parquet(path: Path) -> None:
    """A small Parquet file (1,000 rows), as a data job's input."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 1000
    pq.write_table(pa.table({"id": list(range(n)), "carrier": ["AA", "UA", "DL", "B6"] * (n // 4),
                             "delay": [float(i % 90) for i in range(n)]}), path)


def run(args: argparse.Namespace) -> dict[str, Any]:
    python = sys.executable
    root = Path(args.checkout).resolve()
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
        base = Path(tmp)
        data, out = base / "data", base / "out"
        data.mkdir()
        out.mkdir()
        write_parquet(data / "flights.parquet")
        server = start_redis(base / "redis")
        stack: subprocess.Popen[bytes] | None = None
        try:
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith(("QA_", "SPARK_", "DJANGO_")) and k not in (
                       "REDIS_URL", "DATABASE_URL", "QUEUE_PREFIX", "PYTHONDONTWRITEBYTECODE",
                       "PYTHONPYCACHEPREFIX")}
            env |= {"REDIS_URL": server.url, "QUEUE_PREFIX": PREFIX,
                    "QA_VAR_DIR": str(base / "var"), "QA_DATA_ROOTS": str(data),
                    "QA_OUTPUT_ROOTS": str(out), "QA_SPARK": "off"}
            if args.no_bytecode_cache:
                env["PYTHONDONTWRITEBYTECODE"] = "1"
            else:
                env["PYTHONPYCACHEPREFIX"] = str(base / "pycache")
            subprocess.run([python, "manage.py", "migrate", "--verbosity", "0"], env=env,
                           cwd=root, check=True)
            # As a worker of the checkout measured would announce them (its own engine).
            subprocess.run([python, "-c", ANNOUNCE, server.url, PREFIX], cwd=root, check=True)
            q = Queue.from_url(server.url, "default", prefix=PREFIX)
            if args.served:
                # The commands as typed in the shell that started the stack: its port too.
                from core.procs import free_port

                env |= {"PORT": str(free_port()), "HOST": "127.0.0.1"}
                stack = served_by(python, env, root, base / "var")

            manage = [python, "manage.py"]
            measures = [
                ("help", lambda i: [*manage, "help"]),
                ("datajob submit --help", lambda i: [*manage, "datajob", "submit", "--help"]),
                ("submit", lambda i: [*manage, "submit", '{"n": 1}', "--handler", "noop"]),
                ("datajob submit", lambda i: [
                    *manage, "datajob", "submit", "--input", str(data / "flights.parquet"),
                    "--sql", "SELECT carrier, avg(delay) AS delay FROM chunk GROUP BY carrier",
                    "--output", str(out / f"delays-{i + 1}")]),
                ("queuestat", lambda i: [*manage, "queuestat"]),
            ]
            load = os.getloadavg()[0]
            results = [measure(name, argv, args.runs, env, root) for name, argv in measures]
            submitted = read.totals(q).get("submitted", 0)
            q.redis.close()
        finally:
            if stack is not None:
                stack.send_signal(signal.SIGTERM)
                stack.wait(60)
            server.stop()
    return {
        "bench": "cli", "checkout": str(root), "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "load_1min_at_start": round(load, 2),
        "bytecode_cached": not args.no_bytecode_cache,
        "served_by_the_stack": bool(args.served),
        # Each submit queued one request, each data job one more or two (its chunks, and the
        # combine held until they are done), all of them still waiting.
        "requests_submitted": submitted,
        "results": results,
    }


def table(r: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"manage.py start to exit, median of {r['results'][0]['runs']} runs (load "
                    f"{r['load_1min_at_start']} on {r['cpus']} cores; bytecode "
                    f"{'cached' if r['bytecode_cached'] else 'compiled at each start'}"
                    f"{SERVED_NOTE if r['served_by_the_stack'] else ''})",
              title_justify="left")
    for col in ("command", "wall", "fastest", "CPU", "target (idle)"):
        t.add_column(col, justify="left" if col == "command" else "right")
    for x in r["results"]:
        t.add_row(x["command"], f"{x['wall_median_s']:.3f} s", f"{x['wall_min_s']:.3f} s",
                  f"{x['cpu_median_s']:.3f} s", f"≤ {x['target_s']:g} s")
    Console(stderr=True).print(t)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--no-bytecode-cache", action="store_true",
                        help="compile the project's modules at every start")
    parser.add_argument("--json-only", action="store_true")
    parser.add_argument("--served", action="store_true",
                        help="with `runstack` running, which runs the commands it serves")
    parser.add_argument("--checkout", default=str(ROOT),
                        help="the checkout whose manage.py to run (default: this one)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be 1 or more")
    result = run(args)
    if not args.json_only:
        table(result)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
