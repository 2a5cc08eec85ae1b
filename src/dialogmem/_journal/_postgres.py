"""The PostgreSQL journal: the SQL journal in a shared database that several processes (stateless
API nodes, sleep workers) write at once.

The statements are ``_sql.SQLJournal``'s, in the PostgreSQL dialect; what is here is the
connection layer: the pools (psycopg 3 + psycopg_pool, ``search_path`` set to the store's schema),
transactions, the advisory lock and ``CREATE SCHEMA`` that open a store, a commit run again when
PostgreSQL aborts it to break a deadlock, and ``user_lock`` — a session advisory lock per user, so
one user's batch is extracted by one process at a time while other users proceed elsewhere. A node
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
from typing import Any

import numpy as np

from .._changes import ChangeSet
from .._errors import ConfigError, StoreError
from .._usage import StageUsage
from ._dialect import POSTGRES
from ._memories import set_index_state
from ._rows import Conn
from ._schema import IndexState
from ._sql import SQLJournal

log = logging.getLogger(__name__)


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


_RETRIES = 4


def _transient(exc: BaseException | None) -> bool:
    from psycopg import errors

    return isinstance(exc, errors.DeadlockDetected | errors.SerializationFailure)


def redact(url: str) -> str:
    """The URL without its password, for messages and logs."""
    return re.sub(r"(://[^:/@]*):[^@]*@", r"\1:***@", url)


class PostgresJournal(SQLJournal):
    """The journal in a PostgreSQL schema. Thread-safe; safe for several processes at once."""

    dialect = POSTGRES
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
                yield conn
        except psycopg.Error as exc:
            raise StoreError(f"journal write failed: {exc}") from exc

    def _query(self, sql: str, params: Sequence[object] = ()) -> list[Any]:
        import psycopg

        for attempt in range(2):
            conn = None
            try:
                with self._pool.connection() as conn:
                    return conn.execute(sql, params).fetchall()
            except psycopg.Error as exc:
                if attempt == 0 and conn is not None and conn.broken:
                    log.info("journal connection dropped by the server (%s); reading again", exc)
                    continue
                raise StoreError(f"journal read failed: {exc}") from exc
        raise AssertionError("unreachable")

    def _prepare(self, db: Conn) -> None:
        """Openers of this store wait here for each other; the schema is made when missing."""
        assert self.dialect.lock_open is not None
        db.execute(self.dialect.lock_open, (f"dialogmem-migrate:{self.schema_name}",))
        db.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema_name}"', ())

    def _where(self) -> str:
        return f"{self.path} (schema {self.schema_name})"

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

    def _in_commit(self, db: Conn, cs: ChangeSet, vectors: Mapping[str, np.ndarray]) -> None:
        if self._joined is not None:
            set_index_state(db, self.dialect, self._joined[0](db, cs, vectors), IndexState.SYNCED, None)

    def _in_forget(self, db: Conn, user_id: str) -> None:
        if self._joined is not None:
            self._joined[1](db, user_id)

    # -- several processes ----------------------------------------------------------------
    def user_lock(self, user_id: str) -> AbstractContextManager[None]:
        """A session advisory lock on (store, user), held while the caller writes that user: a batch
        is claimed by one process. Released on exit, or by PostgreSQL when the process dies."""
        return self._user_lock(user_id)

    @contextmanager
    def _user_lock(self, user_id: str) -> Iterator[None]:
        import psycopg

        key = (f"dialogmem:{self.schema_name}", user_id)
        lock, unlock = self.dialect.lock_user, self.dialect.unlock_user
        assert lock is not None and unlock is not None  # the PostgreSQL dialect spells both
        with ExitStack() as stack:
            try:
                conn = stack.enter_context(self._locks.connection())
                conn.execute(lock, key)
            except psycopg.Error as exc:
                raise StoreError(f"cannot lock user {user_id!r} in {self.path}: {exc}") from exc
            try:
                yield
            finally:
                try:
                    conn.execute(unlock, key)
                except psycopg.Error as exc:  # the connection is gone, and the lock with it
                    log.warning("unlocking user %r: %s", user_id, exc)
