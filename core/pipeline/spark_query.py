"""The queries of a data task on its session: the SQL settings a chunk runs with (its file
and shuffle partitions, AQE, its job's FAIR pool), the job's SQL over its views, its EXPLAIN, a
result fetched over Arrow, and the task's Spark jobs cancelled when the task must stop.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from .errors import PipelineError
from .spark_sessions import is_connect

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("queueadmin.pipeline")

_NO_CONNECT_SQL = False  # this PySpark's Connect plan classes differ: sql_over() uses views


def job_pool(job_id: str) -> str:
    """The FAIR scheduler pool of a data job's Spark jobs. Spark never forgets a pool and
    sorts them all at every scheduling round, so jobs share 1,024 pools by a hash of their id
    (two running jobs meet in one pool, and queue there in order, once in 1,024)."""
    n = int.from_bytes(hashlib.blake2b(job_id.encode(), digest_size=4).digest(), "big") % 1024
    return f"queueadmin-{n:04d}"


def chunk_partitions(cores: int | None, at_once: int) -> int | None:
    """How many Spark partitions a chunk is read in when `at_once` chunks share `cores`: the
    cores over the chunks (one each when there are as many chunks as cores), so that the chunks
    running together keep every core busy with as few tasks as that takes. Measured on 2 cores,
    two chunks at once, each read in one partition against Spark's ~64-128 MB ones: 161.7M rows
    in 5.1-5.4 s against 5.9-6.3 s, as fast as one plain job over the whole input. None (Spark's
    own partitioning) when the cores are not known."""
    if cores is None:
        return None
    return max(1, -(-cores // max(1, at_once)))


MIN_PARTITIONS = "spark.sql.files.minPartitionNum"
MAX_PARTITION_BYTES = "spark.sql.files.maxPartitionBytes"


@dataclass
class _Settled:
    now: dict[str, str | None] = field(default_factory=dict)  # as settle() last left them
    before: dict[str, str | None] = field(default_factory=dict)  # before it first changed them


_SETTLED: weakref.WeakKeyDictionary[Any, _Settled] = weakref.WeakKeyDictionary()


def file_partitions(session: SparkSession, n: int | None) -> None:
    """Spark's file reader of `session` cuts what a query reads into about `n` partitions from
    now on (as many bytes each); None: the session's own settings again."""
    if n is None:
        settle(session, {MIN_PARTITIONS: None, MAX_PARTITION_BYTES: None})
    else:  # bytes per partition = the read's bytes / n (FilePartition.maxSplitBytes)
        settle(session, {MIN_PARTITIONS: str(n), MAX_PARTITION_BYTES: str(1 << 40)})


SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
POOL = "spark.scheduler.pool"


def shuffle_into(session: SparkSession, n: int | None) -> None:
    """`session`'s queries shuffle into `n` partitions from now on; None: its own setting
    again. A chunk read in one partition aggregates in one task too (its share of the cores):
    eight chunks of the benchmark's 40M rows, two at a time from a script on the stack's
    server, took 3.00 s against 3.17 s with the server's two (medians of 8 rounds)."""
    settle(session, {SHUFFLE_PARTITIONS: None if n is None else str(n)})


ADAPTIVE = "spark.sql.adaptive.enabled"


def adaptive(session: SparkSession, on: bool) -> None:
    """Adaptive query execution for `session`'s queries from now on: its own setting (on), or
    off. Off, a query with one shuffle runs as one Spark job of two stages, with no planning
    between them; AQE runs the shuffle's stage as a job of its own and plans the rest after
    it. For a chunk whose shuffle partitions are already its share of the cores and which reads
    no other table, that is all AQE would do: eight chunks of the benchmark's 40M rows through
    the stack took 2.40 s with it off against 2.54 s on (10 rounds alternating, plain job
    1.79 s)."""
    settle(session, {ADAPTIVE: None if on else "false"})


