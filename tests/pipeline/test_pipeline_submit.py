"""A data job's submit writes the whole job (chunk request with its split, combine step held
behind it, record) through one atomic engine call (Producer.submit_flow), after reads that
check the id; a job an earlier, four-call submit left half-made is finished by a submit
again. No Spark: the job is only queued."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from core.pipeline import jobs
from core.pipeline.spec import JobSpec
from core.queue import Queue, UnknownHandlerWarning, read
from tests.conftest import keys_under

# What a command the client sends does: only these change data.
WRITING = frozenset({"fcall", "multi", "exec", "hset", "hsetnx", "expire", "zadd", "del",
                     "xadd", "function"})


@pytest.fixture(autouse=True)
def _no_handler_warning() -> Iterator[None]:
    with warnings.catch_warnings():  # no worker announced the datajob handler
        warnings.simplefilter("ignore", UnknownHandlerWarning)
        yield


def a_spec(tmp_path: Path, job_id: str) -> JobSpec:
    return JobSpec(job_id=job_id, input=str(tmp_path / "in.parquet"), format="parquet",
                   output=str(tmp_path / f"out-{job_id}"), sql="SELECT * FROM chunk")


class Sent:
    """The commands a client sends, by round trip (a pipeline or transaction is one)."""

    def __init__(self, client: redis.Redis) -> None:
        self.trips: list[list[str]] = []
        plain, make_pipe = client.execute_command, client.pipeline

        def execute_command(*args: Any, **options: Any) -> Any:
            self.trips.append([str(args[0]).lower()])
            return plain(*args, **options)

        def pipeline(*args: Any, **kwargs: Any) -> Any:
            pipe = make_pipe(*args, **kwargs)
            run = pipe.execute

            def execute(*a: Any, **kw: Any) -> Any:
                names = [str(c[0][0]).lower() for c in pipe.command_stack]
                self.trips.append(["multi", *names, "exec"] if pipe.transaction else names)
                return run(*a, **kw)

            pipe.execute = execute
            return pipe

        client.execute_command = execute_command
        client.pipeline = pipeline

    @property
    def commands(self) -> list[str]:
        return [c for trip in self.trips for c in trip]

    @property
    def writing_trips(self) -> list[list[str]]:
        return [t for t in self.trips if any(c.split()[0] in WRITING for c in t)]


def test_a_job_submit_writes_through_one_engine_call(
    queue: Queue, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """Before: nine round trips (four of them writes: open, the record's MULTI, submit_after,
    add), so a crash between two left half a job. Now: the id's checks, then one FCALL."""
    assert jobs.submit(queue, a_spec(tmp_path, "warm"))  # the library loaded, queue registered
    sent = Sent(redis_client)
    assert jobs.submit(queue, a_spec(tmp_path, "j1"), jobs.QueueOptions(concurrency=4))
    assert sent.writing_trips == [["fcall"]]
    assert sent.commands == ["hgetall", "hgetall", "fcall"]
    req, comb = read.request(queue, "j1"), read.request(queue, "j1.combine")
    assert req is not None and (req.state, req.total, req.concurrency, req.then) == (
        "open", 1, 4, ("j1.combine",))
    assert comb is not None and (comb.state, comb.after) == ("held", "j1")
    assert jobs.status(queue, "j1").spec == a_spec(tmp_path, "j1")
    # Submitted again: the same checks and one call that changes nothing.
    sent.trips.clear()
    assert not jobs.submit(queue, a_spec(tmp_path, "j1"))
    assert sent.writing_trips == [["fcall"]]


def test_a_scheduled_job_holds_its_split_and_its_combine_behind_it(
    queue: Queue, tmp_path: Path
) -> None:
    spec = a_spec(tmp_path, "later")
    assert jobs.submit(queue, spec, delay=3600)
    req = read.request(queue, "later")
    assert req is not None and (req.state, req.total) == ("scheduled", 1)
    assert queue.state("later.combine") == "held"
    assert jobs.status(queue, "later").state == "scheduled"
    assert queue.dequeue("w", 10) == []
    assert queue.run_now("later") == ("open", True)  # open: the split adds the chunks
    [split] = queue.dequeue("w", 10)
    assert (split.request_id, split.payload["op"]) == ("later", "split")


def test_a_job_left_half_made_by_the_four_call_submit_is_finished_by_a_submit_again(
    queue: Queue, tmp_path: Path
) -> None:
    """What a crash right after the first of the earlier version's four calls left: the chunk
    request opened empty, no record, no combine step, no split."""
    queue.open(handler=jobs.HANDLER, request_id="half", concurrency=2)
    spec = a_spec(tmp_path, "half")
    assert jobs.submit(queue, spec)
    st = jobs.status(queue, "half")
    assert st.spec == spec and st.request is not None and st.request.total == 1
    assert st.combine is not None and (st.combine.state, st.combine.after) == ("held", "half")
    [split] = queue.dequeue("w", 10)
    assert split.payload["op"] == "split"
    assert not jobs.submit(queue, spec)  # and once finished, a submit again changes nothing


def test_an_earlier_runs_combine_step_left_behind_is_refused_with_nothing_written(
    queue: Queue, redis_client: redis.Redis, prefix: str, tmp_path: Path
) -> None:
    """Its chunk request expired first: a new run could not hold its own combine step behind
    its chunks, so the submit says so instead of running a job that never combines."""
    spec = a_spec(tmp_path, "old")
    jobs.submit(queue, spec)
    queue.cancel("old")
    for k in keys_under(redis_client, prefix):  # what the chunk request's expiry does
        if ":req:old" in k and ":req:old.combine" not in k:
            redis_client.delete(k)
    before = {k: redis_client.dump(k) for k in keys_under(redis_client, prefix)}
    with pytest.raises(jobs.JobIdTaken) as refused:
        jobs.submit(queue, spec)
    assert str(refused.value) == (
        "--request-id 'old': the combine step old.combine of an earlier run of data job old is "
        "still in queue 'q' (cancelled), though its chunk request has expired; choose another "
        "job id, or submit again once it has expired too (a held one must be cancelled first)")
    assert {k: redis_client.dump(k) for k in keys_under(redis_client, prefix)} == before


def test_a_combine_id_taken_between_the_check_and_the_call_is_refused_in_words(
    queue: Queue, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another producer takes `J.combine` after the submit checked the ids: the engine call
    refuses, writing nothing, and the submit says what holds the id, as its check would."""
    flow = queue.submit_flow

    def racing(*args: Any, **kwargs: Any) -> Any:
        queue.submit([1], handler="noop", request_id="race.combine")
        return flow(*args, **kwargs)

    monkeypatch.setattr(queue, "submit_flow", racing)
    with pytest.raises(jobs.JobIdTaken, match=r"request race\.combine already exists in queue "
                                              r"'q' and is not the combine step of data job race"):
        jobs.submit(queue, a_spec(tmp_path, "race"))
    assert read.request(queue, "race") is None
    assert not queue.records(jobs.RECORD_KIND).exists("race")
