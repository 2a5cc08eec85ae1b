"""What every part of the SQL journal stands on: the dialect its statements take their spellings
from, a write transaction, a read, and the helpers for long id lists.

A connection here is the database driver's own (``sqlite3.Connection`` or ``psycopg.Connection``):
both run ``execute(sql, params)`` and hand out cursors, and the statements already carry the
dialect's parameter marks, so nothing translates them on the way.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar, Protocol

from ._dialect import Dialect

Row = Any  # sqlite3.Row or the PostgreSQL journal's Row: readable by position and by column name


class Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...
    @property
    def description(self) -> Sequence[Sequence[Any]] | None: ...
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...


class Conn(Protocol):
    """The part of a DB-API connection the journal uses, inside one of its transactions."""

    def execute(self, sql: str, params: Sequence[Any], /) -> Cursor: ...
    def cursor(self) -> Any: ...


class SQLRows(ABC):
    """Base of the journal's parts: ``dialect`` says how to spell a statement, ``_tx`` gives a
    connection inside one write transaction, ``_query`` reads rows outside one."""

    dialect: ClassVar[Dialect]
    read_only: bool

    @abstractmethod
    def _tx(self) -> AbstractContextManager[Conn]: ...

    @abstractmethod
    def _query(self, sql: str, params: Sequence[object] = ()) -> list[Row]: ...


def many(db: Conn, sql: str, rows: Sequence[Sequence[object]]) -> None:
    """``sql`` once for each parameter row (nothing for none)."""
    if rows:
        db.cursor().executemany(sql, rows)


def set_meta(db: Conn, d: Dialect, key: str, value: str) -> None:
    db.execute(f"INSERT INTO meta (key, value) VALUES ({d.mark}, {d.mark}) "
               "ON CONFLICT(key) DO UPDATE SET value=excluded.value", (key, value))


#: ids bound in one ``IN (...)`` statement: SQLite's default build binds at most 32,766 values a
#: statement (builds differ: Debian's 3.40 takes 250,000) and PostgreSQL 65,535, so a longer id list
#: is read in parts of this size
ID_PART = 5000


def parts(ids: Sequence[str], size: int) -> Iterator[list[str]]:
    """``ids`` without repeats (as one ``IN (...)`` reads them) in consecutive lists of at most
    ``size``: one statement each."""
    unique = list(dict.fromkeys(ids))
    for lo in range(0, len(unique), size):
        yield unique[lo:lo + size]


#: runs one read statement with its parameters and returns its rows
Reader = Callable[[str, Sequence[object]], Sequence[Row]]


def tx_reader(db: Conn) -> Reader:
    """A ``Reader`` inside the caller's transaction."""
    return lambda sql, params: db.execute(sql, params).fetchall()


def rows_where_in(read: Reader, d: Dialect, select: str, column: str, ids: Sequence[str],
                  params: Sequence[object] = ()) -> list[Row]:
    """The rows of ``select`` (a statement that ends in ``WHERE`` or ``AND``, its marks bound to
    ``params``) whose ``column`` is one of ``ids``, read in parts of ``ID_PART`` ids: one statement each."""
    out: list[Row] = []
    for part in parts(ids, ID_PART):
        sql, values = d.one_of(column, part)
        out.extend(read(f"{select} {sql}", [*params, *values]))
    return out
