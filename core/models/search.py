"""Search documents: the words of a request's payloads, errors and ids (core.mirror.search)."""

from __future__ import annotations

from django.db import models


class SearchDoc(models.Model):
    """What the console's search box matches of one request (core.mirror.search writes it, from
    the request's events, hash and dead letters): bounded text, so that the history stays
    searchable after Redis forgets the request and its tasks. On PostgreSQL the table also has a
    generated column `vector` (tsvector) with a GIN index, added by migration 0011 alone."""

    queue = models.CharField(max_length=200)
    request_id = models.CharField(max_length=200)
    created_at = models.DateTimeField()  # the request's: results are paged by it
    # Its id, tenant, handler and the ids of its first tasks and of its dead tasks.
    words = models.TextField(default="")
    # Its first tasks' payloads (as the submitted/added events carry them), then those of its
    # dead tasks; capped (core.mirror.search.PAYLOADS_MAX).
    payloads = models.TextField(default="")
    errors = models.TextField(default="")  # its dead letters' messages, each once; capped
    # Newest events (submitted, added) and dead-stream entries folded in: older ones are not
    # folded in again, so replaying the streams changes nothing.
    last_event_id = models.CharField(max_length=40, default="")
    last_dead_id = models.CharField(max_length=40, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["queue", "request_id"], name="search_queue_id")
        ]
        indexes = [
            models.Index(fields=["created_at"], name="search_created"),
            models.Index(fields=["queue", "created_at"], name="search_queue_created"),
        ]

    def __str__(self) -> str:
        return f"{self.queue}/{self.request_id}"
