"""The stack says "Spark warming" until its Spark is warm (issue 33, 13: the first data job
after "queueadmin is up" took 50 s, and nothing said Spark was still warming): its start line
says so, and Redis holds the marker that the console and `datajob submit` show
(tests/console/test_spark_warming.py) until `warmspark` has run its first job."""

from __future__ import annotations

import time
import uuid

import pytest
import redis

from core.procs import free_port
from core.queue import spark_warming
from core.stack.redis_server import RedisServer
from tests.stack_support import StartStack

pytestmark = [pytest.mark.slow, pytest.mark.spark]


def test_the_stack_says_spark_warming_until_it_is_warm(
        start_stack: StartStack, redis_server: RedisServer) -> None:
    prefix = "warm" + uuid.uuid4().hex[:8]
    stack = start_stack("--workers", "1", REDIS_URL=redis_server.url, QUEUE_PREFIX=prefix,
                        QA_SPARK="", QA_SPARK_PORT=str(free_port()))
    stack.wait_for_line(r"queueadmin is up", timeout=180)
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    phases: list[str] = []
    deadline = time.monotonic() + 300
    while not any(line.startswith("spark is warm:") for line in stack.lines):
        assert stack.process.poll() is None, "".join(stack.lines)
        assert time.monotonic() < deadline, "".join(stack.lines)
        seen = spark_warming.read(client, prefix=prefix)
        if seen is not None and seen.phase not in phases:
            phases.append(seen.phase)
        time.sleep(0.02)
    said = "".join(stack.lines)
    up = said.index("queueadmin is up")
    warm = said.index("\nspark is warm:")
    # Its first job takes seconds (8-50 s measured): the stack is up well before it is done.
    assert up < said.index("Spark warming: a data job queued now waits for Spark") < warm, said
    assert spark_warming.FIRST_JOB in phases, phases
    assert spark_warming.read(client, prefix=prefix) is None  # warm: nothing to say
    client.close()
