"""Make a class archive for the Spark JVMs (core/pipeline/classes.py): a Spark server started
with it (QA_SPARK_CLASSES) listens in about half the time, for ~150 MiB more memory. `make
test` makes one for the suite's JVMs."""

from __future__ import annotations

import shutil
import tempfile
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError

from core.cli import bad_input
from core.management.base import QueueadminCommand


class Command(QueueadminCommand):
    help = ("Record the classes a Spark server loads into an archive that later Spark JVMs "
            "map when QA_SPARK_CLASSES names it (30-40 s, once).")

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--out", type=Path, default=None,
                            help="where to write it (default: QA_SPARK_CLASSES)")
        parser.add_argument("--if-missing", action="store_true",
                            help="do nothing when the archive is already there")

    def handle(self, *args: Any, **options: Any) -> None:
        from core.pipeline import class_recording, classes, jvm

        out: Path | None = options["out"] or classes.archive_path()
        if out is None:
            raise bad_input("where to? Give --out PATH, or set QA_SPARK_CLASSES to the path "
                            "the Spark JVMs are to map it from")
        out = out.absolute()
        if options["if_missing"] and out.is_file():
            self.stdout.write(f"spark class archive: {out} (already there)")
            return
        if jvm.jdk_tool("java") is None:
            raise CommandError("no java on PATH (nor in JAVA_HOME): install a Java runtime "
                               "(make system-deps) and run this again")
        work = Path(tempfile.mkdtemp(prefix="queueadmin-sparkclasses-"))
        try:
            took = class_recording.build(out, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        size_mb = out.stat().st_size / 2**20
        self.stdout.write(f"spark class archive: {out} ({size_mb:.0f} MiB), made in {took:.1f} s")
