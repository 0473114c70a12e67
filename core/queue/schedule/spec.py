"""A recurring schedule's definition: what it submits, when (a cron expression in a time zone,
or an interval), its policies; its validation, with messages that say what is wrong; and its
time arithmetic.

Cron arithmetic is cronsim's, on aware datetimes in the schedule's IANA zone. cronsim was
chosen over croniter because it keeps a daily job daily across DST: on the fall-back day
croniter fires `30 2 * * *` at 02:30 CEST *and* 02:30 CET, cronsim once (as Debian's cron
does); on the spring-forward day both fire once, at 03:00, the first instant after the
skipped 02:30. Hourly and finer expressions still fire in both repeated hours.
"""

from __future__ import annotations

import functools
import re
import string
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any, cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import orjson
from cronsim import CronSim, CronSimError

from core.queue.errors import InvalidInput
from core.queue.keys import validate_id
from core.queue.options import DEFAULT_OPTIONS

MISSED = ("latest", "all", "none")
OVERLAP = ("skip", "allow")
NAME_MAX = 64  # "sched.<name>.<epoch seconds>" must stay within a request id's 128 characters
DEFAULT_MISSED_MAX = 100
MISSED_MAX_LIMIT = 1000
MISSED_GRACE_MS = 60_000  # a slot older than this when a scheduler first sees it was missed
MIN_EVERY_S = 1
MAX_EVERY_S = 366 * 86_400
MAX_TASKS = 1000
MAX_SPEC_BYTES = 1_000_000
TASK_OPTIONS = tuple(DEFAULT_OPTIONS)  # a schedule's request options: submit()'s
TEMPLATE_FIELDS = ("date", "time", "datetime", "slot", "year", "month", "day", "hour", "minute")
JOB_TEMPLATED = ("input", "output")
_EVERY = re.compile(r"([0-9]+)\s*([smhdw])", re.IGNORECASE)  # ASCII digits only
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


class InvalidSchedule(InvalidInput):
    """A schedule that cannot run as described; the message says what to change."""


def parse_every(text: str | int) -> int:
    """An interval in seconds from `90`, `90s`, `10m`, `1h30m`, `2d`, `1w`."""
    if isinstance(text, int) and not isinstance(text, bool):
        seconds = text
    else:
        raw = str(text).strip().replace(" ", "")
        if raw.isascii() and raw.isdigit():  # "²".isdigit() is true, and int() refuses it
            seconds = int(raw)
        else:
            parts = _EVERY.findall(raw)
            if not parts or "".join(n + u for n, u in parts).lower() != raw.lower():
                raise InvalidSchedule(
                    f"bad interval {text!r}: write a number of seconds or amounts with units "
                    "s, m, h, d, w, such as 90s, 10m, 1h30m, 1d")
            seconds = sum(int(n) * _UNIT_S[u.lower()] for n, u in parts)
    if not MIN_EVERY_S <= seconds <= MAX_EVERY_S:
        raise InvalidSchedule(f"bad interval {text!r}: it must be between {MIN_EVERY_S} second "
                              "and 366 days")
    return seconds


def format_every(seconds: int) -> str:
    """`10m`, `1h30m`: what parse_every reads back."""
    out = []
    for unit in ("w", "d", "h", "m", "s"):
        n, seconds = divmod(seconds, _UNIT_S[unit])
        if n:
            out.append(f"{n}{unit}")
    return "".join(out) or "0s"


def zone(name: str) -> ZoneInfo:
    """The IANA time zone `name`; InvalidSchedule naming it if there is none."""
    try:
        if not name or name != name.strip() or ".." in name or name.startswith("/") \
                or len(name) > 64 or "\0" in name:
            raise ValueError(name)
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:  # OSError: an odd file name
        raise InvalidSchedule(
            f"unknown time zone {name[:80]!r}: use an IANA name such as Europe/Berlin, "
            "America/New_York or UTC") from exc


def parse_time(text: str, tz: str = "UTC") -> int:
    """Milliseconds since the epoch from ISO 8601 (`2026-12-01T02:00+01:00`); a time without
    an offset is in the schedule's zone `tz`."""
    try:
        dt = datetime.fromisoformat(text.strip())
    except ValueError as exc:
        raise InvalidSchedule(f"bad time {text!r}: write ISO 8601, such as 2026-12-01T02:00 "
                              "or 2026-12-01T02:00+01:00") from exc
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=zone(tz))
    ms = int(dt.timestamp() * 1000)
    if not 0 <= ms < LATEST_MS:  # a slot's time must stay a date in every zone
        raise InvalidSchedule(f"time {text[:40]!r} is out of range: between 1970 and 9000")
    return ms


