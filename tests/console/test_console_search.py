"""Search (issue 20, part 4): what the mirror keeps of each request for the search box, and the
search page itself; on SQLite (a plain match) and again on PostgreSQL (full text, ranked) in
the suite's second pass, with the same expected results for whole words."""

from __future__ import annotations

import datetime as dt
import html as htmllib
from typing import Any

import pytest
import redis
from django.db import connection
from django.test import Client
from django.utils import timezone

from core.console import search
from core.mirror.apply import apply_batch
from core.models import Request, SearchDoc
from core.queue import Queue
from tests.console_support import HOSTILE, Seeded
from tests.mirror_support import finish, mirror

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.filterwarnings("ignore::core.queue.errors.UnknownHandlerWarning"),
]
POSTGRES = "postgresql"


def found(q: Queue | None, text: str, scope: str | None = None) -> list[str]:
    """The request ids the text search finds for `text`, across every page."""
    query = search.parse(text, scope)
    ids: list[str] = []
    after = None
    while True:
        got = search.text_matches(query, after)
        ids += [h.request_id for h in got.hits]
        after = got.paged.next
        if after is None:
            return ids


# -- the engine carries the first tasks' text on their event ------------------------------


def test_the_submitted_event_carries_the_first_tasks_ids_and_text_bounded(
    queue: Queue, redis_client: redis.Redis
) -> None:
    queue.submit([{"word": "é" * 400}, *({"n": i} for i in range(20))], request_id="big",
                 handler="h")
    [(_, event)] = redis_client.xrange(queue.keys.events)
    assert event["type"] == "submitted"
    assert len(event["ids"].split()) == 8  # the first 8 tasks, of 21
    text = event["text"]
    assert len(text.encode()) <= 512 and text.startswith('{"word":"éé')  # cut whole chars
    assert '{"n":0}' not in text  # the first payload took the whole budget

    queue.open(handler="h", request_id="s")
    queue.add("s", [{"n": i} for i in range(6)])
    queue.add("s", [{"n": i} for i in range(6, 12)])
    queue.add("s", [{"n": 99}])
    added = [f for _, f in redis_client.xrange(queue.keys.events) if f["type"] == "added"]
    assert [len(f["ids"].split()) for f in added] == [6, 2]  # then nothing: past the 8th
    assert added[1]["text"] == '{"n":6}\n{"n":7}'


# -- the mirror keeps it ------------------------------------------------------------------


def test_payload_words_stay_searchable_after_redis_forgets_the_tasks(queue: Queue) -> None:
    queue.submit([{"order": "X-4711", "customer": "Globex"}, {"order": "X-4712"}],
                 request_id="globex-1", handler="h", tenant="acme")
    queue.submit([{"customer": "Initech"}], request_id="initech-1", handler="h")
    finish(queue)  # done: their streams are deleted at once
    assert not queue.redis.exists(queue.keys.tasks("globex-1"))
    mirror(queue)
    doc = SearchDoc.objects.get(queue="q", request_id="globex-1")
    assert "Globex" in doc.payloads and "X-4712" in doc.payloads
    assert doc.words.split()[:3] == ["globex-1", "acme", "h"]
    assert doc.created_at == Request.objects.get(request_id="globex-1").created_at
    assert found(queue, "globex") == ["globex-1"]
    assert found(queue, "4712") == ["globex-1"]
    assert found(queue, "X-4711 GLOBEX") == ["globex-1"]  # every word, any case
    assert found(queue, "globex initech") == []
    assert sorted(found(queue, "customer")) == ["globex-1", "initech-1"]


def test_streamed_tasks_and_dead_letters_are_indexed(queue: Queue) -> None:
    queue.open(handler="h", request_id="stream-1")
    queue.add("stream-1", [{"city": "Reykjavik"}])
    queue.add("stream-1", [{"city": f"c{i}"} for i in range(20)])
    queue.seal("stream-1")
    finish(queue)
    queue.submit([{"row": 7}], request_id="bad-1", handler="h", max_attempts=1)
    finish(queue, fail=True)
    mirror(queue)
    assert found(queue, "reykjavik") == ["stream-1"]
    assert found(queue, "c6") == ["stream-1"]  # the 8th task
    assert found(queue, "c7") == []  # the 9th: not kept
    # A dead task's payload is kept with its error, wherever it came in the request.
    # The error message of a dead letter ("ValueError: bad row N in 'part-N.csv'").
    assert "bad-1" in found(queue, "valueerror part")
    letter = SearchDoc.objects.get(request_id="bad-1")
    assert "ValueError" in letter.errors


