"""The console's "Spark warming" notice: while the stack's first Spark job runs (`warmspark`,
core.queue.spark_warming), the overview and the data jobs page say that a data job queued now
waits for Spark, so a slow first job is not a mystery.

A context processor: every template may show `spark_warming`, read from Redis (one HGETALL,
shared like the aggregates) only by the pages that do.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest

from core.conf import redis_client
from core.queue import QueueError, spark_warming

from .aggregates import cached


def notice() -> str:
    """"Spark is warming up (its first job runs, 12 s so far)", or "" when it is not (or
    Redis cannot say: the page's other parts report an outage)."""
    prefix = settings.QUEUE_PREFIX
    def read() -> spark_warming.SparkWarming | bool:
        return spark_warming.read(redis_client(), prefix=prefix) or False  # False is cached

    try:
        found = cached(f"spark-warming|{prefix}", read)
    except QueueError:
        return ""
    return found.describe() if isinstance(found, spark_warming.SparkWarming) else ""


def context(request: HttpRequest) -> dict[str, Any]:
    """`spark_warming`: notice(), called when a template first asks for it."""
    return {"spark_warming": notice}
