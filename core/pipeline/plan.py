"""Splitting a Parquet input without copying it: the split task reads only the files' footers
(row counts per row group), cuts the input's rows into N contiguous slices, and each chunk
task reads its own slice of the input.

Where a slice falls:
- on whole files (a directory or glob of many files, as Spark and most tools write them), the
  chunk's Spark job reads those files directly, with Spark's own column pruning: nothing is
  staged;
- inside a file (one big file of many row groups), the chunk reads the row groups of its
  slice with pyarrow, keeping only the columns its SQL reads (Spark's plan says which), and
  stages them as one uncompressed Parquet file for its Spark job.

Cuts fall on row-group boundaries when there are at least as many row groups as chunks (so a
slice never reads a row group another slice reads), and on row numbers otherwise.

Inputs this does not plan (CSV, JSON lines, a path that is not on a local or mounted
filesystem, a Hive-partitioned directory whose columns live in its folder names) are split by
Spark in the split task, as staged Parquet chunks (tasks.split_with_spark).
"""

from __future__ import annotations

import bisect
import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .spec import JobSpec, _matches, is_local, local_path

if TYPE_CHECKING:
    import pyarrow as pa

BATCH_ROWS = 65_536  # rows per batch read and written when a slice is staged
STAGE_OPTIONS: dict[str, Any] = {
    # A staged slice lives for one task: writing it fast beats writing it small.
    "compression": "none",
    # Spark reads microsecond timestamps; pyarrow would keep a nanosecond input as nanoseconds.
    "coerce_timestamps": "us",
    "allow_truncated_timestamps": True,
}


@dataclass(frozen=True)
class Piece:
    """Rows [start, stop) of one input file, numbered within the file."""

    path: str
    start: int
    stop: int
    file_rows: int

    @property
    def whole(self) -> bool:
        return self.start == 0 and self.stop == self.file_rows

    def to_list(self) -> list[Any]:
        return [self.path, self.start, self.stop, self.file_rows]

    @classmethod
    def from_list(cls, v: list[Any]) -> Piece:
        return cls(str(v[0]), int(v[1]), int(v[2]), int(v[3]))


@dataclass(frozen=True)
class InputFile:
    path: str
    group_rows: tuple[int, ...]  # rows of each row group, in file order

    @property
    def rows(self) -> int:
        return sum(self.group_rows)


def input_files(spec: JobSpec) -> list[str] | None:
    """The data files of a local input, in a stable order (sorted paths); None when the
    input's files cannot be listed from here or its folder names carry columns."""
    if not is_local(spec.input):
        return None
    files: list[str] = []
    for match in sorted(_matches(local_path(spec.input))):
        p = Path(match)
        if p.is_dir():
            for root, dirs, names in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
                if any("=" in d for d in dirs):
                    return None  # partition columns: Spark's discovery is needed
                files += [os.path.join(root, n) for n in sorted(names)
                          if not n.startswith((".", "_"))]
        elif p.is_file() and not p.name.startswith((".", "_")):
            files.append(str(p))
    return files


def read_footers(paths: list[str]) -> list[InputFile]:
    import pyarrow.parquet as pq

    out = []
    for path in paths:
        md = pq.ParquetFile(path).metadata
        out.append(InputFile(path, tuple(md.row_group(i).num_rows
                                         for i in range(md.num_row_groups))))
    return out


def cut_points(files: list[InputFile], n: int) -> list[int]:
    """n + 1 row numbers (0 ... total) that cut the input into n slices of about equal rows:
    on row-group boundaries when there are at least n non-empty row groups, else on rows."""
    total = sum(f.rows for f in files)
    bounds: list[int] = []
    at = 0
    for f in files:
        for r in f.group_rows:
            if r:
                at += r
                bounds.append(at)
    if len(bounds) < n:
        return [total * k // n for k in range(n + 1)]
    points, prev = [0], -1
    for k in range(1, n):
        goal = total * k / n
        j = bisect.bisect_left(bounds, goal)
        if j > 0 and (j == len(bounds) or goal - bounds[j - 1] <= bounds[j] - goal):
            j -= 1  # the nearer of the two boundaries around the goal
        # after the previous cut, and leaving a row group for each slice still to come
        j = min(max(j, prev + 1), len(bounds) - 1 - (n - k))
        points.append(bounds[j])
        prev = j
    points.append(total)
    return points


def slices(files: list[InputFile], n: int) -> list[list[Piece]]:
    """The input cut into n slices (a slice may be empty only when there are fewer rows than
    slices), each a list of pieces of files."""
    points = cut_points(files, n)
    out: list[list[Piece]] = []
    for lo, hi in itertools.pairwise(points):
        pieces, first = [], 0
        for f in files:
            a, b = max(lo, first), min(hi, first + f.rows)
            if a < b:
                pieces.append(Piece(f.path, a - first, b - first, f.rows))
            first += f.rows
        out.append(pieces)
    return out


class InputError(ValueError):
    """The input cannot be staged as it is; the message says why."""


def read_pieces(pieces: list[Piece], columns: list[str] | None
                ) -> Iterator[tuple[str, pa.RecordBatch]]:
    """The rows of `pieces` (with the file each batch comes from), only `columns` (None:
    all), read with pyarrow batch by batch, so memory stays bounded whatever the slice's
    size: only the row groups that hold the rows are decoded."""
    import pyarrow.parquet as pq

    for piece in pieces:
        pf = pq.ParquetFile(piece.path)
        md = pf.metadata
        groups, first, pos = [], 0, -1
        for g in range(md.num_row_groups):
            rows = md.row_group(g).num_rows
            if first + rows > piece.start and first < piece.stop:
                groups.append(g)
                pos = first if pos < 0 else pos
            first += rows
        for batch in pf.iter_batches(batch_size=BATCH_ROWS, row_groups=groups,
                                     columns=columns):
            lo, hi = max(piece.start, pos), min(piece.stop, pos + batch.num_rows)
            if lo < hi:
                yield piece.path, batch.slice(lo - pos, hi - lo)
            pos += batch.num_rows
            if pos >= piece.stop:
                break


def stage(pieces: list[Piece], columns: list[str] | None, target: Path, *, probe: str) -> int:
    """Write the slice as one Parquet file under the directory `target`, batch by batch;
    returns its rows. An empty slice (fewer rows than chunks) is an empty file with the
    schema of `probe`. InputError if the slice's files do not share one schema."""
    import pyarrow.parquet as pq

    target.mkdir(parents=True, exist_ok=True)
    out = target / "part-00000.parquet"
    writer: pq.ParquetWriter | None = None
    rows, first_path = 0, ""
    try:
        for path, batch in read_pieces(pieces, columns):
            if writer is None:
                writer, first_path = pq.ParquetWriter(out, batch.schema, **STAGE_OPTIONS), path
            elif not batch.schema.equals(writer.schema, check_metadata=False):
                raise InputError(
                    f"the input's files do not share one schema: {path} has "
                    f"({_columns_text(batch.schema)}) where {first_path} has "
                    f"({_columns_text(writer.schema)})")
            writer.write_batch(batch)
            rows += batch.num_rows
        if writer is None:
            empty = pq.read_schema(probe).empty_table()
            pq.write_table(empty.select(columns) if columns is not None else empty, out,
                           **STAGE_OPTIONS)
    finally:
        if writer is not None:
            writer.close()
    return rows


def _columns_text(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name} {f.type}" for f in schema)
