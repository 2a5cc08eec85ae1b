"""The PostgreSQL journal: the same rows and the same queries as the SQLite journal, in a shared
database that several processes (stateless API nodes, sleep workers) write at once.

It reuses ``SQLiteJournal``'s queries (kept portable: ``?`` marks, ``ON CONFLICT``, table-qualified
upsert columns) through a connection that translates them, and replaces what differs: the
connection pool (psycopg 3 + psycopg_pool), transactions, migrations (``_pg_schema``, serialised
across nodes by an advisory lock) and ``user_lock`` — a session advisory lock per user, so one
user's batch is extracted by one process at a time while other users proceed elsewhere. A node
that dies loses its connections, and PostgreSQL releases its locks: its pending turns stay in the
journal and the next process that touches the user (or opens the store) processes them.

One store per PostgreSQL schema (``journal.schema_name``). Needs the ``postgres`` extra.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from functools import lru_cache
from typing import Any

import numpy as np

from .._changes import ChangeSet
from .._errors import ConfigError, SchemaVersionError, StoreError
from .._usage import StageUsage
from ._pg_schema import PG_MIGRATIONS
from ._schema import SCHEMA_VERSION, IndexState
from ._sqlite import SQLiteJournal

log = logging.getLogger(__name__)

_IGNORE = re.compile(r"^\s*INSERT\s+OR\s+IGNORE\s+INTO\b", re.IGNORECASE)


@lru_cache(maxsize=512)
def translate(sql: str) -> str:
    """A portable statement with ``?`` marks as psycopg wants it (``%s``, literal ``%`` doubled);
    SQLite's ``INSERT OR IGNORE`` becomes ``ON CONFLICT DO NOTHING``."""
    if re.search(r"\bINSERT\s+OR\s+REPLACE\b", sql, re.IGNORECASE):
        raise StoreError("INSERT OR REPLACE is SQLite-only: write the statement with ON CONFLICT … DO UPDATE")
    ignore = bool(_IGNORE.match(sql))
    if ignore:
        sql = _IGNORE.sub("INSERT INTO", sql, count=1)
    sql = sql.replace("%", "%%").replace("?", "%s")
    return sql + " ON CONFLICT DO NOTHING" if ignore else sql


class Row(tuple):
    """A result row readable by position and by column name (like ``sqlite3.Row``)."""

    _index: dict[str, int]

    def __new__(cls, values: Sequence[Any], index: dict[str, int]) -> Row:
        row = super().__new__(cls, values)
        row._index = index
        return row

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._index)


def _row_factory(cursor: Any) -> Any:
    index = {c.name: i for i, c in enumerate(cursor.description or ())}
    return lambda values: Row(values, index)


