"""A data job's SQL, checked on its parsed tree before Spark sees it (sqlglot, Spark dialect):
one SELECT (or a set operation of them, with CTEs) over the job's own views only, calling only
the functions of an allowlist, naming only columns its views have. Refused otherwise, with a
message that says what to change.

Why on the tree, and why Spark runs the tree's text: Spark SQL reaches far beyond a job's data
(`` text.`/etc/passwd` `` reads a file, `reflect('java.lang.System', 'getenv')` reads the
environment, `TRANSFORM(...) USING 'cmd'` runs a program, `${...}` reads the configuration).
Matching the text cannot tell a function call from a string or a comment that looks like one;
the parser can. And what Spark executes is the SQL regenerated from the checked tree
(`CheckedSQL.text`, without comments), never the text as typed, so a construct that the two
parsers read differently (an escape, a nested comment) cannot smuggle anything past the check.

The same check runs in the console, in `datajob submit` and again in the worker before each
task: a task in Redis is not trusted either.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import OptimizeError, ParseError, TokenError
from sqlglot.optimizer.qualify import qualify
from sqlglot.tokenizer_core import Token, TokenType

from .spec import SpecError

# sqlglot says on its logger when it falls back to a generic Command for a statement it does
# not know (ADD JAR, EXECUTE IMMEDIATE): such a statement is refused here anyway.
logging.getLogger("sqlglot").setLevel(logging.ERROR)
MAX_SQL_BYTES = 64 * 1024
DIALECT = "spark"
FUNCTIONS_FILE = Path(__file__).with_name("spark_functions.txt")
# Names the Spark generator writes for syntax rather than functions (CAST(x AS T) and alike).
SYNTAX_NAMES = frozenset({"cast", "try_cast", "extract", "trim", "position", "substring",
                          "overlay", "struct", "array", "map", "interval", "in", "exists",
                          "filter", "within", "over", "values", "grouping", "rollup", "cube",
                          "grouping_sets", "tablesample", "lateral", "unnest"})
# Statements and clauses that do something other than read the job's views.
_FORBIDDEN: dict[type[exp.Expr], str] = {
    exp.QueryTransform: "TRANSFORM ... USING (it runs a program on the server)",
    exp.Command: "a command",
    exp.Parameter: "a ${...} substitution (it reads the server's configuration)",
    exp.Placeholder: "a parameter marker",
    exp.SessionParameter: "a session parameter",
    exp.Set: "SET",
    exp.Use: "USE",
    exp.Cache: "CACHE TABLE",
    exp.Uncache: "UNCACHE TABLE",
    exp.Refresh: "REFRESH",
    exp.Describe: "DESCRIBE",
    exp.Show: "SHOW",
    exp.Into: "SELECT ... INTO",
    exp.LoadData: "LOAD DATA",
    exp.Pragma: "PRAGMA",
    exp.Kill: "KILL",
    exp.Transaction: "a transaction",
    exp.Commit: "COMMIT",
    exp.Rollback: "ROLLBACK",
    exp.Declare: "DECLARE",
    exp.Copy: "COPY",
    exp.Analyze: "ANALYZE",
    exp.Grant: "GRANT",
    exp.Revoke: "REVOKE",
    exp.Execute: "EXECUTE IMMEDIATE",
}
# What may not follow a comma: the end of a list (a clause, a closing bracket, the end).
_AFTER_NO_COMMA = frozenset({
    TokenType.FROM, TokenType.WHERE, TokenType.GROUP_BY, TokenType.HAVING, TokenType.QUALIFY,
    TokenType.ORDER_BY, TokenType.CLUSTER_BY, TokenType.DISTRIBUTE_BY, TokenType.SORT_BY,
    TokenType.UNION, TokenType.INTERSECT, TokenType.EXCEPT, TokenType.JOIN, TokenType.R_PAREN,
    TokenType.R_BRACKET, TokenType.COMMA, TokenType.SEMICOLON})
# What may not come just before a comma: the start of a list.
_BEFORE_NO_COMMA = frozenset({
    TokenType.SELECT, TokenType.DISTINCT, TokenType.FROM, TokenType.GROUP_BY,
    TokenType.ORDER_BY, TokenType.CLUSTER_BY, TokenType.DISTRIBUTE_BY, TokenType.SORT_BY,
    TokenType.PARTITION_BY, TokenType.L_PAREN, TokenType.L_BRACKET, TokenType.COMMA})
_NAME = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*\(")
_UNRESOLVED = re.compile(r"Column '([^']+)' could not be resolved|Unknown column: (\S+)")


class SQLRefused(SpecError):
    """The SQL is not a query a data job may run; the message says why and what to change."""


SMALL_LIMIT = 10_000  # a query with at most this LIMIT counts as an aggregate (CheckedSQL)


@dataclass(frozen=True)
class CheckedSQL:
    """A statement that passed the check: `text` is what Spark runs (regenerated from the
    checked tree), `columns` its output columns when all of them are named (None when an
    expression has no alias: Spark names it after the expression, which is not known here)."""

    text: str
    columns: tuple[str, ...] | None
    # view -> the columns the query reads of it, when they were resolved (to size chunks by
    # the bytes a job reads, not the whole file's)
    reads: Mapping[str, frozenset[str]] | None = None
    # an aggregate (GROUP BY, aggregate functions) or a LIMIT at the outer level: a result that
    # is usually small next to what it reads (chunk.py sends a chunk's back to its worker)
    aggregates: bool = False


@functools.cache
def allowed_functions() -> frozenset[str]:
    """Lower-case names of the functions a job's SQL may call (spark_functions.txt)."""
    lines = FUNCTIONS_FILE.read_text().splitlines()
    return frozenset(ln.strip() for ln in lines if ln.strip() and not ln.startswith("#"))


