"""`manage.py sampledata nycflights13 --out DIR`: the README walkthrough's data as Parquet."""

from __future__ import annotations

from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError

from core.cli import bad_input
from core.management.base import QueueadminCommand


class Command(QueueadminCommand):
    help = ("Write a sample data set as Parquet files: nycflights13 (flights, planes, weather, "
            "airports, airlines), one <table>.parquet each in --out.")

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("dataset", choices=["nycflights13"])
        parser.add_argument("--out", required=True, type=Path, help="directory to write to")

    def handle(self, *args: Any, **o: Any) -> None:
        from core.sample import nycflights13

        try:
            rows = nycflights13.write_tables(o["out"])
        except ModuleNotFoundError as exc:
            raise CommandError(f"{exc.name} is not installed: pip install -e . installs it "
                               "(a dependency in pyproject.toml)") from exc
        except OSError as exc:
            raise bad_input(f"cannot write to {o['out']}: {exc.strerror}") from exc
        for name, n in rows.items():
            self.stdout.write(f"{o['out'] / (name + '.parquet')}  {n:,} rows")
