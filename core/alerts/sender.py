"""The outbox's delivery: nothing lost, nothing sent twice without its id.

A row moves pending -> sending -> sent, each move one atomic UPDATE guarded by what the row
was: `claim` takes a due row (or one left "sending" for longer than lease(): its sender died
mid-send) and marks it with this attempt's token; only the holder of that token marks it sent,
or back to pending with a later due time after a failure (exponential backoff, Retry-After
honoured), or failed once it has tried for GIVE_UP. A process killed between its send and its
mark leaves the row "sending": it is sent again after lease(), with the same id, which the
receiver uses to drop the repeat (at least once, with an idempotency id: docs/alerts.md).

Per channel: at most its `max_per_minute` a minute (the rest wait their turn, in order), and
a channel that failed is not tried again in the same pass. Per incident and channel, a message
goes only after the ones before it (a recovery never overtakes its firing message).
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import uuid
from dataclasses import dataclass

from django.db.models import F, Q
from django.utils import timezone

from core.models import AlertIncident, AlertMessage

from . import channels

log = logging.getLogger("queueadmin.alerts")
GIVE_UP = dt.timedelta(hours=24)
BACKOFF_FIRST_S, BACKOFF_CAP_S = 5.0, 300.0
RETRY_AFTER_CAP_S = 3600.0
BATCH = 100  # rows looked at per pass
KEPT = dt.timedelta(days=30)  # sent and failed rows, resolved incidents: then pruned
PRUNE_BATCH = 1000


@dataclass
class Sent:
    """What one pass did."""

    sent: int = 0
    retrying: int = 0  # failed, to be tried again
    failed: int = 0  # given up
    waiting: int = 0  # held back: a rate limit, an earlier message, a failed channel


def lease() -> dt.timedelta:
    """How long a row stays "sending" before another pass may send it again: three attempts'
    time (channels.timeout_s), so that a living sender's attempt is never taken from it."""
    return dt.timedelta(seconds=3 * channels.timeout_s())


def _due_q(now: dt.datetime) -> Q:
    return Q(delivery="pending", due_at__lte=now) | Q(delivery="sending",
                                                      claimed_at__lt=now - lease())


def send_due(now: dt.datetime | None = None) -> Sent:
    """One pass over the due rows, oldest first."""
    now = now or timezone.now()
    shift = now - timezone.now()  # a pass "at" another time (tests) keeps that offset
    out = Sent()
    blocked: set[int] = set()
    sent_lately: dict[int, int] = {}
    rows = (AlertMessage.objects.filter(_due_q(now)).select_related("channel")
            .order_by("pk")[:BATCH])
    for m in rows:
        if m.channel is None:
            _mark_failed(m, "", "its channel was removed before it was sent")
            out.failed += 1
            continue
        if m.channel_id in blocked or _behind(m) or _over_rate(m, now, sent_lately):
            out.waiting += 1
            continue
        result = deliver(m, shift=shift)
        if result == "sent":
            out.sent += 1
            sent_lately[m.channel_id] = sent_lately.get(m.channel_id, 0) + 1
        elif result in ("retrying", "failed"):
            setattr(out, result, getattr(out, result) + 1)
            blocked.add(m.channel_id)
    return out


def _behind(m: AlertMessage) -> bool:
    """An earlier message of the same incident to the same channel is not sent yet."""
    return m.incident_id is not None and bool(AlertMessage.objects.filter(
        incident_id=m.incident_id, channel_id=m.channel_id, pk__lt=m.pk,
        delivery__in=("pending", "sending")).exists())


def _over_rate(m: AlertMessage, now: dt.datetime, sent_lately: dict[int, int]) -> bool:
    if m.channel_id not in sent_lately:
        sent_lately[m.channel_id] = AlertMessage.objects.filter(
            channel_id=m.channel_id, sent_at__gte=now - dt.timedelta(minutes=1)).count()
    return sent_lately[m.channel_id] >= int(m.channel.max_per_minute)


