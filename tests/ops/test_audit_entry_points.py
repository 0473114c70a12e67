"""Every change of state, from every entry point (the console's actions, the management
commands, the Django admin, a failed login), writes exactly one audit entry, naming its
actor: the console or admin user, the OS user at the command line (or the console user of
`--as`), the caller's address for a failed login."""

from __future__ import annotations

import getpass
import io
from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from axes.models import AccessAttempt
from django.contrib.auth.models import Group, Permission, User
from django.core.management import call_command
from django.test import Client

from core.models import AuditEntry, DeadLetter, Request
from core.pipeline import jobs
from core.pipeline.check import make_spec
from tests.console_support import World, field
from tests.ops_support import ensure_roles, user

pytestmark = pytest.mark.django_db

OS = f"os:{getpass.getuser()}"


@dataclass
class Env:
    world: World
    tmp: Path
    ada: Client  # the admin role, in the console
    root: Client  # a superuser, in the Django admin (users and groups)
    bulk_id: int = 0  # a bulk preview made before the action measured


@pytest.fixture
def env(world: World, tmp_path: Path, settings: Any) -> Env:
    ensure_roles()
    ada = Client()
    ada.force_login(user("ada", "admin", staff=True))
    user("otto", "operator")
    root = Client()
    root.force_login(User.objects.create_superuser("root", "", "unused-password-1"))
    settings.VAR_DIR = tmp_path / "var"
    return Env(world, tmp_path, ada, root)


# -- the console -----------------------------------------------------------------------------


def act(c: Client, page: str, action: str, **data: Any) -> None:
    html = c.get(page).content.decode()
    r = c.post(f"/actions/{action}/", {"queue": "default", "nonce": field(html, "nonce"),
                                       "next": page, **data})
    assert r.status_code in (200, 302), r.content.decode()[:2000]


def group_page(e: Env) -> str:
    return f"/dead/default/{e.world.fingerprint}/"


def bulk_preview(e: Env) -> int:
    r = e.ada.post("/actions/preview/", {"queue": "default",
                                         "preview": f"requeue:{e.world.fingerprint}"})
    assert r.status_code == 302, r.content.decode()[:2000]
    return int(r["Location"].rstrip("/").rsplit("/", 1)[-1])


def console_bulk_preview(e: Env) -> None:
    bulk_preview(e)


def console_bulk_confirm(e: Env) -> None:
    assert e.ada.post(f"/actions/bulk/{e.bulk_id}/confirm/").status_code == 302


def console_bulk_stop(e: Env) -> None:
    assert e.ada.post(f"/actions/bulk/{e.bulk_id}/stop/").status_code == 302


def console_datajob(e: Env) -> None:
    import pandas as pd

    data = e.tmp / "in.parquet"
    pd.DataFrame({"carrier": ["AA"]}).to_parquet(data, index=False)
    form = {"input": str(data), "format": "parquet", "sql": "SELECT * FROM chunk",
            "output": str(e.tmp / "o"), "output_format": "parquet"}
    assert e.ada.post("/jobs/submit/", form).status_code == 302


CONSOLE: dict[str, tuple[str, Callable[[Env], None]]] = {
    "requeue": ("requeue", lambda e: act(e.ada, group_page(e), "requeue",
                                         dead=e.world.dead_ids[:1])),
    "delete": ("delete", lambda e: act(e.ada, group_page(e), "delete",
                                       dead=e.world.dead_ids[:1], confirmed="1")),
    "cancel": ("cancel", lambda e: act(e.ada, "/requests/", "cancel",
                                       request=[e.world.running], confirmed="1")),
    "release": ("release", lambda e: act(
        e.ada, "/pending/", "release",
        entry=[f"{e.world.running}/{e.world.live_task}/w-live/0"])),
    "claim": ("claim", lambda e: act(
        e.ada, "/pending/", "claim", to="w-live",
        entry=[f"{e.world.running}/{e.world.stale_task}/w-stale/0"])),
    "reclaim": ("reclaim", lambda e: act(e.ada, "/workers/", "reclaim", worker="w-stale")),
    "pause": ("pause", lambda e: act(e.ada, "/requests/", "pause", confirmed="1")),
    "resume": ("resume", lambda e: act(e.ada, "/requests/", "resume")),
    "bulk preview": ("preview", console_bulk_preview),
    "bulk confirm": ("requeue", console_bulk_confirm),
    "bulk stop": ("stop", console_bulk_stop),
    "datajob submit": ("datajob", console_datajob),
    "worker quiet": ("worker-quiet", lambda e: act(e.ada, "/workers/", "worker-quiet",
                                                   worker="w-live")),
    "worker stop": ("worker-stop", lambda e: act(e.ada, "/workers/", "worker-stop",
                                                 worker="w-live", confirmed="1")),
}


