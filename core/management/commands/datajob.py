"""`manage.py datajob submit ...`, `show ID`, `cancel ID` and `clean`: data jobs on PySpark
(docs/pipeline.md)."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import CommandError

from core.cli import actor_option, add_actor_option, bad_input, raw_stream
from core.cli.datajob import build_spec, cancel, clean, queue_options, show, submit
from core.cli.due import add_due_options, due_from
from core.management.base import QueueadminCommand
from core.pipeline.jobs import CANCEL_WAIT_S


class Command(QueueadminCommand):
    help = (
        "Data jobs: `submit` checks a job (input and output under the data roots, the SQL "
        "against the input's columns, transform, output) and queues it: split into chunks "
        "on a worker, each chunk transformed, the parts combined once; `show ID` prints its "
        "manifest; `cancel ID` cancels a job and removes its staging data; `clean` removes "
        "what cancelled or expired jobs left."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        s = sub.add_parser("submit", help="check and queue a data job")
        s.add_argument("--input", required=True, help="path or glob of the input")
        s.add_argument("--format", choices=["parquet", "csv", "json"],
                       help="input format (csv: with a header line; json: JSON lines); "
                            "default: from the input's name, as for --view")
        s.add_argument("--view", action="append", default=[], metavar="NAME=PATH",
                       help="an extra read-only table for the SQL (format from the name: "
                            ".csv, .json, else Parquet); repeat for several")
        # --sql or --transform, --chunks or --rows-per-chunk: one of each pair, checked by
        # core.pipeline.submission (not by argparse), so the console's form says the same.
        s.add_argument("--sql", help="Spark SQL over the view `chunk`, run on every chunk "
                                     "(or --transform)")
        s.add_argument("--transform", metavar="NAME",
                       help="a @transform(\"NAME\") function of QA_HANDLER_MODULES (or --sql)")
        s.add_argument("--combine-sql", help="Spark SQL over the view `parts` (every chunk's "
                                             "result), run once at the end")
        s.add_argument("--output", required=True, help="output directory")
        s.add_argument("--output-format", default="parquet", choices=["parquet", "csv"])
        s.add_argument("--chunks", type=int, help="number of chunks (or --rows-per-chunk)")
        s.add_argument("--rows-per-chunk", type=int,
                       help="target rows per chunk (default: by size, one chunk per worker "
                            "slot the job can use, more past 4 GiB a chunk)")
        s.add_argument("--queue", "-q", help="queue name (default: default)")
        # Defaults: core.pipeline.jobs.QueueOptions'.
        s.add_argument("--priority", "-p", type=int, help="0-99 (default 50)")
        s.add_argument("--concurrency", "-c", type=int,
                       help="most chunks running at once (default: QA_DATAJOB_CONCURRENCY, "
                            "else the cores of the stack's own Spark, else no limit)")
        s.add_argument("--tenant", help="client (fair share; default: default)")
        s.add_argument("--max-attempts", type=int,
                       help="attempts per chunk before its dead letter (default 3)")
        s.add_argument("--request-id", help="the job's id (resubmitting it changes nothing)")
        s.add_argument("--wait", action="store_true",
                       help="show per-chunk progress; exit non-zero unless the job is done")
        s.add_argument("--timeout", type=float, metavar="S", help="give up waiting after S s")
        s.add_argument("--overwrite", action="store_true",
                       help="replace an output that is complete already")
        _add_layout_options(s)
        add_due_options(s)
        add_actor_option(s)
        _add_other_actions(sub)

    def handle(self, *args: Any, **o: Any) -> None:
        out, err = raw_stream(self.stdout), raw_stream(self.stderr)
        if o["action"] == "show":
            show(o["job"], queue=o["queue"], stdout=out)
            return
        if o["action"] == "cancel":
            if o["wait"] < 0:
                raise bad_input("--wait: a number of seconds, 0 or more")
            cancel(o["job"], queue=o["queue"], wait_s=o["wait"], stdout=out,
                   actor=actor_option(o["as_user"]))
            return
        if o["action"] == "clean":
            clean(queue=o["queue"], dry_run=o["dry_run"], stdout=out,
                  actor=actor_option(o["as_user"]))
            return
        if o["timeout"] is not None and not o["wait"]:
            raise bad_input("--timeout applies only with --wait")
        due = due_from(o["due_in"], o["due_at"])
        options = queue_options(priority=o["priority"], concurrency=o["concurrency"],
                                tenant=o["tenant"], max_attempts=o["max_attempts"])
        try:
            spec = build_spec(
                input=o["input"], format=o["format"],
                output=o["output"],
                output_format=o["output_format"], sql=o["sql"], transform=o["transform"],
                combine_sql=o["combine_sql"], views=o["view"], chunks=o["chunks"],
                rows_per_chunk=o["rows_per_chunk"], overwrite=o["overwrite"],
                request_id=o["request_id"], partition_by=o["partition_by"], mode=o["mode"],
                incremental=o["incremental"], content_hash=o["content_hash"],
            )
        except KeyboardInterrupt:
            raise CommandError("interrupted while checking the job: nothing was queued") from None
        submit(spec, queue=o["queue"], options=options, wait=o["wait"], timeout=o["timeout"],
               stdout=out, stderr=err, actor=actor_option(o["as_user"]), due=due)


def _add_layout_options(s: ArgumentParser) -> None:
    s.add_argument("--partition-by", action="append", default=[], metavar="COL",
                   help="write the output in Hive-style folders COL=value/ (a column of the "
                        "output); repeat for several, outermost first")
    # Checked by core.pipeline.submission (not argparse's choices), as the console's.
    s.add_argument("--mode", metavar="overwrite|append",
                   help="overwrite (default): the output is this run's rows; append: they "
                        "join the output's earlier runs' rows, a re-run of the same job id "
                        "(a schedule's slot) replacing its own")
    s.add_argument("--incremental", action="store_true",
                   help="reuse the parts of the chunks of the output's last run whose files "
                        "did not change (path, size, time, Parquet footer); compute the rest")
    s.add_argument("--content-hash", action="store_true",
                   help="with --incremental: tell files apart by a SHA-256 of their bytes")


def _add_other_actions(sub: Any) -> None:
    sh = sub.add_parser("show", help="print a job's manifest (by id, or an output dir)")
    sh.add_argument("job", metavar="ID|OUTPUT_DIR")
    sh.add_argument("--queue", "-q", help="queue name (default: default)")
    c = sub.add_parser("cancel", help="cancel a job (both its requests), wait for its "
                                      "running tasks to stop, remove its staging data")
    c.add_argument("job", metavar="ID")
    c.add_argument("--queue", "-q", help="queue name (default: default)")
    c.add_argument("--wait", type=float, default=CANCEL_WAIT_S, metavar="S",
                   help=f"wait at most S s for running tasks to stop (default "
                        f"{CANCEL_WAIT_S:g}); a job still running keeps its staging until "
                        "`datajob clean`")
    add_actor_option(c)
    cl = sub.add_parser("clean", help="remove the staging data of cancelled or expired "
                                      "jobs with no task running")
    cl.add_argument("--queue", "-q", help="queue name (default: default)")
    cl.add_argument("--dry-run", action="store_true",
                    help="print what it would remove; remove nothing")
    add_actor_option(cl)
