"""What a data job's submit-time check found is kept for the next submit of the same job over
the same files (core/pipeline/checkcache.py), and only then: a changed file, statement or
view is checked again, a refusal is never kept, an entry that cannot be read is a miss, and
the worker's own check of a task never reads what was kept."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.pipeline import checkcache
from core.pipeline.check import confine, make_spec
from core.pipeline.spec import SpecError
from core.pipeline.sqlcheck import SQLRefused

SQL = "SELECT a, sum(b) AS total FROM chunk GROUP BY a"


@pytest.fixture
def kept(settings: Any, tmp_path: Path) -> Path:
    """A folder of the test's own for the kept answers."""
    settings.CHECK_CACHE_DIR = tmp_path / "kept"
    return tmp_path / "kept"


def entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def job(tmp_path: Path, input: Path, sql: str = SQL, **kw: Any) -> Any:
    fmt = kw.pop("format", "csv")
    return make_spec(job_id="j1", input=str(input), format=fmt, sql=sql,
                     output=str(tmp_path / "out"), **kw)


def test_an_answer_is_kept_and_found_for_the_same_job_over_the_same_file(
        kept: Path, tmp_path: Path) -> None:
    data = tmp_path / "t.parquet"
    pq.write_table(pa.table({"a": ["x", "y"], "b": [1, 2]}), data)

    spec = job(tmp_path, data, format="parquet", partition_by=["a"])
    [entry] = entries(kept)
    assert json.loads(entry.read_text())["columns"] == ["a", "total"]
    assert checkcache.get(checkcache.key(spec)) == checkcache.Cached(("a", "total"))

    again = job(tmp_path, data, format="parquet", partition_by=["a"])
    assert again == spec and entries(kept) == [entry]
    # The kept columns still check --partition-by, as the SQL's own would.
    with pytest.raises(SpecError, match="the output has no column 'nope'"):
        job(tmp_path, data, format="parquet", partition_by=["nope"])


def test_a_file_rewritten_with_other_columns_is_checked_again(kept: Path,
                                                              tmp_path: Path) -> None:
    data = tmp_path / "t.csv"
    data.write_text("a,b\nx,1\n")
    job(tmp_path, data)
    before = data.stat()
    # The same size, within one tick of the file system's clock (its time put back).
    data.write_text("c,b\nx,1\n")
    os.utime(data, ns=(before.st_atime_ns, before.st_mtime_ns))

    with pytest.raises(SQLRefused, match="a"):
        job(tmp_path, data)
    assert len(entries(kept)) == 1


def test_other_sql_or_another_view_is_a_miss(kept: Path, tmp_path: Path) -> None:
    data = tmp_path / "t.csv"
    data.write_text("a,b\nx,1\n")
    other = tmp_path / "v.csv"
    other.write_text("a,c\nx,2\n")
    job(tmp_path, data)
    job(tmp_path, data, sql="SELECT a FROM chunk")
    job(tmp_path, data, sql="SELECT chunk.a, c FROM chunk JOIN v ON chunk.a = v.a",
        views={"v": str(other)})
    assert len(entries(kept)) == 3

    other.write_text("a,d\nx,2\n")
    with pytest.raises(SQLRefused, match="c"):
        job(tmp_path, data, sql="SELECT chunk.a, c FROM chunk JOIN v ON chunk.a = v.a",
            views={"v": str(other)})


def test_a_refusal_is_not_kept(kept: Path, tmp_path: Path) -> None:
    data = tmp_path / "t.csv"
    data.write_text("a,b\nx,1\n")
    for _ in range(2):
        with pytest.raises(SQLRefused, match="nope"):
            job(tmp_path, data, sql="SELECT nope FROM chunk")
    assert entries(kept) == []


def test_an_entry_that_cannot_be_read_is_a_miss_and_written_again(kept: Path,
                                                                  tmp_path: Path) -> None:
    data = tmp_path / "t.csv"
    data.write_text("a,b\nx,1\n")
    spec = job(tmp_path, data)
    [entry] = entries(kept)
    for junk in ("{not json", json.dumps({"key": "another", "columns": ["z"]}),
                 json.dumps({"key": json.loads(entry.read_text())["key"], "columns": 7})):
        entry.write_text(junk)
        assert checkcache.get(checkcache.key(spec)) is None
        assert job(tmp_path, data) == spec
        assert json.loads(entry.read_text())["columns"] == ["a", "total"]


def test_nothing_is_kept_when_switched_off_or_when_the_folder_cannot_be_written(
        settings: Any, tmp_path: Path) -> None:
    data = tmp_path / "t.csv"
    data.write_text("a,b\nx,1\n")
    settings.CHECK_CACHE_DIR = None
    assert job(tmp_path, data).sql == SQL

    blocked = tmp_path / "a-file"
    blocked.write_text("")
    settings.CHECK_CACHE_DIR = blocked / "kept"  # a folder inside a file: cannot be made
    assert job(tmp_path, data).sql == SQL
    assert {p.name for p in tmp_path.rglob("*")} == {"t.csv", "a-file"}


def test_the_oldest_entries_go_past_the_most_kept(kept: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkcache, "MAX_ENTRIES", 8)
    data = tmp_path / "t.csv"
    data.write_text("a,b\nx,1\n")
    for n in range(20):
        job(tmp_path, data, sql=f"SELECT a, b + {n} AS c FROM chunk")
    assert 6 <= len(entries(kept)) <= 8
    assert not list(kept.glob(".tmp-*"))


def test_a_planted_entry_does_not_get_past_the_workers_check(kept: Path,
                                                             tmp_path: Path) -> None:
    """What is kept answers a submit only: the worker checks each task's statements itself."""
    data = tmp_path / "t.csv"
    data.write_text("a,b\nx,1\n")
    bad = "SELECT reflect('java.lang.Runtime', 'getRuntime') AS r FROM chunk"
    with pytest.raises(SQLRefused, match="reflect"):
        job(tmp_path, data, sql=bad)
    spec = replace(job(tmp_path, data, sql="SELECT a AS r FROM chunk"), sql=bad)
    k = checkcache.key(spec)
    assert k is not None
    checkcache.put(k, ("r",))  # planted by someone who may write the folder

    assert job(tmp_path, data, sql=bad).sql == bad  # the submit took the planted answer
    with pytest.raises(SQLRefused, match="reflect"):
        confine(spec)
