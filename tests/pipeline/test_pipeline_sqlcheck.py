"""A data job's SQL is checked on its parsed tree (core.pipeline.sqlcheck): one query over the
job's own views, allowed functions only, columns the data has; what Spark runs is the text
regenerated from the checked tree. Each way out of the data that Spark SQL offers is refused,
with a message naming it; ordinary queries pass unchanged in meaning."""

from __future__ import annotations

import pytest

from core.pipeline.sqlcheck import MAX_SQL_BYTES, SQLRefused, allowed_functions, check_sql

CHUNK = {"carrier": "STRING", "month": "BIGINT", "dep_delay": "DOUBLE", "tailnum": "STRING",
         "arr": "ARRAY<INT>", "s": "STRUCT<f: INT>", "weird col": "INT"}
PLANES = {"tailnum": "STRING", "manufacturer": "STRING"}
VIEWS = {"chunk": CHUNK, "planes": PLANES}


def refused(sql: str, views: dict[str, dict[str, str] | None] | None = None) -> str:
    with pytest.raises(SQLRefused) as got:
        check_sql(sql, option="--sql", views=VIEWS if views is None else views)
    return str(got.value)


# Every way a Spark SQL statement reaches beyond the job's views, and what the refusal says.
ESCAPES = [
    ("SELECT * FROM parquet.`/etc/passwd`", "reads parquet.`/etc/passwd`"),
    ("SELECT * FROM text.`/srv/var/secret_key`", "a file is given with --input or --view"),
    ("SELECT * FROM csv.`file:///etc/shadow`", "reads csv."),
    ("SELECT * FROM spark_catalog.default.t", "reads spark_catalog.default.t"),
    ("SELECT reflect('java.lang.System', 'getenv', 'HOME') FROM chunk", "calls reflect()"),
    ("SELECT java_method('java.lang.System', 'getenv') FROM chunk", "calls java_method()"),
    ("SELECT try_reflect('java.lang.Runtime', 'getRuntime') FROM chunk", "calls try_reflect()"),
    ("SELECT `reflect`('a', 'b') FROM chunk", "calls reflect()"),
    ("SELECT system.builtin.reflect('a', 'b') FROM chunk", "calls reflect()"),
    ("SELECT carrier FROM chunk WHERE reflect('a', 'b') IS NULL", "calls reflect()"),
    ("SELECT xpath_string(carrier, '/a') FROM chunk", "calls xpath_string()"),
    ("SELECT from_xml(carrier, 'a INT') FROM chunk", "calls from_xml()"),
    ("SELECT from_protobuf(carrier, 'M', '/etc/desc') FROM chunk", "calls from_protobuf()"),
    ("SELECT input_file_name() FROM chunk", "calls input_file_name()"),
    ("SELECT current_user() FROM chunk", "calls current_user()"),
    ("SELECT my_udf(carrier) FROM chunk", "calls my_udf()"),
    ("SELECT TRANSFORM(carrier) USING 'cat /etc/passwd' AS (x) FROM chunk",
     "TRANSFORM ... USING (it runs a program on the server)"),
    ("SELECT * FROM read_files('/etc')", "not table functions"),
    ("SELECT * FROM range(10)", "not table functions"),
    ("SELECT * FROM IDENTIFIER('chunk')", "not table functions"),
    ("SELECT * FROM secret", "reads 'secret', which is not one of the job's views"),
    ("SELECT ${spark.driver.extraJavaOptions} FROM chunk", "does not parse"),
    ("INSERT INTO t SELECT * FROM chunk", "is INSERT"),
    ("INSERT OVERWRITE DIRECTORY '/tmp/x' SELECT * FROM chunk", "is INSERT"),
    ("CREATE TEMPORARY FUNCTION f AS 'x.Y'", "is CREATE"),
    ("CREATE TEMPORARY VIEW v AS SELECT 1", "is CREATE"),
    ("DROP TABLE chunk", "is DROP"),
    ("SET spark.sql.x = 1", "is SET"),
    ("ADD JAR /tmp/evil.jar", "is a command"),
    ("EXECUTE IMMEDIATE 'SELECT 1'", "is a command"),
    ("CACHE TABLE c AS SELECT * FROM chunk", "is CACHE TABLE"),
    ("SELECT 1 FROM chunk; DROP TABLE x", "holds 2 statements"),
    ("VALUES (1)", "is VALUES"),
    ("SELEC carrier FROM chunk", "does not parse"),
    ("SELECT 'unterminated FROM chunk", "does not parse"),
]


@pytest.mark.parametrize(("sql", "says"), ESCAPES)
def test_each_way_out_of_the_jobs_views_is_refused_by_name(sql: str, says: str) -> None:
    message = refused(sql)
    assert message.startswith("--sql ") and says in message, message


def test_a_refusal_in_the_combine_step_names_its_option() -> None:
    with pytest.raises(SQLRefused, match=r"^--combine-sql calls reflect\(\)"):
        check_sql("SELECT reflect('a', 'b') FROM parts", option="--combine-sql",
                  views={"parts": None})


