"""A chunk's report: what its task recorded in the job's record when it had written its part
(and what the manifest lists per chunk)."""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass
class ChunkReport:
    chunk: int
    rows_in: int | None  # None: not counted (a CSV or JSON chunk)
    rows_out: int
    seconds: float
    attempt: int
    worker: str
    part_written_by: str = ""  # worker, spark, or "one step" (onestep.py)
    # As Spark reported them for the chunk's queries (None: it did not; core.pipeline.metered)
    input_bytes: int | None = None
    shuffle_read_bytes: int | None = None
    shuffle_write_bytes: int | None = None
    # Where its time went (None: a report of an earlier version): when it started (ms), how
    # long it waited in the queue before, its Spark query's seconds and its part's write's.
    started_ms: int | None = None
    queued_ms: int | None = None
    spark_s: float | None = None
    write_s: float | None = None

    @classmethod
    def from_json(cls, text: str) -> ChunkReport:
        d = json.loads(text)
        return cls(**{k: d[k] for k in ("chunk", "rows_in", "rows_out", "seconds", "attempt",
                                        "worker")},
                   **{k: d[k] for k in ("part_written_by", "input_bytes", "shuffle_read_bytes",
                                        "shuffle_write_bytes", "started_ms", "queued_ms",
                                        "spark_s", "write_s") if d.get(k) is not None})