Schema = Mapping[str, str]  # column -> Spark type (DDL text), in the view's order


def check_sql(sql: str, *, option: str, views: Mapping[str, Schema | None],
              ) -> CheckedSQL:
    """Check `sql` (the value of `option`, e.g. --sql) against the views it may read (name ->
    schema, or None when the schema is not known here: its columns are then not checked).
    SQLRefused saying what is wrong."""
    if len(sql.encode("utf-8", "surrogatepass")) > MAX_SQL_BYTES:
        raise SQLRefused(f"{option} is {len(sql.encode('utf-8', 'surrogatepass')):,} bytes; "
                         f"at most {MAX_SQL_BYTES // 1024} KiB")
    tree = _parse(sql, option)
    names = {v.lower() for v in views}
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    for node in tree.walk():
        _check_node(node, option, names | ctes, sorted(views))
    columns, reads = _check_columns(tree, option, views)
    text = tree.sql(dialect=DIALECT, comments=False)
    if "${" in text:  # Spark substitutes ${...} anywhere in the text, strings included
        raise SQLRefused(f"{option} holds ${{...}}, which Spark would replace with its "
                         "configuration or environment; write it another way (e.g. '$' || '{')")
    return CheckedSQL(text, columns, reads, _aggregates(tree))


def _parse(sql: str, option: str) -> exp.Expr:
    dialect = Dialect.get_or_raise(DIALECT)
    try:
        tokens = dialect.tokenize(sql)
    except TokenError as exc:
        raise SQLRefused(f"{option} does not parse: {_token_error(exc, sql)}") from None
    try:
        statements = [s for s in dialect.parser().parse(tokens, sql) if s is not None]
    except ParseError as exc:
        raise SQLRefused(f"{option} does not parse: {_parse_error(exc, tokens, sql)}") from None
    if not statements:
        raise SQLRefused(f"{option} is empty")
    if len(statements) > 1:
        raise SQLRefused(f"{option} holds {len(statements)} statements: give one query")
    tree = statements[0]
    while isinstance(tree, exp.Subquery):  # (SELECT ...)
        tree = tree.this
    if not isinstance(tree, exp.Select | exp.SetOperation):
        what = _FORBIDDEN.get(type(tree))
        if what is None and isinstance(tree, exp.Condition | exp.Alias | exp.Identifier):
            # An expression, not a statement: `SELEC x` reads as the column SELEC, aliased x.
            raise SQLRefused(f"{option} does not parse: {_unexpected(tokens[0], sql)} (a query "
                             "starts with SELECT or WITH)")
        what = what or type(tree).__name__.upper()
        raise SQLRefused(f"{option} is {what}: a job's SQL is one query (SELECT, or WITH ... "
                         "SELECT, or a UNION of them) over the job's own views")
    _no_dangling_comma(tokens, sql, option)
    return tree


def _where(sql: str, offset: int) -> str:
    """`line L, column C` (from 1) of the character at `offset` of the text as typed."""
    line_start = sql.rfind("\n", 0, offset) + 1
    return f"line {sql.count(chr(10), 0, offset) + 1}, column {offset - line_start + 1}"


def _unexpected(token: Token, sql: str) -> str:
    return f"unexpected {_shown(token)} at {_where(sql, token.start)}"


def _shown(token: Token) -> str:
    return repr(token.text if len(token.text) <= 40 else token.text[:37] + "...")


