"""How a data job's input is cut into chunks that Spark reads where they are: nothing is copied
or staged. The split task plans from metadata alone (file listings, Parquet footers, file
sizes); each chunk task reads its own slice:

- **whole files** (a directory or glob of files, as Spark and most tools write a dataset): the
  chunk's files, read by Spark's own reader (its column pruning, a Hive-partitioned folder's
  columns from `basePath`);
- **Parquet row groups** (a file of many row groups): the chunk's groups of each file, read by
  the project's Spark reader (core.pipeline.jvm: Spark's vectorized Parquet reader over the
  byte range that holds exactly those groups);
- **rows inside a row group** (only when asked for more chunks than the input has row groups):
  the file read by Spark and filtered on its row numbers (`_metadata.row_index`), which costs a
  read of the file per chunk: the default chunking never cuts there;
- **byte ranges of CSV and JSON lines**, cut anywhere: each range owns the lines that start in
  it (Hadoop's line reader, through the project's Spark reader), parsed by Spark's own CSV and
  JSON parsers with the schema the split inferred.

How many chunks by default: one per slot the job can use at once (the queue's live worker
slots, capped by the job's concurrency) when the input is big enough to be worth sharing, so
that the chunks run as one wave; more only past CHUNK_BYTES a chunk, and then whole waves of
them. Chunks grow with the input, so Spark's fixed cost per chunk (0.2-0.3 s for a job in a
warm session) and the waves' tails shrink against the work; `--chunks` or `--rows-per-chunk`
override it.
"""

from __future__ import annotations

import bisect
import itertools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import PipelineError
from .spec import MAX_CHUNKS, JobSpec, _matches, is_local, local_path

# At most this many input bytes (of the columns a job reads, for Parquet) per chunk by default:
# big enough that Spark's fixed cost is a few percent of a chunk's work, small enough that a
# retried chunk redoes seconds, not minutes (a chunk of this size is ~10 s of one core here).
# With 192 MB chunks, 161.7M rows were 14 chunks in 7 waves, 1.78x plain PySpark; at 1 GiB, 4
# in 2 waves, 1.35x (bench/bench_pipeline.py; see docs/pipeline.md, "How many chunks").
CHUNK_BYTES = 4 * 1024 * 1024 * 1024
# Below this, an input is one chunk whatever the free slots: sharing it would cost more in
# fixed costs than it saves.
MIN_SHARED_BYTES = 48 * 1024 * 1024


@dataclass(frozen=True)
class InputFile:
    path: str
    size: int  # bytes on disk
    group_rows: tuple[int, ...] = ()  # Parquet: rows of each row group, in file order
    group_bytes: tuple[int, ...] = ()  # Parquet: compressed bytes each group holds of the
    # columns the job reads (all of them when not known)
    # Parquet: the columns as Arrow reads them (a pyarrow Schema), and whether one is INT96
    # (which Arrow and Spark read differently): for io.footer_frame().
    schema: Any = field(default=None, compare=False, repr=False)
    int96: bool = field(default=False, compare=False, repr=False)

    @property
    def rows(self) -> int:
        return sum(self.group_rows)


class InputError(PipelineError, ValueError):
    """An input file that cannot be read as the job says; the message names it."""


@dataclass(frozen=True)
class Listing:
    """An input's data files in a stable order, and the folder whose `name=value` subfolders
    give columns (None when there are none)."""

    files: list[str]
    base: str | None = None


def list_input(spec: JobSpec) -> Listing | None:
    """The data files of a local input (sorted; hidden and `_` files skipped); None when they
    cannot be listed from here (a remote path: Spark lists them)."""
    if not is_local(spec.input):
        return None
    files: list[str] = []
    base = None
    for match in sorted(_matches(local_path(spec.input))):
        p = Path(match)
        if p.is_dir():
            for root, dirs, names in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
                if any("=" in d for d in dirs):
                    base = str(p)  # partition columns: Spark reads them from the folders
                files += [os.path.join(root, n) for n in sorted(names)
                          if not n.startswith((".", "_"))]
        elif p.is_file() and not p.name.startswith((".", "_")):
            files.append(str(p))
    return Listing(files, base)


def read_footers(paths: list[str], columns: list[str] | None = None) -> list[InputFile]:
    """Each Parquet file's row groups (rows, and compressed bytes of `columns`, default all),
    from its footer alone."""
    import pyarrow.parquet as pq

    wanted = {c.lower() for c in columns} if columns is not None else None
    out = []
    for path in paths:
        try:
            md = pq.ParquetFile(path).metadata
        except FileNotFoundError:
            raise
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            raise InputError(f"{path} is corrupt or not Parquet (--format): "
                             f"{type(exc).__name__}: {exc}") from exc
        rows, sizes = [], []
        for i in range(md.num_row_groups):
            rg = md.row_group(i)
            rows.append(rg.num_rows)
            sizes.append(sum(
                rg.column(c).total_compressed_size for c in range(rg.num_columns)
                if wanted is None
                or rg.column(c).path_in_schema.split(".")[0].lower() in wanted))
        schema = md.schema
        int96 = any(schema.column(i).physical_type == "INT96" for i in range(len(schema)))
        out.append(InputFile(path, os.path.getsize(path), tuple(rows), tuple(sizes),
                             schema.to_arrow_schema(), int96))
    return out


def sizes(paths: list[str]) -> list[InputFile]:
    return [InputFile(p, os.path.getsize(p)) for p in paths]