@pytest.mark.parametrize("case", list(CONSOLE))
def test_each_console_action_is_one_entry_of_its_user(env: Env, case: str) -> None:
    action, run = CONSOLE[case]
    if case in ("bulk confirm", "bulk stop"):
        env.bulk_id = bulk_preview(env)  # its own entry (the "bulk preview" case)
    assert_one_entry(lambda: run(env), actor="ada", source="console", action=action)


# -- the command line ------------------------------------------------------------------------


def manage(*argv: str) -> None:
    call_command(*argv, stdout=io.StringIO(), stderr=io.StringIO())


def queued_job(e: Env, job_id: str) -> None:
    data = e.tmp / "in.parquet"
    if not data.exists():
        import pandas as pd

        pd.DataFrame({"carrier": ["AA"]}).to_parquet(data, index=False)
    spec = make_spec(job_id=job_id, input=str(data), format="parquet",
                     output=str(e.tmp / f"out-{job_id}"), sql="SELECT * FROM chunk")
    with pytest.warns(Warning):  # no worker announced the datajob handler
        jobs.submit(e.world.q, spec)


def cli_datajob_submit(e: Env) -> None:
    import pandas as pd

    data = e.tmp / "cli.parquet"
    pd.DataFrame({"carrier": ["AA"]}).to_parquet(data, index=False)
    manage("datajob", "submit", "--input", str(data), "--format", "parquet", "--sql",
           "SELECT * FROM chunk", "--output", str(e.tmp / "cli-out"))


def cli_datajob_cancel(e: Env) -> None:
    queued_job(e, "dj-cancel")
    manage("datajob", "cancel", "dj-cancel")


def cli_datajob_clean(e: Env) -> None:
    queued_job(e, "dj-clean")
    e.world.q.cancel("dj-clean")
    manage("datajob", "clean")


CLI: dict[str, tuple[str, str, Callable[[Env], None]]] = {
    "requeue": (OS, "requeue", lambda e: manage("requeue", "--id", e.world.dead_ids[0])),
    # A filtered requeue runs a bulk action here and now: its preview is not a second entry.
    "requeue --fingerprint": (OS, "requeue", lambda e: manage(
        "requeue", "--queue", "default", "--fingerprint", e.world.fingerprint)),
    "requeue --fingerprint --dry-run": (OS, "requeue", lambda e: manage(
        "requeue", "--queue", "default", "--fingerprint", e.world.fingerprint, "--dry-run")),
    "cancel": (OS, "cancel", lambda e: manage("cancel", e.world.running)),
    "claim": (OS, "claim", lambda e: manage(
        "claim", "--request", e.world.running, "--task", e.world.stale_task, "--from",
        "w-stale", "--to", "w-live")),
    "release": (OS, "release", lambda e: manage(
        "release", "--request", e.world.running, "--task", e.world.live_task, "--from",
        "w-live")),
    "pause": (OS, "pause", lambda e: manage("pause", "--queue", "default")),
    "resume": (OS, "resume", lambda e: manage("resume", "--queue", "default")),
    "pause --as": ("ada", "pause", lambda e: manage("pause", "--queue", "default", "--as",
                                                     "ada")),
    "datajob submit": (OS, "datajob", cli_datajob_submit),
    "datajob cancel": (OS, "cancel", cli_datajob_cancel),
    "datajob clean": (OS, "datajob-clean", cli_datajob_clean),
    "createuser": (OS, "user-add", lambda e: manage("createuser", "newbie", "--role",
                                                     "viewer")),
    "createuser --as": ("root", "user-add", lambda e: manage(
        "createuser", "newbie", "--role", "viewer", "--as", "root")),
    "axes_reset_username": (OS, "unlock", lambda e: manage("axes_reset_username", "vic")),
    "runstack's admin": (OS, "user-add", lambda e: runstack_admin()),
    "worker quiet": (OS, "worker-quiet", lambda e: manage("worker", "quiet", "w-live")),
    "worker stop --as": ("ada", "worker-stop", lambda e: manage("worker", "stop", "w-live",
                                                                "--as", "ada")),
}