class _Conn:
    """A psycopg connection that takes the SQLite journal's statements."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    @property
    def raw(self) -> Any:
        """The psycopg connection itself (its open transaction included)."""
        return self._conn

    def execute(self, sql: str, params: Sequence[object] = ()) -> Any:
        return self._conn.execute(translate(sql), params)

    def executemany(self, sql: str, seq: Sequence[Sequence[object]]) -> Any:
        cur = self._conn.cursor()
        seq = list(seq)
        if seq:
            cur.executemany(translate(sql), seq)
        return cur


_RETRIES = 4


def _transient(exc: BaseException | None) -> bool:
    from psycopg import errors

    return isinstance(exc, errors.DeadlockDetected | errors.SerializationFailure)


def redact(url: str) -> str:
    """The URL without its password, for messages and logs."""
    return re.sub(r"(://[^:/@]*):[^@]*@", r"\1:***@", url)


class PostgresJournal(SQLiteJournal):
    """The journal in a PostgreSQL schema. Thread-safe; safe for several processes at once."""

    _memory_text_sql = "(payload::jsonb ->> 'memory')"

    shared = True
    strict_claims = True  # a batch another node processed meanwhile (its lock lost) is refused, not redone
    #: the index carried in this journal's transactions (``join_index``), or None
    _joined: tuple[Callable[[Any, ChangeSet, Mapping[str, np.ndarray]], Sequence[str]],
                   Callable[[Any, str], None]] | None = None

    def __init__(self, url: str, *, schema_name: str = "dialogmem", read_only: bool = False,
                 pool_min_size: int = 1, pool_max_size: int = 8, connect_timeout_s: float = 10.0) -> None:
        try:
            import psycopg
            from psycopg_pool import ConnectionPool
        except ImportError as exc:
            raise ConfigError("journal.url is a PostgreSQL URL but psycopg is not installed: "
                              "pip install 'dialogmem[postgres]'") from exc
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", schema_name):
            raise ConfigError(f"invalid PostgreSQL schema name {schema_name!r}")
        self.path = redact(url)
        self.read_only = read_only
        self.schema_name = schema_name
        # public after the store's schema: where ``CREATE EXTENSION vector`` puts pgvector's types
        options = f"-c search_path={schema_name},public" + (" -c default_transaction_read_only=on" if read_only else "")
        kwargs = {"autocommit": True, "row_factory": _row_factory, "options": options,
                  "application_name": "dialogmem", "connect_timeout": max(1, round(connect_timeout_s))}
        # no check on checkout (a round trip per query): a read that meets a connection the server
        # dropped runs once more on a fresh one; a write fails with StoreError (adds are idempotent)
        self._pool = ConnectionPool(url, min_size=pool_min_size, max_size=pool_max_size, kwargs=kwargs,
                                    timeout=connect_timeout_s, open=False, name=f"dialogmem-{schema_name}")
        # user locks hold a connection while the user's batch is extracted: their own pool, so
        # waiting lock holders can never starve the journal's queries; checked, as they idle long
        self._locks = ConnectionPool(url, min_size=1, max_size=pool_max_size, kwargs=kwargs,
                                     timeout=max(300.0, connect_timeout_s), open=False,
                                     name=f"dialogmem-{schema_name}-locks",
                                     check=ConnectionPool.check_connection)
        try:
            for pool in (self._pool, self._locks):
                pool.open(wait=True, timeout=connect_timeout_s)
            self._migrate()
        except psycopg.Error as exc:
            self.close()
            raise StoreError(f"cannot open the PostgreSQL journal {self.path}: {exc}") from exc
        except BaseException:
            self.close()
            raise

    # -- infrastructure -------------------------------------------------------------------
    @contextmanager
    def _tx(self) -> Iterator[Any]:
        import psycopg

        if self.read_only:
            raise StoreError(f"journal {self.path} is open read-only")
        try:
            with self._pool.connection() as conn, conn.transaction():
                yield _Conn(conn)
        except psycopg.Error as exc:
            raise StoreError(f"journal write failed: {exc}") from exc

    def _query(self, sql: str, params: Sequence[object] = ()) -> list[Any]:
        import psycopg

        for attempt in range(2):
            conn = None
            try:
                with self._pool.connection() as conn:
                    return conn.execute(translate(sql), params).fetchall()
            except psycopg.Error as exc:
                if attempt == 0 and conn is not None and conn.broken:
                    log.info("journal connection dropped by the server (%s); reading again", exc)
                    continue
                raise StoreError(f"journal read failed: {exc}") from exc
        raise AssertionError("unreachable")

    def _migrate(self) -> None:
        if max(PG_MIGRATIONS) < SCHEMA_VERSION:
            raise StoreError(f"the PostgreSQL journal has no migration to schema version {SCHEMA_VERSION} "
                             f"(only up to {max(PG_MIGRATIONS)}): add it to _journal/_pg_schema.py")
        if self.read_only:
            current = self._current_version()
            if current > SCHEMA_VERSION:
                raise SchemaVersionError(f"{self.path} has schema version {current}; this dialogmem reads up "
                                         f"to {SCHEMA_VERSION}")
            if current < SCHEMA_VERSION:
                raise StoreError(f"{self.path} (schema {self.schema_name}) has schema version {current} and needs "
                                 "an upgrade: open it once read-write (without read_only)")
            return
        with self._tx() as db:  # one transaction; concurrent openers wait on the lock
            db.execute("SELECT pg_advisory_xact_lock(hashtext(?))", (f"dialogmem-migrate:{self.schema_name}",))
            db.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema_name}"')
            db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            current = int(row[0]) if row else 0
            if current > SCHEMA_VERSION:
                raise SchemaVersionError(f"{self.path} (schema {self.schema_name}) has schema version {current}; "
                                         f"this dialogmem reads up to {SCHEMA_VERSION}")
            for version in range(current + 1, SCHEMA_VERSION + 1):
                PG_MIGRATIONS[version](db)
                db.execute("INSERT INTO meta (key, value) VALUES ('schema_version', ?) "
                           "ON CONFLICT(key) DO UPDATE SET value=excluded.value", (str(version),))
                log.info("journal %s (schema %s) migrated to schema version %d", self.path, self.schema_name,
                         version)

    def _current_version(self) -> int:
        try:
            rows = self._query("SELECT value FROM meta WHERE key='schema_version'")
        except StoreError as exc:
            raise StoreError(f"{self.path} holds no dialogmem journal in schema {self.schema_name}: {exc}") from exc
        return int(rows[0][0]) if rows else 0

    def close(self) -> None:
        for pool in (getattr(self, "_pool", None), getattr(self, "_locks", None)):
            if pool is not None:
                pool.close()

    def commit(self, cs: ChangeSet, vectors: Mapping[str, np.ndarray], *,
               access: Sequence[tuple[str, str, int, float]] = (),
               usage: Mapping[tuple[str, str], StageUsage] | None = None) -> None:
        """As on SQLite; a transaction PostgreSQL aborted to break a deadlock with another node's
        (access and usage counters are shared rows) changed nothing and is run again."""
        for attempt in range(_RETRIES):
            try:
                return super().commit(cs, vectors, access=access, usage=usage)
            except StoreError as exc:
                if attempt == _RETRIES - 1 or not _transient(exc.__cause__):
                    raise
                log.warning("journal commit of user %s aborted by PostgreSQL (%s); retrying", cs.user_id,
                            exc.__cause__)
                time.sleep(0.01 * 2 ** attempt)

    @property
    def pool(self) -> Any:
        """The connection pool (``search_path``: this store's schema, then public): the PostgreSQL
        index (``store.backend = "postgres"``) runs on it."""
        return self._pool

    # -- an index in the same database ----------------------------------------------------
    def join_index(self, on_commit: Callable[[Any, ChangeSet, Mapping[str, np.ndarray]], Sequence[str]],
                   on_forget: Callable[[Any, str], None]) -> None:
        """Carry the vector index's rows in this journal's transactions (``store.backend =
        "postgres"``): ``on_commit(conn, cs, vectors)`` runs last in every :meth:`commit`, on its
        psycopg connection, and returns the memory ids it applied, which leave the outbox (synced)
        in the same transaction; ``on_forget(conn, user_id)`` runs last in :meth:`forget_user`. A
        change and its index rows commit together or not at all."""
        self._joined = (on_commit, on_forget)

    def _in_commit(self, db: Any, cs: ChangeSet, vectors: Mapping[str, np.ndarray]) -> None:
        if self._joined is None:
            return
        done = list(self._joined[0](db.raw, cs, vectors))
        for lo in range(0, len(done), 1000):
            db.execute("UPDATE memories SET index_state=?, index_error=NULL WHERE id = ANY(?::text[])",
                       (int(IndexState.SYNCED), done[lo:lo + 1000]))

    def _in_forget(self, db: Any, user_id: str) -> None:
        if self._joined is not None:
            self._joined[1](db.raw, user_id)

    # -- several processes ----------------------------------------------------------------
    def user_lock(self, user_id: str) -> AbstractContextManager[None]:
        """A session advisory lock on (store, user), held while the caller writes that user: a batch
        is claimed by one process. Released on exit, or by PostgreSQL when the process dies."""
        return self._user_lock(user_id)

    @contextmanager
    def _user_lock(self, user_id: str) -> Iterator[None]:
        import psycopg

        key = (f"dialogmem:{self.schema_name}", user_id)
        with ExitStack() as stack:
            try:
                conn = stack.enter_context(self._locks.connection())
                conn.execute("SELECT pg_advisory_lock(hashtext(%s), hashtext(%s))", key)
            except psycopg.Error as exc:
                raise StoreError(f"cannot lock user {user_id!r} in {self.path}: {exc}") from exc
            try:
                yield
            finally:
                try:
                    conn.execute("SELECT pg_advisory_unlock(hashtext(%s), hashtext(%s))", key)
                except psycopg.Error as exc:  # the connection is gone, and the lock with it
                    log.warning("unlocking user %r: %s", user_id, exc)
