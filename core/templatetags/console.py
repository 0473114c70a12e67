"""The console's one way to show a time, a duration, a payload and a progress bar, and its
navigation."""

from __future__ import annotations

import datetime as dt
import functools
import json
import time
from typing import Any
from urllib.parse import quote

from django import template
from django.urls import get_script_prefix, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from core.queue.options import DEFAULT_CONCURRENCY

register = template.Library()

PAYLOAD_PREVIEW = 120  # characters of a payload shown before "show all"


def _to_datetime(value: Any) -> dt.datetime | None:
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        try:
            return dt.datetime.fromtimestamp(value / 1000, dt.UTC)
        except (OverflowError, ValueError, OSError):  # past the year 9999: shown as "—"
            return None
    return None


@register.filter
def duration(ms: Any) -> str:
    """Milliseconds as "850 ms", "42 s", "3 min 4 s", "2 h 5 min", "3 d 4 h"."""
    if ms is None or ms == "":
        return "—"
    ms = int(ms)
    s = abs(ms) // 1000
    if abs(ms) < 1000:
        return f"{ms} ms"
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s" if s % 60 and s < 600 else f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


@register.simple_tag
def ago(value: Any) -> SafeString:
    """A time as "3 min ago" ("in 5 s" if ahead), with the exact UTC time on hover."""
    when = _to_datetime(value)
    if when is None:
        return format_html("<span class=\"muted\">{}</span>", "—")
    delta_ms = int((time.time() - when.timestamp()) * 1000)
    text = "just now" if abs(delta_ms) < 1000 else (
        f"{duration(delta_ms)} ago" if delta_ms > 0 else f"in {duration(-delta_ms)}"
    )
    exact = when.astimezone(dt.UTC)
    return format_html('<time datetime="{}" title="{} UTC">{}</time>',
                       exact.isoformat(timespec="milliseconds"),
                       exact.strftime("%Y-%m-%d %H:%M:%S.") + f"{exact.microsecond // 1000:03d}",
                       text)


@register.simple_tag
def payload(text: Any, limit: int = PAYLOAD_PREVIEW) -> SafeString:
    """A payload (JSON text), escaped: one compact line, cut at `limit` characters; when that
    is not all of it, a "show all" opens it pretty-printed. A plain <details>, so it works
    without JavaScript."""
    raw = "" if text is None else str(text)
    try:
        value = json.loads(raw)
    except ValueError:
        compact = pretty = raw
    else:
        compact = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
        pretty = json.dumps(value, indent=2, ensure_ascii=False)
    if len(compact) <= limit and "\n" not in compact:
        return format_html('<code class="payload">{}</code>', compact)
    return format_html(
        '<details class="payload"><summary><code>{}</code> <span class="more">show all'
        "</span></summary><pre>{}</pre></details>",
        compact[:limit] + ("…" if len(compact) > limit else ""), pretty,
    )


@register.simple_tag
def text_block(text: Any, limit: int = 400) -> SafeString:
    """A long text (error, traceback) escaped, cut with "show all" like a payload."""
    raw = "" if text is None else str(text)
    if len(raw) <= limit:
        return format_html('<pre class="text">{}</pre>', raw)
    return format_html(
        '<details class="payload"><summary><pre class="text">{}…</pre><span class="more">'
        "show all ({} characters)</span></summary><pre class=\"text\">{}</pre></details>",
        raw[:limit], f"{len(raw):,}", raw,
    )


SEGMENTS = ("done", "dead", "cancelled", "leased", "delayed", "waiting")
# What each segment is called where it is labelled: a leased task is running on a worker.
SEGMENT_NAMES = {"leased": "running"}


@register.simple_tag
def progress(row: Any, tasks: Any = None) -> SafeString:
    """A request's tasks as one bar: done, dead, cancelled, running (leased), delayed,
    waiting, each segment labelled with its count under it. SVG rectangles (attributes, not
    inline style, so a strict CSP allows it). The figure is the share of its tasks finished;
    with `tasks` (TaskProgress, as the request page reads them), what its running tasks
    report of themselves (ctx.progress) counts too, as a darker part of the running segment."""
    counts = {s: max(0, int(getattr(row, s, 0) or 0)) for s in SEGMENTS}
    total = max(int(getattr(row, "total", 0) or 0), sum(counts.values()), 1)
    reported = min(float(counts["leased"]), sum(
        t.percent / 100 for t in tasks or ()
        if getattr(t, "running", False) and t.percent is not None))
    x = 0.0
    rects = []
    for name in SEGMENTS:
        width = 100 * counts[name] / total
        if width > 0:
            rects.append(format_html('<rect class="p-{}" x="{}" y="0" width="{}" '
                                     'height="8"></rect>', name, f"{x:.3f}", f"{width:.3f}"))
            if name == "leased" and reported > 0:
                rects.append(format_html(
                    '<rect class="p-reported" x="{}" y="0" width="{}" height="8"></rect>',
                    f"{x:.3f}", f"{100 * reported / total:.3f}"))
        x += width
    shown = [(s, counts[s]) for s in SEGMENTS if counts[s]]
    label = ", ".join(f"{n:,} {SEGMENT_NAMES.get(s, s)}" for s, n in shown) or "no tasks"
    finished = counts["done"] + counts["dead"] + counts["cancelled"]
    pct = int(100 * (finished + reported) / total)
    if finished + reported < total:
        pct = min(pct, 99)  # 100 % only once every task has finished
    why = "of its tasks finished (done, dead or cancelled)"
    if reported > 0:
        why += (f", and what its running tasks report of themselves: {reported:.2f} of "
                f"{counts['leased']:,} between them")
        label += f" (reporting {100 * reported / counts['leased']:.0f} % on average)"
    segs = format_html_join("", '<span class="seg" data-segment="{}"><i class="k k-{}"></i>{} '
                            "{}</span>", ((s, s, f"{n:,}", SEGMENT_NAMES.get(s, s))
                                          for s, n in shown))
    return format_html(
        '<span class="progress"><svg viewBox="0 0 100 8" preserveAspectRatio="none" '
        'role="img" aria-label="{}"><title>{}</title><rect class="p-track" x="0" y="0" '
        'width="100" height="8"></rect>{}</svg><span class="pct" title="{}">{}%</span>'
        '<span class="segs">{}</span></span>',
        label, label, SafeString("".join(rects)), why, pct, segs,
    )


