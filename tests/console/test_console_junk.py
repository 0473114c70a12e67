"""Junk input never breaks the console: every bad value is a 400 (or a page with a message),
never a 500, and never the "Redis unavailable" banner unless Redis really cannot answer.

The regression tests of issue 18 (items 2, 3 and 4) first, then the corpus test, which drives
every query parameter and form field of every page and action with the same junk."""

from __future__ import annotations

import contextlib
import html as htmllib
import json
import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import redis
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from core.console import forms
from core.console import schedules as schedule_forms
from core.models import AuditEntry, BulkAction, DeadLetter
from core.pipeline import jobs
from core.pipeline.check import make_spec
from core.pipeline.spec import SpecError
from core.queue import Queue
from core.views.actions import SPECS
from core.views.alerts import CHANNEL_ACTIONS, CHANNEL_FIELDS, RULE_ACTIONS, RULE_FIELDS
from core.views.datajobs import OPTION_FIELDS
from tests.console.test_console_datajobs import filled
from tests.console_support import World
from tests.console_support import field as field_of

pytestmark = pytest.mark.django_db

BANNER = "<b>Redis unavailable.</b>"  # the outage banner (base.html's hidden one aside)


def page_of(response: Any) -> str:
    return htmllib.unescape(response.content.decode())


def refused(response: Any, says: str) -> None:
    """A 400 page naming the problem: no traceback, no outage banner."""
    body = page_of(response)
    assert response.status_code == 400, body[-800:]
    assert says in body, body[-800:]
    assert BANNER not in body and "Traceback" not in body


# -- item 2: query parameters that still answered 500 -------------------------------------


def test_a_doubly_negative_priority_is_refused(admin: Client, world: World) -> None:
    refused(admin.get("/requests/?priority=--5"), "priority must be a whole number from 0 to 99")
    refused(admin.get("/requests/?priority=-"), "priority must be a whole number")
    refused(admin.get("/requests/?priority=%EF%BC%95"), "priority must be")  # fullwidth 5


def test_a_refused_parameter_is_one_line_in_the_log_and_a_server_error_keeps_its_traceback(
    admin: Client, world: World, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="django.request"):
        refused(admin.get("/requests/?priority=--5"), "priority must be a whole number")
        try:
            raise RuntimeError("a bug")
        except RuntimeError:
            logging.getLogger("django.request").error(
                "Internal Server Error: /x/", exc_info=True, extra={"status_code": 500})
    bad, broken = [r for r in caplog.records if r.name == "django.request"]
    assert bad.levelname == "WARNING" and bad.status_code == 400  # type: ignore[attr-defined]
    line = bad.getMessage()
    assert "priority must be a whole number" in line and "/requests/" in line
    # (on the records: the formatter of the run's log, text or JSON, is another test's choice)
    assert bad.exc_info is None and bad.exc_text is None
    assert broken.exc_info is not None and broken.exc_info[0] is RuntimeError


OUT_OF_RANGE = ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59"]


@pytest.mark.parametrize("value", OUT_OF_RANGE)
@pytest.mark.parametrize("page", ["/requests/", "/dead/", "/audit/",
                                  "/dead/default/{fingerprint}/"])
@pytest.mark.parametrize("name", ["since", "until"])
def test_a_time_that_leaves_the_calendar_in_utc_is_refused(
    admin: Client, world: World, page: str, name: str, value: str
) -> None:
    url = page.format(fingerprint=world.fingerprint)
    refused(admin.get(url, {name: value}), f"{name} must be a date or time")


@pytest.mark.parametrize("value", OUT_OF_RANGE)
@pytest.mark.parametrize("action", ["requeue", "delete", "cancel"])
def test_a_bulk_preview_refuses_a_time_that_leaves_the_calendar(
    admin: Client, world: World, action: str, value: str
) -> None:
    for name in ("since", "until"):
        response = admin.post("/actions/preview/", {"queue": "default", "action": action,
                                                    name: value})
        refused(response, f"{name} must be a date or time")
    assert not BulkAction.objects.exists()


def test_an_id_search_ending_in_the_last_code_point_is_a_page(
    admin: Client, world: World
) -> None:
    # U+10FFFF has no successor; U+D7FF's is no character (a lone surrogate) but U+E000.
    for find in ("%F4%8F%BF%BF", "run%F4%8F%BF%BF", "%F0%9F%98%80", "run%ED%9F%BF"):
        response = admin.get(f"/requests/?id={find}")
        assert response.status_code == 200, page_of(response)[-800:]
    # The prefix search itself still finds what it should.
    assert world.running in page_of(admin.get("/requests/?id=run"))


def test_a_nul_in_a_text_filter_is_refused(admin: Client, world: World) -> None:
    # PostgreSQL cannot hold a NUL in a string (its driver raises): no row has one.
    for url in ("/requests/?tenant=a%00", "/requests/?id=run%00", "/dead/?handler=%00",
                "/audit/?user=%00"):
        refused(admin.get(url), "NUL")


def test_an_action_refusing_a_nul_audits_it_as_u_fffd(admin: Client, world: World) -> None:
    # The refusal's audit entry held the NUL, which PostgreSQL refused: a 500 on the Limits
    # page (a limit named "\x00"), found by the junk corpus on PostgreSQL.
    response = admin.post("/limits/change/", {"queue": "default", "name": "a\x00",
                                              "on": "handler", "value": "echo", "rate": "1/1s",
                                              "action": "set"})
    assert response.status_code == 400, page_of(response)[-800:]
    entry = AuditEntry.objects.get(action="limit-set")
    assert "a\ufffd" in entry.target and "\x00" not in entry.target + entry.error