def runstack_admin() -> None:
    from core.stack.supervisor import Stack

    Stack(host="127.0.0.1", port=0, out=io.StringIO())._ensure_admin()


@pytest.mark.parametrize("case", list(CLI))
def test_each_command_is_one_entry_of_the_os_user_or_its_as(env: Env, case: str) -> None:
    actor, action, run = CLI[case]
    assert_one_entry(lambda: run(env), actor=actor, source="cli", action=action)


def test_as_names_a_console_user_whose_permissions_apply(env: Env) -> None:
    before = AuditEntry.objects.count()
    with pytest.raises(Exception, match="otto may not pause"):
        manage("pause", "--queue", "default", "--as", "otto")
    [entry] = AuditEntry.objects.order_by("id")[before:]
    assert (entry.actor, entry.source, entry.refused) == ("otto", "cli", True)
    assert not env.world.q.paused()
    with pytest.raises(Exception, match="no active console user"):
        manage("pause", "--queue", "default", "--as", "nobody-of-that-name")
    assert AuditEntry.objects.count() == before + 1


# -- the Django admin ------------------------------------------------------------------------


class FormFields(HTMLParser):
    """The fields a browser would post from a page's forms, as they are filled in."""

    def __init__(self) -> None:
        super().__init__()
        self.data: dict[str, list[str]] = {}
        self._select: str | None = None
        self._textarea: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        name = a.get("name")
        if tag == "input" and name and a.get("type") not in ("submit", "button", "file"):
            checkable = a.get("type") in ("checkbox", "radio")
            if checkable and "checked" not in a:
                return
            self.data.setdefault(name, []).append(a.get("value", "on" if checkable else ""))
        elif tag == "select" and name:
            self._select = name
            self.data.setdefault(name, [])
        elif tag == "option" and self._select and "selected" in a:
            self.data[self._select].append(a.get("value", ""))
        elif tag == "textarea" and name:
            self._textarea = name
            self.data[name] = [""]

    def handle_endtag(self, tag: str) -> None:
        if tag == "select":
            self._select = None
        elif tag == "textarea":
            self._textarea = None

    def handle_data(self, data: str) -> None:
        if self._textarea:
            self.data[self._textarea][0] += data


def change(c: Client, url: str, **changes: Any) -> None:
    parser = FormFields()
    parser.feed(c.get(url).content.decode())
    data: dict[str, Any] = {**parser.data, **changes, "_save": "Save"}
    r = c.post(url, data)
    assert r.status_code == 302, (r.context["adminform"].form.errors, data)


def admin_requeue(e: Env) -> None:
    pk = DeadLetter.objects.get(entry_id=e.world.dead_ids[0]).pk
    e.root.post("/admin/core/deadletter/", {"action": "requeue_dead_tasks",
                                            "_selected_action": [pk]})


def admin_cancel(e: Env) -> None:
    pk = Request.objects.get(request_id=e.world.running).pk
    e.root.post("/admin/core/request/", {"action": "cancel_requests", "_selected_action": [pk]})


def admin_user_add(e: Env) -> None:
    r = e.root.post("/admin/auth/user/add/", {
        "username": "newbie", "password1": "a-long-pass-phrase-9",
        "password2": "a-long-pass-phrase-9", "usable_password": "true"})
    assert r.status_code == 302, r.content.decode()[:3000]


def admin_user_groups(e: Env) -> None:
    otto = User.objects.get(username="otto")
    change(e.root, f"/admin/auth/user/{otto.pk}/change/",
           groups=[str(Group.objects.get(name="admin").pk)])
    assert list(otto.groups.values_list("name", flat=True)) == ["admin"]


def admin_user_permissions(e: Env) -> None:
    otto = User.objects.get(username="otto")
    perm = Permission.objects.get(content_type__app_label="core", codename="pause_queue")
    change(e.root, f"/admin/auth/user/{otto.pk}/change/", user_permissions=[str(perm.pk)])
    assert otto.user_permissions.get() == perm