def default_chunks(work_bytes: int, slots: int) -> int:
    """The default number of chunks for an input whose job reads `work_bytes` and can run on
    `slots` worker slots at once: one wave of a chunk per slot (none smaller than half of
    MIN_SHARED_BYTES), or whole waves of chunks of at most CHUNK_BYTES."""
    if work_bytes < MIN_SHARED_BYTES:
        return 1
    slots = max(1, slots)
    n = max(-(-work_bytes // CHUNK_BYTES),
            min(slots, -(-work_bytes // (MIN_SHARED_BYTES // 2))))
    if n > slots:
        n = -(-n // slots) * slots  # whole waves: no slot idles through the last one
    return max(1, min(n, MAX_CHUNKS))


def chunk_count(spec: JobSpec, *, rows: int | None, work_bytes: int, slots: int) -> int:
    """--chunks, else rows / --rows-per-chunk (when the rows are known), else by size."""
    if spec.chunks is not None:
        return spec.chunks
    if spec.rows_per_chunk is not None and rows is not None:
        return max(1, min(MAX_CHUNKS, -(-rows // spec.rows_per_chunk)))
    return default_chunks(work_bytes, slots)


# -- Parquet -------------------------------------------------------------------------------


def cut_points(files: list[InputFile], n: int) -> list[int]:
    """n + 1 row numbers (0 ... total) that cut the input into n slices of about equal bytes:
    on row-group boundaries when there are at least n non-empty row groups, else on rows."""
    total = sum(f.rows for f in files)
    bounds: list[int] = []  # row number after each non-empty group
    weight: list[int] = []  # bytes up to and including that group
    at = done = 0
    for f in files:
        for r, b in zip(f.group_rows, f.group_bytes or f.group_rows, strict=True):
            if r:
                at += r
                done += max(b, 1)
                bounds.append(at)
                weight.append(done)
    if len(bounds) < n:
        return [total * k // n for k in range(n + 1)]
    points, prev = [0], -1
    for k in range(1, n):
        goal = done * k / n
        j = bisect.bisect_left(weight, goal)
        if j > 0 and (j == len(weight) or goal - weight[j - 1] <= weight[j] - goal):
            j -= 1  # the nearer of the two boundaries around the goal
        # after the previous cut, and leaving a row group for each slice still to come
        j = min(max(j, prev + 1), len(bounds) - 1 - (n - k))
        points.append(bounds[j])
        prev = j
    points.append(total)
    return points


def parquet_reads(files: list[InputFile], n: int, base: str | None) -> list[dict[str, Any]]:
    """The n chunks' reads of a Parquet input: whole files, row groups, or rows."""
    out = []
    for lo, hi in itertools.pairwise(cut_points(files, n)):
        whole: list[str] = []
        groups: list[list[Any]] = []
        rows: list[list[Any]] = []
        first = 0
        for f in files:
            a, b = max(lo, first), min(hi, first + f.rows)
            if a < b:
                ga, gb = _group_span(f, a - first, b - first)
                if (a, b) == (first, first + f.rows):
                    whole.append(f.path)
                    groups.append([f.path, 0, len(f.group_rows)])
                elif ga is not None and gb is not None:
                    groups.append([f.path, ga, gb])
                else:
                    rows.append([f.path, a - first, b - first])
            first += f.rows
        known = {"known_rows": hi - lo}
        if rows:
            out.append({"rows": rows, **known})
        elif len(whole) == len(groups):
            out.append({"files": whole, **({"base": base} if base else {}), **known})
        else:
            out.append({"groups": groups, **known})
    return out


def _group_span(f: InputFile, start: int, stop: int) -> tuple[int | None, int | None]:
    """The row groups [first, end) that rows [start, stop) of `f` are exactly, or Nones."""
    edges = list(itertools.accumulate(f.group_rows, initial=0))
    try:
        return edges.index(start), edges.index(stop)
    except ValueError:
        return None, None


# -- whole files and byte ranges ---------------------------------------------------------


def file_reads(files: list[InputFile], n: int, base: str | None) -> list[dict[str, Any]]:
    """n chunks of whole files, of about equal bytes (n at most the number of files), each
    file a row group of one row for cut_points, so the cuts fall between files."""
    n = max(1, min(n, len(files)))
    as_groups = [InputFile(f.path, f.size, (1,), (max(f.size, 1),)) for f in files]
    extra = {"base": base} if base else {}
    return [{"files": [f.path for f in files[lo:hi]], **extra}
            for lo, hi in itertools.pairwise(cut_points(as_groups, n))]


def range_reads(files: list[InputFile], n: int) -> list[dict[str, Any]]:
    """n chunks of byte ranges of line-delimited files, of about equal bytes; a range owns the
    lines that start inside it, so the ranges' lines are every line once."""
    total = sum(f.size for f in files)
    cuts = [total * k // n for k in range(n + 1)]
    out = []
    for lo, hi in itertools.pairwise(cuts):
        ranges, first = [], 0
        for f in files:
            a, b = max(lo, first), min(hi, first + f.size)
            if a < b:
                ranges.append([f.path, a - first, b - first])
            first += f.size
        out.append({"ranges": ranges})
    return out


def read_rows(read: dict[str, Any]) -> int | None:
    """The rows a chunk's read holds when the plan knows them (Parquet), else None."""
    return read.get("known_rows")