def test_an_interval_of_digits_int_cannot_read_is_refused(admin: Client, world: World) -> None:
    # "²".isdigit() is true and int() refused it: a schedule's save and preview were a 500.
    form = SCHEDULE_FORM | {"timing": "every", "every": "\u00b2"}
    refused(admin.post("/schedules/save/", form), "bad interval")
    preview = admin.get("/schedules/preview/", form)  # the form's live preview: its message
    assert preview.status_code == 200 and "bad interval" in page_of(preview)


# -- item 2: a data job's SQL over 64 KiB, an output path over 255 characters ---------------


def _nothing_queued(q: Queue, job_id: str) -> None:
    assert q.redis.keys(f"{q.keys.base}*{job_id}*") == []
    assert q.redis.zcard(f"{q.keys.base}datajobs") == 0


BIG_SQL = "SELECT * FROM chunk WHERE carrier <> '" + "x" * 70_000 + "'"


def test_a_form_with_sql_over_64_kib_is_refused_with_nothing_written(
    console: Queue, admin: Client, tmp_path: Path
) -> None:
    response = admin.post("/jobs/submit/", filled(tmp_path, sql=BIG_SQL, request_id="big-1"))
    refused(response, "KiB")
    _nothing_queued(console, "big-1")
    # The form is refused before anything is done: no job, so nothing to audit as done.
    assert not AuditEntry.objects.filter(action="datajob", acted__gt=0).exists()


def test_the_cli_refuses_sql_over_64_kib_with_nothing_written(
    console: Queue, tmp_path: Path
) -> None:
    form = filled(tmp_path)
    with pytest.raises(CommandError, match="KiB"):
        call_command("datajob", "submit", "--input", form["input"], "--format", "parquet",
                     "--output", form["output"], "--sql", BIG_SQL, "--request-id", "big-2")
    _nothing_queued(console, "big-2")


def test_a_job_whose_tasks_the_queue_refuses_is_refused_with_nothing_written(
    console: Queue, tmp_path: Path
) -> None:
    # The spec passes every check of its own, but a task cannot carry it: a lone surrogate
    # (bytes that are not UTF-8 on a command line) is no JSON, and a queue may have a
    # smaller payload limit. Either was found only after the job's request was opened.
    form = filled(tmp_path)
    with pytest.raises(CommandError, match="cannot carry"):
        call_command("datajob", "submit", "--input", form["input"], "--format", "parquet",
                     "--output", form["output"], "--request-id", "odd-1",
                     "--sql", "SELECT * FROM chunk WHERE carrier <> '\udcff'")
    _nothing_queued(console, "odd-1")
    small = Queue(console.redis, "default", prefix=console.keys.prefix, max_payload_bytes=300)
    spec = make_spec(job_id="small-1", input=form["input"], format="parquet",
                     output=form["output"], sql="SELECT * FROM chunk")
    with pytest.raises(SpecError, match="cannot carry"):
        jobs.submit(small, spec)
    _nothing_queued(console, "small-1")


@pytest.mark.parametrize("output", [
    "{tmp}/" + "o" * 300,  # one name over 255 bytes
    "{tmp}/" + "/".join(["d" * 200] * 30),  # a path over the system's PATH_MAX
    "{tmp}/" + "\U0001f600" * 70,  # 70 characters, 280 bytes
])
def test_an_output_path_too_long_for_the_system_is_refused(
    console: Queue, admin: Client, tmp_path: Path, output: str
) -> None:
    form = filled(tmp_path, output=output, request_id="long-1")
    response = admin.post("/jobs/submit/", form)
    assert response.status_code == 400, page_of(response)[-800:]
    assert "--output" in page_of(response) or "output" in page_of(response)
    _nothing_queued(console, "long-1")
    with pytest.raises(CommandError):
        call_command("datajob", "submit", "--input", form["input"], "--format", "parquet",
                     "--output", form["output"], "--sql", form["sql"], "--request-id", "long-1")
    _nothing_queued(console, "long-1")


# -- item 3: stream ids Redis refuses are bad input, not an outage ------------------------

HUGE_ID = "99999999999999999999-0"  # 20 digits: past 2**64 - 1


@pytest.mark.parametrize("after", [HUGE_ID, "0-99999999999999999999", "18446744073709551616-0"])
def test_a_stream_id_past_64_bits_is_a_bad_cursor(
    admin: Client, world: World, after: str
) -> None:
    response = admin.get(f"/requests/default/{world.running}/", {"after": after})
    refused(response, "Bad page cursor")


def test_the_largest_stream_id_redis_takes_is_a_page(admin: Client, world: World) -> None:
    top = f"{2**64 - 1}-{2**64 - 1}"
    response = admin.get(f"/requests/default/{world.running}/", {"after": top})
    assert response.status_code == 200, page_of(response)[-800:]


@pytest.mark.parametrize("action", ["requeue", "delete"])
def test_an_action_naming_a_stream_id_past_64_bits_is_refused(
    admin: Client, world: World, action: str
) -> None:
    html = admin.get("/dead/").content.decode()
    data = {"queue": "default", "nonce": field_of(html, "nonce"), "confirmed": "1"}
    refused(admin.post(f"/actions/{action}/", {**data, "dead": [world.dead_ids[0], HUGE_ID]}),
            "Bad dead letter id")
    refused(admin.post(f"/actions/{action}/", {**data, "one": HUGE_ID}), "Bad dead letter id")
    assert DeadLetter.objects.filter(request_id=world.failed).count() == 3
    assert world.q.redis.xlen(world.q.keys.dead) == 3


