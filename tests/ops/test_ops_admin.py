"""The Django admin: history and audit log read-only; the admin actions "requeue dead tasks"
and "cancel" go through the service layer, with its permission check and audit entry."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.test import Client

from core.models import AuditEntry, DeadLetter, Request
from core.ops.audit import Actor
from core.ops.audit import record as audit_record
from core.queue import Queue
from tests.mirror_support import mirror
from tests.ops_support import dead_letters, ensure_roles, still_dead, user

pytestmark = pytest.mark.django_db


@pytest.fixture
def q(django_queue: Queue) -> Queue:
    return django_queue


def logged_in(u: User) -> Client:
    c = Client()
    c.force_login(u)
    return c


def test_an_admin_requeues_dead_tasks_from_the_admin(q: Queue) -> None:
    ids = dead_letters(q, 3)
    ada = user("ada", "admin", staff=True)
    pks = list(DeadLetter.objects.filter(entry_id__in=ids[:2]).values_list("pk", flat=True))
    r = logged_in(ada).post("/admin/core/deadletter/", {
        "action": "requeue_dead_tasks", "_selected_action": pks}, follow=True)
    assert r.status_code == 200
    assert "requeued 2 of 2; 0 skipped" in r.content.decode()
    assert still_dead(q, ids) == 1
    entry = AuditEntry.objects.get()
    assert (entry.actor, entry.source, entry.action, entry.acted) == ("ada", "admin",
                                                                      "requeue", 2)


def test_an_admin_cancels_requests_from_the_admin(q: Queue) -> None:
    q.submit([1, 2], request_id="a", handler="h")
    q.submit([1], request_id="b", handler="h")
    mirror(q)
    pks = list(Request.objects.filter(queue=q.name).values_list("pk", flat=True))
    r = logged_in(user("ada", "admin", staff=True)).post("/admin/core/request/", {
        "action": "cancel_requests", "_selected_action": pks}, follow=True)
    assert "cancelled 2 of 2; 0 skipped" in r.content.decode()
    assert q.state("a") == q.state("b") == "cancelled"


def test_staff_without_the_permission_is_not_offered_the_action(q: Queue) -> None:
    ids = dead_letters(q, 1)
    staff = user("sam", "viewer", staff=True)
    staff.user_permissions.add(*Permission.objects.filter(codename="view_deadletter"))
    c = logged_in(User.objects.get(pk=staff.pk))
    page = c.get("/admin/core/deadletter/")
    assert page.status_code == 200 and "requeue_dead_tasks" not in page.content.decode()
    pk = DeadLetter.objects.get(entry_id=ids[0]).pk
    c.post("/admin/core/deadletter/", {"action": "requeue_dead_tasks",
                                       "_selected_action": [pk]})
    assert still_dead(q, ids) == 1  # a forged POST does nothing


def test_audit_entries_are_read_only_in_the_admin(q: Queue) -> None:
    entry = audit_record(Actor("os:x", None, "cli"), "pause", "default", target="queue default",
                         count=1, acted=1)
    c = logged_in(User.objects.create_superuser("root", "", "pw"))
    assert c.get("/admin/core/auditentry/").status_code == 200
    detail = c.get(f"/admin/core/auditentry/{entry.pk}/change/")
    assert detail.status_code == 200 and 'name="_save"' not in detail.content.decode()
    assert c.get("/admin/core/auditentry/add/").status_code == 403
    assert c.post(f"/admin/core/auditentry/{entry.pk}/delete/", {"post": "yes"}).status_code \
        == 403
    c.post(f"/admin/core/auditentry/{entry.pk}/change/", {"actor": "someone else"})
    entry.refresh_from_db()
    assert entry.actor == "os:x"
    for model in ("request", "deadletter", "bulkaction"):
        assert c.get(f"/admin/core/{model}/").status_code == 200


def test_createuser_admin_role_gets_the_admin_group_and_the_admin() -> None:
    ensure_roles()
    out = io.StringIO()
    call_command("createuser", "ada", "--role", "admin", stdout=out)
    ada = User.objects.get(username="ada")
    assert ada.is_staff and not ada.is_superuser
    assert ada.has_perm("core.pause_queue") and ada.has_perm("core.delete_deadletter")
    call_command("createuser", "otto", "--role", "operator", stdout=out)
    otto = User.objects.get(username="otto")
    assert not otto.is_staff and otto.has_perm("core.requeue_deadletter")
    assert not otto.has_perm("core.pause_queue")


def test_an_admin_reads_the_schedules_history_in_the_admin_and_changes_nothing(
        q: Queue) -> None:
    from core.mirror.schedules import mirror_schedules
    from core.models import ScheduleRecord
    from core.queue.schedule.api import declare, every

    declare(q, every("poll", "10m", handler="h", tasks=[{}]))
    mirror_schedules(q)
    rec = ScheduleRecord.objects.get(name="poll")
    ensure_roles()
    call_command("createuser", "ada", "--role", "admin", stdout=io.StringIO())
    c = logged_in(User.objects.get(username="ada"))
    listing = c.get("/admin/core/schedulerecord/")
    assert listing.status_code == 200 and "poll" in listing.content.decode()
    assert c.get("/admin/core/schedulerecord/add/").status_code == 403
    c.post(f"/admin/core/schedulerecord/{rec.pk}/change/", {"name": "other"})
    rec.refresh_from_db()
    assert rec.name == "poll"