def test_the_parts_view_is_not_readable_from_the_chunk_sql_nor_chunk_from_the_combine() -> None:
    assert "not one of the job's views (chunk, planes)" in refused("SELECT * FROM parts")
    with pytest.raises(SQLRefused, match="not one of the job's views"):
        check_sql("SELECT * FROM chunk", option="--combine-sql", views={"parts": None})


OK = [
    "SELECT carrier, month, sum(dep_delay) AS delay_sum, count(dep_delay) AS n FROM chunk "
    "GROUP BY carrier, month",
    "SELECT p.manufacturer, count(*) AS flights FROM chunk c JOIN planes p "
    "ON c.tailnum = p.tailnum GROUP BY p.manufacturer",
    "WITH t AS (SELECT carrier, dep_delay FROM chunk) SELECT carrier, max(dep_delay) AS m "
    "FROM t GROUP BY carrier",
    "SELECT transform(arr, x -> x + 1) AS t, s.f, `weird col` FROM chunk",
    "SELECT carrier FROM chunk WHERE tailnum IN (SELECT tailnum FROM planes)",
    "SELECT /*+ BROADCAST(p) */ c.carrier FROM chunk c JOIN planes p USING (tailnum)",
    "SELECT carrier, row_number() OVER (PARTITION BY month ORDER BY dep_delay DESC) AS r "
    "FROM chunk",
    "SELECT x FROM chunk LATERAL VIEW explode(arr) t AS x",
    "(SELECT carrier FROM chunk) UNION ALL (SELECT tailnum FROM planes)",
    "SELECT try_cast(carrier AS INT) AS c, date_format(current_date(), 'yyyy') AS y FROM chunk",
    "SELECT * FROM chunk TABLESAMPLE (10 PERCENT) LIMIT 5",
    "select Carrier from CHUNK",
]


@pytest.mark.parametrize("sql", OK)
def test_ordinary_queries_pass(sql: str) -> None:
    checked = check_sql(sql, option="--sql", views=VIEWS)
    assert checked.text and "/*" not in checked.text.replace("/*+", "")


def test_spark_runs_the_checked_tree_without_comments_not_the_text_as_typed() -> None:
    checked = check_sql("SELECT carrier /* a note */ FROM chunk -- the end", option="--sql",
                        views=VIEWS)
    assert checked.text == "SELECT carrier FROM chunk"


def test_a_column_the_data_lacks_is_named_with_the_columns_it_has() -> None:
    message = refused("SELECT carrier, nope FROM chunk")
    assert message == ("--sql names `nope`, which the data does not have (columns of the "
                       "input: carrier, month, dep_delay, tailnum, arr, s, weird col; planes: "
                       "tailnum, manufacturer)")
    assert "names `delay`" in refused("SELECT carrier FROM chunk ORDER BY delay")
    assert "names `x`" in refused("SELECT c.x FROM chunk c")


def test_columns_are_not_checked_against_a_view_whose_columns_are_unknown() -> None:
    checked = check_sql("SELECT anything FROM chunk", option="--sql", views={"chunk": None})
    assert checked.columns == ("anything",) and checked.reads is None


def test_the_output_columns_and_the_columns_read_are_known_when_all_are_named() -> None:
    checked = check_sql("SELECT p.manufacturer, count(*) AS n FROM chunk c JOIN planes p "
                        "ON c.tailnum = p.tailnum WHERE c.month > 1 GROUP BY 1",
                        option="--sql", views=VIEWS)
    assert checked.columns == ("manufacturer", "n")
    assert checked.reads == {"chunk": {"tailnum", "month"},
                             "planes": {"tailnum", "manufacturer"}}
    assert check_sql("SELECT * FROM chunk", option="--sql",
                     views={"chunk": {"a": "INT", "B": "STRING"}}).columns == ("a", "b")
    assert check_sql("SELECT count(*) FROM chunk", option="--sql", views=VIEWS).columns is None


def test_sql_over_64_kib_is_refused_with_its_size() -> None:
    big = "SELECT carrier FROM chunk WHERE carrier IN (" + ",".join(["'AA'"] * 20_000) + ")"
    assert len(big) > MAX_SQL_BYTES
    assert refused(big).startswith(f"--sql is {len(big):,} bytes; at most 64 KiB")


def test_the_allowlist_is_spark_builtins_without_those_that_reach_outside() -> None:
    names = allowed_functions()
    assert {"sum", "count", "date_format", "from_json", "transform", "explode"} <= names
    assert not {"reflect", "java_method", "try_reflect", "xpath", "input_file_name",
                "from_protobuf", "range"} & names


