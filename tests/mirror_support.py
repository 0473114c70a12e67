"""What the mirror tests share: running the mirror in burst mode on one test queue, finishing
requests fast, and comparing the database with Redis."""

from __future__ import annotations

from typing import Any

from core.mirror import MirrorConfig, Totals, run_mirror
from core.queue import Queue
from core.queue.models import STATES

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