def test_replaying_the_streams_adds_nothing_twice(queue: Queue, redis_client: Any) -> None:
    queue.submit([{"word": "zanzibar"}], request_id="z", handler="h", max_attempts=1)
    finish(queue, fail=True)
    mirror(queue)
    before = SearchDoc.objects.values().get(request_id="z")
    events = redis_client.xrange(queue.keys.events)
    dead = redis_client.xrange(queue.keys.dead)
    apply_batch(queue, events, dead)
    apply_batch(queue, events, dead)
    assert SearchDoc.objects.values().get(request_id="z") == before
    assert before["payloads"].count("zanzibar") == 1 and before["errors"].count("bad row") == 1


# -- the page -----------------------------------------------------------------------------


def docs(n: int, *, word: str = "walrus", queue: str = "default", prefix: str = "w",
         start: dt.datetime | None = None, **extra: str) -> list[str]:
    """n requests (rows and search rows) whose payload holds `word`, one a second apart."""
    start = start or timezone.now() - dt.timedelta(days=1)
    rids = [f"{prefix}-{i:04d}" for i in range(n)]
    Request.objects.bulk_create(
        Request(queue=queue, request_id=rid, state="done", created_at=start + i * dt.timedelta(
            seconds=1), updated_at=start, handler="h", tenant="t")
        for i, rid in enumerate(rids))
    SearchDoc.objects.bulk_create(
        SearchDoc(queue=queue, request_id=rid, created_at=start + i * dt.timedelta(seconds=1),
                  words=f"{rid} t h", payloads=extra.get("payloads", f'{{"note": "{word} {i}"}}'))
        for i, rid in enumerate(rids))
    return rids


def page_text(response: Any) -> str:
    return htmllib.unescape(response.content.decode())


def test_the_header_has_the_search_box_on_every_page(viewer: Client, seeded: Seeded) -> None:
    for path in ("/", "/requests/", "/dead/", f"/requests/default/{seeded.running}/",
                 "/search/?q=x"):
        body = viewer.get(path).content.decode()
        assert 'id="search-box"' in body and 'action="/search/"' in body, path


def test_a_payload_word_finds_the_request_and_links_to_it(
    viewer: Client, console: Queue, redis_client: redis.Redis
) -> None:
    console.submit([{"invoice": "INV-20391", "note": "late fee"}], request_id="inv-1",
                   handler="echo", tenant="acme")
    console.submit([{"invoice": "INV-11111"}], request_id="inv-2", handler="echo")
    finish(console)
    mirror(console)
    scans = int(redis_client.info("commandstats").get("cmdstat_scan", {}).get("calls", 0))
    response = viewer.get("/search/?q=inv-20391&queue=default")
    assert response.status_code == 200
    body = response.content.decode()
    assert 'data-request="inv-1"' in body and 'data-request="inv-2"' not in body
    assert 'href="/requests/default/inv-1/"' in body
    assert "<mark>INV</mark>" in body or "<mark>inv</mark>" in body.lower()
    after = int(redis_client.info("commandstats").get("cmdstat_scan", {}).get("calls", 0))
    assert after == scans  # the database, never a Redis scan
    # "fee" and "late" are both in inv-1's payload; "fee" alone is not in inv-2's.
    assert 'data-request="inv-1"' in viewer.get("/search/?q=late+fee").content.decode()
    assert "No request has all of" in page_text(viewer.get("/search/?q=late+nothere"))


def test_ids_task_ids_tenants_and_handlers_are_looked_up_as_typed(
    viewer: Client, console: Queue
) -> None:
    console.submit([{"n": 1}], request_id="order-77", handler="resize", tenant="globex",
                   max_attempts=1)
    console.submit([{"n": 2}], request_id="order-778", handler="resize")
    console.submit([{"n": 3}, {"n": 4}], request_id="other", handler="resize")
    [lease] = console.dequeue("w", 1)  # order-77's task, failed for good
    console.fail(lease, "ValueError: no", retry=False)
    mirror(console)
    task = lease.task_id
    body = viewer.get("/search/?q=order-77").content.decode()
    direct = body.split('id="direct"')[1].split("</ul>")[0]
    assert direct.index("order-77<") < direct.index("order-778<")  # exact first, then prefix
    body = viewer.get(f"/search/?q={task}").content.decode()
    assert f"Task <span class=\"mono\">{task}</span> of request" in body
    assert 'href="/requests/default/order-77/"' in body
    other_task = SearchDoc.objects.get(request_id="other").words.split()[-1]  # its 2nd task
    assert 'href="/requests/default/other/"' in viewer.get(f"/search/?q={other_task}").content \
        .decode().split('id="direct"')[1]
    body = page_text(viewer.get("/search/?q=globex"))
    assert "Tenant globex in queue default" in body.replace("<b>", "").replace("</b>", "")
    assert "/requests/?queue=default&tenant=globex" in body
    body = page_text(viewer.get("/search/?q=resize"))
    assert "/requests/?queue=default&handler=resize" in body
    # The handler's word is in every one of its requests' words too.
    assert 'data-request="order-77"' in body and 'data-request="other"' in body