def settle(session: SparkSession, wanted: dict[str, str | None]) -> None:
    """Give `session` these SQL settings (None: the value it had before settle() first changed
    it). Only what differs from the last call is sent: on Spark Connect each setting is a round
    trip, and a slot's session runs chunk after chunk with the same ones."""
    state = _SETTLED.setdefault(session, _Settled())
    for key, value in wanted.items():
        if key not in state.before:
            if value is None:
                continue  # never changed here: it is the session's own
            state.before[key] = state.now[key] = session.conf.get(key, None)
        target = state.before[key] if value is None else value
        if state.now[key] == target:
            continue
        if target is None:
            session.conf.unset(key)
        else:
            session.conf.set(key, target)
        state.now[key] = target


class NotArrow(PipelineError):
    """A result that cannot come back over Arrow: more than the server sends
    (spark.driver.maxResultSize), or what Arrow cannot carry as Spark gives it (a struct with
    a field name twice). Its rows must come another way (Spark's write)."""


def fetch_arrow(df: DataFrame) -> tuple[Any, Any]:
    """`df`'s rows as an Arrow table, as toArrow() gives them, and its Spark schema, in one
    round trip on Spark Connect: PySpark's toArrow() first asks the server for the schema (an
    analysis of the whole plan, a round trip of its own), then runs the plan, whose reply
    carries the schema anyway. Classic Spark, or a PySpark without that call: toArrow().
    NotArrow: the result cannot come this way (toArrow() would fail the same way)."""
    to_table = getattr(df, "_to_table", None) if is_connect(df.sparkSession) else None
    try:
        if to_table is None:
            return df.toArrow(), df.schema
        table, schema = to_table()
    except Exception as exc:
        if "maxResultSize" in str(exc):  # the server refused to send that much
            raise NotArrow(str(exc)) from exc
        raise
    from pyspark.sql.pandas.types import to_arrow_schema

    if schema is None:  # not sent by this server: asked for, as toArrow() does
        schema = df.schema
    try:  # toArrow()'s own conversion: Spark's types and names, timestamps in UTC
        arrow = to_arrow_schema(schema, error_on_duplicated_field_names_in_struct=True,
                                timezone="UTC")
    except Exception as exc:  # e.g. PySpark's UnsupportedOperationException
        raise NotArrow(str(exc)) from exc
    return table.cast(arrow), schema


def observed(df: DataFrame, name: str, *exprs: Any) -> tuple[DataFrame, Any]:
    """`df` observed (df.observe(Observation(name), *exprs)): the frame, and the Observation
    whose `get` says the metrics once a query over it has run. On Spark Connect the plan is
    built here: PySpark's observe() first asks the server whether `df` is streaming, an
    analysis of its whole plan (a read's listing and schema) in a round trip of its own, 0.3-0.6
    s of a small job under load; a data job's frames never are."""
    from pyspark.sql import Observation

    if is_connect(df.sparkSession):
        try:
            from pyspark.sql.connect.dataframe import DataFrame as ConnectFrame
            from pyspark.sql.connect.observation import Observation as ConnectObservation
            from pyspark.sql.connect.plan import CollectMetrics

            frame: Any = df
            watch: Any = ConnectObservation(name)
            out: Any = ConnectFrame(CollectMetrics(frame._plan, watch, list(exprs)),
                                    frame._session)
            watch._result = {}  # as Observation._on leaves it: observed, not yet run
            out._cached_schema = frame._cached_schema
            return out, watch
        except (ImportError, TypeError, AttributeError):  # PySpark's classes changed shape
            pass
    seen = Observation(name)
    return df.observe(seen, *exprs), seen


EXPLAIN_MODE = "formatted"  # the physical plan's outline, then each operator's details


def explain(df: DataFrame, mode: str = EXPLAIN_MODE) -> str:
    """Spark's EXPLAIN of `df` as text (what df.explain() prints): an analysis and planning
    call, one round trip on Spark Connect, no Spark job."""
    if is_connect(df.sparkSession):
        return str(cast(Any, df)._explain_string(mode=mode))
    jvm = cast(Any, df.sparkSession).sparkContext._jvm
    return str(jvm.PythonSQLUtils.explainString(cast(Any, df)._jdf.queryExecution(), mode))