def test_a_pending_entry_naming_a_stream_id_past_64_bits_is_refused(
    admin: Client, world: World
) -> None:
    html = admin.get("/pending/").content.decode()
    data = {"queue": "default", "nonce": field_of(html, "nonce"),
            "entry": f"{world.running}/{HUGE_ID}/w-live/0", "to": "w-live"}
    for action in ("release", "claim"):
        refused(admin.post(f"/actions/{action}/", data), "Bad pending entry")


def test_redis_refusing_a_command_is_a_message_not_an_outage(
    admin: Client, world: World
) -> None:
    # A request whose task stream is a string: every read of it is a WRONGTYPE reply. Redis
    # answered, so the page must not say it cannot be reached.
    q = world.q
    q.redis.delete(q.keys.tasks(world.running))
    q.redis.set(q.keys.tasks(world.running), "not a stream")
    response = admin.get(f"/requests/default/{world.running}/")
    body = page_of(response)
    assert response.status_code < 500, body[-800:]
    assert BANNER not in body and "cannot be reached" not in body
    assert "WRONGTYPE" in body
    # A real outage still shows its banner: the overview of an unreachable Redis.


def test_redis_busy_is_still_shown_as_an_outage(
    admin: Client, world: World, redis_server: Any, wait_until: Any
) -> None:
    # BUSY (a script past its time limit) is an error reply too, but it says Redis serves
    # nobody for now: the outage banner, as before. A real one: a script that spins until
    # it is killed, on the suite's own server.
    q = world.q
    spinner = redis.Redis.from_url(redis_server.url, decode_responses=True)
    threshold = q.redis.config_get("busy-reply-threshold")["busy-reply-threshold"]
    q.redis.config_set("busy-reply-threshold", 20)
    spin = "while true do redis.call('TIME') end"
    thread = threading.Thread(target=_run_quietly, args=(spinner, spin), daemon=True)
    thread.start()
    probe = redis.Redis.from_url(redis_server.url, decode_responses=True)
    try:
        wait_until(lambda: _busy(probe), what="Redis to answer BUSY")
        response = admin.get("/requests/")
        assert response.status_code == 503
        assert BANNER in page_of(response) and "busy" in page_of(response)
    finally:
        wait_until(lambda: _killed(probe), what="the script to be killed")
        thread.join(10)
        probe.config_set("busy-reply-threshold", threshold)
        probe.close()
        spinner.close()


def _run_quietly(client: redis.Redis, script: str) -> None:
    with contextlib.suppress(redis.ResponseError):  # "killed by user"
        client.eval(script, 0)


def _busy(client: redis.Redis) -> bool:
    try:
        client.ping()
    except redis.ResponseError as exc:
        return str(exc).startswith("BUSY")
    return False


def _killed(client: redis.Redis) -> bool:
    try:
        client.script_kill()
    except redis.ResponseError as exc:
        return "NOTBUSY" in str(exc)
    return False


# -- item 4: whatever a heartbeat holds, the workers page renders ---------------------------


ODD_TASKS: list[Any] = [
    {"queue": "default", "request": "a/b", "task": "1-0"},  # a slash: no URL can hold it
    {"queue": "", "request": "run-1", "task": "1-0"},  # names no queue
    {"request": "run-1"},  # no queue, no task
    {"queue": "default", "request": "", "task": ""},
    {"queue": "no such queue!", "request": "x y", "task": "<b>bold</b>", "since": "soon"},
    {"queue": ["default"], "request": {"id": 1}, "task": None, "since": 1e300},
    "just a string", 42, None,
]


def test_a_malformed_heartbeat_shows_its_odd_tasks_as_text(
    admin: Client, world: World
) -> None:
    q = world.q
    q.heartbeat("w-odd", {"host": "h", "pid": 3, "dead_after_ms": 600_000,
                          "queues": ["default"], "tasks": ODD_TASKS})
    response = admin.get("/workers/")
    body = response.content.decode()
    assert response.status_code == 200, body[-1500:]
    row = body.split('data-worker="w-odd"', 1)[1].split("</tr>", 1)[0]
    assert "a/b" in row and "&lt;b&gt;bold&lt;/b&gt;" in row and "<b>bold" not in row
    assert 'href="/requests/default/a/b/' not in row
    # The well-formed workers still link their tasks.
    assert f'href="/requests/default/{world.running}/"' in body


@pytest.mark.parametrize("info", [
    {"tasks": "run-1/1-0"}, {"tasks": {"request": "run-1"}}, {"tasks": 7},
    {"started": 10**30, "dead_after_ms": "forever", "processed": [1], "slots": None},
    {"started": float("inf"), "dead_after_ms": 10**400, "failed": float("nan")},
    {"started": -5, "dead_after_ms": -1, "queues": {"a": 1}, "host": "h" * 100_000},
    [1, 2, 3], "a string", 12, None,
])
def test_heartbeat_info_of_any_shape_renders(
    admin: Client, world: World, info: Any
) -> None:
    # As another client (or an older worker) could write it: Python's json, which also
    # writes Infinity and integers past 64 bits.
    q = world.q
    q.heartbeat("w-odd", {})
    for worker in ("w-odd", "w-live"):  # w-live holds a lease: the pending page reads it too
        q.redis.hset(q.keys.worker(worker), "info", json.dumps(info))
    response = admin.get("/workers/")
    assert response.status_code == 200, response.content.decode()[-1500:]
    assert 'data-worker="w-odd"' in response.content.decode()
    for page in ("/pending/", f"/requests/default/{world.running}/", "/"):
        response = admin.get(page)
        assert response.status_code == 200, (page, response.content.decode()[-1500:])


def test_heartbeat_info_that_is_not_json_renders(admin: Client, world: World) -> None:
    q = world.q
    q.heartbeat("w-odd", {"host": "h"})
    q.redis.hset(q.keys.worker("w-odd"), "info", "{not json <b>")
    response = admin.get("/workers/")
    body = response.content.decode()
    assert response.status_code == 200, body[-1500:]
    assert 'data-worker="w-odd"' in body and "<b>" not in body.split('data-worker="w-odd"')[1]


