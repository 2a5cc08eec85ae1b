"""The SQLite journal (WAL): raw turns, history, usage, sleep bookkeeping, schema version.

Raw turns are committed before any processing, so a turn the caller was told was accepted survives
a crash at any later point; unprocessed turns are replayed when the store is opened again.
Opening a store never deletes or rewrites data: migrations only add.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from ._errors import InputError, SchemaVersionError, StoreError
from ._types import Event, HistoryEntry, Turn
from ._usage import StageUsage

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1


def _run_script(db: sqlite3.Connection, script: str) -> None:
    # executescript() would COMMIT first and break the migration's transaction
    for statement in script.split(";"):
        if statement.strip():
            db.execute(statement)


def _v1(db: sqlite3.Connection) -> None:
    _run_script(
        db,
        """
        CREATE TABLE IF NOT EXISTS turns (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            id TEXT NOT NULL,
            user_id TEXT NOT NULL,
            agent_id TEXT,
            session_id TEXT,
            speaker TEXT NOT NULL,
            role TEXT,
            content TEXT NOT NULL,
            time_stamp TEXT NOT NULL,
            float_time_stamp REAL NOT NULL,
            weekday TEXT NOT NULL,
            metadata TEXT NOT NULL DEFAULT '{}',
            processed INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL,
            UNIQUE (user_id, id)
        );
        CREATE INDEX IF NOT EXISTS turns_pending ON turns (processed, user_id, seq);
        CREATE TABLE IF NOT EXISTS history (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            memory_id TEXT NOT NULL,
            user_id TEXT NOT NULL,
            event TEXT NOT NULL,
            old_memory TEXT,
            new_memory TEXT,
            timestamp REAL NOT NULL,
            actor TEXT NOT NULL
        );
        CREATE INDEX IF NOT EXISTS history_memory ON history (user_id, memory_id, seq);
        CREATE TABLE IF NOT EXISTS usage (
            kind TEXT NOT NULL,
            stage TEXT NOT NULL,
            calls INTEGER NOT NULL DEFAULT 0,
            prompt_tokens INTEGER NOT NULL DEFAULT 0,
            completion_tokens INTEGER NOT NULL DEFAULT 0,
            latency_ms REAL NOT NULL DEFAULT 0,
            failures INTEGER NOT NULL DEFAULT 0,
            fallbacks INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (kind, stage)
        );
        CREATE TABLE IF NOT EXISTS sleep_pending (
            memory_id TEXT NOT NULL,
            user_id TEXT NOT NULL,
            PRIMARY KEY (user_id, memory_id)
        );
        CREATE TABLE IF NOT EXISTS speakers (
            user_id TEXT NOT NULL,
            speaker TEXT NOT NULL,
            PRIMARY KEY (user_id, speaker)
        );
        """
    )


#: version -> migration; each runs in one transaction together with its version record
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {1: _v1}


class Journal:
    """Durable bookkeeping in one SQLite file. Thread-safe (one connection, one lock)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path) if str(path) != ":memory:" else path
        try:
            self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._db.execute("PRAGMA busy_timeout=5000")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open journal {path}: {exc}") from exc
        self._lock = threading.RLock()
        self._migrate()

    # -- infrastructure -------------------------------------------------------------------
    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
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
        if self._db.in_transaction:
            self._db.execute("ROLLBACK")

    def _query(self, sql: str, params: Sequence[object] = ()) -> list[sqlite3.Row]:
        with self._lock:
            try:
                cur = self._db.execute(sql, params)
                cur.row_factory = sqlite3.Row
                return cur.fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"journal read failed: {exc}") from exc

    def _migrate(self) -> None:
        with self._tx() as db:
            db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        current = int(row[0]) if row else 0
        if current > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"{self.path} has schema version {current}; this dialogmem reads up to {SCHEMA_VERSION}"
            )
        for version in range(current + 1, SCHEMA_VERSION + 1):
            with self._tx() as db:
                MIGRATIONS[version](db)
                db.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema_version', ?) "
                    "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                    (str(version),),
                )
            log.info("journal %s migrated to schema version %d", self.path, version)

    @property
    def schema_version(self) -> int:
        return int(self._query("SELECT value FROM meta WHERE key='schema_version'")[0][0])

    def close(self) -> None:
        with self._lock:
            try:
                self._db.close()
            except sqlite3.Error as exc:  # closing twice or after a failure must not mask the cause
                log.debug("closing journal: %s", exc)

    # -- turns ----------------------------------------------------------------------------
    def append_turns(self, turns: Sequence[Turn]) -> list[Turn]:
        """Commit turns in one transaction; returns them with ``seq`` set.

        A turn whose (user, id) exists with the same content is accepted again as a no-op
        (idempotent retries); the same id with different content is an ``InputError``.
        """
        out: list[Turn] = []
        now = time.time()
        with self._tx() as db:
            for t in turns:
                row = db.execute(
                    "SELECT seq, content FROM turns WHERE user_id=? AND id=?", (t.user_id, t.id)
                ).fetchone()
                if row is not None:
                    if row[1] != t.content:
                        raise InputError(f"message id {t.id!r} already exists with different content")
                    out.append(t.model_copy(update={"seq": row[0]}))
                    continue
                cur = db.execute(
                    "INSERT INTO turns (id, user_id, agent_id, session_id, speaker, role, content, "
                    "time_stamp, float_time_stamp, weekday, metadata, created_at) "
                    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                    (t.id, t.user_id, t.agent_id, t.session_id, t.speaker, t.role, t.content,
                     t.time_stamp, t.float_time_stamp, t.weekday, json.dumps(t.metadata), now),
                )
                db.execute(
                    "INSERT OR IGNORE INTO speakers (user_id, speaker) VALUES (?, ?)", (t.user_id, t.speaker)
                )
                out.append(t.model_copy(update={"seq": cur.lastrowid}))
        return out

    @staticmethod
    def _turn(row: sqlite3.Row) -> Turn:
        data = dict(row)
        data["metadata"] = json.loads(data["metadata"])
        data.pop("processed", None)
        data.pop("created_at", None)
        return Turn.model_validate(data)

    def turns(self, user_id: str, *, ids: Iterable[str] | None = None, pending_only: bool = False,
              limit: int | None = None) -> list[Turn]:
        sql = "SELECT * FROM turns WHERE user_id=?"
        params: list[object] = [user_id]
        if pending_only:
            sql += " AND processed=0"
        if ids is not None:
            id_list = list(ids)
            if not id_list:
                return []
            sql += f" AND id IN ({','.join('?' * len(id_list))})"
            params += id_list
        sql += " ORDER BY seq"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [self._turn(r) for r in self._query(sql, params)]

    def turns_before(self, user_id: str, seq: int, limit: int) -> list[Turn]:
        """The ``limit`` turns of this user just before ``seq``, oldest first."""
        rows = self._query(
            "SELECT * FROM (SELECT * FROM turns WHERE user_id=? AND seq<? ORDER BY seq DESC LIMIT ?) ORDER BY seq",
            (user_id, seq, limit),
        )
        return [self._turn(r) for r in rows]

    def pending_users(self) -> list[str]:
        return [r[0] for r in self._query("SELECT DISTINCT user_id FROM turns WHERE processed=0")]

    def mark_processed(self, user_id: str, turn_ids: Iterable[str]) -> None:
        ids = list(turn_ids)
        if not ids:
            return
        with self._tx() as db:
            db.executemany(
                "UPDATE turns SET processed=1 WHERE user_id=? AND id=?", [(user_id, i) for i in ids]
            )

    def count_turns(self, user_id: str | None = None) -> int:
        if user_id is None:
            return int(self._query("SELECT COUNT(*) FROM turns")[0][0])
        return int(self._query("SELECT COUNT(*) FROM turns WHERE user_id=?", (user_id,))[0][0])

    def speakers(self, user_id: str) -> list[str]:
        rows = self._query("SELECT speaker FROM speakers WHERE user_id=? ORDER BY speaker", (user_id,))
        return [r[0] for r in rows]

    # -- history --------------------------------------------------------------------------
    def add_history(self, entries: Sequence[tuple[str, HistoryEntry]],
                    *, sleep_pending: Sequence[tuple[str, str]] = ()) -> None:
        """Append (user_id, entry) rows; optionally queue memories for the next sleep. One transaction.

        An ADD for a memory that already has one is skipped, so a replay after a crash does not
        write it twice.
        """
        with self._tx() as db:
            for user_id, e in entries:
                if e.event is Event.ADD and db.execute(
                    "SELECT 1 FROM history WHERE user_id=? AND memory_id=? AND event='ADD'",
                    (user_id, e.memory_id),
                ).fetchone():
                    continue
                db.execute(
                    "INSERT INTO history (memory_id, user_id, event, old_memory, new_memory, timestamp, actor) "
                    "VALUES (?,?,?,?,?,?,?)",
                    (e.memory_id, user_id, e.event.value, e.old_memory, e.new_memory, e.timestamp, e.actor),
                )
            db.executemany(
                "INSERT OR IGNORE INTO sleep_pending (user_id, memory_id) VALUES (?, ?)", sleep_pending
            )

    def history(self, memory_id: str, user_id: str) -> list[HistoryEntry]:
        rows = self._query(
            "SELECT memory_id, event, old_memory, new_memory, timestamp, actor FROM history "
            "WHERE user_id=? AND memory_id=? ORDER BY seq",
            (user_id, memory_id),
        )
        return [HistoryEntry.model_validate(dict(r)) for r in rows]

    # -- sleep bookkeeping ----------------------------------------------------------------
    def sleep_pending(self, user_id: str | None = None) -> dict[str, list[str]]:
        """user_id -> memory ids added or changed since that user's last sleep."""
        if user_id is None:
            rows = self._query("SELECT user_id, memory_id FROM sleep_pending ORDER BY user_id")
        else:
            rows = self._query(
                "SELECT user_id, memory_id FROM sleep_pending WHERE user_id=?", (user_id,)
            )
        out: dict[str, list[str]] = {}
        for r in rows:
            out.setdefault(r[0], []).append(r[1])
        return out

    def clear_sleep_pending(self, user_id: str, memory_ids: Iterable[str]) -> None:
        with self._tx() as db:
            db.executemany(
                "DELETE FROM sleep_pending WHERE user_id=? AND memory_id=?",
                [(user_id, m) for m in memory_ids],
            )

    # -- usage ----------------------------------------------------------------------------
    def add_usage(self, deltas: dict[tuple[str, str], StageUsage]) -> None:
        """Add counters to the persisted totals, all in one transaction."""
        if not deltas:
            return
        with self._tx() as db:
            db.executemany(
                "INSERT INTO usage (kind, stage, calls, prompt_tokens, completion_tokens, latency_ms, "
                "failures, fallbacks) VALUES (?,?,?,?,?,?,?,?) ON CONFLICT(kind, stage) DO UPDATE SET "
                "calls=calls+excluded.calls, prompt_tokens=prompt_tokens+excluded.prompt_tokens, "
                "completion_tokens=completion_tokens+excluded.completion_tokens, "
                "latency_ms=latency_ms+excluded.latency_ms, failures=failures+excluded.failures, "
                "fallbacks=fallbacks+excluded.fallbacks",
                [(kind, stage, u.calls, u.prompt_tokens, u.completion_tokens, u.latency_ms,
                  u.failures, u.fallbacks) for (kind, stage), u in deltas.items()],
            )

    def usage(self) -> dict[tuple[str, str], StageUsage]:
        rows = self._query(
            "SELECT kind, stage, calls, prompt_tokens, completion_tokens, latency_ms, failures, fallbacks "
            "FROM usage"
        )
        return {(r[0], r[1]): StageUsage(*r[2:]) for r in rows}

    # -- forgetting -----------------------------------------------------------------------
    def forget_user(self, user_id: str) -> int:
        """Delete every row of this user; returns the number of turns removed."""
        with self._tx() as db:
            n = db.execute("DELETE FROM turns WHERE user_id=?", (user_id,)).rowcount
            for table in ("history", "sleep_pending", "speakers"):
                db.execute(f"DELETE FROM {table} WHERE user_id=?", (user_id,))
        return n
