"""The conditions read from the engine: work no live worker runs, waiting work ageing, delayed
requests held past their due time, workers gone without stopping, expired leases, late
schedules, Redis itself, and the mirror's lag. Each reads through core.queue.read (once per
pass, through Look) and says what holds now; the evaluator turns that into incidents."""

from __future__ import annotations

from functools import partial

from core.conf import redacted
from core.models import AlertIncident, AlertRule
from core.models.alert_conditions import CONDITIONS, format_duration

from .look import Finding, Look, Outcome, Unknown, link

Open = dict[str, AlertIncident]


def threshold(rule: AlertRule) -> float:
    value = rule.threshold if rule.threshold is not None else CONDITIONS[rule.condition].default
    return float(value or 0)


def no_live_worker(rule: AlertRule, look: Look, _open: Open) -> Outcome:
    """Per queue and handler: more tasks than the threshold (0) wait, and no live worker of
    the queue runs their handler (none at all, or none that announced it)."""
    limit = threshold(rule)
    out = Outcome()
    for q in look.queues(rule.queue):
        s = look.stats(q)
        for handler, n in s.waiting_by_handler.items():
            if n <= max(0, limit) or (rule.handler and handler != rule.handler):
                continue
            if s.workers and handler in s.handlers_run:
                continue
            who = "no live worker" if not s.workers else f"no live worker that runs {handler}"
            out.found.append(Finding(
                subject=f"{q}/{handler}", value=n, count=n, url=link("workers", queue=q),
                summary=f"{n:,} task{'s' if n != 1 else ''} of handler {handler} "
                        f"wait{'' if n != 1 else 's'} in queue {q} and {who} is there to "
                        "take them",
                resolved=f"queue {q}: handler {handler}'s tasks no longer wait without a live "
                         "worker (a worker runs it again, or they were taken or cancelled)",
                details={"queue": q, "handler": handler, "waiting": n, "workers": s.workers,
                         "paused": s.paused}))
    return out


def waiting_age(rule: AlertRule, look: Look, _open: Open) -> Outcome:
    limit = threshold(rule)
    out = Outcome()
    for q in look.queues(rule.queue):
        a = look.attention(q)
        if a.oldest_waiting_ms is None:
            continue
        age = max(0, a.now_ms - a.oldest_waiting_ms) / 1000
        if age <= limit:
            continue
        paused = " (the queue is paused)" if look.stats(q).paused else ""
        out.found.append(Finding(
            subject=q, value=age, url=link("requests", queue=q),
            summary=f"the oldest waiting work in queue {q} was submitted {format_duration(age)} "
                    f"ago, over {format_duration(limit)}{paused}",
            resolved=f"queue {q}: no waiting work is older than {format_duration(limit)} now",
            details={"queue": q, "age_s": round(age, 1), "threshold_s": limit}))
    return out


def request_overdue(rule: AlertRule, look: Look, _open: Open) -> Outcome:
    from core.queue import read

    limit = threshold(rule)
    out = Outcome()
    for q in look.queues(rule.queue):
        page = look.reads(("scheduled", q), partial(read.scheduled, look.queue(q), limit=1))
        first = page.items[0] if page.items else None
        if first is None or first.due_ms is None:
            continue
        late = (look.now_ms - first.due_ms) / 1000
        if late <= limit:
            continue
        out.found.append(Finding(
            subject=q, value=late, url=link("scheduled", queue=q),
            summary=f"delayed request {first.id} of queue {q} is {format_duration(late)} past "
                    "its due time and has not been made due (no worker or scheduler promotes "
                    "it)",
            resolved=f"queue {q}: no delayed request is held past its due time now",
            details={"queue": q, "request": first.id, "late_s": round(late, 1)}))
    return out


def worker_lost(rule: AlertRule, look: Look, _open: Open) -> Outcome:
    """A registered worker whose heartbeat is older than its own --dead-after: it did not
    stop (a stopping worker leaves the registry), it died or hangs."""
    from core.queue import read

    out = Outcome()
    for q in look.queues(rule.queue):
        page = look.reads(("workers", q), partial(read.workers, look.queue(q), limit=500))
        for w in page.items:
            dead_after = w.info.get("dead_after_ms") if isinstance(w.info, dict) else None
            limit_ms = int(dead_after) if isinstance(dead_after, int) and dead_after > 0 \
                else 10_000
            silent = (look.now_ms - w.last_beat_ms) / 1000
            if silent * 1000 <= limit_ms:
                continue
            host = f" on {w.info.get('host')} (pid {w.info.get('pid')})" if w.info else ""
            out.found.append(Finding(
                subject=f"{q}/{w.name}", value=silent, url=link("workers", queue=q),
                summary=f"worker {w.name}{host} of queue {q} last beat "
                        f"{format_duration(silent)} ago and did not stop: it died or hangs",
                resolved=f"worker {w.name} of queue {q} beats again, or left the registry "
                         "(its leases were recovered)",
                details={"queue": q, "worker": w.name, "silent_s": round(silent, 1)}))
    return out