def test_release_of_a_worker_with_odd_tasks_releases_the_good_ones(
    admin: Client, world: World
) -> None:
    # w-stale holds a real task; its heartbeat also lists an entry no id can be made of.
    q = world.q
    now = q.now_ms()
    q.heartbeat("w-stale", {"host": "h", "pid": 2, "dead_after_ms": 10_000,
                            "queues": ["default"],
                            "tasks": [{"queue": "default", "request": world.running,
                                       "task": world.stale_task, "since": now},
                                      {"queue": "default", "request": "a/b", "task": "x"}]})
    q.redis.zadd(q.keys.workers, {"w-stale": now - 8_000})
    html = admin.get("/workers/").content.decode()
    assert "Release its 1 task" in html
    held = [v for k, v in _hidden(html) if k == "held:w-stale"]
    assert held == [f"{world.running}/{world.stale_task}"]
    response = admin.post("/actions/release-worker/", {
        "queue": "default", "nonce": field_of(html, "nonce"), "worker": "w-stale",
        "held:w-stale": held}, follow=True)
    assert response.status_code == 200
    assert "released" in page_of(response).lower()


def _hidden(html: str) -> list[tuple[str, str]]:
    import re

    return [(htmllib.unescape(k), htmllib.unescape(v)) for k, v in
            re.findall(r'<input type="hidden" name="([^"]*)" value="([^"]*)"', html)]


def test_a_poll_of_a_page_without_a_live_part_is_refused(admin: Client, world: World) -> None:
    # Tokens and Retention never poll; htmx's headers asking for their live part were a 500
    # (no such partial). A page that polls still answers its fragment.
    for url in ("/tokens/", "/retention/"):
        refused(admin.get(url, headers={"HX-Request": "true", "HX-Target": "live"}),
                "no live part")
        assert admin.get(url).status_code == 200
    polled = admin.get("/limits/", headers={"HX-Request": "true", "HX-Target": "live"})
    assert polled.status_code == 200 and "<html" not in polled.content.decode()


# -- the corpus: every parameter and field of every page and action, with the same junk ----

JUNK: list[str] = [
    "", " ", "-1", "--5", "0", "99999999999999999999", "-99999999999999999999", "1e309",
    "NaN", "abc", "\x00", "a/b", "../../etc/passwd", "<script>alert(1)</script>", "' OR 1=1 --",
    "9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59", "10000-01-01", "2026-02-30",
    "\U0010ffff", "\U0001f600\u0301\u202e", HUGE_ID, f"{2**64 - 1}-{2**64 - 1}", "1:2",
    "x" * 100_000,
]
# Percent-encoded as sent, not as a string: bytes that are not UTF-8, an encoded surrogate.
RAW_JUNK = ["%FF%FE", "%ED%A0%80", "%C0%AF"]


def _q(value: str) -> str:
    return quote(value, safe="")


def _encode(pairs: list[tuple[str, str]], raw: dict[str, str] | None = None) -> str:
    """A query string or form body: `pairs` percent-encoded, `raw` as given."""
    parts = [f"{_q(k)}={_q(v)}" for k, v in pairs]
    parts += [f"{_q(k)}={v}" for k, v in (raw or {}).items()]
    return "&".join(parts)


@dataclass
class Junk:
    """Sends junk and keeps what went wrong: a 5xx, or the outage banner."""

    client: Client
    sent: int = 0
    wrong: list[str] = field(default_factory=list)

    def check(self, what: str, response: Any) -> None:
        self.sent += 1
        body = response.content.decode(errors="replace")
        if response.status_code >= 500 or BANNER in body:
            self.wrong.append(f"{response.status_code} {what[:150]}")

    def get(self, path: str, query: str = "", **headers: str) -> None:
        url = f"{path}?{query}" if query else path
        self.check(f"GET {url}", self.client.get(url, headers=headers))

    def post(self, path: str, body: str) -> None:
        self.check(f"POST {path} {body}", self.client.post(
            path, body, content_type="application/x-www-form-urlencoded"))

    def fields(self, method: str, path: str, names: list[str],
               base: dict[str, str] | None = None, values: list[str] = JUNK) -> None:
        """Each of `names`, one at a time, set to every junk value (on top of `base`), then
        given twice (junk first, a sane value last, and the other way round)."""
        send = self.get if method == "GET" else self.post
        base = base or {}
        for name in names:
            rest = [(k, v) for k, v in base.items() if k != name]
            for value in values:
                send(path, _encode([*rest, (name, value)]))
            for value in RAW_JUNK:
                send(path, _encode(rest, {name: value}))
            sane = base.get(name, "1")
            for value in ("--5", "x" * 100_000, HUGE_ID):
                send(path, _encode([*rest, (name, value), (name, sane)]))
                send(path, _encode([*rest, (name, sane), (name, value)]))


SCHEDULE_FIELDS = list(schedule_forms.FIELDS)
SCHEDULE_FORM = {"name": "junk-sched", "kind": "tasks", "handler": "echo", "tasks": '{"n": 1}',
                 "timing": "cron", "cron": "0 * * * *", "tz": "Europe/Berlin",
                 "missed": "latest", "missed_max": "100", "overlap": "skip"}