def _token_error(exc: TokenError, sql: str) -> str:
    """A tokenizer's refusal (an unclosed quote or comment), placed in the text as typed."""
    cause = exc.__cause__ or exc.__context__
    m = re.match(r"Missing (.+) from (\d+):(\d+)", str(cause or ""))
    if m is not None:
        return (f"the {m.group(1)} opened at line {m.group(2)}, column {int(m.group(3)) + 1} "
                "is not closed")
    if isinstance(cause, IndexError):  # the scanner ran past the end of the text
        return "it ends inside a quote or a comment that is not closed"
    return _first_line(exc)


def _parse_error(exc: ParseError, tokens: list[Token], sql: str) -> str:
    """Where the parser stopped, in the text as typed: `unexpected 'SELEC' at line 1, column 1`.
    A first word that is no keyword at all is the culprit, whatever the parser tripped on
    after it (`SELEC carrier FROM chunk` stops at FROM)."""
    if tokens and tokens[0].token_type == TokenType.VAR:
        return f"{_unexpected(tokens[0], sql)} (a query starts with SELECT or WITH)"
    error = exc.errors[0] if exc.errors else {}
    # sqlglot places an error at the end of the token it stopped at (its line and column)
    at = (error.get("line"), error.get("col"))
    token = next((t for t in tokens if (t.line, t.col) == at), None)
    if token is None:
        return _first_line(exc)
    description = str(error.get("description") or "")
    if description.startswith("Required keyword"):
        return f"{_shown(token)} at {_where(sql, token.start)} lacks what should follow it"
    expecting = re.fullmatch(r"Expecting (\S+)", description)
    if expecting is None:
        return _unexpected(token, sql)
    wanted = repr(expecting.group(1))
    if token is tokens[-1]:
        return (f"expecting {wanted} after {_shown(token)} at {_where(sql, token.start)}, "
                "where the query ends")
    return f"{_unexpected(token, sql)} (expecting {wanted})"


def _no_dangling_comma(tokens: list[Token], sql: str, option: str) -> None:
    """Refuse a comma with no item after it in its list (`SELECT carrier, FROM chunk`) or
    none before it (`SELECT , carrier`): Spark refuses both, but sqlglot reads past them, and
    the regenerated text would run as if the comma were not there (or worse: `SELECT a, union
    FROM chunk` reads as a UNION)."""
    for i, token in enumerate(tokens):
        if token.token_type != TokenType.COMMA:
            continue
        following = tokens[i + 1] if i + 1 < len(tokens) else None
        if following is None or following.token_type in _AFTER_NO_COMMA:
            before = f"before {_shown(following)}" if following is not None else "at the end"
            raise SQLRefused(f"{option} does not parse: a trailing comma at "
                             f"{_where(sql, token.start)} ({before}): remove it, or add the "
                             "item it stands before")
        if i == 0 or tokens[i - 1].token_type in _BEFORE_NO_COMMA:
            raise SQLRefused(f"{option} does not parse: a comma at {_where(sql, token.start)} "
                             f"with no item before it (after {_shown(tokens[i - 1])})"
                             if i else f"{option} does not parse: it starts with a comma")


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return re.sub(r"\x1b\[[0-9;]*m", "", text[0]) if text else type(exc).__name__


def _check_node(node: exp.Expr, option: str, readable: set[str],
                views: list[str]) -> None:
    for kind, what in _FORBIDDEN.items():
        if isinstance(node, kind):
            raise SQLRefused(f"{option} uses {what}, which a job's SQL may not")
    if isinstance(node, exp.DDL | exp.DML):
        raise SQLRefused(f"{option} uses {type(node).__name__.upper()}: a job's SQL only reads "
                         "(one SELECT over the job's own views)")
    if isinstance(node, exp.Table) and not node.find_ancestor(exp.Hint):
        _check_table(node, option, readable, views)
    elif isinstance(node, exp.Func):
        name = _function_name(node)
        if name is not None and name not in allowed_functions() and name not in SYNTAX_NAMES:
            raise SQLRefused(f"{option} calls {name}(), which a job's SQL may not use (only "
                             "Spark's built-in functions that work on the data; not those that "
                             "reach files, the environment or Java)")


