"""Data jobs in the database (issue 35): what a data job's Redis record says (its spec, split
plan, chunk reports, manifest and the EXPLAIN of its SQL), kept after Redis has forgotten it.

The mirror writes these rows (core.mirror.datajobs) from the job's record and requests, as the
job runs and when it finishes, idempotently; the Data jobs pages read Redis while the record
lasts and these rows after. Retention prunes them by `finished_at` (NULL while the job runs).
"""

from __future__ import annotations

from django.db import models

JOB_STATES = [
    (s, s) for s in ("scheduled", "running", "done", "failed", "cancelled", "expired")
]
CHUNK_STATES = [(s, s) for s in ("done", "failed")]


class DataJob(models.Model):
    """One data job of one queue, as its record and requests last said."""

    queue = models.CharField(max_length=200)
    job_id = models.CharField(max_length=200)
    state = models.CharField(max_length=12, choices=JOB_STATES)
    cancelled = models.BooleanField(default=False)  # an operator cancelled it
    spec = models.TextField()  # JSON: core.pipeline.spec.JobSpec.to_json()
    priority = models.PositiveSmallIntegerField(default=0)
    tenant = models.CharField(max_length=200, default="")
    # The split: how the input was cut, into how many chunks, its rows (NULL: not counted),
    # the plan itself (JSON: each chunk's read) and how long planning took.
    split_how = models.CharField(max_length=20, default="")
    chunks = models.PositiveIntegerField(null=True, blank=True)
    input_rows = models.BigIntegerField(null=True, blank=True)
    plan = models.TextField(default="", blank=True)
    split_seconds = models.FloatField(null=True, blank=True)
    # Spark's EXPLAIN of the chunk SQL over the first chunk's read, and of the combine SQL,
    # captured at the split.
    explain_sql = models.TextField(default="", blank=True)
    explain_combine = models.TextField(default="", blank=True)
    # The chunks' reports summed (each is a DataJobChunk row).
    chunks_done = models.PositiveIntegerField(default=0)
    chunks_failed = models.PositiveIntegerField(default=0)
    rows_in = models.BigIntegerField(null=True, blank=True)
    rows_out = models.BigIntegerField(null=True, blank=True)
    chunk_seconds = models.FloatField(null=True, blank=True)
    combine_seconds = models.FloatField(null=True, blank=True)
    manifest = models.TextField(default="", blank=True)  # JSON, once done
    # Why it failed (one line per failed task) and its dead letters (JSON, the latest few,
    # their errors cut), so that its page says why once Redis has forgotten them.
    failures = models.TextField(default="", blank=True)
    letters = models.TextField(default="", blank=True)
    created_at = models.DateTimeField()  # submitted
    finished_at = models.DateTimeField(null=True, blank=True, db_index=True)
    updated_at = models.DateTimeField()  # last copied from Redis

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["queue", "job_id"], name="datajob_queue_id")
        ]
        indexes = [
            # The list, newest first, by keyset (core.console.paging.keyset).
            models.Index(fields=["queue", "created_at", "id"], name="datajob_queue_created"),
            # The mirror's refresh of the jobs still running; retention per queue.
            models.Index(fields=["queue", "finished_at"], name="datajob_queue_finished"),
        ]

    def __str__(self) -> str:
        return f"{self.queue}/{self.job_id} ({self.state})"


class DataJobChunk(models.Model):
    """One chunk's report (done), or its dead letter (failed)."""

    job = models.ForeignKey(DataJob, on_delete=models.CASCADE, related_name="chunk_rows")
    chunk = models.PositiveIntegerField()
    state = models.CharField(max_length=12, choices=CHUNK_STATES)
    rows_in = models.BigIntegerField(null=True, blank=True)  # NULL: not counted (CSV, JSON)
    rows_out = models.BigIntegerField(null=True, blank=True)
    seconds = models.FloatField(null=True, blank=True)
    attempt = models.PositiveIntegerField(null=True, blank=True)  # the run that reported
    worker = models.CharField(max_length=200, default="")
    part_written_by = models.CharField(max_length=10, default="")  # worker or spark
    # As Spark reported them for the chunk's queries (NULL: Spark did not say).
    input_bytes = models.BigIntegerField(null=True, blank=True)
    shuffle_read_bytes = models.BigIntegerField(null=True, blank=True)
    shuffle_write_bytes = models.BigIntegerField(null=True, blank=True)
    # Failed: its dead letter's error (cut), id and group (core.mirror.fingerprint).
    error = models.TextField(default="", blank=True)
    letter = models.CharField(max_length=40, default="", blank=True)
    fingerprint = models.CharField(max_length=64, default="", blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "chunk"], name="datajobchunk_job_chunk")
        ]

    def __str__(self) -> str:
        return f"chunk {self.chunk} of {self.job_id} ({self.state})"
