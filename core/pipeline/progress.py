"""A data task's Spark progress, reported through ctx.progress(): Spark tasks finished of
those known so far, over every Spark job the task ran (a chunk runs a few: its read, its
write, an observation), so the count only grows while the task runs.

Spark Connect pushes it: PySpark 4's `registerProgressHandler` is called with each
operation's stages while the server reports them (every `spark.connect.progress.
reportInterval`, 2 s by default, and once at the end). A classic session (SPARK_MASTER) has
no such hook: its status tracker is asked instead, for the jobs of the task's job group,
every POLL_S by a thread beside the task.

A Meter beside it keeps what Spark reported of the bytes the task's queries moved (its chunk
report's input and shuffle bytes): the input bytes of each stage in Connect's progress reports
(sent every REPORT_INTERVAL, asked of the server per session), a classic session's stages from
its status store, and the SQL metrics of a result fetched over Spark Connect (add_sql).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from . import spark_query, spark_sessions

Report = Callable[[int, int, str], None]  # (tasks done, tasks known, message)
POLL_S = 0.5
# How often a Connect server sends an operation's progress (its default, 2 s, leaves a short
# chunk's bytes unreported); a session setting, sent once per worker slot's session.
REPORT_INTERVAL = ("spark.connect.progress.reportInterval", "100ms")
STORE_WAIT_S = 1.0  # a classic session's status store lags its jobs by its listener bus


@dataclass
class Meter:
    """What Spark reported of the bytes a task's queries moved; figures() sums them."""

    # Spark Connect's progress: (operation, stage) -> (input bytes, complete, tasks started)
    stages: dict[tuple[str, int], tuple[int, bool, bool]] = field(default_factory=dict)
    # A classic session's stages (status store): stage -> (input, shuffle read, write)
    classic: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    # SQL metrics of results fetched over Spark Connect: (files' bytes, shuffle read, write)
    sql: list[tuple[int, int, int]] = field(default_factory=list)

    def add_sql(self, frame: Any) -> None:
        """The SQL metrics Spark Connect sent with `frame`'s result (its executionInfo): the
        bytes of the files its scans read, and its Exchanges' shuffle bytes."""
        with contextlib.suppress(Exception):  # an older client: no metrics
            info = frame.executionInfo
            if info is None or info.metrics is None:
                return
            _, graph = info.metrics.extract_graph()
            got = {"filesSize": 0, "localBytesRead": 0, "remoteBytesRead": 0,
                   "shuffleBytesWritten": 0}
            for node in graph.values():
                for m in node.metrics:
                    if m.name in got:
                        got[m.name] += int(m.value)
            self.sql.append((got["filesSize"], got["localBytesRead"] + got["remoteBytesRead"],
                             got["shuffleBytesWritten"]))

    def figures(self) -> dict[str, int | None]:
        """input_bytes, shuffle_read_bytes, shuffle_write_bytes as Spark reported them; None
        for what it did not (a Connect operation shorter than its progress reports, a stage
        seen half done, a part Spark wrote: its write sends no SQL metrics). Input bytes of 0
        are none reported (a reader that does not count them)."""
        if self.classic:
            i, r, w = (sum(v[n] for v in self.classic.values()) for n in range(3))
            return {"input_bytes": i or None, "shuffle_read_bytes": r, "shuffle_write_bytes": w}
        seen = self.stages.values()
        whole = bool(seen) and all(done or not started for _, done, started in seen)
        read = sum(b for b, _, _ in seen) if whole else 0
        if not read and self.sql:
            read = sum(x[0] for x in self.sql)
        return {"input_bytes": read or None,
                "shuffle_read_bytes": sum(x[1] for x in self.sql) if self.sql else None,
                "shuffle_write_bytes": sum(x[2] for x in self.sql) if self.sql else None}


class Totals:
    """Stages by (operation or job, stage id) -> (done, total); reports their sums."""

    def __init__(self, report: Report) -> None:
        self.report = report
        self._stages: dict[tuple[str, int], tuple[int, int]] = {}
        self._last: tuple[int, int] | None = None

    def finished(self) -> None:
        """The block's Spark work ended well: if Spark reported none of its stages (an
        operation shorter than its report interval may end with none), say it is done."""
        if self._last is None:
            self._last = (1, 1)
            self.report(1, 1, "Spark: done (too quick for Spark to report its stages)")

    def update(self, owner: str, stages: Iterable[tuple[int, int, int]], running: int) -> None:
        """`stages`: (stage id, tasks done, tasks) of one operation or job."""
        for sid, done, total in stages:
            self._stages[(owner, sid)] = (done, total)
        done = sum(d for d, _ in self._stages.values())
        total = sum(t for _, t in self._stages.values())
        if total <= 0 or (done, total) == self._last:
            return
        self._last = (done, total)
        finished = sum(1 for d, t in self._stages.values() if d >= t)
        self.report(done, total, f"Spark: {done:,} of {total:,} tasks, {finished} of "
                                 f"{len(self._stages)} stages done, {running} running")