def test_results_page_by_keyset_without_gaps_or_repeats(viewer: Client, console: Queue) -> None:
    rids = docs(120)
    docs(3, word="other", prefix="o")
    seen: list[str] = []
    url = "/search/?q=walrus"
    pages = 0
    while url:
        response = viewer.get(url)
        assert response.status_code == 200
        body = response.content.decode()
        seen += [part.split('"')[0] for part in body.split('data-request="')[1:]]
        pages += 1
        nxt = body.split('Next page »')[0].rsplit('href="', 1)[-1].split('"')[0] \
            if "Next page »" in body else None
        url = htmllib.unescape(f"/search/{nxt}") if nxt else ""
        assert "OFFSET" not in body
    assert pages == 3
    assert sorted(seen) == sorted(rids) and len(seen) == len(set(seen))
    if connection.vendor != POSTGRES:  # newest first; PostgreSQL ranks them (all equal here)
        assert seen == sorted(rids, reverse=True)


def test_more_matches_than_are_ranked_are_listed_newest_first(console: Queue) -> None:
    rids = docs(search.RANK_MAX + 5)
    query = search.parse("walrus")
    first = search.text_matches(query, None)
    assert first.count == search.RANK_MAX + 1 and not first.ranked
    assert [h.request_id for h in first.hits] == sorted(rids, reverse=True)[:50]
    assert first.paged.next is not None and not first.paged.next.startswith("r")


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_postgresql_ranks_an_id_tenant_or_handler_above_a_payload_word(console: Queue) -> None:
    start = timezone.now() - dt.timedelta(days=2)
    docs(3, word="falcon", prefix="p", start=start)  # in payloads only, and newer
    SearchDoc.objects.create(queue="default", request_id="x-1", words="x-1 falcon h",
                             created_at=start - dt.timedelta(days=1))
    SearchDoc.objects.create(queue="default", request_id="x-2", words="x-2 t h",
                             errors="TimeoutError: falcon did not answer",
                             created_at=start - dt.timedelta(days=1))
    got = search.text_matches(search.parse("falcon"), None)
    assert got.ranked and got.count == 5
    assert [h.request_id for h in got.hits][:2] == ["x-1", "x-2"]  # tenant, error, payloads
    # A prefix of a word matches it.
    assert sorted(found(None, "falc")) == ["p-0000", "p-0001", "p-0002", "x-1", "x-2"]


def test_the_scope_can_be_the_current_queue(viewer: Client, console: Queue) -> None:
    docs(2, word="heron", prefix="d")
    docs(2, word="heron", queue="other", prefix="e")
    assert sorted(found(None, "heron")) == ["d-0000", "d-0001", "e-0000", "e-0001"]
    assert sorted(found(None, "heron", "default")) == ["d-0000", "d-0001"]
    body = viewer.get("/search/?q=heron&scope=queue&queue=default").content.decode()
    assert 'data-request="d-0000"' in body and 'data-request="e-0000"' not in body


ODD = ["' OR 1=1 --", "a:* | !b", "\\", "&", "(x", "x\u00a0y", "x—y", "😀", "\U0010ffff",
       "‮evil", "%_%", "a" * 200, " ".join("abcdefgh"), "0", "-", "1-1", f"{2**64}-{2**64}",
       "18446744073709551615-18446744073709551615", "<script>alert(1)</script>", HOSTILE[:190]]


@pytest.mark.parametrize("value", ODD)
def test_odd_characters_give_a_page_never_a_500(viewer: Client, seeded: Seeded,
                                                value: str) -> None:
    docs(2, word="osprey")
    viewer.raise_request_exception = False
    response = viewer.get("/search/", {"q": value})
    assert response.status_code == 200, value
    assert "<script>alert(1)</script>" not in response.content.decode()
    response = viewer.get("/search/", {"q": value, "scope": "queue", "after": "1:1"})
    assert response.status_code == 200, value


