"""A data task's Spark progress, reported through ctx.progress(): Spark tasks finished of
those known so far, over every Spark job the task ran (a chunk runs a few: its read, its
write, an observation), so the count only grows while the task runs.

Spark Connect pushes it: PySpark 4's `registerProgressHandler` is called with each
operation's stages while the server reports them (every `spark.connect.progress.
reportInterval`, 2 s by default, and once at the end). A classic session (SPARK_MASTER) has
no such hook: its status tracker is asked instead, for the jobs of the task's job group,
every POLL_S by a thread beside the task.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from . import spark

Report = Callable[[int, int, str], None]  # (tasks done, tasks known, message)
POLL_S = 0.5


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


def _connect_handler(totals: Totals) -> Any:
    from pyspark.sql.connect.shell.progress import ProgressHandler, StageInfo

    class Handler(ProgressHandler):
        def __call__(self, stages: Iterable[StageInfo] | None, inflight_tasks: int,
                     operation_id: str | None, done: bool) -> None:
            # At the end (done) PySpark passes the stages as last reported, mid-way: the
            # operation is over, so are they (a failed one fails the task anyway).
            rows = [(s.stage_id, s.num_tasks if done else s.num_completed_tasks, s.num_tasks)
                    for s in stages or ()]
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


@contextlib.contextmanager
def reporting(session: Any, tag: str, report: Report) -> Iterator[None]:
    """Report the Spark progress of the block's jobs (those of job group or tag `tag` on a
    classic session, as spark.cancellable sets it) through `report`."""
    totals = Totals(report)
    if spark.is_connect(session):
        handler = _connect_handler(totals)
        session.registerProgressHandler(handler)
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                session.removeProgressHandler(handler)
        totals.finished()
        return
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
    totals.finished()