LATEST_MS = int(datetime(9000, 1, 1, tzinfo=ZoneInfo("UTC")).timestamp() * 1000)


CRON_FIELDS = "minute hour day-of-month month day-of-week"


def check_cron(expr: str) -> str:
    """`expr` if it is a 5-field cron expression cronsim reads; else InvalidSchedule. Five
    fields exactly: cronsim would also read six (seconds first), every field then shifted."""
    expr = " ".join(str(expr).split())
    fields = len(expr.split())
    if fields != 5:
        raise InvalidSchedule(
            f"bad cron expression {expr[:200]!r}: it has {fields} field"
            f"{'' if fields == 1 else 's'}; a cron expression has five fields: {CRON_FIELDS}, "
            "such as '30 2 * * *' (no seconds field)")
    try:
        CronSim(expr, datetime(2000, 1, 1, tzinfo=ZoneInfo("UTC")))
    except CronSimError as exc:
        raise InvalidSchedule(
            f"bad cron expression {expr!r}: {exc} (five fields: {CRON_FIELDS}, such as "
            "'30 2 * * *')") from exc
    try:
        next(CronSim(expr, datetime(2000, 1, 1, tzinfo=ZoneInfo("UTC"))))
    except StopIteration as exc:
        raise InvalidSchedule(f"cron expression {expr!r} never fires") from exc
    return expr


