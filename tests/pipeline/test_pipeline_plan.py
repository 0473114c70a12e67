"""Planning a data job's chunks from metadata alone (core.pipeline.plan): where the cuts fall,
that the chunks' reads hold every row (or byte) exactly once, how each is read (whole files,
row groups, rows, byte ranges), and how many chunks the default gives. No Spark here: the
reads themselves are tested against Spark in test_pipeline_reads.py."""

from __future__ import annotations

import itertools
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.pipeline import plan
from core.pipeline.check import make_spec
from tests.pipeline_support import flights

MB = 1024 * 1024


def files_of(*groups: tuple[int, ...]) -> list[plan.InputFile]:
    return [plan.InputFile(f"f{i}", sum(g), g, g) for i, g in enumerate(groups)]


def test_cuts_fall_on_row_group_boundaries_when_there_are_enough_groups() -> None:
    points = plan.cut_points(files_of((100,) * 30), 8)
    assert points[0] == 0 and points[-1] == 3000 and len(points) == 9
    assert all(p % 100 == 0 for p in points)
    assert all(b > a for a, b in itertools.pairwise(points))  # none empty
    sizes = [b - a for a, b in itertools.pairwise(points)]
    assert max(sizes) - min(sizes) <= 100  # as even as whole groups allow


def test_cuts_weigh_groups_by_the_bytes_the_job_reads_not_their_rows() -> None:
    # Two files of 100 rows each; the first's groups hold 9 times the bytes of the second's.
    files = [plan.InputFile("a", 900, (50, 50), (450, 450)),
             plan.InputFile("b", 100, (50, 50), (50, 50))]
    assert plan.cut_points(files, 2) == [0, 50, 200]


def test_cuts_fall_on_rows_when_there_are_fewer_groups_than_chunks() -> None:
    assert plan.cut_points(files_of((600,)), 3) == [0, 200, 400, 600]
    assert plan.cut_points(files_of((5,)), 8) == [0, 0, 1, 1, 2, 3, 3, 4, 5]


def test_uneven_groups_leave_no_chunk_empty() -> None:
    assert plan.cut_points(files_of((1000, 1, 1, 1)), 4) == [0, 1000, 1001, 1002, 1003]


def test_parquet_reads_are_whole_files_row_groups_or_rows() -> None:
    files = files_of((100,), (100,), (50, 50), (100,))
    whole = plan.parquet_reads(files, 2, None)
    assert whole == [{"files": ["f0", "f1"], "known_rows": 200},
                     {"files": ["f2", "f3"], "known_rows": 200}]
    groups = plan.parquet_reads(files_of((30, 30, 30)), 2, None)
    assert groups == [{"groups": [["f0", 0, 1]], "known_rows": 30},
                      {"groups": [["f0", 1, 3]], "known_rows": 60}]
    rows = plan.parquet_reads(files_of((90,)), 3, None)
    assert [r["rows"] for r in rows] == [[["f0", 0, 30]], [["f0", 30, 60]], [["f0", 60, 90]]]
    mixed = plan.parquet_reads(files_of((10,), (10, 10, 10)), 2, None)
    assert mixed[0] == {"groups": [["f0", 0, 1], ["f1", 0, 1]], "known_rows": 20}
    for n in (1, 3, 7, 60):
        covered = []
        for read in plan.parquet_reads(files, n, None):
            by_file = {f.path: f for f in files}
            for path in read.get("files", []):
                covered += [(path, r) for r in range(by_file[path].rows)]
            for path, a, b in read.get("groups", []):
                start = sum(by_file[path].group_rows[:a])
                covered += [(path, r) for r in range(start, sum(by_file[path].group_rows[:b]))]
            for path, a, b in read.get("rows", []):
                covered += [(path, r) for r in range(a, b)]
        assert len(covered) == len(set(covered)) == 400


def test_whole_file_reads_keep_the_partition_base() -> None:
    files = [plan.InputFile(f"/d/m={i}/p.parquet", 10) for i in range(4)]
    reads = plan.file_reads(files, 2, "/d")
    assert reads == [{"files": ["/d/m=0/p.parquet", "/d/m=1/p.parquet"], "base": "/d"},
                     {"files": ["/d/m=2/p.parquet", "/d/m=3/p.parquet"], "base": "/d"}]
    assert len(plan.file_reads(files, 9, None)) == 4  # never more chunks than files


