"""Console pages at scale: p50/p95 of every page and polled fragment over HTTP, against the
stack `make run` serves (`manage.py runstack`: gunicorn, the mirror), with

- 1,000,000 waiting tasks in one request, and 1,000,000 more in 10,000 requests of 100,
- 10,000 finished requests in the database (what Redis has expired) and 10,000 dead letters in
  50 fingerprints (real ones: failed through the engine, mirrored into the database),
- 50 registered workers,

and the number of Redis commands one overview poll costs (INFO commandstats before and after).

    .venv/bin/python bench/bench_console.py [--requests-per-page 50] [--small] [--json-only]

Runs everything in a temporary QA_VAR_DIR on free ports (its own redis-server); nothing else is
touched. `--small` seeds a hundredth of that, to try the bench quickly.
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
import urllib.error
import urllib.request
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.queue.errors import UnknownHandlerWarning  # noqa: E402

TARGET_P95_MS = 300.0
METRICS_TOKEN = "bench-metrics-token"
QUEUE = "bench"  # no worker of the stack serves it: the waiting tasks stay waiting
# 50 kinds of failure (5 handlers x 10 messages), each message with varying numbers and ids:
# 10,000 dead letters that fall into exactly 50 fingerprints.
MESSAGES = (
    "row {n} has {m} columns, expected 12",
    "missing key 'col_{n}' in record {hex}",
    "upstream {host} port {n} did not answer within {m} ms",
    "file /data/part-{n}.parquet is corrupt at offset {m}",
    "partition {n} of job {uuid} was lost",
    "quota exceeded for tenant t{m}: {n} > 1000",
    "cannot parse '{hex}' as a date",
    "connection reset by peer after {n} bytes",
    "division by zero in column {n}",
    "schema mismatch: field {n} is string, expected int",
)
EXCEPTIONS = ("ValueError", "KeyError", "TimeoutError", "OSError", "RuntimeError")


def free_port() -> int:
    from core.stack.redis_server import free_port as fp

    return fp()


class Stack:
    """`manage.py runstack --workers 0` in a temporary QA_VAR_DIR."""

    def __init__(self, var_dir: Path) -> None:
        self.var_dir = var_dir
        self.port = free_port()
        self.redis_port = free_port()
        self.env = os.environ | {
            "QA_VAR_DIR": str(var_dir),
            "QA_REDIS_PORT": str(self.redis_port),
            "QA_REDIS_FSYNC": "everysec",  # seeding 2M tasks; pages read, they do not write
            "PORT": str(self.port),
            "QA_ADMIN_PASSWORD": "bench-admin-password",
            "METRICS_TOKEN": METRICS_TOKEN,
            "DJANGO_SETTINGS_MODULE": "queueadmin.settings",
        }
        self.env.pop("REDIS_URL", None)
        self.env.pop("DATABASE_URL", None)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        log = open(self.var_dir / "stack.log", "wb")  # noqa: SIM115 (lives with the process)
        self.proc = subprocess.Popen(
            [sys.executable, "manage.py", "runstack", "--workers", "0"],
            cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError((self.var_dir / "stack.log").read_text())
            if b"queueadmin is up" in (self.var_dir / "stack.log").read_bytes():
                return
            time.sleep(0.2)
        raise TimeoutError("the stack did not come up in 120 s")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(60)


def seed_redis(stack: Stack, scale: float) -> dict[str, Any]:
    from core.queue import Queue
    from core.queue.connect import connect

    client = connect(stack.redis_url, cluster=False)
    q = Queue(client, QUEUE, prefix="qa")
    big = int(1_000_000 * scale)
    started = time.perf_counter()
    q.submit([{"row": i} for i in range(big)], handler="transform", request_id="big")
    small_requests = int(10_000 * scale)
    for i in range(small_requests):
        q.submit(
            [{"chunk": j, "path": f"s3://bucket/in/{i:05d}/{j:03d}.parquet"} for j in range(100)],
            handler="transform",
            tenant=f"tenant-{i % 20}",
            priority=(10, 50, 90)[i % 3],
            request_id=f"req-{i:05d}",
        )
    # Dead letters: requests of one attempt per task, failed through the engine.
    failing = Queue(client, QUEUE, prefix="qa")
    dead_total = int(10_000 * scale) if scale < 1 else 10_000
    per_request = 100
    n = 0
    for r in range(dead_total // per_request):
        rid = f"failing-{r:04d}"
        failing.submit(
            [{"record": j} for j in range(per_request)],
            handler=f"h{r % 5}",
            max_attempts=1,
            priority=99,  # leased before the 2M others
            request_id=rid,
        )
        leases = failing.dequeue("bench-failer", count=per_request)
        for lease in leases:
            exc, msg = EXCEPTIONS[r % 5], MESSAGES[n % len(MESSAGES)]  # handler h{r % 5}
            text = msg.format(
                n=n, m=n * 7 % 1000, hex=f"{n * 2654435761 % 2**32:08x}",
                host=f"10.0.{n % 256}.{n % 7}", uuid=f"{n:08x}-1234-5678-9abc-{n:012x}",
            )
            failing.fail(lease, f"{exc}: {text}", f"Traceback ...\n{exc}: {text}", retry=False)
            n += 1
    return {
        "waiting_tasks": big + small_requests * 100,
        "dead_letters": n,
        "seed_redis_s": round(time.perf_counter() - started, 1),
    }


def seed_workers(stack: Stack, n: int = 50) -> None:
    from core.queue import Queue
    from core.queue.connect import connect

    client = connect(stack.redis_url, cluster=False)
    q = Queue(client, QUEUE, prefix="qa")
    for i in range(n):
        info = {"host": f"node-{i // 4}", "pid": str(1000 + i), "queues": QUEUE, "slots": "4"}
        q.heartbeat(f"node-{i // 4}-{1000 + i}", info, [], ttl_ms=3_600_000, lease_ms=30_000)


def seed_database(scale: float) -> dict[str, Any]:
    """Finished requests that Redis no longer has: rows only the database holds."""
    import datetime as dt

    from core.models import Request

    n = int(10_000 * scale)
    now = dt.datetime.now(dt.UTC)
    rows = []
    for i in range(n):
        created = now - dt.timedelta(days=2, minutes=i)
        state = ("done", "done", "done", "failed", "cancelled")[i % 5]
        rows.append(
            Request(
                queue=QUEUE, request_id=f"old-{i:05d}", state=state, priority=(10, 50, 90)[i % 3],
                concurrency=8, tenant=f"tenant-{i % 20}", handler=f"h{i % 5}", max_attempts=3,
                total=100, done=100 if state == "done" else 90, dead=10 if state == "failed" else 0,
                cancelled=10 if state == "cancelled" else 0, created_at=created,
                updated_at=created + dt.timedelta(minutes=3),
                finished_at=created + dt.timedelta(minutes=3), completions=1,
                expired_at=now - dt.timedelta(days=1),
            )
        )
    Request.objects.bulk_create(rows, batch_size=2000, ignore_conflicts=True)
    return {"finished_requests_in_db": Request.objects.filter(queue=QUEUE).count()}


def wait_mirrored(dead_letters: int, timeout: float = 600) -> None:
    from core.models import DeadLetter

    deadline = time.monotonic() + timeout
    while DeadLetter.objects.filter(queue=QUEUE).count() < dead_letters:
        if time.monotonic() > deadline:
            raise TimeoutError("the mirror did not catch up")
        time.sleep(0.5)


def session_cookie() -> str:
    """A logged-in session of the stack's admin user, made the way django.contrib.auth does."""
    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.auth.models import User
    from django.contrib.sessions.backends.db import SessionStore

    user = User.objects.get(username="admin")
    s = SessionStore()
    s[SESSION_KEY] = str(user.pk)
    s[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    s[HASH_SESSION_KEY] = user.get_session_auth_hash()
    s.save()
    return f"{settings.SESSION_COOKIE_NAME}={s.session_key}"


def pages(fingerprint: str) -> list[tuple[str, str]]:
    """Every page and polled fragment, as the console's URLs name them."""
    q = f"queue={QUEUE}"
    return [
        ("overview", f"/?{q}"),
        ("requests", f"/requests/?{q}"),
        ("requests (state=done, db)", f"/requests/?{q}&state=done"),
        ("requests (prefix search)", f"/requests/?{q}&id=req-0"),
        ("request detail (1M tasks)", f"/requests/{QUEUE}/big/"),
        ("request detail (100 tasks)", f"/requests/{QUEUE}/req-00042/"),
        ("pending entries", f"/pending/?{q}"),
        ("dead letters (groups)", f"/dead/?{q}"),
        ("dead letters (one group)", f"/dead/{QUEUE}/{fingerprint}/"),
        ("workers", f"/workers/?{q}"),
        ("metrics", "/metrics"),
    ]


def measure(stack: Stack, cookie: str, path: str, n: int) -> dict[str, Any]:
    times = []
    status = 0
    for _ in range(n):
        headers = {"Cookie": cookie}
        if path == "/metrics":
            headers = {"Authorization": f"Bearer {METRICS_TOKEN}"}
        req = urllib.request.Request(stack.base + path, headers=headers)
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                resp.read()
                status = resp.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return {
        "status": status,
        "p50_ms": round(statistics.median(times), 1),
        "p95_ms": round(times[int(len(times) * 0.95) - 1], 1),
        "max_ms": round(times[-1], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests-per-page", type=int, default=50)
    parser.add_argument("--small", action="store_true", help="a hundredth of the scale")
    parser.add_argument("--json-only", action="store_true")
    args = parser.parse_args()
    scale = 0.01 if args.small else 1.0
    # No worker of the stack runs the bench's handlers, on purpose: its tasks stay waiting.
    warnings.simplefilter("ignore", UnknownHandlerWarning)

    var_dir = Path(tempfile.mkdtemp(prefix="qa-bench-console-"))
    stack = Stack(var_dir)
    os.environ.update({k: v for k, v in stack.env.items() if k.startswith(("QA_", "DJANGO"))})
    import django

    django.setup()
    stack.start()
    try:
        from core.queue import read
        from core.queue.connect import connect

        out: dict[str, Any] = {"scale": scale}
        out |= seed_redis(stack, scale)
        seed_workers(stack)
        out |= seed_database(scale)
        wait_mirrored(out["dead_letters"])
        from core.models import DeadLetter

        fingerprint = DeadLetter.objects.filter(queue=QUEUE).values_list(
            "fingerprint", flat=True
        )[0]
        cookie = session_cookie()
        client = connect(stack.redis_url, cluster=False)
        results: dict[str, dict[str, Any]] = {}
        for name, path in pages(fingerprint):
            measure(stack, cookie, path, 3)  # warm up
            results[name] = measure(stack, cookie, path, args.requests_per_page)
        # Redis commands of one overview poll, its cache cold (it waits the cache out first).
        time.sleep(1.5)
        before = sum(calls for calls, _ in read.command_stats(client).values())
        measure(stack, cookie, f"/?queue={QUEUE}", 1)
        after = sum(calls for calls, _ in read.command_stats(client).values())
        out["overview_poll_redis_commands"] = after - before - 1  # minus our own INFO
        out["pages"] = results
        out["worst_p95_ms"] = max(r["p95_ms"] for r in results.values())
        out["all_pages_under_target"] = all(
            r["p95_ms"] < TARGET_P95_MS and r["status"] == 200 for r in results.values()
        )
    finally:
        stack.stop()
    if not args.json_only:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"console pages over HTTP (gunicorn), scale {scale:g}")
        for col in ("page", "status", "p50 ms", "p95 ms", "max ms", f"p95 < {TARGET_P95_MS:g}"):
            table.add_column(col, justify="left" if col == "page" else "right")
        for name, r in out["pages"].items():
            ok = r["p95_ms"] < TARGET_P95_MS and r["status"] == 200
            table.add_row(name, str(r["status"]), f"{r['p50_ms']}", f"{r['p95_ms']}",
                          f"{r['max_ms']}", "yes" if ok else "MISSED")
        Console(stderr=True).print(table)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