# Every page: the URL pattern's name, its path with sane arguments, and the query parameters
# its view reads (every one of them; test_the_table_covers_... checks that).
PAGES: dict[str, tuple[str, list[str]]] = {
    "overview": ("/", ["queue"]),
    "requests": ("/requests/", ["queue", "state", "tenant", "handler", "priority", "since",
                                "until", "sort", "id", "after"]),
    "request": ("/requests/default/{running}/", ["after", "results"]),
    "result": ("/requests/default/res-1/results/{result_task}/", ["queue", "format"]),
    "pending": ("/pending/", ["queue", "after"]),
    "dead": ("/dead/", ["queue", "handler", "tenant", "request", "since", "until"]),
    "dead_group": ("/dead/default/{fingerprint}/", ["handler", "tenant", "request", "since",
                                                    "until", "after"]),
    "workers": ("/workers/", ["queue", "after"]),
    "handlers": ("/handlers/", ["queue", "range", "sort", "handler"]),
    "audit": ("/audit/", ["queue", "user", "action", "since", "until", "after"]),
    "datajobs": ("/jobs/", ["queue", "after"]),
    "datajob": ("/jobs/default/dj-junk/", ["queue"]),
    "bulk": ("/actions/bulk/{bulk}/", ["queue"]),
    "healthz": ("/healthz", []),
    "metrics": ("/metrics", []),
    "login": ("/login/", ["next"]),
    "scheduled": ("/scheduled/", ["queue", "after"]),
    "schedules": ("/schedules/", ["queue"]),
    "schedule_edit": ("/schedules/default/junk-sched/edit/", ["queue"]),
    "schedule_preview": ("/schedules/preview/", ["queue", *SCHEDULE_FIELDS]),
    "search": ("/search/", ["queue", "q", "scope", "after"]),
    "limits": ("/limits/", ["queue"]),
    "alerts": ("/alerts/", ["queue"]),
    "retention": ("/retention/", ["queue"]),
    "tokens": ("/tokens/", ["queue"]),
}
# Every form: the pattern's name, its path, a sane form and the fields to fill with junk.
COMMON = ["queue", "nonce", "next", "confirmed"]
ACTIONS: dict[str, tuple[dict[str, str], list[str]]] = {
    "requeue": ({"dead": "{dead}"}, ["dead", "one", *COMMON]),
    "delete": ({"dead": "{dead}", "confirmed": "1"}, ["dead", "one"]),
    "requeue-request": ({"request": "{failed}"}, ["request"]),
    "cancel": ({"request": "nosuch-1"}, ["request", "one", *COMMON]),
    "release": ({"entry": "{running}/{stale_task}/w-stale/0"}, ["entry"]),
    "claim": ({"entry": "{running}/{stale_task}/w-stale/0", "to": "w-live"}, ["entry", "to"]),
    "release-worker": ({"worker": "w-stale", "held:w-stale": "{running}/{stale_task}"},
                       ["worker", "held:w-stale"]),
    "reclaim": ({"worker": "w-gone"}, ["worker"]),
    "pause": ({}, ["queue", "next"]),
    "resume": ({}, ["queue", "next"]),
    "run-now": ({"request": "nosuch-1"}, ["request", "one", *COMMON]),
    "worker-quiet": ({"worker": "w-live"}, ["worker"]),
    "worker-resume": ({"worker": "w-live"}, ["worker"]),
    "worker-stop": ({"worker": "w-live", "confirmed": "1"}, ["worker"]),
}
PREVIEW_FIELDS = ["preview", "action", "queue", "handler", "tenant", "request", "fingerprint",
                  "since", "until", "state", "priority", "id"]
CONFIRM_FIELDS = ["typed_count", "rate"]
SUBMIT_FIELDS = [*dict.fromkeys(OPTION_FIELDS.values()), "overwrite", "incremental", "content_hash"]
LOGIN_FIELDS = ["username", "password", "next"]
FORMS = {"act", "bulk_preview", "bulk_confirm", "bulk_stop", "datajob_submit", "login",
         "logout", "schedule_save", "schedule_act", "limits_change", "alert_rule_add",
         "alert_rule_act", "alert_channel_add", "alert_channel_act", "retention_change",
         "token_create", "token_revoke"}
LIMIT_FIELDS = ["queue", "name", "on", "value", "rate", "concurrency", "action"]
LIMIT_FORM = {"queue": "default", "name": "junk-limit", "on": "handler", "value": "echo",
              "rate": "100/1s", "concurrency": "4", "action": "set"}
TOKEN_FIELDS = ["queue", "name", "scope", "expires", "user"]
TOKEN_FORM = {"queue": "default", "name": "junk-token", "scope": "read", "expires": "7d",
              "user": ""}
SCHEDULE_ACTIONS = ["run-now", "pause", "resume", "delete"]
# The Alerts page's forms, with the fields to fill with junk on each: a rule with every field
# (a count), then each other kind of threshold (a factor, a ratio, a duration) and the job's
# scope; a channel of each kind (the webhook's port 9 refuses at once: a test fails fast).
RULE_FORM_FIELDS = [*RULE_FIELDS, "channels"]
RULE_FORMS: list[tuple[dict[str, str], list[str]]] = [
    ({"when": "dead-rate", "queue": "default", "handler": "echo", "tenant": "acme",
      "threshold": "5", "for_": "1m", "quiet": "1h", "max_per_hour": "20"}, RULE_FORM_FIELDS),
    ({"when": "datajob-slow", "tenant": "acme", "job": "dj-1", "threshold": "3x"},
     ["job", "threshold"]),
    ({"when": "redis-memory", "threshold": "90%"}, ["threshold"]),
    ({"when": "waiting-age", "queue": "default", "threshold": "10m"}, ["threshold"]),
]
CHANNEL_FORMS: list[tuple[dict[str, str], list[str]]] = [
    ({"kind": "webhook", "target": "http://127.0.0.1:9/x", "secret": "s" * 20,
      "max_per_minute": "5"}, list(CHANNEL_FIELDS)),
    ({"kind": "email", "target": "ops@example.org"}, ["target"]),
    ({"kind": "slack", "target": "https://hooks.example.org/x"}, ["target", "secret"]),
]
RETENTION_FIELDS = ["queue", "kind", "duration", "scope", "action"]
RETENTION_FORM = {"queue": "default", "kind": "requests", "duration": "30d", "scope": "queue",
                  "action": "set"}
