"""Django's SQLite backend, which makes the database file's folder (QA_VAR_DIR by default:
private to its user, 0700) when it first opens the database, and keeps the database in
write-ahead-log mode. Nothing makes that folder at import any more, so a command that needs no
database (help, submit, queuestat, a refused runstack) leaves no var/ behind in the directory
it ran in; `migrate` or `createuser` in a new one still just works."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db.backends.sqlite3 import base


class DatabaseWrapper(base.DatabaseWrapper):
    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        name = str(conn_params["database"])
        if not (self.creation.is_in_memory_db(name) or name.startswith("file:")):
            folder = Path(name).parent
            try:
                folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            except OSError as exc:
                raise ImproperlyConfigured(
                    f"cannot create {folder} for the database ({exc.strerror}): run queueadmin "
                    "from a directory it may write in, or set QA_VAR_DIR (or DATABASE_URL)"
                ) from exc
        conn = super().get_new_connection(conn_params)
        if not self.creation.is_in_memory_db(name):
            # Write-ahead logging: the console's and the API's reads go on while the mirror,
            # the pruner or the alerts write, and a commit is one append (and fsync) to the
            # log instead of a rollback journal's copy and its fsyncs. Kept in the file: set
            # once, every later connection finds it; the -wal and -shm files sit beside it.
            conn.execute("PRAGMA journal_mode=WAL")
        return conn