def _check_table(node: exp.Table, option: str, readable: set[str], views: list[str]) -> None:
    known = ", ".join(views)
    if not isinstance(node.this, exp.Identifier):
        raise SQLRefused(f"{option} reads from {node.this.sql(dialect=DIALECT)[:80]}: a job's "
                         f"SQL reads only its own views ({known}), not table functions")
    if node.args.get("db") or node.args.get("catalog"):
        raise SQLRefused(f"{option} reads {node.sql(dialect=DIALECT)[:120]}: a job's SQL reads "
                         f"only its own views ({known}); a file is given with --input or "
                         "--view NAME=PATH, not in the SQL")
    if node.name.lower() not in readable:
        raise SQLRefused(f"{option} reads {node.name!r}, which is not one of the job's views "
                         f"({known}); another file is given with --view NAME=PATH")


def _function_name(node: exp.Func) -> str | None:
    """The name Spark will see for a call: as written for an unknown one, else as the Spark
    generator writes it; None for syntax that is not a call (CASE, operators)."""
    if isinstance(node, exp.Anonymous):
        return str(node.name).lower()
    m = _NAME.match(node.sql(dialect=DIALECT, comments=False))
    return m.group(1).lower() if m else None


def _check_columns(tree: exp.Expr, option: str, views: Mapping[str, Schema | None]
                   ) -> tuple[tuple[str, ...] | None, dict[str, frozenset[str]] | None]:
    """Resolve the columns against the views' schemas (those known); SQLRefused for a column
    no view has. Returns the output columns when all are named, and the columns read of
    each view."""
    known = {name: dict(schema) for name, schema in views.items() if schema is not None}
    if len(known) < len(views):  # a view of unknown columns: nothing to check against
        return _named(tree), None
    try:
        qualified = qualify(tree.copy(), schema=dict(known), dialect=DIALECT,
                            validate_qualify_columns=True, quote_identifiers=False,
                            identify=False)
    except OptimizeError as exc:
        m = _UNRESOLVED.search(str(exc))
        if m is None:  # something the resolver does not follow: Spark decides at the split
            return _named(tree), None
        column = m.group(1) or m.group(2)
        have = "; ".join(f"{'the input' if n == 'chunk' else n}: {', '.join(cols)}"
                         for n, cols in known.items())
        raise SQLRefused(f"{option} names `{column}`, which the data does not have "
                         f"(columns of {have})") from None
    except Exception:
        return _named(tree), None
    return _named(tree, qualified), _reads(qualified, set(known))


def _reads(qualified: exp.Expr, views: set[str]) -> dict[str, frozenset[str]]:
    """The columns of each view that the resolved query names (through its aliases)."""
    alias = {t.alias_or_name.lower(): t.name.lower() for t in qualified.find_all(exp.Table)}
    found: dict[str, set[str]] = {v: set() for v in views}
    for col in qualified.find_all(exp.Column):
        view = alias.get(col.table.lower())
        if view in found:
            found[view].add(col.name)
    return {v: frozenset(cols) for v, cols in found.items()}


def _outer_select(tree: Any) -> exp.Select | None:
    while isinstance(tree, exp.SetOperation | exp.Subquery):
        tree = tree.left if isinstance(tree, exp.SetOperation) else tree.this
    return tree if isinstance(tree, exp.Select) else None


def _aggregates(tree: exp.Expr) -> bool:
    """The outer query groups, aggregates (outside a window) or has a LIMIT of at most
    SMALL_LIMIT rows; not a UNION."""
    if not isinstance(tree, exp.Select):
        return False
    limit = tree.args.get("limit")
    n = limit.expression if isinstance(limit, exp.Limit) else None
    if tree.args.get("group") or (isinstance(n, exp.Literal) and n.is_int
                                  and int(n.name) <= SMALL_LIMIT):
        return True
    return any(not agg.find_ancestor(exp.Window, exp.Subquery)
               for e in tree.expressions for agg in e.find_all(exp.AggFunc))


def _named(tree: exp.Expr, qualified: exp.Expr | None = None
           ) -> tuple[str, ...] | None:
    """The output columns, when every one has a name of its own (an alias, a column, or `*`
    expanded by the resolver in `qualified`); None when one is an unnamed expression."""
    query = _outer_select(tree)
    if query is None:
        return None
    for e in query.expressions:
        if not isinstance(e, exp.Alias | exp.Column | exp.Star):
            return None
        star = isinstance(e, exp.Star) or (isinstance(e, exp.Column) and e.is_star)
        if star and qualified is None:
            return None
    done = _outer_select(qualified) if qualified is not None else query
    return tuple(e.alias_or_name for e in done.expressions) if done is not None else None


def view_names(spec_views: Iterable[str], *, combine: bool) -> list[str]:
    """The views a job's SQL may read: its chunk (or, in the combine step, its parts) and
    its --view tables."""
    return ["parts" if combine else "chunk", *spec_views]