def sql_over(session: SparkSession, text: str, views: dict[str, DataFrame]) -> DataFrame:
    """The query `text` over `views` (name -> frame). On Spark Connect, one plan that carries
    its views (PySpark's own plan for spark.sql() with DataFrame arguments), sent only with
    the query that runs it: a temporary view and spark.sql() are a round trip each there, each
    analysing the query once more. Eight chunks of the benchmark's 40M rows, two at a time from
    a script on the stack's server, took 2.99 s against 3.23 s (medians of 8 rounds, plain
    job 2.37 s). Classic Spark, or a PySpark without that plan: temporary views of the task's
    own session."""
    if is_connect(session):
        plan = _connect_sql(session, text, views)
        if plan is not None:
            return plan
    for name, frame in views.items():
        frame.createOrReplaceTempView(name)
    return session.sql(text)


def _connect_sql(session: SparkSession, text: str, views: dict[str, DataFrame]
                 ) -> DataFrame | None:
    """A Spark Connect DataFrame of `text` with `views` as its relations (PySpark's internal
    plan classes, pinned by pyproject's pyspark<5; None if they changed shape)."""
    global _NO_CONNECT_SQL
    if _NO_CONNECT_SQL:
        return None
    try:
        from pyspark.sql.connect.dataframe import DataFrame as ConnectFrame
        from pyspark.sql.connect.plan import SQL, SubqueryAlias

        relations = [SubqueryAlias(cast(Any, frame)._plan, name)
                     for name, frame in views.items()]
        plan = SQL(text, None, None, relations)
        # PySpark's SQL plan has no child, so the observations of its relations (a view's
        # df.observe(Observation)) would not be collected by the query that runs them: they
        # are named here (a small job's one step counts its chunk's rows so).
        seen = {k: v for r in relations for k, v in r.observations.items()}
        if seen:
            plan.__class__ = _observed_sql(type(plan))
            cast(Any, plan)._seen = seen
        return ConnectFrame(plan, session)  # type: ignore[arg-type]
    except (ImportError, TypeError, AttributeError) as exc:
        _NO_CONNECT_SQL = True
        log.warning("spark connect: no SQL plan with relations in this PySpark (%s); "
                    "using temporary views", exc)
        return None


_OBSERVED: dict[type, type] = {}


def _observed_sql(base: type) -> type:
    """PySpark's SQL plan class, whose `observations` are also those of its relations."""
    if base not in _OBSERVED:
        def observations(self: Any) -> dict[str, Any]:
            return {**base.observations.__get__(self), **self._seen}  # type: ignore[attr-defined]

        _OBSERVED[base] = type(f"Observed{base.__name__}", (base,),
                               {"observations": property(observations)})
    return _OBSERVED[base]


@contextlib.contextmanager
def cancellable(session: SparkSession, tag: str, should_stop: Any, *,
                pool: str | None = None) -> Iterator[None]:
    """Run the block's Spark jobs in the job group `tag` (classic Spark; an operation tag on
    Spark Connect); while it runs, a watcher thread asks `should_stop()` every 0.2 s and
    cancels the group when it says so (the task's request was cancelled, or its lease was
    lost). A job group, not a job tag, on classic Spark: SQL executions there do not carry
    the thread's job tags (measured on 4.3: cancelJobsWithTag left the job running)."""
    connect = is_connect(session)
    if pool is not None:  # SQL settings starting with spark. reach the jobs' local properties
        settle(session, {POOL: pool})  # a slot's next chunk of the same job: no round trip
    if connect:
        session.addTag(tag)
    else:
        session.sparkContext.setJobGroup(tag, f"queueadmin task {tag}", interruptOnCancel=True)
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.2):
            if should_stop():
                with contextlib.suppress(Exception):
                    if connect:
                        session.interruptTag(tag)
                    else:
                        session.sparkContext.cancelJobGroup(tag)
                return

    watcher = threading.Thread(target=watch, name=f"spark-cancel-{tag}", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join(1)
        with contextlib.suppress(Exception):
            if connect:
                session.removeTag(tag)
            else:
                sc = session.sparkContext
                for prop in ("spark.jobGroup.id", "spark.job.description",
                             "spark.job.interruptOnCancel"):
                    sc.setLocalProperty(prop, None)  # type: ignore[arg-type]
