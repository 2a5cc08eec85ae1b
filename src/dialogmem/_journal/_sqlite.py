"""The SQLite journal (WAL): raw turns, canonical memory rows, history, usage, sleep queue, schema.

Raw turns are committed before anything is derived from them, so a turn the caller was told was
accepted survives a crash at any later point; pending turns are the write buffer, processed when
their batch is due (also after a restart). Memory rows are the source of truth: the vector index
is rebuilt from them. Opening a store never deletes or rewrites data: migrations only add.

One connection serialised by a lock: every transaction is short (no model call runs inside one).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

from .._errors import InputError, SchemaVersionError, StoreError
from .._types import Event, HistoryEntry, QuarantinedTurn, Turn, mend_stored, stored_record
from .._usage import StageUsage
from ._graph import GraphRows
from ._keys import KeyRows
from ._ltmqueue import LTMQueueRows
from ._memories import ID_PART, MemoryRows, _marks, _parts
from ._schema import MIGRATIONS, SCHEMA_VERSION, TurnStatus

log = logging.getLogger(__name__)

PAGE_SIZE = 8192  # bytes a page of a journal created from now on

_TURN_COLUMNS = ("seq, id, user_id, agent_id, session_id, speaker, role, content, time_stamp, float_time_stamp, "
                 "weekday, metadata")


class SQLiteJournal(LTMQueueRows, GraphRows, MemoryRows, KeyRows):  # the mixins that provide what others stub first
    """Durable bookkeeping of one store in one SQLite file. Thread-safe.

    Its SQL is kept portable (``?`` marks, ``ON CONFLICT``, table-qualified upsert columns):
    ``PostgresJournal`` runs the same statements through a translating connection."""

    shared = False  # one process owns the file (the store lock): user locks are in-process only

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
        try:
            self._migrate()
        except BaseException:
            self.close()
            raise

    # -- infrastructure -------------------------------------------------------------------
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
        with self._lock:
            try:
                cur = self._db.execute(sql, params)
                cur.row_factory = sqlite3.Row
                return cur.fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"journal read failed: {exc}") from exc

    def _migrate(self) -> None:
        current = self._current_version()
        if current > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"{self.path} has schema version {current}; this dialogmem reads up to {SCHEMA_VERSION}")
        if current < SCHEMA_VERSION and self.read_only:
            raise StoreError(f"{self.path} has schema version {current} and needs an upgrade: open it once "
                             "read-write (without read_only)")
        for version in range(current + 1, SCHEMA_VERSION + 1):
            with self._tx() as db:
                MIGRATIONS[version](db)
                db.execute("INSERT INTO meta (key, value) VALUES ('schema_version', ?) "
                           "ON CONFLICT(key) DO UPDATE SET value=excluded.value", (str(version),))
            log.info("journal %s migrated to schema version %d", self.path, version)

    def _current_version(self) -> int:
        if not self.read_only:
            with self._tx() as db:
                db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        try:
            rows = self._query("SELECT value FROM meta WHERE key='schema_version'")
        except StoreError as exc:
            raise StoreError(f"{self.path} is not a dialogmem journal: {exc}") from exc
        return int(rows[0][0]) if rows else 0

    def user_lock(self, user_id: str) -> AbstractContextManager[None]:
        """Nothing to take across processes: one process owns a SQLite store."""
        return nullcontext()

    @property
    def schema_version(self) -> int:
        return int(self.meta("schema_version") or 0)

    def meta(self, key: str) -> str | None:
        rows = self._query("SELECT value FROM meta WHERE key=?", (key,))
        return rows[0][0] if rows else None

    def set_meta(self, key: str, value: str | None) -> None:
        with self._tx() as db:
            if value is None:
                db.execute("DELETE FROM meta WHERE key=?", (key,))
            else:
                db.execute("INSERT INTO meta (key, value) VALUES (?, ?) "
                           "ON CONFLICT(key) DO UPDATE SET value=excluded.value", (key, value))

    def close(self) -> None:
        with self._lock:
            try:
                self._db.close()
            except sqlite3.Error as exc:  # closing twice or after a failure must not mask the cause
                log.debug("closing journal: %s", exc)

    # -- turns ----------------------------------------------------------------------------
    def fresh_turns(self, turns: Sequence[Turn]) -> list[Turn]:
        """The turns the journal does not hold yet. A turn whose (user, id) is journaled with the
        same content is a retry and is left out; with other content it is an ``InputError``."""
        if not turns:
            return []
        user_id = turns[0].user_id
        known = {r[0]: r[1] for part in _parts([t.id for t in turns], ID_PART) for r in self._query(
            f"SELECT id, content FROM turns WHERE user_id=? AND id IN ({_marks(part)})", [user_id, *part])}
        for t in turns:
            if t.id in known and known[t.id] != t.content:
                raise InputError(f"message id {t.id!r} already exists with different content")
        return [t for t in turns if t.id not in known]

    @staticmethod
    def _insert_turns(db: sqlite3.Connection, turns: Sequence[Turn], now: float) -> None:
        for t in turns:
            row = db.execute("SELECT content FROM turns WHERE user_id=? AND id=?", (t.user_id, t.id)).fetchone()
            if row is not None:  # a retry that raced its first attempt: already journaled
                if row[0] != t.content:
                    raise InputError(f"message id {t.id!r} already exists with different content")
                continue
            db.execute(
                "INSERT INTO turns (id, user_id, agent_id, session_id, speaker, role, content, time_stamp, "
                "float_time_stamp, weekday, metadata, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (t.id, t.user_id, t.agent_id, t.session_id, t.speaker, t.role, t.content, t.time_stamp,
                 t.float_time_stamp, t.weekday, json.dumps(t.metadata, ensure_ascii=False), now))
            db.execute("INSERT INTO speakers (user_id, speaker) VALUES (?, ?) ON CONFLICT DO NOTHING",
                       (t.user_id, t.speaker))

    @staticmethod
    def _turn(row: sqlite3.Row | dict[str, Any]) -> Turn:
        data = dict(row)
        data.pop("error", None)
        data["metadata"] = json.loads(data["metadata"])
        return mend_stored(Turn, data, f"turn {data.get('id')!r} of user {data.get('user_id')!r}")

    def turns(self, user_id: str, *, ids: Iterable[str] | None = None, status: TurnStatus | None = None,
              limit: int | None = None) -> list[Turn]:
        sql = f"SELECT {_TURN_COLUMNS} FROM turns WHERE user_id=?"
        params: list[object] = [user_id]
        if status is not None:
            sql += " AND processed=?"
            params.append(int(status))
        tail, last = (" ORDER BY seq LIMIT ?", [limit]) if limit is not None else (" ORDER BY seq", [])
        if ids is None:
            return [self._turn(r) for r in self._query(sql + tail, [*params, *last])]
        found = [self._turn(r) for part in _parts(list(ids), ID_PART)
                 for r in self._query(sql + f" AND id IN ({_marks(part)})" + tail, [*params, *part, *last])]
        return sorted(found, key=lambda t: t.seq)[:limit]

    def turn_rows(self, user_id: str, *, after_seq: int = 0,
                  limit: int = 1000) -> list[tuple[Turn, TurnStatus, str | None]]:
        """This user's turns in journal order after ``after_seq`` (a page of an export), each with its
        status and error."""
        rows = self._query(f"SELECT {_TURN_COLUMNS}, processed, error FROM turns WHERE user_id=? AND seq>? "
                           "ORDER BY seq LIMIT ?", (user_id, after_seq, limit))
        out = []
        for r in rows:
            data = dict(r)
            status, error = TurnStatus(data.pop("processed")), data.pop("error")
            out.append((self._turn(data), status, error))
        return out

    def pending_turns(self, user_id: str) -> list[Turn]:
        return self.turns(user_id, status=TurnStatus.PENDING)

    def turns_before(self, user_id: str, seq: int | None, limit: int) -> list[Turn]:
        """The ``limit`` turns of this user just before ``seq`` (or the last ones), oldest first."""
        bound = seq if seq is not None else 2**62
        rows = self._query(
            f"SELECT * FROM (SELECT {_TURN_COLUMNS} FROM turns WHERE user_id=? AND seq<? ORDER BY seq DESC "
            "LIMIT ?) AS recent ORDER BY seq", (user_id, bound, limit))
        return [self._turn(r) for r in rows]

    def pending_users(self) -> list[str]:
        return [r[0] for r in self._query("SELECT DISTINCT user_id FROM turns WHERE processed=0")]

    def count_turns(self, user_id: str | None = None, status: TurnStatus | None = None) -> int:
        sql = "SELECT COUNT(*) FROM turns WHERE 1=1"
        params: list[object] = []
        if user_id is not None:
            sql, params = sql + " AND user_id=?", [user_id]
        if status is not None:
            sql, params = sql + " AND processed=?", [*params, int(status)]
        return int(self._query(sql, params)[0][0])

    def speakers(self, user_id: str) -> list[str]:
        rows = self._query("SELECT speaker FROM speakers WHERE user_id=? ORDER BY speaker", (user_id,))
        return [r[0] for r in rows]

    def quarantined(self, user_id: str | None = None) -> list[tuple[str, QuarantinedTurn]]:
        """(user id, turn with its error) of every quarantined turn, oldest first."""
        sql = f"SELECT {_TURN_COLUMNS}, error FROM turns WHERE processed=?"
        params: list[object] = [int(TurnStatus.QUARANTINED)]
        if user_id is not None:
            sql, params = sql + " AND user_id=?", [*params, user_id]
        rows = self._query(sql + " ORDER BY seq", params)
        return [(r["user_id"], QuarantinedTurn(turn=self._turn(r), error=r["error"] or "")) for r in rows]

    def set_turn_status(self, user_id: str, ids: Sequence[str], status: TurnStatus, *,
                        only_from: TurnStatus | None = None) -> int:
        """Move turns to ``status`` (e.g. quarantined -> pending to retry, or -> dropped)."""
        if not ids:
            return 0
        changed = 0
        with self._tx() as db:  # every part or none
            for part in _parts(ids, ID_PART):
                sql = f"UPDATE turns SET processed=?, error=NULL WHERE user_id=? AND id IN ({_marks(part)})"
                params: list[object] = [int(status), user_id, *part]
                if only_from is not None:
                    sql, params = sql + " AND processed=?", [*params, int(only_from)]
                changed += db.execute(sql, params).rowcount
        return changed

    # -- history --------------------------------------------------------------------------
    @staticmethod
    def _insert_history(db: sqlite3.Connection, user_id: str, e: HistoryEntry) -> None:
        """One history row; an ADD for a memory that has one already is a replay and is skipped."""
        if e.event is Event.ADD and db.execute(
                "SELECT 1 FROM history WHERE user_id=? AND memory_id=? AND event='ADD'",
                (user_id, e.memory_id)).fetchone():
            return
        previous = e.previous.model_dump_json() if e.previous is not None else None
        db.execute("INSERT INTO history (memory_id, user_id, event, old_memory, new_memory, timestamp, actor, "
                   "old_record) VALUES (?,?,?,?,?,?,?,?)",
                   (e.memory_id, user_id, e.event.value, e.old_memory, e.new_memory, e.timestamp, e.actor,
                    previous))

    def history(self, memory_id: str, user_id: str) -> list[HistoryEntry]:
        rows = self._query(
            "SELECT memory_id, event, old_memory, new_memory, timestamp, actor, old_record FROM history "
            "WHERE user_id=? AND memory_id=? ORDER BY seq", (user_id, memory_id))
        out = []
        for r in rows:
            data: dict[str, Any] = dict(r)
            raw = data.pop("old_record")
            data["previous"] = stored_record(raw) if raw else None
            out.append(mend_stored(HistoryEntry, data, f"a history row of memory {memory_id!r}"))
        return out

    # -- sleep bookkeeping ----------------------------------------------------------------
    def sleep_pending(self, user_id: str | None = None) -> dict[str, list[str]]:
        """user_id -> memory ids added or changed since that user's last sleep."""
        if user_id is None:
            rows = self._query("SELECT user_id, memory_id FROM sleep_pending ORDER BY user_id, memory_id")
        else:
            rows = self._query("SELECT user_id, memory_id FROM sleep_pending WHERE user_id=? ORDER BY memory_id",
                               (user_id,))
        out: dict[str, list[str]] = {}
        for r in rows:
            out.setdefault(r[0], []).append(r[1])
        return out

    # -- usage ----------------------------------------------------------------------------
    def add_usage(self, deltas: Mapping[tuple[str, str], StageUsage]) -> None:
        """Add counters to the persisted totals, all in one transaction."""
        if not deltas or self.read_only:
            return
        with self._tx() as db:
            self._add_usage(db, deltas)

    @staticmethod
    def _add_usage(db: sqlite3.Connection, deltas: Mapping[tuple[str, str], StageUsage]) -> None:
        db.executemany(
                "INSERT INTO usage (kind, stage, calls, prompt_tokens, completion_tokens, latency_ms, "
                "failures, fallbacks) VALUES (?,?,?,?,?,?,?,?) ON CONFLICT(kind, stage) DO UPDATE SET "
                "calls=usage.calls+excluded.calls, prompt_tokens=usage.prompt_tokens+excluded.prompt_tokens, "
                "completion_tokens=usage.completion_tokens+excluded.completion_tokens, "
                "latency_ms=usage.latency_ms+excluded.latency_ms, failures=usage.failures+excluded.failures, "
                "fallbacks=usage.fallbacks+excluded.fallbacks",
            [(kind, stage, u.calls, u.prompt_tokens, u.completion_tokens, u.latency_ms,
              u.failures, u.fallbacks) for (kind, stage), u in sorted(deltas.items())])  # one lock order

    def usage(self) -> dict[tuple[str, str], StageUsage]:
        rows = self._query("SELECT kind, stage, calls, prompt_tokens, completion_tokens, latency_ms, failures, "
                           "fallbacks FROM usage")
        return {(r[0], r[1]): StageUsage(*r[2:]) for r in rows}

    # -- forgetting -----------------------------------------------------------------------
    def forget_user(self, user_id: str) -> dict[str, int]:
        """Delete every row of this user; returns how many turns and memories were removed."""
        with self._tx() as db:
            turns = db.execute("DELETE FROM turns WHERE user_id=?", (user_id,)).rowcount
            memories = db.execute("DELETE FROM memories WHERE user_id=?", (user_id,)).rowcount
            for table in ("history", "sleep_pending", "speakers", "ltm_pending"):
                db.execute(f"DELETE FROM {table} WHERE user_id=?", (user_id,))
            self._in_forget(db, user_id)
        return {"turns": turns, "memories": memories}

    def _in_forget(self, db: sqlite3.Connection, user_id: str) -> None:
        """Last step of :meth:`forget_user`, inside its transaction (see ``_in_commit``)."""


def now() -> float:
    return time.time()