@pytest.mark.parametrize("sql", [
    "SELECT '${spark.app.name}' AS conf FROM chunk",
    "SELECT carrier AS `${env:HOME}` FROM chunk",
    "SELECT concat('$', '{x}') AS fine, '${system:user.name}' AS not_fine FROM chunk",
])
def test_a_substitution_anywhere_in_the_text_is_refused(sql: str) -> None:
    """Spark replaces ${...} in the SQL text before parsing it, strings and quoted names
    included (and the workers' sessions turn that off as well)."""
    assert "holds ${...}, which Spark would replace" in refused(sql)


@pytest.mark.parametrize(("sql", "aggregates"), [
    ("SELECT carrier, sum(dep_delay) AS s FROM chunk GROUP BY carrier", True),
    ("SELECT count(*) AS n, max(month) AS m FROM chunk", True),
    ("SELECT carrier FROM chunk LIMIT 10", True),
    ("WITH t AS (SELECT carrier FROM chunk) SELECT carrier, count(*) AS n FROM t "
     "GROUP BY carrier", True),
    ("SELECT carrier, month FROM chunk", False),
    ("SELECT carrier FROM chunk LIMIT 5000000", False),
    ("SELECT carrier, sum(month) OVER (PARTITION BY carrier) AS s FROM chunk", False),
    ("SELECT carrier FROM (SELECT carrier, count(*) AS n FROM chunk GROUP BY carrier) t", False),
    ("SELECT carrier FROM chunk WHERE month IN (SELECT max(month) FROM chunk)", False),
    ("SELECT carrier FROM chunk GROUP BY carrier UNION ALL SELECT carrier FROM chunk", False),
])
def test_an_outer_aggregate_is_known_from_the_tree(sql: str, aggregates: bool) -> None:
    """The outer query groups, aggregates outside a window, or has a small LIMIT: its result
    is an aggregate's (a chunk's then comes back to its worker); anything else is not."""
    assert check_sql(sql, option="--sql", views=VIEWS).aggregates is aggregates


@pytest.mark.parametrize(("sql", "says"), [
    ("SELEC carrier FROM chunk", "--sql does not parse: unexpected 'SELEC' at line 1, column 1 "
     "(a query starts with SELECT or WITH)"),
    ("-- delays\n  selec carrier", "--sql does not parse: unexpected 'selec' at line 2, column 3 "
     "(a query starts with SELECT or WITH)"),
    ("SELECT carrier, FROM chunk", "--sql does not parse: a trailing comma at line 1, column 15 "
     "(before 'FROM'): remove it, or add the item it stands before"),
    ("SELECT carrier,\n       month,\nFROM chunk", "--sql does not parse: a trailing comma at "
     "line 2, column 13 (before 'FROM')"),
    ("SELECT carrier, union FROM chunk", "a trailing comma at line 1, column 15 (before "
     "'union')"),
    ("SELECT concat(carrier,) AS c FROM chunk", "a trailing comma at line 1, column 22 (before "
     "')')"),
    ("SELECT carrier FROM chunk WHERE month IN (1, 2,)", "a trailing comma at line 1, column 47"),
    ("SELECT carrier FROM chunk GROUP BY carrier,", "a trailing comma at line 1, column 43 (at "
     "the end)"),
    ("SELECT , carrier FROM chunk", "--sql does not parse: a comma at line 1, column 8 with no "
     "item before it (after 'SELECT')"),
    ("SELECT (carrier\nFROM chunk", "--sql does not parse: unexpected 'FROM' at line 2, column 1 "
     "(expecting ')')"),
    ("SELECT carrier FROM chunk WHERE month IN (SELECT max(month) FROM chunk",
     "--sql does not parse: expecting ')' after 'chunk' at line 1, column 66, where the query "
     "ends"),
    ("SELECT carrier FROM chunk WHERE", "--sql does not parse: 'WHERE' at line 1, column 27 "
     "lacks what should follow it"),
    ("SELECT carrier FROM chunk WHERE carrier = 'AA", "--sql does not parse: the ' opened at "
     "line 1, column 43 is not closed"),
    ("SELECT carrier FROM chunk /* to do", "--sql does not parse: it ends inside a quote or a "
     "comment that is not closed"),
])
def test_a_parse_error_is_placed_in_the_text_as_typed(sql: str, says: str) -> None:
    """Where the SQL stops parsing, by line and column of what the user typed, naming what
    stands there; a comma with nothing after it (or before it) is refused as Spark refuses
    it, not dropped as sqlglot would and then run."""
    message = refused(sql)
    assert message.startswith("--sql does not parse: ") and says in message, message


@pytest.mark.parametrize("sql", [
    "SELECT carrier FROM chunk, LATERAL (SELECT 1 AS one)",
    "SELECT sum(month) OVER (PARTITION BY carrier, tailnum ORDER BY month, carrier) AS s "
    "FROM chunk",
    "SELECT named_struct('a', month, 'b', carrier) AS s, array(1, 2)[0] AS x FROM chunk",
    "SELECT carrier, ',' AS comma, `weird col` FROM chunk;",
])
def test_commas_that_separate_items_pass(sql: str) -> None:
    assert check_sql(sql, option="--sql", views=VIEWS).text
