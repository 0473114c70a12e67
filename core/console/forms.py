"""The action forms' fields, checked: whatever a page posts (ids, pending entries, a rate, a
return address) is parsed here, and anything malformed is a 400 that says what was wrong.

A pending entry travels as "<request>/<task>/<consumer>/<idle ms>": what the page showed, so
the engine can refuse to act if the entry has moved on since ("/" is in no id)."""

from __future__ import annotations

from dataclasses import dataclass

from django.http import HttpRequest, QueryDict
from django.utils.http import url_has_allowed_host_and_scheme

from core.queue.errors import InvalidInput
from core.queue.keys import validate_id, validate_task_id

from .params import BadParam

MAX_TARGETS = 1_000  # a page's selection; more goes through a bulk preview
DEAD_FILTERS = ("handler", "tenant", "request", "fingerprint", "since", "until")
REQUEST_FILTERS = ("state", "tenant", "priority", "handler", "since", "until", "id")


@dataclass(frozen=True)
class Entry:
    """A pending entry as the page showed it."""

    request_id: str
    task_id: str
    consumer: str
    idle_ms: int

    def encode(self) -> str:
        return f"{self.request_id}/{self.task_id}/{self.consumer}/{self.idle_ms}"


def _many(post: QueryDict, name: str, what: str) -> list[str]:
    values = [v.strip() for v in post.getlist(name) if v.strip()]
    if not values:
        raise BadParam(f"Select at least one {what}.")
    if len(values) > MAX_TARGETS:
        raise BadParam(f"At most {MAX_TARGETS:,} {what}s at once; use the bulk action "
                       "(all matching the filter) for more.")
    return list(dict.fromkeys(values))  # a double-listed id counts once


def dead_ids(post: QueryDict) -> list[str]:
    """The selected dead letters (their dead-stream ids), or the one whose own button was
    pressed (`one`)."""
    ids = [post["one"].strip()] if post.get("one") else _many(post, "dead", "dead letter")
    try:
        return [validate_task_id(i) for i in ids]
    except InvalidInput as exc:
        raise BadParam(f"Bad dead letter id: {exc}.") from None


def request_ids(post: QueryDict) -> list[str]:
    """The selected requests, or the one whose own button was pressed (`one`)."""
    ids = [post["one"].strip()] if post.get("one") else _many(post, "request", "request")
    return [request_id(i) for i in ids]


def request_id(value: str) -> str:
    try:
        return validate_id(value.strip(), "request id")
    except InvalidInput as exc:
        raise BadParam(f"Bad request id: {exc}.") from None


def worker(post: QueryDict, name: str = "worker") -> str:
    value = post.get(name, "").strip()
    if not value:
        raise BadParam("No worker given.")
    try:
        return validate_id(value, "worker name")
    except InvalidInput as exc:
        raise BadParam(f"Bad worker name: {exc}.") from None


def entry(value: str) -> Entry:
    parts = value.split("/")
    if len(parts) != 4 or not parts[3].isdecimal() or len(parts[3]) > 15:
        raise BadParam(f"Bad pending entry {value!r}: expected <request>/<task>/<consumer>/"
                       "<idle ms>.")
    rid, tid, consumer, idle = parts
    try:
        validate_id(rid, "request id")
        validate_task_id(tid)
        validate_id(consumer, "consumer name")
    except InvalidInput as exc:
        raise BadParam(f"Bad pending entry: {exc}.") from None
    return Entry(rid, tid, consumer, int(idle))


def entries(post: QueryDict) -> list[Entry]:
    return [entry(v) for v in _many(post, "entry", "pending entry")]


def held(post: QueryDict, worker_name: str) -> list[Entry]:
    """The tasks the workers page showed a worker holding ("<request>/<task>" each, in
    `held:<worker>`): everything the page showed it hold, released in one click."""
    values = _many(post, f"held:{worker_name}", "task held by the worker")
    out = []
    for v in values:
        rid, _, tid = v.partition("/")
        out.append(entry(f"{rid}/{tid}/{worker_name}/0"))
    return out


def consumer(post: QueryDict) -> str:
    value = post.get("to", "").strip()
    if not value:
        raise BadParam("Name the live worker to give the selected entries to.")
    try:
        return validate_id(value, "consumer name")
    except InvalidInput as exc:
        raise BadParam(f"Bad consumer: {exc}.") from None


def rate(post: QueryDict) -> int | None:
    value = post.get("rate", "").strip()
    if not value:
        return None
    if not value.isdecimal() or not 1 <= int(value) <= 100_000:
        raise BadParam(f"The rate limit must be a whole number of tasks per second from 1 to "
                       f"100,000, not {value!r}.")
    return int(value)


def filters(post: QueryDict, action: str) -> dict[str, str]:
    """The list page's filter, as it posted it in hidden fields (only the known names)."""
    names = REQUEST_FILTERS if action == "cancel" else DEAD_FILTERS
    out = {}
    for name in names:
        value = post.get(name, "").strip()
        if len(value) > 200:
            raise BadParam(f"{name} is longer than 200 characters.")
        if "\0" in value:  # PostgreSQL cannot hold one in a string, so no row has one
            raise BadParam(f"{name} cannot hold a NUL character.")
        if value:
            out[name] = value
    return out


def next_url(request: HttpRequest, default: str) -> str:
    """Where to go after the action: the page it came from, if it is one of ours."""
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ) and target.startswith("/"):
        return target
    return default