# More junk for the newer forms' text: line breaks and other controls, digits int() cannot
# read ("\u00b2".isdigit() is true), durations and numbers past every limit.
TEXT_JUNK = [*JUNK, "a\r\nSet-Cookie: x=1", "\t", "\x7f", "\u2028", "\u00b2", "1\u00b2m",
             "\u0661\u0662m", "\uff15", "9" * 600, "9" * 30 + "d", "never", "forever", "-5m",
             "1.5h", "0s"]


def _console_patterns() -> dict[str, str]:
    """The console's URL patterns by name (the admin's are driven on their own)."""
    out = {}
    for p in get_resolver().url_patterns:
        if isinstance(p, URLResolver) and p.namespace == "core":
            out |= {q.name: str(q.pattern) for q in p.url_patterns if isinstance(q, URLPattern)}
    return out


def test_the_tables_cover_every_page_parameter_and_form_field() -> None:
    # A page or a parameter added without junk to go with it fails here.
    assert set(_console_patterns()) == set(PAGES) | FORMS
    root = Path(__file__).resolve().parents[2]
    read: set[tuple[str, str]] = set()
    for module in sorted((root / "core" / "views").glob("*.py")):
        source = module.read_text()
        for name in re.findall(r'params\.\w+\(q, "(\w+)"', source):
            read.add((module.stem, name))
    fuzzed = {name for _, names in PAGES.values() for name in names}
    assert {name for _, name in read} <= fuzzed
    posted = set(COMMON) | set(PREVIEW_FIELDS) | set(CONFIRM_FIELDS) | set(SUBMIT_FIELDS) \
        | set(LOGIN_FIELDS) | {f for _, names in ACTIONS.values() for f in names} \
        | {"worker", "held:w-stale", "held:{{ w.name }}"} | set(forms.DEAD_FILTERS) \
        | set(forms.REQUEST_FILTERS) | set(SCHEDULE_FIELDS) | {"original", "version", "confirm"} \
        | set(RULE_FORM_FIELDS) | set(CHANNEL_FIELDS) | set(RETENTION_FIELDS) \
        | set(LIMIT_FIELDS) | set(TOKEN_FIELDS)
    in_templates: set[str] = set()
    for template in (root / "templates").rglob("*.html"):
        in_templates |= set(re.findall(r'<(?:input|select|textarea|button)[^>]*\bname="([^"]+)"',
                                       template.read_text()))
    in_templates -= {"{{ name }}"}  # the list pages' filters again (forms.*_FILTERS)
    assert in_templates - {"held:{{ w.name }}"} <= posted | fuzzed  # filter forms are GETs
    assert set(SPECS) == set(ACTIONS)


@dataclass
class Named:
    """What the corpus's paths and forms name: the world's ids, the bulk action previewed, the
    data job submitted."""

    ids: dict[str, str]
    form: dict[str, str]
    bulk_url: str


def _junk_pages(junk: Junk, n: Named) -> None:
    for path, params in PAGES.values():
        path = path.format(**n.ids)
        junk.fields("GET", path, params)
        junk.get(path, "page=abc", HX_Request="true", HX_Target="live")
        junk.get(path, _encode([(p, "--5") for p in params]), HX_Request="true")


def _junk_paths(junk: Junk, n: Named) -> None:
    """The paths' own arguments."""
    for value in JUNK[1:]:
        v = _q(value)
        for path in (f"/requests/{v}/x/", f"/requests/default/{v}/", f"/dead/default/{v}/",
                     f"/dead/{v}/{'a' * 40}/", f"/jobs/default/{v}/", f"/jobs/{v}/x/",
                     f"/actions/bulk/{v}/", f"/actions/{v}/",
                     f"/requests/default/res-1/results/{v}/", f"/requests/{v}/res-1/results/x/"):
            junk.get(path)
    for num in ("0", "99999999999999999999", str(2**63), str(2**64)):
        junk.get(f"/actions/bulk/{num}/")
        junk.post(f"/actions/bulk/{num}/confirm/", "")
        junk.post(f"/actions/bulk/{num}/stop/", "")


def _junk_actions(junk: Junk, n: Named) -> None:
    for action, (sane, fields) in ACTIONS.items():
        base = {"queue": "default", **{k: v.format(**n.ids) for k, v in sane.items()}}
        junk.fields("POST", f"/actions/{action}/", fields, base)
    junk.fields("POST", "/actions/preview/", PREVIEW_FIELDS,
                {"queue": "default", "action": "cancel"})
    junk.fields("POST", "/actions/preview/", PREVIEW_FIELDS[1:],
                {"queue": "default", "action": "delete"})
    junk.fields("POST", f"{n.bulk_url}confirm/", CONFIRM_FIELDS)
    junk.post(f"{n.bulk_url}stop/", "")


def _junk_forms(junk: Junk, n: Named) -> None:
    junk.fields("POST", "/jobs/submit/", SUBMIT_FIELDS, n.form)
    junk.fields("GET", "/jobs/submit/", ["queue"])
    junk.fields("POST", f"/jobs/submit/?queue={_q('x' * 300)}", ["sql"], n.form)
    junk.fields("POST", "/login/", LOGIN_FIELDS)
    junk.fields("POST", "/logout/", ["next"])  # logs out, last: the rest needed the login