def expired_leases(rule: AlertRule, look: Look, _open: Open) -> Outcome:
    limit = threshold(rule)
    out = Outcome()
    for q in look.queues(rule.queue):
        n = look.attention(q).expired_leases
        if n <= limit:
            continue
        out.found.append(Finding(
            subject=q, value=n, count=n, url=link("pending", queue=q),
            summary=f"{n:,} lease{'s' if n != 1 else ''} of queue {q} expired and "
                    f"{'were' if n != 1 else 'was'} not reclaimed (is the reaper running?)",
            resolved=f"queue {q}: the expired leases were reclaimed",
            details={"queue": q, "expired": n}))
    return out


def schedule_late(rule: AlertRule, look: Look, _open: Open) -> Outcome:
    """A schedule whose next slot is past by more than the threshold and not fired (no
    scheduler runs), or whose last run was missed or an error."""
    from core.queue.read.schedules import schedule_runs, schedules

    limit = threshold(rule)
    out = Outcome()
    for q in look.queues(rule.queue):
        queue = look.queue(q)
        for st in look.reads(("schedules", q), partial(schedules, queue)):
            if rule.handler and st.schedule.handler != rule.handler:
                continue
            if st.paused:
                continue
            why = ""
            if st.next_ms is not None and (look.now_ms - st.next_ms) / 1000 > limit:
                late = (look.now_ms - st.next_ms) / 1000
                why = f"its run due {format_duration(late)} ago has not fired"
            else:
                runs = look.reads(("runs", q, st.name),
                                  partial(schedule_runs, queue, st.name, 1))
                if runs and runs[0].status in ("missed", "error"):
                    note = f" ({runs[0].note})" if runs[0].note else ""
                    what = "missed" if runs[0].status == "missed" else "an error"
                    why = f"its last slot was {what}{note}"
            if why:
                out.found.append(Finding(
                    subject=f"{q}/{st.name}", url=link("schedules", queue=q),
                    summary=f"schedule {st.name} of queue {q}: {why}",
                    resolved=f"schedule {st.name} of queue {q} runs on time again",
                    details={"queue": q, "schedule": st.name}))
    return out


def redis_down(rule: AlertRule, look: Look, _open: Open) -> Outcome:
    from django.conf import settings

    from core.conf import redis_client
    from core.queue import read

    try:
        look.reads(("ping",), lambda: read.ping(redis_client()))
    except Unknown:
        where = redacted(settings.REDIS_URL)
        return Outcome([Finding(
            subject="redis", url=link("overview"),
            summary=f"Redis at {where} does not answer ({look.redis_error})",
            resolved=f"Redis at {where} answers again",
            details={"error": look.redis_error or ""})])
    return Outcome()


def redis_memory(rule: AlertRule, look: Look, _open: Open) -> Outcome:
    h = look.health()
    limit = threshold(rule)
    if not h.maxmemory_bytes or h.used_memory_bytes / h.maxmemory_bytes <= limit:
        return Outcome()
    share = h.used_memory_bytes / h.maxmemory_bytes
    return Outcome([Finding(
        subject="redis", value=share, url=link("overview"),
        summary=f"Redis uses {share:.0%} of its maxmemory ({h.used_memory} of {h.maxmemory}), "
                f"over {limit:.0%}: at 100% it refuses writes (or evicts keys)",
        resolved=f"Redis' memory is back under {limit:.0%} of its maxmemory",
        details={"used_bytes": h.used_memory_bytes, "max_bytes": h.maxmemory_bytes})])


def redis_aof(rule: AlertRule, look: Look, _open: Open) -> Outcome:
    h = look.health()
    bad = {what: status for what, status in (
        ("append-only file write", h.aof_write_status),
        ("append-only file rewrite", h.aof_rewrite_status),
        ("snapshot (RDB) save", h.rdb_status)) if status and status != "ok"}
    if not bad:
        return Outcome()
    return Outcome([Finding(
        subject="redis", url=link("overview"),
        summary="Redis reports a failed " + ", ".join(f"{w} ({s})" for w, s in bad.items())
                + ": what it acknowledged may not be on disk",
        resolved="Redis' append-only file and snapshot writes succeed again",
        details=bad)])


def mirror_lag(rule: AlertRule, look: Look, _open: Open) -> Outcome:
    """The read /metrics exports as queueadmin_mirror_lag_seconds (core.queue.follow.lag):
    the age of the oldest event or dead letter the mirror's group has not written. A queue
    no mirror has ever read has no lag to judge (None), as /metrics has no series for it."""
    from core.queue.follow import lag

    limit = threshold(rule)
    out = Outcome()
    for q in look.queues(rule.queue):
        seconds = look.reads(("lag", q), partial(lag, look.queue(q), "mirror",
                                                  now_ms=look.now_ms))
        if seconds is None or seconds <= limit:
            continue
        out.found.append(Finding(
            subject=q, value=seconds, url=link("overview", queue=q),
            summary=f"queue {q}'s history is {format_duration(seconds)} behind: the oldest "
                    "event or dead letter the mirror has not written yet is that old (is "
                    "runservices or runmirror running?)",
            resolved=f"queue {q}'s history has caught up",
            details={"queue": q, "lag_s": round(seconds, 1)}))
    return out
