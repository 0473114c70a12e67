"""The mirror's tests (core/mirror): the queues' streams into the database, also killed
mid-batch and through Redis outages; tests/mirror_support.py compares rows with Redis."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.mirror_support import migrate_database
from tests.stack_support import migrated_sqlite


@pytest.fixture
def database_url(tmp_path: Path) -> Iterator[str]:
    """A database of its own for processes started by the test, migrated: a SQLite file, or a
    throwaway PostgreSQL database when the suite runs on PostgreSQL."""
    url = os.environ.get("DATABASE_URL", "")
    if url.startswith(("postgres://", "postgresql://")):
        import psycopg

        name = f"qa_mirror_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(url, autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        base = url.rsplit("/", 1)[0]
        yield_url = f"{base}/{name}"
        try:
            migrate_database(yield_url, tmp_path)
            yield yield_url
        finally:
            with psycopg.connect(url, autocommit=True) as c:
                c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    else:
        migrated_sqlite(tmp_path / "mirror.sqlite3")  # as migrate makes it, 3 s of CPU sooner
        yield f"sqlite:///{tmp_path / 'mirror.sqlite3'}"