def _junk_schedules(junk: Junk, n: Named) -> None:
    """The form (saved once as it is, so that the actions find a schedule), the actions, and
    their path arguments."""
    assert junk.client.post("/schedules/save/", SCHEDULE_FORM).status_code == 302
    junk.fields("POST", "/schedules/save/",
                [*SCHEDULE_FIELDS, "original", "version"], SCHEDULE_FORM | {"name": "junk-2"})
    for act in SCHEDULE_ACTIONS:
        junk.fields("POST", f"/schedules/default/junk-sched/{act}/", ["confirm", "queue"])
    for value in JUNK[1:]:
        v = _q(value)
        for path in (f"/schedules/{v}/junk-sched/edit/", f"/schedules/default/{v}/edit/",
                     f"/schedules/default/{v}/pause/", f"/schedules/default/junk-sched/{v}/"):
            junk.get(path)
            junk.post(path, "")


def _junk_limits(junk: Junk, n: Named) -> None:
    """The Limits page's form: set (saved once as it is, so that a change and a remove find
    it), then every field with junk, set and remove."""
    assert junk.client.post("/limits/change/", LIMIT_FORM).status_code == 302
    junk.fields("POST", "/limits/change/", LIMIT_FIELDS, LIMIT_FORM)
    junk.fields("POST", "/limits/change/", LIMIT_FIELDS, LIMIT_FORM | {"action": "remove"})


def _junk_tokens(junk: Junk, n: Named) -> None:
    """The API tokens page's forms: a create as it is (the token shown on its answer), then
    every field with junk; a revoke of a junk name and of the one made."""
    assert junk.client.post("/tokens/create/", TOKEN_FORM).status_code == 200
    junk.fields("POST", "/tokens/create/", TOKEN_FIELDS, TOKEN_FORM | {"name": "junk-2"},
                TEXT_JUNK)
    for name in ["%00", "x" * 300, "..", "junk-token"]:
        junk.post(f"/tokens/{name}/revoke/", "queue=default")
    junk.fields("POST", "/tokens/junk-token/revoke/", ["queue"])
    for value in JUNK[1:]:
        junk.get(f"/tokens/{_q(value)}/revoke/")
        junk.post(f"/tokens/{_q(value)}/revoke/", "queue=default")


def _post_with_queue(junk: Junk, path: str, body: str = "") -> None:
    """`path`'s ?queue= (where the Alerts page's actions return to) with junk."""
    for value in JUNK:
        junk.post(f"{path}?queue={_q(value)}", body)
    for value in RAW_JUNK:
        junk.post(f"{path}?queue={value}", body)


def _alerting(junk: Junk) -> dict[str, str]:
    """A webhook channel and an email one, and a rule sending to the first, saved as they are
    (so that the actions find them); the rule's form."""
    client = junk.client
    [(hook, _), (mail, _), _] = CHANNEL_FORMS
    assert client.post("/alerts/channels/add/", {"name": "junk-chan", **hook}).status_code == 302
    assert client.post("/alerts/channels/add/", {"name": "junk-mail", **mail}).status_code == 302
    rule = {"name": "junk-rule", "channels": "junk-chan", **RULE_FORMS[0][0]}
    assert client.post("/alerts/rules/add/", rule).status_code == 302
    return rule


def _junk_alert_rules(junk: Junk, n: Named) -> None:
    """The Alerts page's rule form: every field with junk, for each kind of threshold."""
    rule = _alerting(junk)
    for i, (form, names) in enumerate(RULE_FORMS):
        for name in names:  # a rule's name each: the sane form is added once, then exists
            base = {"name": f"r{i}-{name}", "channels": "junk-chan", **form}
            junk.fields("POST", "/alerts/rules/add/", [name], base, TEXT_JUNK)
    junk.post("/alerts/rules/add/", _encode([*rule.items(), ("channels", "junk-mail"),
                                             *[("channels", v) for v in JUNK]]))
    _post_with_queue(junk, "/alerts/rules/add/", _encode(list(rule.items())))


def _junk_alert_channels(junk: Junk, n: Named) -> None:
    """The Alerts page's channel form (every field with junk, for each kind), the rules' and
    the channels' actions, and their path arguments."""
    _alerting(junk)
    for i, (form, names) in enumerate(CHANNEL_FORMS):
        for name in names:
            junk.fields("POST", "/alerts/channels/add/", [name],
                        {"name": f"c{i}-{name}", **form}, TEXT_JUNK)
    hook = CHANNEL_FORMS[0][0]
    _post_with_queue(junk, "/alerts/channels/add/", _encode([("name", "junk-q"), *hook.items()]))
    for act in RULE_ACTIONS:
        junk.fields("POST", f"/alerts/rules/junk-rule/{act}/", ["confirm"])
        _post_with_queue(junk, f"/alerts/rules/junk-rule/{act}/")
    for act in CHANNEL_ACTIONS:
        junk.fields("POST", f"/alerts/channels/junk-chan/{act}/", ["confirm"])
        _post_with_queue(junk, f"/alerts/channels/junk-chan/{act}/")
    junk.post("/alerts/channels/junk-mail/test/", "")
    _junk_alert_paths(junk)


def _junk_alert_paths(junk: Junk) -> None:
    """A rule's and a channel's name and action in the path with junk; then both removed for
    good (the channel once no rule sends to it) and named again."""
    for value in JUNK[1:]:
        v = _q(value)
        for path in (f"/alerts/rules/{v}/enable/", f"/alerts/rules/{v}/remove/",
                     f"/alerts/rules/junk-rule/{v}/", f"/alerts/channels/{v}/test/",
                     f"/alerts/channels/{v}/remove/", f"/alerts/channels/junk-chan/{v}/"):
            junk.get(path)
            junk.post(path, "")
            junk.post(path, "confirm=yes")
    for path in ("/alerts/rules/junk-rule/remove/", "/alerts/channels/junk-chan/remove/",
                 "/alerts/rules/junk-rule/enable/", "/alerts/channels/junk-chan/test/"):
        junk.post(path, "confirm=yes")