def admin_user_delete(e: Env) -> None:
    otto = User.objects.get(username="otto")
    assert e.root.post(f"/admin/auth/user/{otto.pk}/delete/", {"post": "yes"}).status_code == 302
    assert not User.objects.filter(username="otto").exists()


def admin_group_add(e: Env) -> None:
    perm = Permission.objects.get(content_type__app_label="core", codename="view_console")
    r = e.root.post("/admin/auth/group/add/", {"name": "auditors", "permissions": [perm.pk]})
    assert r.status_code == 302, r.content.decode()[:3000]


def admin_group_permissions(e: Env) -> None:
    viewer = Group.objects.get(name="viewer")
    perm = Permission.objects.get(content_type__app_label="core", codename="cancel_request")
    current = [str(p) for p in viewer.permissions.values_list("pk", flat=True)]
    change(e.root, f"/admin/auth/group/{viewer.pk}/change/", permissions=[*current, str(perm.pk)])
    assert viewer.permissions.filter(pk=perm.pk).exists()


def admin_group_delete(e: Env) -> None:
    viewer = Group.objects.get(name="viewer")
    r = e.root.post("/admin/auth/group/", {"action": "delete_selected", "post": "yes",
                                           "_selected_action": [viewer.pk]})
    assert r.status_code == 302 and not Group.objects.filter(name="viewer").exists()


def admin_unlock(e: Env) -> None:
    attempt = AccessAttempt.objects.create(username="vic", ip_address="10.0.0.9",
                                           user_agent="ua", failures_since_start=5,
                                           get_data="", post_data="", http_accept="",
                                           path_info="/login/")
    r = e.root.post("/admin/axes/accessattempt/", {"action": "unlock",
                                                   "_selected_action": [attempt.pk]})
    assert r.status_code == 302 and not AccessAttempt.objects.exists()


ADMIN: dict[str, tuple[str, Callable[[Env], None]]] = {
    "requeue dead tasks": ("requeue", admin_requeue),
    "cancel requests": ("cancel", admin_cancel),
    "add a user": ("user-add", admin_user_add),
    "a user's groups": ("user-change", admin_user_groups),
    "a user's permissions": ("user-change", admin_user_permissions),
    "delete a user": ("user-delete", admin_user_delete),
    "add a group": ("group-add", admin_group_add),
    "a group's permissions": ("group-change", admin_group_permissions),
    "delete a group": ("group-delete", admin_group_delete),
    "unlock": ("unlock", admin_unlock),
}


@pytest.mark.parametrize("case", list(ADMIN))
def test_each_django_admin_change_is_one_entry_of_its_user(env: Env, case: str) -> None:
    action, run = ADMIN[case]
    assert_one_entry(lambda: run(env), actor="root", source="admin", action=action)


def test_an_admin_entry_says_what_changed(env: Env) -> None:
    admin_user_groups(env)
    entry = AuditEntry.objects.get(action="user-change")
    assert "user 'otto' (groups: admin; active)" in entry.target
    assert "Changed Groups." in entry.target


# -- failed logins ---------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "source"), [("/login/", "console"),
                                              ("/admin/login/", "admin")])
def test_a_failed_login_is_one_entry_of_its_address(env: Env, path: str, source: str) -> None:
    def wrong() -> None:
        r = Client(REMOTE_ADDR="10.1.2.3").post(path, {"username": "ada", "password": "nope"})
        assert r.status_code == 200

    entry = assert_one_entry(wrong, actor="ip:10.1.2.3", source=source, action="login")
    assert entry.refused and entry.target == "user name 'ada'"
    assert entry.error == "wrong user name or password"


# -- the promise -----------------------------------------------------------------------------


def assert_one_entry(run: Callable[[], None], *, actor: str, source: str,
                     action: str) -> AuditEntry:
    before = AuditEntry.objects.order_by("-id").values_list("id", flat=True).first() or 0
    run()
    new = list(AuditEntry.objects.filter(id__gt=before).order_by("id"))
    got = [(e.actor, e.source, e.action) for e in new]
    assert got == [(actor, source, action)], got
    return new[0]


def test_every_action_here_is_one_the_audit_log_offers() -> None:
    from core.views.audit import ACTIONS

    used = {a for a, _ in CONSOLE.values()} | {a for _, a, _ in CLI.values()} | {
        a for a, _ in ADMIN.values()} | {"login"}
    assert used <= set(ACTIONS)  # each can be picked in the audit log's filter
