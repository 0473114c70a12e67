"""The console's Retention page (issue 35, item 2): every account reads each kind's retention,
where it comes from and the pruner's last passes; admins set it for the queue shown or for
every queue, or take a queue's back, each change one audit entry; anyone else's POST is
refused (403, audited); bad input is a 400 that says what is wrong."""

from __future__ import annotations

import html as htmllib
from datetime import UTC, datetime
from typing import Any

import pytest
from django.test import Client

from core.mirror.retention_prune import Report, record
from core.models import AuditEntry, RetentionSetting
from core.queue import Queue

pytestmark = pytest.mark.django_db


def text(response: Any) -> str:
    return htmllib.unescape(response.content.decode())


def row(html: str, kind: str) -> str:
    start = html.index(f'data-kind="{kind}"')
    return html[start:html.index("</tr>", start)]


def test_every_account_reads_each_kind_and_where_it_comes_from(
        viewer: Client, console: Queue, settings: Any) -> None:
    settings.RETENTION = {"audit": "400d"}
    RetentionSetting.objects.create(kind="requests", queue="default", seconds=90,
                                    updated_by="ada")

    html = text(viewer.get("/retention/"))

    for kind in ("requests", "dead", "search", "audit", "bulk", "datajobs", "handler-minutes",
                 "handler-hours"):
        assert f'data-kind="{kind}"' in html
    assert "30d" in row(html, "requests") and "90s" in row(html, "requests")
    assert "set by ada" in row(html, "requests")
    assert "400d" in row(html, "audit") and "from QA_RETAIN_AUDIT" in row(html, "audit")
    assert "<form" not in html.split('id="retention"')[1].split("</table>")[0]  # reads only
    assert 'href="/retention/?queue=default"' in text(viewer.get("/"))  # in the navigation


def test_an_admin_sets_the_queues_retention_and_every_queues(admin: Client,
                                                              console: Queue) -> None:
    done = admin.post("/retention/change/", {"queue": "default", "kind": "requests",
                                             "duration": "12h", "scope": "queue"}, follow=True)

    assert done.status_code == 200
    html = text(done)
    assert "Requests are now kept for 12h in queue default" in html
    assert RetentionSetting.objects.get(kind="requests", queue="default").seconds == 12 * 3600
    entry = AuditEntry.objects.get(action="retention-set")
    assert (entry.actor, entry.source, entry.queue) == ("ada", "console", "default")

    admin.post("/retention/change/", {"queue": "default", "kind": "audit",
                                      "duration": "forever", "scope": "every"})
    assert RetentionSetting.objects.get(kind="audit", queue="").seconds is None
    html = text(admin.get("/retention/"))
    assert "forever" in row(html, "audit") and "12h" in row(html, "requests")

    admin.post("/retention/change/", {"queue": "default", "kind": "requests",
                                      "scope": "queue", "action": "unset"})
    assert not RetentionSetting.objects.filter(kind="requests").exists()
    assert AuditEntry.objects.filter(action="retention-unset", acted=1).count() == 1


@pytest.mark.parametrize("who", ["viewer", "operator"])
def test_anyone_else_is_refused_and_the_refusal_audited(who: str, request: Any,
                                                        console: Queue) -> None:
    client = request.getfixturevalue(who)

    refused = client.post("/retention/change/", {"queue": "default", "kind": "requests",
                                                 "duration": "1s", "scope": "every"})

    assert refused.status_code == 403
    assert not RetentionSetting.objects.exists()
    assert AuditEntry.objects.get(action="retention-set").refused


@pytest.mark.parametrize(("form", "says"), [
    ({"kind": "requests", "duration": "a while"}, "'a while' is not a duration"),
    ({"kind": "requests", "duration": ""}, "is not a duration"),
    ({"kind": "<script>x</script>", "duration": "1d"}, "is not a kind of history"),
    ({"kind": "requests", "duration": "0s"}, "keeps nothing"),
])
def test_bad_input_is_a_400_that_says_what_is_wrong(admin: Client, console: Queue,
                                                    form: dict[str, str], says: str) -> None:
    bad = admin.post("/retention/change/", {"queue": "default", "scope": "queue"} | form)

    assert bad.status_code == 400
    assert says in text(bad) and "<script>x" not in bad.content.decode()
    assert not RetentionSetting.objects.exists()


def test_an_unknown_queue_is_a_404_and_a_get_of_the_form_a_405(admin: Client,
                                                               console: Queue) -> None:
    assert admin.post("/retention/change/", {"queue": "nosuch", "kind": "requests",
                                             "duration": "1d"}).status_code == 404
    assert admin.get("/retention/change/").status_code == 405


def test_a_setting_that_is_not_a_duration_is_shown_not_a_500(viewer: Client, console: Queue,
                                                              settings: Any) -> None:
    settings.RETENTION = {"bulk": "later"}

    page = viewer.get("/retention/")

    assert page.status_code == 200
    assert "QA_RETAIN_BULK: &#x27;later&#x27; is not a duration" in page.content.decode()


def test_the_pruners_last_passes_are_shown(viewer: Client, console: Queue) -> None:
    report = Report(removed={"requests": 1200, "request-events": 2400, "search": 1200},
                    batches=14, longest_ms=12.5, longest_at="requests of queue default",
                    seconds=0.4)
    record(report, started=datetime.now(UTC), source="services")

    html = text(viewer.get("/retention/"))

    runs = html.split('id="prune-runs"')[1]
    assert "2,400" in runs and "requests 1,200" in runs and "12.5 ms" in runs
