"""Two processes writing one SQLite database (the mirror, a command's audit entry, the
console): the one that comes second waits for the first's commit rather than failing with
"database is locked" (queueadmin/settings.py: transaction_mode IMMEDIATE)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from queueadmin.sqlite.base import DatabaseWrapper


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's locking")
def test_a_second_writer_waits_for_the_first_commit_instead_of_failing(
    tmp_path: Path, django_db_blocker: Any
) -> None:
    params = {**connection.settings_dict, "NAME": str(tmp_path / "db.sqlite3")}
    first = DatabaseWrapper(params, "first")
    errors: list[BaseException] = []
    with django_db_blocker.unblock():
        first.cursor().execute("CREATE TABLE t (n integer)")
        # The first's transaction reads before it writes, as a mirror batch does...
        first._start_transaction_under_autocommit()  # what atomic() does on SQLite
        first.cursor().execute("SELECT count(*) FROM t")

        def write() -> None:  # ...while another process writes and commits
            second = DatabaseWrapper(params, "second")  # (a connection is its thread's)
            try:
                second.cursor().execute("INSERT INTO t VALUES (2)")
            except BaseException as exc:  # kept for the assertion
                errors.append(exc)
            finally:
                second.close()

        other = threading.Thread(target=write)
        other.start()
        other.join(0.3)
        assert other.is_alive()  # it waits for the first's lock...
        first.cursor().execute("INSERT INTO t VALUES (1)")  # ...which writes without failing
        first.connection.commit()
        other.join(10)
        assert errors == []
        rows = first.cursor().execute("SELECT n FROM t ORDER BY n").fetchall()
        assert rows == [(1,), (2,)]
        first.close()
