"""A Spark Connect server's start with and without a class archive (core/pipeline/classes.py,
QA_SPARK_CLASSES): what the archive saves and what it costs. Prints JSON, then a table.

    .venv/bin/python bench/bench_spark_start.py [--rounds 2] [--archive PATH] [--json-only]

The archive is made first with `manage.py sparkclasses` (timed) unless --archive names one.
Then each round starts the server as the stack does (core.pipeline.server, local[2]) without
and with it, alternating which goes first, and measures for each: the seconds until it listens
and the JVM's CPU time by then, the first warm-up job (server.warm: what `runstack` runs) and
a second one, then the JVM's RSS and PSS after 25 s idle, and its CPU time in all. Everything
runs in a temporary directory of its own; one server at a time.
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "queueadmin.settings")

import django  # noqa: E402

django.setup()

from bench.bench_mirror import proc_cpu  # noqa: E402
from core.pipeline import server  # noqa: E402
from core.procs import free_port, wait_listening  # noqa: E402

IDLE_S = 25.0


def memory_mib(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("Rss", "Pss"):
            out[key.lower()] = int(value.split()[0]) // 1024
    return out


def one_start(work: Path, archive: Path | None) -> dict[str, Any]:
    config = server.ServerConfig(port=free_port(), local_dir=work / "local", cores="2",
                                 class_archive=archive)
    server.prepare(config)
    started = time.monotonic()
    with open(work / "server.log", "wb") as log:
        proc = subprocess.Popen(server.argv(config), env=server.env(), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        if not wait_listening("127.0.0.1", config.port, timeout=180,
                              alive=lambda: proc.poll() is None):
            raise SystemExit((work / "server.log").read_text()[-2000:])
        listen_s = time.monotonic() - started
        listen_cpu_s = proc_cpu(proc.pid)
        first_s = server.warm(config.url, work / "warm")
        second_s = server.warm(config.url, work / "warm")
        time.sleep(IDLE_S)
        return {"listen_s": round(listen_s, 2), "listen_cpu_s": round(listen_cpu_s, 2),
                "first_job_s": round(first_s, 2), "second_job_s": round(second_s, 2),
                **{f"{k}_mib": v for k, v in memory_mib(proc.pid).items()},
                "cpu_s": round(proc_cpu(proc.pid), 2)}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--archive", type=Path, help="an archive made before (else made here)")
    parser.add_argument("--json-only", action="store_true")
    args = parser.parse_args()

    result: dict[str, Any] = {"load_before": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="bench-spark-start-") as tmp:
        work = Path(tmp)
        archive = args.archive
        if archive is None:
            archive = work / "spark-classes.jsa"
            started = time.monotonic()
            subprocess.run([sys.executable, "manage.py", "sparkclasses", "--out", str(archive)],
                           cwd=ROOT, check=True, capture_output=True)
            result["archive_made_s"] = round(time.monotonic() - started, 1)
        result["archive_mib"] = archive.stat().st_size // 2**20
        runs: dict[str, list[dict[str, Any]]] = {"without": [], "with": []}
        for i in range(args.rounds):
            order = ["without", "with"] if i % 2 == 0 else ["with", "without"]
            for name in order:
                runs[name].append(one_start(work, archive if name == "with" else None))
        result["runs"] = runs
        result["median"] = {name: {key: statistics.median(r[key] for r in rs) for key in rs[0]}
                            for name, rs in runs.items()}
    result["load_after"] = os.getloadavg()[0]
    print(json.dumps(result, indent=2))
    if not args.json_only:
        table(result)


def table(result: dict[str, Any]) -> None:
    med = result["median"]
    print(f"\nSpark Connect server start, median of {len(result['runs']['with'])} rounds "
          f"(load {result['load_before']:.1f} -> {result['load_after']:.1f}); archive "
          f"{result['archive_mib']} MiB", file=sys.stderr)
    print(f"{'':<22}{'without':>10}{'with':>10}", file=sys.stderr)
    for key in med["without"]:
        print(f"{key:<22}{med['without'][key]:>10.2f}{med['with'][key]:>10.2f}", file=sys.stderr)


if __name__ == "__main__":
    main()