@dataclass(frozen=True)
class Schedule:
    """One recurring schedule. Either `handler` + `tasks` (+ queue `options`) or `job` (a data
    job's spec without its id, `output` templated with the slot: `out/delays/{date}`); either
    `cron` (+ `tz`) or `every_s`."""

    name: str
    queue: str = "default"
    handler: str | None = None
    tasks: list[Any] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    job: dict[str, Any] | None = None
    cron: str | None = None
    tz: str = "UTC"
    every_s: int | None = None
    start_ms: int | None = None
    end_ms: int | None = None
    missed: str = "latest"
    missed_max: int = DEFAULT_MISSED_MAX
    overlap: str = "skip"
    description: str = ""

    # -- definition -----------------------------------------------------------------------

    def validated(self) -> Schedule:
        """This schedule, normalised, or InvalidSchedule saying what is wrong."""
        try:
            return self._validated()
        except InvalidSchedule:
            raise
        except InvalidInput as exc:  # the engine's checks (ids, options): the same words
            raise InvalidSchedule(str(exc)) from None

    def _validated(self) -> Schedule:
        validate_id(self.queue, "queue name")
        name = self.name
        if not isinstance(name, str) or len(name) > NAME_MAX:
            raise InvalidSchedule(f"bad schedule name {name!r}: at most {NAME_MAX} characters")
        validate_id(name, "schedule name")
        cron, every = self.cron, self.every_s
        if (cron is None) == (every is None):
            raise InvalidSchedule("give either a cron expression (--cron) or an interval "
                                  "(--every), not both or neither")
        if cron is not None:
            cron = check_cron(cron)
        else:
            every = parse_every(every)  # type: ignore[arg-type]
        zone(self.tz)
        for label, value in (("start", self.start_ms), ("end", self.end_ms)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise InvalidSchedule(f"{label} must be a time in milliseconds, got {value!r}")
        if self.start_ms is not None and self.end_ms is not None and \
                self.end_ms <= self.start_ms:
            raise InvalidSchedule(f"the end ({self._iso(self.end_ms)}) is not after the start "
                                  f"({self._iso(self.start_ms)})")
        if self.missed not in MISSED:
            raise InvalidSchedule(f"missed must be one of {', '.join(MISSED)}, got "
                                  f"{self.missed!r}")
        if self.overlap not in OVERLAP:
            raise InvalidSchedule(f"overlap must be one of {', '.join(OVERLAP)}, got "
                                  f"{self.overlap!r}")
        if self.missed == "all" and self.overlap == "skip":
            raise InvalidSchedule("missed=all replays every missed slot at once, which "
                                  "overlap=skip would skip: use overlap=allow with it")
        if isinstance(self.missed_max, bool) or not isinstance(self.missed_max, int) or \
                not 1 <= self.missed_max <= MISSED_MAX_LIMIT:
            raise InvalidSchedule(f"missed_max must be between 1 and {MISSED_MAX_LIMIT}, got "
                                  f"{self.missed_max!r}")
        out = replace(self, name=name, cron=cron, every_s=every,
                      description=str(self.description)[:500])
        out._check_what()
        if len(out.to_json()) > MAX_SPEC_BYTES:
            raise InvalidSchedule(f"the schedule is larger than {MAX_SPEC_BYTES:,} bytes: "
                                  "submit references to data, not the data")
        return out

    def _check_what(self) -> None:
        if (self.job is None) == (self.handler is None):
            raise InvalidSchedule("give either a handler and its task payloads, or a data job, "
                                  "not both or neither")
        if self.job is not None:
            if self.tasks:
                raise InvalidSchedule("a data job schedule takes no task payloads")
            self.job_fields(0)  # templates checked on a sample slot
            return
        from core.queue.options import RequestOptions, _options, task_list

        validate_id(self.handler, "handler")
        tasks = task_list(self.tasks)
        if not tasks:
            raise InvalidSchedule("a schedule needs at least one task payload to submit")
        if len(tasks) > MAX_TASKS:
            raise InvalidSchedule(f"a schedule submits at most {MAX_TASKS} tasks per run, "
                                  f"got {len(tasks)}")
        for i, task in enumerate(tasks):
            try:
                orjson.dumps(task)
            except orjson.JSONEncodeError as exc:
                raise InvalidSchedule(f"task {i} is not JSON: {exc}") from exc
        unknown = set(self.options) - set(TASK_OPTIONS)
        if unknown:
            raise InvalidSchedule(f"unknown request option(s) {', '.join(sorted(unknown))}; "
                                  f"known: {', '.join(TASK_OPTIONS)}")
        _options(str(self.handler), cast(RequestOptions, dict(self.options)))

    @property
    def kind(self) -> str:
        return "datajob" if self.job is not None else "tasks"

    def to_json(self) -> str:
        return orjson.dumps(asdict(self), option=orjson.OPT_SORT_KEYS).decode()

    @classmethod
    def from_json(cls, text: str) -> Schedule:
        d = orjson.loads(text)
        return cls(**d)

    # -- time -----------------------------------------------------------------------------

    @property
    def zoneinfo(self) -> ZoneInfo:
        return zone(self.tz)

    def _iso(self, ms: int) -> str:
        return datetime.fromtimestamp(ms / 1000, self.zoneinfo).isoformat(timespec="minutes")

    def after(self, ms: int) -> int | None:
        """The first slot strictly after `ms` (from start, up to end), or None if none."""
        base = ms if self.start_ms is None else max(ms, self.start_ms - 1)
        if self.every_s is not None:
            step = self.every_s * 1000
            anchor = self.start_ms or 0
            slot = anchor if base < anchor else anchor + ((base - anchor) // step + 1) * step
        else:
            assert self.cron is not None
            dt = datetime.fromtimestamp(base // 1000, self.zoneinfo)
            try:
                slot = int(next(CronSim(self.cron, dt)).timestamp() * 1000)
            except StopIteration:
                return None
        if self.end_ms is not None and slot > self.end_ms:
            return None
        return slot

    def upcoming(self, after_ms: int, n: int = 5) -> list[int]:
        """The next `n` slots strictly after `after_ms`."""
        out: list[int] = []
        slot = self.after(after_ms)
        while slot is not None and len(out) < n:
            out.append(slot)
            slot = self.after(slot)
        return out

    def due(self, next_ms: int, now_ms: int) -> tuple[list[int], int, int | None]:
        """What a scheduler at `now_ms` does with the slots from `next_ms` (the first not yet
        handled) up to now, under the missed-slot policy: (slots to fire, how many are
        skipped as missed, the next slot after now)."""
        slots, total = self._recent(next_ms, now_ms, max(self.missed_max, 1))
        following = self.after(max(now_ms, slots[-1] if slots else now_ms))
        if not slots:
            return [], 0, following
        # Slots within the grace are late only by the schedulers' lag, not missed: they run
        # under every policy. The policy decides about the older ones (downtime).
        on_time = [s for s in slots if now_ms - s <= MISSED_GRACE_MS]
        if self.missed == "all":
            fire = slots
        elif on_time or self.missed == "none":
            fire = on_time
        else:
            fire = slots[-1:]
        if self.overlap == "skip":
            fire = fire[-1:]  # runs of one claim would overlap one another
        return fire, total - len(fire), following

    def _recent(self, first: int, now_ms: int, keep: int) -> tuple[list[int], int]:
        """The last `keep` slots in [first, now_ms], and how many there are in all (a cron
        schedule's are counted up to 100,000: a downtime of 70 days at one a minute)."""
        if first > now_ms:
            return [], 0
        if self.every_s is not None:
            step = self.every_s * 1000
            last = now_ms if self.end_ms is None else min(now_ms, self.end_ms)
            total = max(0, (last - first) // step + 1)
            n = min(total, keep)
            top = first + (total - 1) * step
            return [top - (n - 1 - i) * step for i in range(n)], total
        recent: deque[int] = deque(maxlen=keep)
        total, slot = 0, first
        while slot <= now_ms and total < 100_000:
            recent.append(slot)
            total += 1
            following = self.after(slot)
            if following is None:
                break
            slot = following
        return list(recent), total

    def describe(self) -> str:
        """The schedule's timing in words: `At 02:30, every day (Europe/Berlin)`."""
        if self.every_s is not None:
            words = f"Every {format_every(self.every_s)}"
        else:
            assert self.cron is not None
            words = f"{cron_words(self.cron)} ({self.tz})"
        if self.start_ms is not None:
            words += f", from {self._iso(self.start_ms)}"
        if self.end_ms is not None:
            words += f", until {self._iso(self.end_ms)}"
        return words

    # -- what a slot submits ----------------------------------------------------------------

    def request_id(self, slot_ms: int) -> str:
        """The id of the request of slot `slot_ms`: one per schedule and slot."""
        return f"sched.{self.name}.{slot_ms // 1000}"

    def run_now_id(self, at_ms: int) -> str:
        return f"sched.{self.name}.now{at_ms}"

    def request_ids(self, rid: str) -> list[str]:
        """The requests one run makes (a data job: its chunks, then its combine)."""
        return [rid, f"{rid}.combine"] if self.job is not None else [rid]

    def template_values(self, slot_ms: int) -> dict[str, str]:
        dt = datetime.fromtimestamp(slot_ms / 1000, self.zoneinfo)
        return {
            "date": dt.strftime("%Y-%m-%d"), "time": dt.strftime("%H%M"),
            "datetime": dt.strftime("%Y%m%dT%H%M"), "slot": str(slot_ms // 1000),
            "year": dt.strftime("%Y"), "month": dt.strftime("%m"), "day": dt.strftime("%d"),
            "hour": dt.strftime("%H"), "minute": dt.strftime("%M"),
        }

    def job_fields(self, slot_ms: int, rid: str | None = None) -> dict[str, Any]:
        """The data job of slot `slot_ms`: its fields as a data job's spec takes them
        (core.pipeline.submission.scheduled_job checks them), its paths templated, its id the
        slot's request id."""
        assert self.job is not None
        values = self.template_values(slot_ms)
        job = dict(self.job)
        job.pop("job_id", None)
        job.setdefault("format", "")  # as `datajob submit`: the input's name says it
        for key in JOB_TEMPLATED:
            if isinstance(job.get(key), str):
                try:
                    job[key] = job[key].format_map(values)
                except (KeyError, ValueError, IndexError) as exc:
                    raise InvalidSchedule(
                        f"data job {key} {job[key]!r}: bad template ({exc}); it may use "
                        f"{', '.join('{' + f + '}' for f in TEMPLATE_FIELDS)}") from None
        return {**job, "job_id": rid or self.request_id(slot_ms)}


def is_templated(text: object) -> bool:
    """Whether a data job's path uses a template field (`{date}`), so that it differs from
    one run to the next."""
    if not isinstance(text, str):
        return False
    try:
        return any(field is not None for _, field, _, _ in string.Formatter().parse(text))
    except ValueError:  # a lone brace: not a template (job_fields says so)
        return False


def cron_words(expr: str) -> str:
    """A cron expression in words (`At 02:30`), kept per expression up to 256 characters (a
    valid one can be as long as a schedule's spec: never kept): cron_descriptor reads its
    message catalog again for each description (a profiled run of the console's junk test
    spent 4.5 s on 8,497 descriptions of a handful of expressions)."""
    return _kept_cron_words(expr) if len(expr) <= 256 else _cron_words(expr)


def _cron_words(expr: str) -> str:
    from cron_descriptor import ExpressionDescriptor, Options

    options = Options()
    options.use_24hour_time_format = True
    try:
        return str(ExpressionDescriptor(expr, options).get_description())
    except Exception:  # the words are a courtesy: cronsim decides what runs
        return expr


_kept_cron_words = functools.lru_cache(maxsize=1024)(_cron_words)


def slot_time(ms: int, tz: str) -> str:
    """A slot as the console shows it: local time with its offset."""
    return datetime.fromtimestamp(ms / 1000, zone(tz)).isoformat(timespec="minutes")