@register.filter
def get_item(mapping: Any, key: Any) -> Any:
    """mapping[key], or None."""
    return mapping.get(key) if isinstance(mapping, dict) else None


@register.filter
def sub(value: Any, other: Any) -> int:
    """value - other, for durations in templates."""
    try:
        return int(value) - int(other)
    except (TypeError, ValueError):
        return 0


@register.filter
def thousands(value: Any) -> str:
    """A count as "3,214" (what the service layer's messages say too)."""
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return "" if value is None else str(value)


@register.filter
def concurrency(value: Any) -> str:
    """A request's concurrency as a count, or "no limit" for the engine's default: a request
    that set none has DEFAULT_CONCURRENCY, a number no queue reaches."""
    try:
        n = int(value)
    except (TypeError, ValueError):
        return "" if value is None else str(value)
    return "no limit" if n >= DEFAULT_CONCURRENCY else f"{n:,}"


def _count(value: float) -> str:
    """A progress count: "1,204", or "4.5" (two decimals at most)."""
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.2f}".rstrip("0").rstrip(".")


@register.simple_tag
def task_progress(p: Any) -> SafeString:
    """What a task reported (TaskProgress): a bar with "done / total (pct)" when it gave a
    total, else its count; an SVG as the request's bar is (no inline style)."""
    if p is None or p.done is None:
        return format_html('<span class="muted">{}</span>', "—")
    pct = p.percent
    if pct is None:
        return format_html('<span class="task-count">{}</span>', _count(p.done))
    label = f"{_count(p.done)} / {_count(p.total)}"
    return format_html(
        '<span class="progress task-progress" data-done="{}" data-total="{}"><svg '
        'viewBox="0 0 100 8" preserveAspectRatio="none" role="img" aria-label="{}"><title>{}'
        '</title><rect class="p-track" x="0" y="0" width="100" height="8"></rect><rect '
        'class="p-done" x="0" y="0" width="{}" height="8"></rect></svg><span class="pct">{}'
        ' ({}%)</span></span>',
        _count(p.done), _count(p.total), label, label, f"{pct:.3f}", label, f"{int(pct)}",
    )


@register.simple_tag
def clock(ms: Any) -> SafeString:
    """A time of day "14:03:27" (UTC), the full date and time on hover: log lines' times."""
    when = _to_datetime(ms)
    if when is None:
        return format_html("<span class=\"muted\">{}</span>", "—")
    return format_html('<time datetime="{}" title="{} UTC">{}</time>',
                       when.isoformat(timespec="milliseconds"),
                       when.strftime("%Y-%m-%d %H:%M:%S"), when.strftime("%H:%M:%S"))


@register.filter
def seconds(value: Any) -> str:
    """A time in seconds as "0.42 ms", "12.5 ms", "1.5 s", and from a minute on as duration()."""
    if value is None or value == "":
        return "—"
    v = float(value)
    if v < 0.001:
        return f"{v * 1000:.2f} ms"
    if v < 1:
        return f"{v * 1000:.3g} ms"
    if v < 60:
        return f"{v:.3g} s"
    return duration(int(v * 1000))


# The header's pages: URL name (also the page's `nav`), label, and the permission that shows
# the link (beyond core.view_console, which the whole header needs).
NAV = (("overview", "Overview", ""), ("requests", "Requests", ""),
       ("scheduled", "Scheduled", ""), ("schedules", "Schedules", ""),
       ("pending", "Pending", ""), ("dead", "Dead letters", ""), ("workers", "Workers", ""),
       ("handlers", "Handlers", ""), ("datajobs", "Data jobs", ""), ("audit", "Audit log", ""),
       ("alerts", "Alerts", "core.manage_alerts"), ("limits", "Limits", ""),
       ("retention", "Retention", ""))

_CURRENT = SafeString(' class="current" aria-current="page"')


@functools.cache
def _nav_paths(prefix: str) -> tuple[tuple[str, str, str, str], ...]:
    """NAV with each page's path, reversed once per script prefix rather than on every page
    (13 reverses were a fifth of a small page's time)."""
    return tuple((name, reverse(f"core:{name}"), label, perm) for name, label, perm in NAV)


@register.simple_tag(takes_context=True)
def console_nav(context: Any, current: Any, queue: Any) -> SafeString:
    """The header's links to every page for `queue`, `current` marked; htmx swaps the body."""
    user = context.get("user")
    q = quote(str(queue), safe="/")
    return format_html_join(
        "\n", '<a href="{0}?queue={1}" hx-get="{0}?queue={1}" hx-target="body" '
        'hx-push-url="true"{2}>{3}</a>',
        ((path, q, _CURRENT if name == current else "", label)
         for name, path, label, perm in _nav_paths(get_script_prefix())
         if not perm or (user is not None and user.has_perm(perm))))

