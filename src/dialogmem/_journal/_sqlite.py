"""The SQLite journal (WAL): the SQL journal on one file that one process owns.

Only the connections are here: one for writes, serialised by a lock, ``BEGIN IMMEDIATE`` for a
write (every transaction is short: no model call runs inside one), ``synchronous=FULL``; and one for
reads outside a transaction, with its own lock, so a search's short read never waits behind a
write's commit and fsync (WAL lets a reader and a writer work at once). A read sees what was committed
before it began, as on PostgreSQL, where a read takes another pooled connection than the write's
transaction; reads inside a transaction go through that transaction (``_rows.tx_reader``). The
statements are ``_sql.SQLJournal``'s, in the SQLite dialect. Opening a store never deletes or rewrites data:
migrations only add.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from .._errors import StoreError
from ._dialect import SQLITE
from ._sql import SQLJournal

log = logging.getLogger(__name__)

PAGE_SIZE = 8192  # bytes a page of a journal created from now on


class SQLiteJournal(SQLJournal):
    """Durable bookkeeping of one store in one SQLite file. Thread-safe."""

    dialect = SQLITE

    def __init__(self, path: Path | str, *, read_only: bool = False) -> None:
        self.path = path
        self.read_only = read_only
        target = f"file:{Path(path).resolve()}?mode=ro" if read_only else str(path)
        try:
            self._db = sqlite3.connect(target, uri=read_only, check_same_thread=False, isolation_level=None)
            if not read_only:
                # A new file only (it fixes the size when the first table is made; an existing file
                # keeps its own): a memories row (~1.6 KB with its float16 vector) packs 5 to an 8 KB
                # page against 2 to a 4 KB one, 2,455 -> 2,104 B a memory (issue 45).
                self._db.execute(f"PRAGMA page_size={PAGE_SIZE}")
                self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA busy_timeout=10000")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open journal {path}: {exc}") from exc
        self._lock = threading.RLock()
        self._read_lock = threading.Lock()
        self._reader = self._db
        try:
            self._migrate()
            if not read_only:
                self._reader = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
                self._reader.execute("PRAGMA query_only=1")
                self._reader.execute("PRAGMA busy_timeout=10000")
        except sqlite3.Error as exc:
            self.close()
            raise StoreError(f"cannot open journal {path}: {exc}") from exc
        except BaseException:
            self.close()
            raise

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        if self.read_only:
            raise StoreError(f"journal {self.path} is open read-only")
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                yield self._db
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback()
                raise StoreError(f"journal write failed: {exc}") from exc
            except BaseException:
                self._rollback()
                raise

    def _rollback(self) -> None:
        try:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
        except sqlite3.Error as exc:  # a closed connection: nothing left to roll back
            log.debug("rollback: %s", exc)

    def _query(self, sql: str, params: Sequence[object] = ()) -> list[sqlite3.Row]:
        with self._lock if self._reader is self._db else self._read_lock:
            try:
                cur = self._reader.execute(sql, params)
                cur.row_factory = sqlite3.Row
                return cur.fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"journal read failed: {exc}") from exc

    def close(self) -> None:
        with self._lock, self._read_lock:
            for db in {id(c): c for c in (self._reader, self._db)}.values():
                try:
                    db.close()
                except sqlite3.Error as exc:  # closing twice or after a failure must not mask the cause
                    log.debug("closing journal: %s", exc)