def deliver(m: AlertMessage, *, shift: dt.timedelta = dt.timedelta(0)) -> str:
    """Claim the row, send it, record what came of it: "sent", "retrying", "failed", or
    "taken" when another sender holds it (or it is no longer due). `shift`: the clock's
    offset from now (a test's pass at another time)."""
    token, now = uuid.uuid4().hex, timezone.now() + shift
    claimed = AlertMessage.objects.filter(_due_q(now), pk=m.pk).update(
        delivery="sending", claim=token, claimed_at=now, attempts=F("attempts") + 1)
    if not claimed:
        return "taken"
    attempt = AlertMessage.objects.filter(pk=m.pk).values_list("attempts", flat=True).get()
    body = {**m.body, "id": str(m.key)}
    try:
        answer = channels.send(m.channel, channels.Delivery(str(m.key), body, attempt))
    except channels.SendFailed as exc:
        return _failed(m, token, str(exc), exc.retry_after, attempt, timezone.now() + shift)
    except Exception as exc:  # a bug in one channel's code must not stop the outbox
        log.exception("alert message %s to %s: unexpected error", m.key, m.channel_name)
        return _failed(m, token, f"{type(exc).__name__}: {exc}", None, attempt,
                       timezone.now() + shift)
    AlertMessage.objects.filter(pk=m.pk, claim=token).update(
        delivery="sent", sent_at=timezone.now() + shift, response=answer[:200], error="")
    return "sent"


def _failed(m: AlertMessage, token: str, error: str, retry_after: float | None,
            attempt: int, now: dt.datetime) -> str:
    if m.status == "test" or now - m.created_at >= GIVE_UP:
        _mark_failed(m, token, error)
        if m.status != "test":  # a test's failure is told to whoever asked for it
            log.error("alert message %s to %s: gave up after %d attempts: %s", m.key,
                      m.channel_name, attempt, error)
        return "failed"
    wait = min(BACKOFF_CAP_S, BACKOFF_FIRST_S * 2 ** (attempt - 1)) * random.uniform(0.8, 1.2)
    if retry_after is not None:
        wait = max(wait, min(retry_after, RETRY_AFTER_CAP_S))
    AlertMessage.objects.filter(pk=m.pk, claim=token).update(
        delivery="pending", due_at=now + dt.timedelta(seconds=wait), error=error[:2000],
        claim="")
    log.warning("alert message %s to %s: attempt %d failed (%s); next in %.0fs", m.key,
                m.channel_name, attempt, error, wait)
    return "retrying"


def _mark_failed(m: AlertMessage, token: str, error: str) -> None:
    """Given up: by the holder of `token`, or ("") a row no sender holds."""
    rows = (AlertMessage.objects.filter(pk=m.pk, claim=token) if token else
            AlertMessage.objects.filter(_due_q(timezone.now()), pk=m.pk))
    rows.update(delivery="failed", error=error[:2000])


def send_now(message_id: int) -> AlertMessage:
    """Deliver one row at once (a channel's test, from the console or the command line),
    through the same claim as the outbox's loop: a services process never sends it too."""
    m = AlertMessage.objects.select_related("channel").get(pk=message_id)
    if m.channel is not None:
        deliver(m)
    else:
        _mark_failed(m, "", "its channel was removed before it was sent")
    fresh: AlertMessage = AlertMessage.objects.get(pk=message_id)
    return fresh


def prune(now: dt.datetime | None = None) -> int:
    """Delete sent and failed messages, and resolved incidents, older than KEPT (in batches
    by key: no long lock). How many rows went."""
    cutoff = (now or timezone.now()) - KEPT
    gone = 0
    for rows in (AlertMessage.objects.filter(created_at__lt=cutoff,
                                             delivery__in=("sent", "failed")),
                 AlertIncident.objects.filter(resolved_at__lt=cutoff, status="resolved")):
        while ids := list(rows.order_by("pk").values_list("pk", flat=True)[:PRUNE_BATCH]):
            gone += rows.model.objects.filter(pk__in=ids).delete()[0]
    return gone
