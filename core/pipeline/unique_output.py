"""A data job's unique key (issue 37): one per output path, so that a job submitted while
another job writing the same output waits or runs creates nothing and answers with that job
(jobs.submit, unless unique_output=False). The chunk request holds the key and hands it to its
combine step when done (the engine's flow hand-over), so the key is held until the output is
written, or until the job fails or is cancelled."""

from __future__ import annotations

import hashlib
import re

# What core.queue.unique takes as a key after the "output:" prefix (at most 200 characters).
_PATH = re.compile(r"[A-Za-z0-9_.@=+:/-]{1,190}")


def output_key(output: str) -> str:
    """The unique key of the jobs writing `output`: the path itself where the engine takes it
    as a key, else a digest of it."""
    if _PATH.fullmatch(output):
        return f"output:{output}"
    return "output:sha256:" + hashlib.sha256(output.encode()).hexdigest()
