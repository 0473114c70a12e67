"""The request page's results (issue 20): each task's result, escaped, cut to one line with a
link to the whole value; paged; and the page of one whole result."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.test import Client

from core.models import Request
from core.queue import Queue
from tests.console_support import HOSTILE

pytestmark = pytest.mark.django_db


def finish(q: Queue, rid: str, results: list[Any], **options: Any) -> list[str]:
    """A request of len(results) tasks, each acked with its result; its task ids."""
    q.submit(list(range(len(results))), handler="echo", request_id=rid, **options)
    leases = q.dequeue("w", len(results))
    q.ack_many(leases, results)
    return [lease.task_id for lease in leases]


def test_the_request_page_shows_results_escaped_and_cut_with_the_whole_value_a_click_away(
    viewer: Client, console: Queue
) -> None:
    long = {"rows": list(range(400)), "note": HOSTILE}
    small, none, big = finish(console, "r", [{"note": HOSTILE}, None, long])
    html = viewer.get("/requests/default/r/").content.decode()
    section = html[html.index('id="results"'):]
    assert "2 tasks returned a result" in section
    assert "<script>alert" not in html and '"onmouseover=' not in html
    assert f'id="result-{small}"' in section and f'id="result-{none}"' not in section
    row = re.search(rf'id="result-{big}".*?</tr>', section, re.S)
    assert row is not None
    cut = row.group(0)
    # The value shown, not the row: a task id (a millisecond timestamp) may well hold "399".
    shown = re.search(r'<code class="payload">(.*?)</code>', cut, re.S)
    assert shown is not None
    assert "…" in shown.group(1) and "&quot;rows&quot;: [0, 1, 2" in shown.group(1)
    assert "399" not in shown.group(1)
    size = len(json.dumps(long, separators=(",", ":")).encode())
    assert f"whole value ({size:,} bytes)" in cut
    url = f"/requests/default/r/results/{big}/"
    assert f'href="{url}"' in cut

    whole = viewer.get(url)
    assert whole.status_code == 200
    page = whole.content.decode()
    assert "    399\n" in page  # pretty-printed, all of it
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert" not in page
    polled = viewer.get(url, headers={"HX-Request": "true", "HX-Target": "live"})
    assert polled.status_code == 286  # nothing on it changes: htmx stops polling
    raw = viewer.get(url + "?format=json")
    assert raw["Content-Type"] == "application/json"
    assert json.loads(raw.content) == long


def test_results_are_paged_and_every_one_is_shown_once(viewer: Client, console: Queue) -> None:
    tids = finish(console, "many", [{"i": i, "pad": "x" * 70} for i in range(300)])
    seen: list[str] = []
    url = "/requests/default/many/"
    pages = 0
    while url:
        response = viewer.get(url)
        assert response.status_code == 200
        results = response.context["results"]
        assert results["total"] == 300
        seen += [r.task_id for r in results["rows"]]
        pages += 1
        url = f"/requests/default/many/?results={results['next']}" if results["next"] else ""
    assert pages > 1
    assert sorted(set(seen)) == sorted(tids) and len(seen) == len(set(seen))


def test_a_request_without_results_says_so_and_one_redis_forgot_says_that(
    viewer: Client, console: Queue
) -> None:
    finish(console, "quiet", [None, None])
    assert "None: a task's result appears here" in viewer.get(
        "/requests/default/quiet/").content.decode()
    console.submit([1], handler="echo", request_id="soon")
    assert "None yet" in viewer.get("/requests/default/soon/").content.decode()
    from django.utils import timezone

    now = timezone.now()
    Request.objects.create(queue="default", request_id="gone", state="done", priority=50,
                           tenant="t", handler="echo", total=1, done=1, created_at=now,
                           updated_at=now, finished_at=now, completions=1)
    html = viewer.get("/requests/default/gone/").content.decode()
    assert "Redis no longer holds this request's results" in html


@pytest.mark.parametrize(("url", "status", "says"), [
    ("/requests/default/r/?results=abc", 400, "results must be a page cursor"),
    ("/requests/default/r/?results=99999999999999999999999", 400, "results must be a page"),
    ("/requests/default/r/?results=-1", 400, "results must be a page cursor"),
    ("/requests/default/r/results/1-0/", 404, "has no result"),
    ("/requests/default/r/results/not-a-task/", 404, "invalid task id"),
    ("/requests/default/a%3Ab/results/1-0/", 404, "invalid request id"),
    ("/requests/default/r/results/{task}/?format=xml", 400, "format must be one of json"),
])
def test_bad_input_is_a_page_with_the_reason(
    viewer: Client, console: Queue, url: str, status: int, says: str
) -> None:
    (task,) = finish(console, "r", ["v"])
    response = viewer.get(url.format(task=task))
    assert response.status_code == status
    assert says in response.content.decode()


def test_a_result_page_needs_the_console_permission(
    client: Client, nobody: Client, console: Queue
) -> None:
    (task,) = finish(console, "r", ["secret value"])
    url = f"/requests/default/r/results/{task}/"
    anonymous = client.get(url)
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]
    assert nobody.get(url).status_code == 403
    assert nobody.get(url + "?format=json").status_code == 403