@pytest.mark.parametrize(("params", "says"), [
    ({"q": "x" * 201}, "q is longer than 200 characters"),
    ({"q": "a\0b"}, "q cannot hold a NUL character"),
    ({"q": "a b c d e f g h i"}, "at most 8"),
    ({"q": "walrus", "after": "abc"}, "Bad page cursor"),
    ({"q": "walrus", "after": "rNaN:1:1"}, "Bad page cursor"),
    ({"q": "walrus", "after": "r1e999:1:1"}, "Bad page cursor"),
    ({"q": "walrus", "after": "1" * 18 + ":1"}, "Bad page cursor"),
    ({"q": "walrus", "scope": "nowhere"}, "scope must be one of"),
    ({"q": "walrus", "queue": "nosuch"}, "There is no queue named"),
])
def test_bad_input_is_a_400_or_404_with_a_message(viewer: Client, console: Queue,
                                                  params: dict[str, str], says: str) -> None:
    docs(1)
    viewer.raise_request_exception = False
    response = viewer.get("/search/", params)
    assert response.status_code in (400, 404), response.status_code
    assert says in page_text(response)


def test_a_ranked_cursor_on_sqlite_is_a_400_not_a_500(viewer: Client, console: Queue) -> None:
    docs(1)
    response = viewer.get("/search/", {"q": "walrus", "after": "r0.5:1:1"})
    assert response.status_code == (200 if connection.vendor == POSTGRES else 400)


def test_search_needs_the_console_permission(nobody: Client, client: Client,
                                             console: Queue) -> None:
    assert nobody.get("/search/?q=x").status_code == 403
    assert client.get("/search/?q=x")["Location"].startswith("/login/")


def test_whole_words_match_alike_and_the_last_word_as_typed(console: Queue) -> None:
    docs(1, prefix="g", payloads='{"customer": "Globex", "city": "Springfield"}')
    docs(1, prefix="s", payloads='{"customer": "Soylent", "n": 7}')
    for text, rids in (("globex", ["g-0000"]), ("springfield globex", ["g-0000"]),
                       ("glob", ["g-0000"]),  # the last word: a prefix, as typed
                       ("7", ["s-0000"])):
        assert found(None, text) == rids, text
    postgres = connection.vendor == POSTGRES
    # Not the last word: a whole word on PostgreSQL, anywhere on SQLite (a LIKE).
    assert found(None, "glob springfield") == ([] if postgres else ["g-0000"])
    # Too short to be a prefix on PostgreSQL ("gl" is no word of it).
    assert found(None, "gl") == ([] if postgres else ["g-0000"])
    assert search.parse("a b-c dee").tsquery == "'a' & 'b' & 'c' & 'dee':*"


def test_a_request_whose_events_were_trimmed_is_found_by_id_tenant_and_handler(
    queue: Queue, redis_client: redis.Redis
) -> None:
    queue.submit([{"word": "lost"}], request_id="gap-1", handler="crunch", tenant="hooli")
    redis_client.xtrim(queue.keys.events, maxlen=0)  # before any mirror read them
    queue.submit([{"word": "kept"}], request_id="after-1", handler="crunch")
    mirror(queue)  # reconciles the gap from the state indexes
    assert found(queue, "hooli crunch") == ["gap-1"]
    assert found(queue, "lost") == []  # its payload was only on the trimmed event
    assert found(queue, "kept") == ["after-1"]


@pytest.mark.django_db(transaction=True)
def test_the_migration_gives_existing_history_its_search_rows() -> None:
    from django.db.migrations.executor import MigrationExecutor

    before, after = [("core", "0009_schedule_permissions")], [("core", "0011_search")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    try:
        apps = executor.loader.project_state(before).apps
        now = timezone.now()
        apps.get_model("core", "Request").objects.create(
            queue="default", request_id="old-7", state="failed", tenant="umbrella",
            handler="brew", created_at=now, updated_at=now)
        apps.get_model("core", "DeadLetter").objects.create(
            queue="default", entry_id="1-0", request_id="old-7", task_id="5-0",
            error="OSError: vat 9 leaks", payload='{"vat": "nine"}', dead_at=now,
            fingerprint="f" * 40)
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(after)
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
    doc = SearchDoc.objects.get(request_id="old-7")
    assert (doc.words, doc.errors, doc.payloads) == ("old-7 umbrella brew", "OSError: vat 9 leaks",
                                                     '{"vat": "nine"}')
    assert found(None, "umbrella vat leaks nine") == ["old-7"]
