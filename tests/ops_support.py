"""What the service-layer tests share besides their fixtures (tests/ops/conftest.py): users by
role, dead letters in Redis and mirrored into the database, and a look at the audit log."""

from __future__ import annotations

from django.contrib.auth.models import Group, Permission, User

from core.models import AuditEntry, DeadLetter
from core.ops.audit import Actor
from core.queue import Queue
from tests.mirror_support import mirror


def ensure_roles() -> None:
    """The viewer, operator and admin groups as migration 0004 grants them (a transactional
    test elsewhere may have flushed the rows migrations wrote)."""
    from core.ops.perms import GROUPS

    for name, codenames in GROUPS.items():
        group = Group.objects.get_or_create(name=name)[0]
        group.permissions.set(Permission.objects.filter(content_type__app_label="core",
                                                        codename__in=codenames))


def user(name: str, role: str | None, *, staff: bool = False) -> User:
    ensure_roles()
    u = User.objects.create_user(name, is_staff=staff)
    if role:
        u.groups.add(Group.objects.get(name=role))
    return User.objects.get(pk=u.pk)  # fresh: no permission cache from before the group


CLI = Actor("os:tester", None, "cli")


def dead_letters(q: Queue, n: int, *, rid: str = "bad", handler: str = "spark",
                 error: str = "ValueError: bad row 7 in 'part-7.csv'", mirrored: bool = True,
                 tenant: str = "acme") -> list[str]:
    """A request of `n` tasks that all die (retry refused); their dead-letter ids, oldest
    first, mirrored into the DeadLetter table unless `mirrored` is False."""
    q.submit([{"i": i} for i in range(n)], request_id=rid, handler=handler, tenant=tenant,
             concurrency=max(n, 1), max_attempts=1)
    while leases := q.dequeue("w", 1000):
        for lease in leases:
            q.fail(lease, error, retry=False, worker="w")
    if mirrored:
        mirror(q)
    ids: list[str] = []
    for eid, f in q.redis.xrange(q.keys.dead):
        if f["request"] == rid:
            ids.append(eid)
    return ids


def last_audit() -> AuditEntry:
    entry = AuditEntry.objects.order_by("-id").first()
    assert entry is not None, "no audit entry was written"
    return entry


def still_dead(q: Queue, ids: list[str]) -> int:
    pipe = q.redis.pipeline(transaction=False)
    for i in ids:
        pipe.xrange(q.keys.dead, i, i)
    return sum(1 for rows in pipe.execute() if rows)


def fingerprint_of(q: Queue, rid: str) -> str:
    row = DeadLetter.objects.filter(queue=q.name, request_id=rid).first()
    assert row is not None
    return str(row.fingerprint)
