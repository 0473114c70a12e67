"""Search (issue 20, part 4): one SearchDoc row per request (what the search box matches), an
index on dead letters' task ids, and, on PostgreSQL only, a generated tsvector column with a
GIN index for full-text search. The rows of requests mirrored before this migration are filled
in from their Request rows (id, tenant, handler) and first dead letter (error, payload); their
tasks' payloads are gone from Redis by now.

The tsvector is built from the three text columns with ASCII punctuation turned into spaces
first, so that PostgreSQL's parser and the words the console splits a query into agree
(core.console.search.SEPARATORS): `s3://b/file.csv` is the words s3, b, file and csv on both
sides, and a prefix query on any of them finds it. Weights: A id, tenant, handler, task ids;
B error messages; C payloads (ts_rank ranks by them)."""

from typing import Any

from django.db import migrations, models

# Keep in step with core.console.search.SEPARATORS (its character class, in PostgreSQL's).
SEPARATORS = r"[\x01-\x2f\x3a-\x40\x5b-\x60\x7b-\x7f]+"


def _words(column: str) -> str:
    return f"to_tsvector('simple', regexp_replace({column}, '{SEPARATORS}', ' ', 'g'))"


VECTOR = (
    f"setweight({_words('words')}, 'A') || setweight({_words('errors')}, 'B') || "
    f"setweight({_words('payloads')}, 'C')"
)
CAP = 2000  # characters of a backfilled error or payload


def backfill(apps: Any, schema_editor: Any) -> None:
    qn = schema_editor.connection.ops.quote_name
    doc, req, dead = (qn(t) for t in ("core_searchdoc", "core_request", "core_deadletter"))

    def first(column: str) -> str:
        return (f"COALESCE((SELECT SUBSTR(d.{qn(column)}, 1, {CAP}) FROM {dead} d "
                f"WHERE d.{qn('queue')} = r.{qn('queue')} AND d.{qn('request_id')} = "
                f"r.{qn('request_id')} ORDER BY d.{qn('entry_id')} LIMIT 1), '')")

    columns = ", ".join(qn(c) for c in ("queue", "request_id", "created_at", "words", "payloads",
                                        "errors", "last_event_id", "last_dead_id"))
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {doc} ({columns}) SELECT r.{qn('queue')}, r.{qn('request_id')}, "
            f"r.{qn('created_at')}, r.{qn('request_id')} || ' ' || r.{qn('tenant')} || ' ' || "
            f"r.{qn('handler')}, {first('payload')}, {first('error')}, '', '' FROM {req} r"
        )


def vector(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return  # SQLite: the console matches the text columns with LIKE instead
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE core_searchdoc ADD COLUMN vector tsvector "
                       f"GENERATED ALWAYS AS ({VECTOR}) STORED")
        cursor.execute("CREATE INDEX search_vector ON core_searchdoc USING GIN (vector)")


def no_vector(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:
            cursor.execute("DROP INDEX IF EXISTS search_vector")
            cursor.execute("ALTER TABLE core_searchdoc DROP COLUMN IF EXISTS vector")


class Migration(migrations.Migration):

    dependencies = [
        ('core', '0010_handler_metrics'),
    ]

    operations = [
        migrations.CreateModel(
            name='SearchDoc',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                           verbose_name='ID')),
                ('queue', models.CharField(max_length=200)),
                ('request_id', models.CharField(max_length=200)),
                ('created_at', models.DateTimeField()),
                ('words', models.TextField(default='')),
                ('payloads', models.TextField(default='')),
                ('errors', models.TextField(default='')),
                ('last_event_id', models.CharField(default='', max_length=40)),
                ('last_dead_id', models.CharField(default='', max_length=40)),
            ],
        ),
        migrations.AddIndex(
            model_name='deadletter',
            index=models.Index(fields=['task_id'], name='dead_task'),
        ),
        migrations.AddIndex(
            model_name='searchdoc',
            index=models.Index(fields=['created_at'], name='search_created'),
        ),
        migrations.AddIndex(
            model_name='searchdoc',
            index=models.Index(fields=['queue', 'created_at'], name='search_queue_created'),
        ),
        migrations.AddConstraint(
            model_name='searchdoc',
            constraint=models.UniqueConstraint(fields=('queue', 'request_id'),
                                               name='search_queue_id'),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
        migrations.RunPython(vector, no_vector),
    ]