def _junk_retention(junk: Junk, n: Named) -> None:
    """Set and unset, for the queue shown and for every queue, every field with junk."""
    assert junk.client.post("/retention/change/", RETENTION_FORM).status_code == 302
    for extra in ({}, {"scope": "every"}, {"action": "unset"},
                  {"action": "unset", "scope": "every"}):
        junk.fields("POST", "/retention/change/", RETENTION_FIELDS, RETENTION_FORM | extra,
                    TEXT_JUNK)


# The corpus in parts, each on a world of its own, so that the test processes share them (the
# whole corpus in one test took 53 s on SQLite and 84 s on PostgreSQL, the longest test of
# either pass); with how many requests each part sent when it was split (6,743 in all).
CORPUS: dict[str, tuple[Callable[[Junk, Named], None], int]] = {
    "pages": (_junk_pages, 2_558),
    "paths": (_junk_paths, 252),
    "actions": (_junk_actions, 2_007),
    "forms": (_junk_forms, 748),
    "schedules": (_junk_schedules, 1_178),
    "limits": (_junk_limits, 476),
    "alert-rules": (_junk_alert_rules, 764),
    "alert-channels": (_junk_alert_channels, 1_167),
    "retention": (_junk_retention, 980),
    "tokens": (_junk_tokens, 331),
}


@pytest.mark.slow  # 5-15 s a part alone: thousands of requests through the whole console
@pytest.mark.parametrize("part", list(CORPUS))
def test_junk_in_every_parameter_and_field_is_never_a_5xx_nor_an_outage(
    admin: Client, world: World, tmp_path: Path, part: str
) -> None:
    form = filled(tmp_path, request_id="dj-junk")
    assert admin.post("/jobs/submit/", form).status_code == 302
    made = admin.post("/actions/preview/", {"queue": "default", "action": "requeue",
                                            "fingerprint": world.fingerprint})
    bulk_url = made["Location"]
    ids = {"running": world.running, "failed": world.failed, "fingerprint": world.fingerprint,
           "dead": world.dead_ids[0], "stale_task": world.stale_task,
           "bulk": bulk_url.strip("/").split("/")[-1]}
    world.q.submit([1], handler="echo", request_id="res-1", priority=99)  # leased first
    [leased] = world.q.dequeue("w-res", 1)
    world.q.ack(leased, {"note": "a result"})
    ids["result_task"] = leased.task_id
    admin.raise_request_exception = False  # a 500 is counted, not raised
    junk = Junk(admin)
    run, expected = CORPUS[part]
    run(junk, Named(ids, form, bulk_url))
    assert junk.wrong == [], f"{len(junk.wrong)} of {junk.sent}:\n" + "\n".join(junk.wrong)
    assert junk.sent >= expected  # the part ran in full: as many as when the corpus was split
    print(f"\n{junk.sent:,} junk requests ({part})")


# The Django admin: a search past SQLite's 50 KB LIKE pattern and a selection that is not a
# primary key were Django's own 500s (ModelAdmin.get_search_results, response_action); the
# admin now refuses both with a 400 (core/admin.py, Bounded).
SEARCHES = [v for v in JUNK if len(v) < 50_000] + ["x" * 40_000]
SELECTIONS = ["-1", "0", str(2**31), str(2**63 - 1)]


def _staff(client: Client) -> Junk:
    user = User.objects.get(username="ada")
    user.is_staff = True
    user.save()
    client.raise_request_exception = False
    return Junk(client)


@pytest.mark.slow  # 12 s alone: over a thousand requests to the admin's pages
def test_junk_in_the_django_admin_is_never_a_5xx(admin: Client, world: World) -> None:
    junk = _staff(admin)
    for model in ("request", "deadletter", "auditentry", "bulkaction"):
        path = f"/admin/core/{model}/"
        junk.fields("GET", path, ["o", "p", "e", "all", "state__exact", "queue"])
        for value in SEARCHES:
            junk.get(path, _encode([("q", value)]))
        for value in [*JUNK[1:6], JUNK[-1]]:
            junk.get(f"{path}{_q(value)}/change/")
    junk.fields("POST", "/admin/core/request/", ["action", "index", "select_across"],
                {"action": "cancel_requests", "_selected_action": "1"})
    junk.fields("POST", "/admin/core/deadletter/", ["action", "index", "select_across"],
                {"action": "requeue_dead_tasks", "_selected_action": "1"})
    for path, action in (("/admin/core/request/", "cancel_requests"),
                         ("/admin/core/deadletter/", "requeue_dead_tasks")):
        for value in SELECTIONS:
            junk.post(path, _encode([("action", action), ("_selected_action", value)]))
    assert junk.wrong == [], f"{len(junk.wrong)} of {junk.sent}:\n" + "\n".join(junk.wrong)
    print(f"\n{junk.sent:,} junk requests to the admin")


def test_the_django_admin_refuses_a_huge_search_and_a_selection_of_no_key(
    admin: Client, world: World
) -> None:
    junk = _staff(admin)
    junk.get("/admin/core/request/", _encode([("q", "x" * 100_000)]))
    junk.post("/admin/core/request/", _encode([("action", "cancel_requests"),
                                               ("_selected_action", "abc")]))
    junk.post("/admin/core/deadletter/", _encode([("action", "requeue_dead_tasks"),
                                                  ("_selected_action", "1e309")]))
    assert junk.wrong == []
