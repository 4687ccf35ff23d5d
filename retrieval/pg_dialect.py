"""SQLite-flavoured SQL, as the code writes it, to the SQL PostgreSQL runs.

The code writes SQL once, in the subset both engines share; sqlglot (a SQL parser and
transpiler) carries it across, and a few transforms cover what sqlglot leaves as it is:

- ``?`` placeholders become psycopg's ``%s``, and a ``%`` inside a string literal is
  doubled, since psycopg reads ``%`` as the start of a placeholder;
- ``INSERT OR IGNORE`` becomes ``INSERT … ON CONFLICT DO NOTHING``;
- ``LIKE`` becomes ``ILIKE``: SQLite's LIKE ignores case, PostgreSQL's does not;
- a conflict target keeps its column names only (sqlglot adds an ordering there,
  which PostgreSQL refuses);
- ``date(t, 'unixepoch')``, the UTC day of a Unix time, becomes ``to_char`` of
  ``to_timestamp(t)`` in UTC.

What cannot carry across is refused loudly (:class:`Untranslatable`): ``INSERT OR
REPLACE`` (write ``ON CONFLICT (…) DO UPDATE``), ``rowid`` (name the key), ``GLOB``,
``COLLATE NOCASE`` (compare ``lower()``s). Translations are cached: the code's SQL is a
small set of strings.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import sqlglot
from sqlglot import exp


class Untranslatable(ValueError):
    """SQL that would mean something else, or nothing, in PostgreSQL."""


@dataclass(frozen=True)
class Translated:
    sql: str
    insert_into: str | None = None  # the table an INSERT writes
    returns: bool = False  # it has a RETURNING clause of its own


@lru_cache(maxsize=4096)
def translate(sql: str) -> Translated:
    """One statement, carried across."""
    statements = [s for s in sqlglot.parse(sql, read="sqlite") if s is not None]
    if len(statements) != 1:
        raise Untranslatable(f"one statement at a time, not {len(statements)}")
    statement = statements[0].transform(_escaped).transform(_portable)
    insert_into = None
    if isinstance(statement, exp.Insert):
        table = statement.find(exp.Table)
        insert_into = table.name if table is not None else None
    returns = statement.args.get("returning") is not None
    return Translated(statement.sql(dialect="postgres"), insert_into, returns)


def to_postgres(sql: str) -> str:
    return translate(sql).sql


def _portable(node: exp.Expression) -> exp.Expression:
    if isinstance(node, exp.Insert):
        return _insert(node)
    if isinstance(node, exp.Like):
        return exp.ILike(this=node.this, expression=node.expression)
    if isinstance(node, exp.Glob):
        raise Untranslatable("GLOB has no PostgreSQL spelling; use LIKE")
    if isinstance(node, exp.Collate) and node.text("expression").upper() == "NOCASE":
        raise Untranslatable("COLLATE NOCASE: compare lower() of both sides")
    if isinstance(node, exp.Column) and node.name.lower() == "rowid" and not node.table:
        raise Untranslatable("rowid exists in SQLite only: name the table's key")
    if isinstance(node, exp.OnConflict):
        return _conflict_target(node)
    if _is_unix_day(node):
        return _utc_day(node.expressions[0])
    return node


def _is_unix_day(node: exp.Expression) -> bool:
    """``date(t, 'unixepoch')``, as sqlglot reads it."""
    if not isinstance(node, exp.Anonymous) or node.name.upper() != "DATE":
        return False
    if len(node.expressions) != 2:
        return False
    modifier = node.expressions[1]
    return isinstance(modifier, exp.Literal) and modifier.this.lower() == "unixepoch"


def _utc_day(seconds: exp.Expression) -> exp.Expression:
    moment = exp.AtTimeZone(
        this=exp.Anonymous(this="TO_TIMESTAMP", expressions=[seconds]),
        zone=exp.Literal.string("UTC"),
    )
    return exp.Anonymous(this="TO_CHAR", expressions=[moment, exp.Literal.string("YYYY-MM-DD")])


def _escaped(node: exp.Expression) -> exp.Expression:
    if isinstance(node, exp.Literal) and node.is_string and "%" in node.this:
        return exp.Literal.string(node.this.replace("%", "%%"))
    return node


def _insert(node: exp.Insert) -> exp.Expression:
    alternative = (node.args.get("alternative") or "").upper()
    if alternative == "IGNORE":
        node = node.copy()
        node.set("alternative", None)
        node.set("conflict", exp.OnConflict(action=exp.var("DO NOTHING")))
    elif alternative:
        raise Untranslatable(f"INSERT OR {alternative}: write ON CONFLICT (…) DO UPDATE")
    return node


def _conflict_target(node: exp.OnConflict) -> exp.Expression:
    keys = node.args.get("conflict_keys") or []
    bare = [key.this if isinstance(key, exp.Ordered) else key for key in keys]
    if bare != keys:
        node = node.copy()
        node.set("conflict_keys", bare)
    return node
