"""Data jobs as operations (core.ops.datajobs): one submit and one clean for the console's
form and `manage.py datajob`, each checking the actor's permission (a refusal audited), writing
one audit entry (also when Redis fails) and returning what the front ends only display: the
job's id, whether it is new, and why it waits (queue paused, no worker of its handler, Spark
warming up)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from django.contrib.auth.models import User

from core.models import AuditEntry
from core.ops import datajobs
from core.ops.audit import as_actor
from core.ops.errors import BadInput, Refused
from core.pipeline import jobs
from core.pipeline.check import make_spec
from core.pipeline.spec import JobSpec
from core.queue import Queue, RedisReplyError, handlers, spark_warming
from tests.conftest import keys_under
from tests.ops_support import CLI

pytestmark = pytest.mark.django_db


def spec_in(tmp_path: Path, job_id: str = "dj1") -> JobSpec:
    data = tmp_path / "in.parquet"
    if not data.exists():
        pd.DataFrame({"carrier": ["AA", "UA"]}).to_parquet(data, index=False)
    return make_spec(job_id=job_id, input=str(data), format="parquet",
                     output=str(tmp_path / f"out-{job_id}"), sql="SELECT * FROM chunk")


def entries() -> list[tuple[Any, ...]]:
    return list(AuditEntry.objects.order_by("id").values_list(
        "actor", "action", "target", "count", "acted", "skipped", "refused"))


def test_a_submit_is_one_entry_and_says_what_the_job_waits_for(
    django_queue: Queue, operator_user: User, tmp_path: Path
) -> None:
    spec = spec_in(tmp_path)
    done = datajobs.submit(as_actor(operator_user), django_queue.name, spec)
    assert (done.queue, done.job_id, done.created) == ("default", "dj1", True)
    # No worker announced the data jobs' handler; the queue runs; no Spark warms up.
    assert (done.no_worker, done.paused, done.warming, done.request) == (True, False, "", None)
    assert jobs.status(django_queue, "dj1").state == "running"
    target = f"data job dj1: {spec.input} -> {spec.output}"
    assert entries() == [("otto", "datajob", target, 1, 1, 0, False)]
    assert AuditEntry.objects.get(pk=done.audit_id).acted == 1

    again = datajobs.submit(as_actor(operator_user), django_queue.name, spec)
    assert (again.created, again.paused, again.warming) == (False, False, "")
    assert entries()[-1] == ("otto", "datajob", target, 1, 0, 1, False)


def test_a_new_job_says_its_queue_is_paused_and_spark_warms_up(
    django_queue: Queue, tmp_path: Path
) -> None:
    handlers.announce(django_queue, "w1", [jobs.HANDLER])
    django_queue.pause()
    spark_warming.mark(django_queue.redis, prefix=django_queue.keys.prefix,
                       url="sc://127.0.0.1:15002", phase=spark_warming.FIRST_JOB, ttl_s=60)
    done = datajobs.submit(CLI, django_queue.name, spec_in(tmp_path), delay=3600)
    assert (done.created, done.no_worker, done.paused) == (True, False, True)
    assert done.warming.startswith("Spark is warming up (its first job runs")
    assert done.request is not None and done.request.state == "scheduled"


def test_a_refused_actor_is_audited_and_nothing_is_queued(
    django_queue: Queue, viewer_user: User, tmp_path: Path
) -> None:
    spec = spec_in(tmp_path)
    with pytest.raises(Refused, match=r"vera may not submit a data job: it needs the permission "
                                       r"core\.submit_datajob"):
        datajobs.submit(as_actor(viewer_user), django_queue.name, spec)
    assert entries() == [("vera", "datajob", f"data job dj1: {spec.input} -> {spec.output}",
                          1, 0, 0, True)]
    assert keys_under(django_queue.redis, django_queue.keys.prefix) == []
    with pytest.raises(Refused, match=r"core\.cancel_request"):
        datajobs.clean(as_actor(viewer_user), django_queue.name)
    assert entries()[-1][:2] + entries()[-1][-1:] == ("vera", "datajob-clean", True)


def test_a_taken_id_is_bad_input_and_writes_nothing(django_queue: Queue,
                                                     tmp_path: Path) -> None:
    with pytest.warns(Warning):  # no worker runs handler noop
        django_queue.submit([{"a": 1}], handler="noop", request_id="X")
    before = {k: django_queue.redis.dump(k)
              for k in keys_under(django_queue.redis, django_queue.keys.prefix)}
    with pytest.raises(BadInput, match="--request-id 'X': request X already exists"):
        datajobs.submit(CLI, django_queue.name, spec_in(tmp_path, "X"))
    assert {k: django_queue.redis.dump(k)
            for k in keys_under(django_queue.redis, django_queue.keys.prefix)} == before


def test_redis_refusing_the_submit_is_audited_with_its_error(
    django_queue: Queue, tmp_path: Path
) -> None:
    django_queue.redis.set(django_queue.keys.request("dj1"), "not a hash")
    with pytest.raises(RedisReplyError):
        datajobs.submit(CLI, django_queue.name, spec_in(tmp_path))
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.acted, entry.refused) == ("datajob", 0, False)
    assert "WRONGTYPE" in entry.error


def test_a_clean_says_what_it_removed_in_one_entry(django_queue: Queue,
                                                   tmp_path: Path) -> None:
    spec = spec_in(tmp_path)
    datajobs.submit(CLI, django_queue.name, spec)
    django_queue.cancel("dj1")
    (spec.staging / "parts").mkdir(parents=True)
    (spec.staging / "parts" / "p").write_bytes(b"x" * 10)
    dry = datajobs.clean(CLI, django_queue.name, dry_run=True)
    assert [(c.job_id, c.removed_bytes) for c in dry.removed] == [("dj1", 10)]
    assert spec.staging.exists()
    done = datajobs.clean(CLI, django_queue.name)
    assert [(c.job_id, c.removed_bytes) for c in done.removed] == [("dj1", 10)]
    assert not spec.staging.exists()
    what = "staging of the cancelled or expired data jobs of queue default: dj1"
    assert entries()[-2:] == [("os:tester", "datajob-clean", f"dry run: {what}", 1, 0, 0, False),
                              ("os:tester", "datajob-clean", what, 1, 1, 0, False)]


def test_a_cancel_is_the_whole_jobs_and_what_is_no_job_is_bad_input(
    django_queue: Queue, operator_user: User, tmp_path: Path
) -> None:
    with pytest.warns(Warning):  # no worker runs handler noop
        django_queue.submit([{"a": 1}], handler="noop", request_id="plain1")
    for job_id, says in (("plain1", "no data job 'plain1' in queue 'default'"),
                         ("nosuch", "no data job 'nosuch' in queue 'default'"),
                         ("a:b", "invalid job id")):
        with pytest.raises(BadInput, match=says):
            datajobs.cancel(as_actor(operator_user), django_queue.name, job_id)
    assert django_queue.state("plain1") == "active" and entries() == []
    datajobs.submit(CLI, django_queue.name, spec_in(tmp_path))
    result = datajobs.cancel(as_actor(operator_user), django_queue.name, "dj1", wait_s=0)
    assert (result.action, result.acted) == ("cancel", 1)
    assert jobs.status(django_queue, "dj1").state == "cancelled"
    assert entries()[-1][:2] + entries()[-1][-3:] == ("otto", "cancel", 1, 0, False)


def test_datajob_cancel_of_what_is_no_job_says_so_as_every_refusal_of_the_command(
        django_queue: Queue) -> None:
    """Bad input exits 2 with the command's name first, as `datajob cancel a:b` did already."""
    from django.core.management import call_command
    from django.core.management.base import CommandError

    for job_id, says in (("nosuch", "datajob cancel: no data job 'nosuch' in queue 'default'"),
                         ("a:b", "datajob cancel: invalid job id")):
        with pytest.raises(CommandError) as refused:
            call_command("datajob", "cancel", job_id)
        assert str(refused.value).startswith(says) and refused.value.returncode == 2
