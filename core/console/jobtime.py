"""Where a data job's time went, for its page: one bar per step on the job's own time axis
(from its submit to its end): the split, each chunk, the combine; each bar cut into its queue
wait, its Spark time and its write (a chunk's), so that a user sees at a glance whether the
job waited for workers, computed, or wrote.

The figures are the job's own (core.pipeline: each step's `started_ms` and `queued_ms`, a
chunk's `spark_s` and `write_s`, the split's and the combine's seconds): from its manifest
once done (the database keeps it), else from its record while it runs. A job run by an
earlier version has none: no bars.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_CHUNK_BARS = 40  # a job of more chunks shows its first ones; the summary counts them all
WIDTH = 1000  # the bars' viewBox width: x and widths are in thousandths of the job's time


@dataclass(frozen=True)
class Segment:
    kind: str  # wait, run, spark, write, other: its colour (CSS class t-<kind>)
    x: float  # in WIDTH units from the job's submit
    width: float
    seconds: float
    title: str  # the tooltip


@dataclass(frozen=True)
class Bar:
    label: str
    segments: list[Segment]
    seconds: float  # the step's own time, queue wait not counted
    waited: float  # its queue wait


@dataclass
class JobTime:
    total_s: float
    bars: list[Bar] = field(default_factory=list)
    summary: list[tuple[str, str]] = field(default_factory=list)  # (what, how long)
    more_chunks: int = 0  # chunks not drawn (past MAX_CHUNK_BARS)


def _num(v: Any) -> float | None:
    try:
        return None if v is None or v == "" else float(v)
    except (TypeError, ValueError):
        return None


class _Axis:
    def __init__(self, start_ms: float, end_ms: float) -> None:
        self.start, self.span = start_ms, max(1.0, end_ms - start_ms)

    def x(self, at_ms: float) -> float:
        return round(max(0.0, min(WIDTH, (at_ms - self.start) * WIDTH / self.span)), 2)

    def seg(self, kind: str, at_ms: float, seconds: float, title: str) -> Segment:
        x = self.x(at_ms)
        width = max(0.0, self.x(at_ms + seconds * 1000) - x)
        return Segment(kind, x, max(width, 1.0) if seconds > 0 else width, round(seconds, 3),
                       f"{title}: {seconds:.2f} s")


def _step_bar(axis: _Axis, label: str, started_ms: float, queued_ms: float | None,
              parts: list[tuple[str, float, str]]) -> Bar:
    """A step's bar: its queue wait (before `started_ms`), then `parts` (kind, seconds,
    name) one after another."""
    segs, waited = [], (queued_ms or 0) / 1000
    if waited > 0:
        segs.append(axis.seg("wait", started_ms - waited * 1000, waited, "queue wait"))
    at = started_ms
    for kind, seconds, name in parts:
        if seconds > 0:
            segs.append(axis.seg(kind, at, seconds, name))
            at += seconds * 1000
    return Bar(label, segs, round(sum(s for _, s, _ in parts), 3), round(waited, 3))


def _chunk_parts(r: dict[str, Any]) -> list[tuple[str, float, str]]:
    seconds = _num(r.get("seconds")) or 0.0
    spark, write = _num(r.get("spark_s")) or 0.0, _num(r.get("write_s")) or 0.0
    other = max(0.0, seconds - spark - write)
    return [("other", other, "reading its plan, its session"), ("spark", spark, "Spark"),
            ("write", write, "writing its part")]


def job_time(figures: dict[str, Any], chunks: list[dict[str, Any]]) -> JobTime | None:
    """The bars of a job from its figures (created_ms; split_started_ms, split_queued_ms,
    split_seconds; combine_started_ms, combine_queued_ms, combine_seconds; one_step) and its
    chunks' reports; None when it has no timings (run by an earlier version)."""
    created = _num(figures.get("created_ms"))
    timed = [c for c in chunks if _num(c.get("started_ms")) is not None]
    if created is None or (not timed and figures.get("split_started_ms") is None):
        return None
    ends = [created]
    split_at, split_s = _num(figures.get("split_started_ms")), _num(figures.get("split_seconds"))
    comb_at, comb_s = _num(figures.get("combine_started_ms")), _num(
        figures.get("combine_seconds"))
    if split_at is not None:
        ends.append(split_at + (split_s or 0) * 1000)
    for c in timed:
        ends.append(float(c["started_ms"]) + (_num(c.get("seconds")) or 0) * 1000)
    one_step = bool(figures.get("one_step"))
    if comb_at is not None and not one_step:
        ends.append(comb_at + (comb_s or 0) * 1000)
    axis = _Axis(created, max(ends))
    out = JobTime(round((max(ends) - created) / 1000, 3))
    if split_at is not None:
        out.bars.append(_step_bar(axis, "split", split_at, _num(figures.get("split_queued_ms")),
                                  [("run", split_s or 0.0, "planning the chunks")]))
    timed.sort(key=lambda c: int(c.get("chunk", 0)))
    for c in timed[:MAX_CHUNK_BARS]:
        label = "one step" if one_step else f"chunk {c.get('chunk')}"
        out.bars.append(_step_bar(axis, label, float(c["started_ms"]),
                                  _num(c.get("queued_ms")), _chunk_parts(c)))
    out.more_chunks = max(0, len(timed) - MAX_CHUNK_BARS)
    if comb_at is not None and not one_step:
        out.bars.append(_step_bar(axis, "combine", comb_at,
                                  _num(figures.get("combine_queued_ms")),
                                  [("run", comb_s or 0.0, "combining the parts")]))
    out.summary = _summary(figures, timed, one_step)
    return out


def _summary(figures: dict[str, Any], timed: list[dict[str, Any]],
             one_step: bool) -> list[tuple[str, str]]:
    """Split, waves (the chunks, from the first's start to the last's end, and how many ran
    at once), combine."""
    out: list[tuple[str, str]] = []
    if (s := _num(figures.get("split_seconds"))) is not None:
        out.append(("split", f"{s:.2f} s"))
    if timed and not one_step:
        spans = [(float(c["started_ms"]), float(c["started_ms"]) + (_num(c.get("seconds"))
                                                                     or 0) * 1000)
                 for c in timed]
        at_once = max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans)
        waves = -(-len(spans) // max(1, at_once))
        took = (max(b for _, b in spans) - min(a for a, _ in spans)) / 1000
        out.append(("chunks", f"{took:.2f} s: {len(spans)} chunk{'s' * (len(spans) != 1)} "
                              f"in {waves} wave{'s' * (waves != 1)} of up to {at_once} at once"))
    elif timed:
        out.append(("one step", f"{_num(timed[0].get('seconds')) or 0:.2f} s: chunk and "
                                "combine in one Spark query"))
    if not one_step and (c := _num(figures.get("combine_seconds"))) is not None:
        out.append(("combine", f"{c:.2f} s"))
    return out


FIGURES = ("created_ms", "split_started_ms", "split_queued_ms", "split_seconds",
           "combine_started_ms", "combine_queued_ms", "combine_seconds", "one_step")


def of_status(manifest: dict[str, Any] | None, record: dict[str, Any],
              reports: list[dict[str, Any]]) -> JobTime | None:
    """A job's bars: from its manifest when it has one (done), else from its record (its
    submit and split) and its chunks' reports so far."""
    if manifest is not None:
        figures = {k: manifest.get(k) for k in FIGURES} | (
            {"created_ms": manifest.get("submitted_ms")})
        return job_time(figures, [c for c in manifest.get("chunks") or [] if c])
    return job_time({k: record.get(k) for k in FIGURES}, reports)
