"""The mirror's statements: rows read and written in bulk, below the ORM (which costs more than
the database does at tens of thousands of rows a second).

On PostgreSQL new rows go by COPY (psycopg 3's `cursor.copy`), rows that exist through a
temporary table and one INSERT ... SELECT ... ON CONFLICT DO UPDATE; on SQLite by executemany()
of one INSERT ... ON CONFLICT DO UPDATE on the driver's own cursor (Django's wrapper rewrites
the placeholders of every statement). Datetimes are written as Django writes them: aware on
PostgreSQL, naive UTC text on SQLite.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from django.db import IntegrityError, connections, router, transaction
from django.db.models import DateTimeField, Model

CHUNK = 500  # keys per SELECT ... IN on SQLite (its limit on parameters is far above)


def connection_for(model: type[Model]) -> Any:
    return connections[router.db_for_write(model)]


def _sqlite_time(v: datetime) -> str:
    # As Django's SQLite backend writes a datetime (adapt_datetimefield_value): naive UTC text.
    if v.tzinfo is not UTC:
        v = v.astimezone(UTC)
    return v.replace(tzinfo=None).isoformat(" ")


_TIMES: dict[tuple[str, tuple[str, ...]], tuple[int, ...]] = {}


def _times(model: type[Model], columns: Sequence[str]) -> tuple[int, ...]:
    """The positions of `columns` that are datetimes (cached per table and columns)."""
    key = (model._meta.db_table, tuple(columns))
    if (got := _TIMES.get(key)) is None:
        got = _TIMES[key] = tuple(i for i, c in enumerate(columns)
                                  if isinstance(model._meta.get_field(c), DateTimeField))
    return got


def _for_sqlite(model: type[Model], columns: Sequence[str], rows: Sequence[Sequence[Any]]
                ) -> list[list[Any]]:
    times = _times(model, columns)
    out = []
    for row in rows:
        row = list(row)
        for i in times:
            if (v := row[i]) is not None:
                row[i] = _sqlite_time(v)
        out.append(row)
    return out


@contextmanager
def _cursor(conn: Any) -> Iterator[Any]:
    """The driver's cursor: psycopg's on PostgreSQL, sqlite3's own (no placeholder rewriting)
    on SQLite."""
    if conn.vendor == "postgresql":
        with conn.cursor() as wrapper:
            yield wrapper.cursor
    else:
        conn.ensure_connection()
        raw = conn.connection.cursor()
        try:
            yield raw
        finally:
            raw.close()


def select(
    model: type[Model], columns: Sequence[str], where: dict[str, Any], key: str,
    values: Sequence[str],
) -> list[tuple[Any, ...]]:
    """`columns` of the rows of `model` matching `where` whose `key` is one of `values`
    (datetimes aware, as the ORM gives them)."""
    if not values:
        return []
    conn = connection_for(model)
    qn = conn.ops.quote_name
    table = qn(model._meta.db_table)
    cols = ", ".join(qn(c) for c in columns)
    fixed = " AND ".join(f"{qn(k)} = %s" for k in where)
    out: list[tuple[Any, ...]] = []
    with _cursor(conn) as cur:
        if conn.vendor == "postgresql":
            cur.execute(f"SELECT {cols} FROM {table} WHERE {fixed} AND {qn(key)} = ANY(%s)",
                        [*where.values(), list(values)])
            return list(cur.fetchall())
        fixed = fixed.replace("%s", "?")
        times = _times(model, columns)
        for i in range(0, len(values), CHUNK):
            part = values[i : i + CHUNK]
            cur.execute(f"SELECT {cols} FROM {table} WHERE {fixed} AND {qn(key)} IN "
                        f"({', '.join('?' * len(part))})", [*where.values(), *part])
            rows = cur.fetchall()
            if times:
                # Django's converter gives naive UTC datetimes: aware, as the ORM's.
                rows = [list(r) for r in rows]
                for r in rows:
                    for t in times:
                        if r[t] is not None:
                            r[t] = r[t].replace(tzinfo=UTC)
            out += [tuple(r) for r in rows]
    return out


def insert(model: type[Model], columns: Sequence[str], rows: Sequence[Sequence[Any]], *,
           key: Sequence[str] = (), update: Sequence[str] = ()) -> None:
    """Rows that should be new (their keys looked up in this transaction): COPY on PostgreSQL.
    Should one exist after all (a writer that did not take the mirror's lock), the rows go
    through upsert() instead: with `update` they overwrite it, without they leave it."""
    if not rows:
        return
    conn = connection_for(model)
    if conn.vendor != "postgresql":
        upsert(model, columns, rows, key=key, update=update)
        return
    qn = conn.ops.quote_name
    copy_sql = (f"COPY {qn(model._meta.db_table)} ({', '.join(qn(c) for c in columns)}) "
                "FROM STDIN")
    try:
        with transaction.atomic(using=conn.alias), _cursor(conn) as cur, \
                cur.copy(copy_sql) as copy:
            for row in rows:
                copy.write_row(row)
    except IntegrityError:
        if not key:
            raise
        upsert(model, columns, rows, key=key, update=update)


def upsert(model: type[Model], columns: Sequence[str], rows: Sequence[Sequence[Any]], *,
           key: Sequence[str], update: Sequence[str] = ()) -> None:
    """INSERT ... ON CONFLICT (key) DO UPDATE SET update (DO NOTHING without `update`)."""
    if not rows:
        return
    conn = connection_for(model)
    qn = conn.ops.quote_name
    table = qn(model._meta.db_table)
    cols = ", ".join(qn(c) for c in columns)
    action = ("DO UPDATE SET " + ", ".join(f"{qn(c)} = EXCLUDED.{qn(c)}" for c in update)
              if update else "DO NOTHING")
    conflict = f"ON CONFLICT ({', '.join(qn(c) for c in key)}) {action}"
    with _cursor(conn) as cur:
        if conn.vendor == "postgresql":
            # COPY into a temporary table of the same columns, then one statement.
            temp = qn(f"qa_mirror_{model._meta.db_table}")
            _temporary(cur, temp, f"SELECT {cols} FROM {table}")
            with cur.copy(f"COPY {temp} ({cols}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            cur.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {temp} {conflict}")
            return
        one = ", ".join("?" * len(columns))
        cur.executemany(f"INSERT INTO {table} ({cols}) VALUES ({one}) {conflict}",
                        _for_sqlite(model, columns, rows))


def _temporary(cur: Any, temp: str, like: str) -> None:
    """An empty temporary table (emptied at every commit; made again if a rollback took it
    away: IF NOT EXISTS costs a catalog lookup)."""
    cur.execute(f"CREATE TEMPORARY TABLE IF NOT EXISTS {temp} ON COMMIT DELETE ROWS AS "
                f"{like} WITH NO DATA")
    cur.execute(f"DELETE FROM {temp}")  # used twice in one transaction


def append(model: type[Model], columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Rows that are new by construction (no key to conflict on): COPY or executemany."""
    if not rows:
        return
    conn = connection_for(model)
    qn = conn.ops.quote_name
    table = qn(model._meta.db_table)
    cols = ", ".join(qn(c) for c in columns)
    with _cursor(conn) as cur:
        if conn.vendor == "postgresql":
            with cur.copy(f"COPY {table} ({cols}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            return
        one = ", ".join("?" * len(columns))
        cur.executemany(f"INSERT INTO {table} ({cols}) VALUES ({one})",
                        _for_sqlite(model, columns, rows))
