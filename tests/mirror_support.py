"""What the mirror tests share: running the mirror in burst mode on one test queue, finishing
requests fast, and comparing the database with Redis."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from core.mirror import MirrorConfig, Totals, run_mirror
from core.queue import Queue
from core.queue.models import STATES

ROOT = Path(__file__).resolve().parents[1]
# Hash fields a Request row mirrors under the same name.
COMPARED = ("state", "priority", "concurrency", "tenant", "handler", "max_attempts", "total",
            "waiting", "leased", "delayed", "done", "dead", "cancelled")


def mirror(q: Queue, *, group: str = "mirror", batch: int = 1000) -> Totals:
    """Run the mirror over `q` until it has applied everything there is."""
    config = MirrorConfig(queues=(q.name,), group=group, batch=batch, burst=True)
    return run_mirror(config, lambda name: Queue(q.redis, name, prefix=q.keys.prefix))


def finish(q: Queue, *, consumer: str = "w", fail: bool = False) -> int:
    """Lease every waiting task and ack it (or fail it for good); returns how many."""
    n = 0
    while leases := q.dequeue(consumer, count=1000):
        if fail:
            for lease in leases:
                q.fail(lease, f"ValueError: bad row {n} in 'part-{n}.csv'", retry=False)
        else:
            q.ack_many(leases)
        n += len(leases)
    return n


def redis_requests(q: Queue) -> dict[str, dict[str, Any]]:
    """Every request of the queue's state indexes, as the mirror should have written it."""
    r: Any = q.redis
    rids = [rid for s in STATES for rid in r.zrange(q.keys.state_index(s), 0, -1)]
    pipe = r.pipeline(transaction=False)
    for rid in rids:
        pipe.hgetall(q.keys.request(rid))
    out = {}
    for rid, h in zip(rids, pipe.execute(), strict=True):
        out[rid] = {f: (h.get(f, "") if f in ("state", "tenant", "handler") else int(h.get(f) or 0))
                    for f in COMPARED}
    return out


def db_requests(queue: str, using: str = "default") -> dict[str, dict[str, Any]]:
    from core.models import Request

    rows = Request.objects.using(using).filter(queue=queue).values("request_id", *COMPARED)
    return {row.pop("request_id"): row for row in rows}


def assert_db_equals_redis(q: Queue) -> None:
    expected, got = redis_requests(q), db_requests(q.name)
    missing = expected.keys() - got.keys()
    assert not missing, f"{len(missing)} requests missing from the database, e.g. {min(missing)}"
    wrong = [rid for rid in expected if expected[rid] != got[rid]]
    assert not wrong, f"{len(wrong)} rows differ, e.g. {wrong[0]}: {got[wrong[0]]} != " \
                      f"{expected[wrong[0]]}"


# -- mirror processes of their own (a database that the test's processes share) -------------


def process_env(
    database_url: str, tmp_path: Path, redis_url: str = "", prefix: str = ""
) -> dict[str, str]:
    """The environment of a `manage.py` process on `database_url` (and a Redis, if given)."""
    return os.environ | {
        "DATABASE_URL": database_url, "DJANGO_SETTINGS_MODULE": "queueadmin.settings",
        "SECRET_KEY": "mirror-tests", "QA_VAR_DIR": str(tmp_path / "var"),
        **({"REDIS_URL": redis_url, "QUEUE_PREFIX": prefix} if redis_url else {}),
    }


def migrate_database(database_url: str, tmp_path: Path) -> None:
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, check=True,
                   env=process_env(database_url, tmp_path))


def db_query(database_url: str, sql: str) -> list[tuple[Any, ...]]:
    """The rows of `sql`, straight from the database at `database_url`."""
    if database_url.startswith("sqlite"):
        import sqlite3

        with sqlite3.connect(database_url.removeprefix("sqlite:///")) as c:
            return c.execute(sql).fetchall()
    import psycopg

    with psycopg.connect(database_url) as c:
        return c.execute(sql).fetchall()


def db_rows(database_url: str) -> list[tuple[Any, ...]]:
    """(request_id, state, ...) of every Request row of queue q, straight from the database."""
    columns = ", ".join(["request_id", *COMPARED])
    return db_query(database_url, f"SELECT {columns} FROM core_request WHERE queue = 'q'")