def test_byte_ranges_cover_every_byte_once_across_files() -> None:
    files = [plan.InputFile("a.csv", 1000), plan.InputFile("b.csv", 10),
             plan.InputFile("c.csv", 0), plan.InputFile("d.csv", 500)]
    for n in (1, 2, 3, 7, 100):
        reads = plan.range_reads(files, n)
        assert len(reads) == n
        seen = [(path, b) for r in reads for path, lo, hi in r["ranges"]
                for b in range(lo, hi)]
        assert len(seen) == len(set(seen)) == 1510


@pytest.mark.parametrize(("work", "slots", "want"), [
    (1 * MB, 4, 1),  # small: one chunk whatever the free slots
    (40 * MB, 4, 1),
    (100 * MB, 4, 4),  # worth sharing: a chunk per free slot
    (100 * MB, 1, 1),
    (700 * MB, 2, 2),  # one wave: a chunk per slot, however big, up to CHUNK_BYTES
    (plan.CHUNK_BYTES * 2, 2, 2),
    (plan.CHUNK_BYTES * 2 + 1, 2, 4),
    (plan.CHUNK_BYTES * 10, 2, 10),  # big: by size
    (plan.CHUNK_BYTES * 3, 2, 4),  # ... in whole waves
    (plan.CHUNK_BYTES * 5, 4, 8),
])
def test_the_default_chunking_is_by_size_and_free_slots(work: int, slots: int,
                                                        want: int) -> None:
    assert plan.default_chunks(work, slots) == want


def test_chunks_or_rows_per_chunk_win_over_the_default(tmp_path: Path) -> None:
    data = tmp_path / "f.parquet"
    flights(10).to_parquet(data, index=False)
    common = {"job_id": "c", "input": str(data), "format": "parquet",
              "output": str(tmp_path / "out"), "sql": "SELECT * FROM chunk"}
    spec = make_spec(**common, chunks=7)
    assert plan.chunk_count(spec, rows=10, work_bytes=10**12, slots=4) == 7
    spec = make_spec(**common, rows_per_chunk=3)
    assert plan.chunk_count(spec, rows=10, work_bytes=1, slots=4) == 4
    spec = make_spec(**common)
    assert plan.chunk_count(spec, rows=10, work_bytes=1, slots=4) == 1


def test_footers_give_rows_and_the_bytes_of_the_columns_read(tmp_path: Path) -> None:
    path = tmp_path / "f.parquet"
    pq.write_table(pa.Table.from_pandas(flights(1000), preserve_index=False), path,
                   row_group_size=250)
    [all_cols] = plan.read_footers([str(path)])
    [two] = plan.read_footers([str(path)], ["Carrier", "month"])  # as SQL names them
    assert all_cols.group_rows == two.group_rows == (250, 250, 250, 250)
    assert all(0 < b < a for a, b in zip(all_cols.group_bytes, two.group_bytes, strict=True))


def test_listing_skips_hidden_files_and_finds_partition_folders(tmp_path: Path) -> None:
    part = tmp_path / "by_month" / "month=1"
    part.mkdir(parents=True)
    flights(10).to_parquet(part / "a.parquet", index=False)
    spec = make_spec(job_id="p", input=str(tmp_path / "by_month"), format="parquet",
                     output=str(tmp_path / "out"), sql="SELECT * FROM chunk")
    listing = plan.list_input(spec)
    assert listing == plan.Listing([str(part / "a.parquet")], str(tmp_path / "by_month"))
    flat = tmp_path / "flat"
    flat.mkdir()
    for name in ("b.parquet", "a.parquet"):
        flights(10).to_parquet(flat / name, index=False)
    for name in ("_SUCCESS", ".a.parquet.crc"):
        (flat / name).write_text("")
    spec = make_spec(job_id="q", input=str(flat), format="parquet",
                     output=str(tmp_path / "out2"), sql="SELECT * FROM chunk")
    assert plan.list_input(spec) == plan.Listing([str(flat / "a.parquet"),
                                                  str(flat / "b.parquet")])
