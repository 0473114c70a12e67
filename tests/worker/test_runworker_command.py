"""`manage.py runworker` as a command: options, handler modules, and clear refusals."""

from __future__ import annotations

import gc
import signal
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from core.queue import Queue


def test_handler_modules_from_settings_are_loaded(django_queue: Queue, settings: Any) -> None:
    settings.QUEUEADMIN_HANDLER_MODULES = ["tests.handlers"]
    django_queue.submit([{"ms": 1}, {"ms": 1}], request_id="r", handler="pause")
    before, frozen = signal.getsignal(signal.SIGTERM), gc.get_freeze_count()
    call_command("runworker", "--burst", "--dead-after", "1")
    assert django_queue.state("r") == "done"
    assert signal.getsignal(signal.SIGTERM) is before  # the worker put the handler back
    # Run in this (the test's) process, not its own: nothing of it frozen out of the
    # garbage collector's sight (tests/worker/test_worker_tracing.py: a runworker process).
    assert gc.get_freeze_count() == frozen


def test_an_unimportable_handler_module_is_a_command_error(django_queue: Queue) -> None:
    with pytest.raises(CommandError, match=r"cannot import handler module 'no\.such\.module'"):
        call_command("runworker", "--burst", "--import", "no.such.module")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--slots", "0"], "slots must be 1 to 1,024"),
        (["--prefetch", "5000"], "prefetch must be between 1 and 1000"),
        (["--dead-after", "0.1"], "dead_after must be between 0.5 and 3600 seconds"),
        (["--name", "bad name"], "invalid worker name"),
        (["--queue", "a{b}"], "invalid queue name"),
    ],
)
def test_bad_options_are_command_errors(
    django_queue: Queue, args: list[str], message: str
) -> None:
    with pytest.raises(CommandError, match=message) as caught:
        call_command("runworker", "--burst", *args)
    assert "REDIS_URL" not in str(caught.value)  # the Redis hint is for Redis problems only


def test_a_bad_spark_conf_is_refused_before_any_task_is_taken(
    django_queue: Queue, settings: Any
) -> None:
    settings.SPARK_CONF = "spark.driver.memory=8g;memory=8g"
    django_queue.submit([{"ms": 1}], request_id="r", handler="noop")
    with pytest.raises(CommandError, match=r"SPARK_CONF: 'memory=8g' is not a Spark setting"):
        call_command("runworker", "--burst")
    assert django_queue.state("r") == "active"  # nothing taken