def _connect_handler(totals: Totals, meter: Meter | None) -> Any:
    from pyspark.sql.connect.shell.progress import ProgressHandler, StageInfo

    class Handler(ProgressHandler):
        def __call__(self, stages: Iterable[StageInfo] | None, inflight_tasks: int,
                     operation_id: str | None, done: bool) -> None:
            # At the end (done) PySpark passes the stages as last reported, mid-way: the
            # operation is over, so are they (a failed one fails the task anyway).
            got = list(stages or ())
            rows = [(s.stage_id, s.num_tasks if done else s.num_completed_tasks, s.num_tasks)
                    for s in got]
            if meter is not None:  # its bytes only as reported (not counted done at the end)
                for s in got:
                    meter.stages[(operation_id or "", s.stage_id)] = (
                        s.num_bytes_read, s.done or s.num_completed_tasks >= s.num_tasks,
                        s.num_completed_tasks > 0)
            if rows:
                totals.update(operation_id or "", rows, 0 if done else inflight_tasks)

    return Handler()


def _poll_classic(session: Any, tag: str, totals: Totals, stop: threading.Event) -> None:
    while not stop.wait(POLL_S):
        _classic_once(session, tag, totals)


def _classic_once(session: Any, tag: str, totals: Totals) -> None:
    with contextlib.suppress(Exception):  # a JVM gone, a job forgotten meanwhile
        tracker = session.sparkContext.statusTracker()
        running = 0
        for jid in tracker.getJobIdsForGroup(tag):
            job = tracker.getJobInfo(jid)
            # A finished job's stages are all done, those it skipped too (their output was
            # there already: they never run, and would be counted undone for ever).
            over = job is not None and job.status == "SUCCEEDED"
            rows = []
            for sid in job.stageIds if job else ():
                st = tracker.getStageInfo(sid)
                if st is not None:
                    rows.append((sid, st.numTasks if over else st.numCompletedTasks,
                                 st.numTasks))
                    running += st.numActiveTasks
            totals.update(f"job {jid}", rows, running)


def _classic_bytes(session: Any, tag: str, before: set[int], meter: Meter) -> None:
    """The bytes of the stages of the group's jobs since `before`, from the status store (the
    figures of Spark's UI), once none of them is still active there."""
    with contextlib.suppress(Exception):  # a JVM gone, a stage forgotten meanwhile
        tracker = session.sparkContext.statusTracker()
        store = session.sparkContext._jsc.sc().statusStore()
        deadline = time.monotonic() + STORE_WAIT_S
        while True:
            got, active = {}, False
            for jid in set(tracker.getJobIdsForGroup(tag)) - before:
                job = tracker.getJobInfo(jid)
                for sid in job.stageIds if job else ():
                    st = store.lastStageAttempt(sid)
                    active |= st.status().toString() in ("ACTIVE", "PENDING")
                    got[sid] = (int(st.inputBytes()), int(st.shuffleReadBytes()),
                                int(st.shuffleWriteBytes()))
            if not active or time.monotonic() > deadline:
                meter.classic.update(got)
                return
            time.sleep(0.05)


@contextlib.contextmanager
def reporting(session: Any, tag: str, report: Report,
              meter: Meter | None = None) -> Iterator[None]:
    """Report the Spark progress of the block's jobs (those of job group or tag `tag` on a
    classic session, as spark_query.cancellable sets it) through `report`; and what Spark
    reports of their bytes into `meter`."""
    totals = Totals(report)
    if spark_sessions.is_connect(session):
        if meter is not None:
            with contextlib.suppress(Exception):  # a server without the setting
                spark_query.settle(session, dict([REPORT_INTERVAL]))
        handler = _connect_handler(totals, meter)
        session.registerProgressHandler(handler)
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                session.removeProgressHandler(handler)
        totals.finished()
        return
    before: set[int] = set()
    if meter is not None:  # a retry's earlier jobs are in the same group
        with contextlib.suppress(Exception):
            before = set(session.sparkContext.statusTracker().getJobIdsForGroup(tag))
    stop = threading.Event()
    poller = threading.Thread(target=_poll_classic, args=(session, tag, totals, stop),
                              name=f"spark-progress-{tag}", daemon=True)
    poller.start()
    try:
        yield
    finally:
        stop.set()
        poller.join(2)
        _classic_once(session, tag, totals)  # the last counts
    if meter is not None:
        _classic_bytes(session, tag, before, meter)
    totals.finished()
