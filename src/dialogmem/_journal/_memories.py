"""Memory rows of the journal: the canonical copy of every memory, and the one commit of a change set.

A row holds the record (JSON), its dense vector, its status (active, evicted, deleted), and its
index state — the outbox of the vector index: a committed change marks the rows it touched, the
change writer applies them to the index and marks them synced once the index has flushed, and
whatever is still marked after a crash is applied again when the store opens.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

import numpy as np

from .._changes import ChangeSet, GraphCommit, MemoryRemoval, MemoryWrite
from .._errors import StoreError
from .._types import HistoryEntry, MemoryRecord, Turn, stored_record, unix_time_or_none
from .._usage import StageUsage
from ._schema import IndexState, TurnStatus
from ._vectors import decode, encode

Row = Any  # sqlite3.Row, or a mapping row of another SQL backend

_SELECT = "SELECT id, payload, access_count, last_accessed, status FROM memories"


class MemoryRows:
    """Mixin: needs ``_tx()``, ``_query()``, ``_insert_turns()`` and ``_insert_history()``."""

    #: SQL of a row's memory text (it lives in the JSON payload); PostgreSQL spells it its own way
    _memory_text_sql = "json_extract(payload, '$.memory')"

    #: refuse a commit whose processed turns are not all pending (several processes share the journal)
    strict_claims = False

    def _tx(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError  # provided by the journal

    def _query(self, sql: str, params: Sequence[object] = ()) -> list[Row]:
        raise NotImplementedError  # provided by the journal

    @staticmethod
    def _insert_turns(db: sqlite3.Connection, turns: Sequence[Turn], now: float) -> None:
        raise NotImplementedError  # provided by the journal

    @staticmethod
    def _insert_history(db: sqlite3.Connection, user_id: str, e: HistoryEntry) -> None:
        raise NotImplementedError  # provided by the journal

    @staticmethod
    def _add_usage(db: sqlite3.Connection, deltas: Mapping[tuple[str, str], StageUsage]) -> None:
        raise NotImplementedError  # provided by the journal

    def _apply_graph(self, db: sqlite3.Connection, graph: GraphCommit) -> None:
        raise NotImplementedError  # provided by the journal (by GraphRows, first in the MRO)

    @staticmethod
    def _queue_for_ltm(db: sqlite3.Connection, user_id: str, memory_id: str) -> None:
        raise NotImplementedError  # provided by the journal (by LTMQueueRows)

    @staticmethod
    def _unqueue_for_ltm(db: sqlite3.Connection, pairs: Sequence[tuple[str, str]]) -> None:
        raise NotImplementedError  # provided by the journal (by LTMQueueRows)

    # -- the one commit ---------------------------------------------------------------------
    def commit(self, cs: ChangeSet, vectors: Mapping[str, np.ndarray], *,
               access: Sequence[tuple[str, str, int, float]] = (),
               usage: Mapping[tuple[str, str], StageUsage] | None = None) -> None:
        """Everything in ``cs`` in one transaction (one fsync); ``vectors`` by memory id for the
        writes; ``access`` (user, id, count, last) deltas of access statistics and ``usage`` counters
        ride along."""
        now = time.time()
        with self._tx() as db:
            self._insert_turns(db, cs.turns, now)
            for w in cs.writes:
                self._write(db, cs.user_id, w, vectors.get(w.record.id), now)
            for r in cs.removals:
                self._remove(db, cs.user_id, r, now)
            claimed = _set_status(db, cs.user_id, cs.processed, TurnStatus.PROCESSED, None)
            if self.strict_claims and claimed != len(set(cs.processed)):
                raise StoreError(f"{len(set(cs.processed)) - claimed} of the turns this change processes for user "
                                 f"{cs.user_id} are no longer pending (another process took them); nothing committed")
            for turn_id, error in cs.quarantined.items():
                _set_status(db, cs.user_id, [turn_id], TurnStatus.QUARANTINED, error[:2000])
            db.executemany("DELETE FROM sleep_pending WHERE user_id=? AND memory_id=?",
                           [(cs.user_id, m) for m in cs.sleep_done])
            if cs.graph is not None:
                self._apply_graph(db, cs.graph)
            _add_access(db, access)
            if usage:
                self._add_usage(db, usage)
            self._in_commit(db, cs, vectors)

    def _in_commit(self, db: sqlite3.Connection, cs: ChangeSet, vectors: Mapping[str, np.ndarray]) -> None:
        """Last step of :meth:`commit`, inside its transaction: nothing here; a journal that carries
        its index in the same database applies the change to it (``PostgresJournal.join_index``)."""

    def _write(self, db: sqlite3.Connection, user_id: str, w: MemoryWrite, vector: np.ndarray | None,
               now: float) -> None:
        r = w.record
        if r.user_id != user_id:
            raise StoreError(f"memory {r.id} belongs to another change set's user")
        owner = db.execute("SELECT user_id FROM memories WHERE id=?", (r.id,)).fetchone()
        if owner is not None and owner[0] != user_id:
            raise StoreError(f"memory id {r.id} is taken by another user")
        blob = encode(vector)
        db.execute(
            "INSERT INTO memories (id, user_id, status, tier, agent_id, session_id, speaker_name, float_time_stamp, "
            "version, payload, vector, index_state, index_error, updated_at) "
            "VALUES (?, ?, 'active', ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?) ON CONFLICT(id) DO UPDATE SET "
            "status='active', tier=excluded.tier, agent_id=excluded.agent_id, session_id=excluded.session_id, "
            "speaker_name=excluded.speaker_name, float_time_stamp=excluded.float_time_stamp, "
            "version=excluded.version, payload=excluded.payload, vector=COALESCE(excluded.vector, memories.vector), "
            "index_state=excluded.index_state, index_error=NULL, updated_at=excluded.updated_at",
            (r.id, user_id, r.tier, r.agent_id, r.session_id, r.speaker_name, r.float_time_stamp, r.version,
             _payload(r), blob, int(IndexState.UPSERT), now))
        self._insert_history(db, user_id, HistoryEntry(
            memory_id=r.id, event=w.event, old_memory=w.old.memory if w.old is not None else None,
            new_memory=r.memory, timestamp=now, actor=w.actor, previous=w.old))
        if w.sleep_pending:
            db.execute("INSERT INTO sleep_pending (user_id, memory_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
                       (user_id, r.id))

    def _remove(self, db: sqlite3.Connection, user_id: str, rm: MemoryRemoval, now: float) -> None:
        r = rm.record
        db.execute("UPDATE memories SET status=?, index_state=?, index_error=NULL, updated_at=? "
                   "WHERE id=? AND user_id=?", (rm.status, int(IndexState.REMOVE), now, r.id, user_id))
        self._insert_history(db, user_id, HistoryEntry(
            memory_id=r.id, event=rm.event, old_memory=r.memory, new_memory=None, timestamp=now, actor=rm.actor,
            previous=r))
        db.execute("DELETE FROM sleep_pending WHERE user_id=? AND memory_id=?", (user_id, r.id))
        if rm.status == "evicted":  # handed to the next LTM consolidation cycle, exactly once
            self._queue_for_ltm(db, user_id, r.id)
        else:
            self._unqueue_for_ltm(db, [(user_id, r.id)])

    # -- rows copied from an export ---------------------------------------------------------
    def import_rows(self, user_id: str, *, turns: Sequence[tuple[Turn, TurnStatus, str | None]] = (),
                    memories: Sequence[tuple[MemoryRecord, str, np.ndarray | None]] = (),
                    history: Sequence[HistoryEntry] = ()) -> dict[str, int]:
        """Rows of one user copied from an export as they were, in one transaction: turns with their
        status and error, memories with their status (active, evicted, deleted), vector and access
        counts, history rows with their own times. What the journal holds already is left as it is
        (a turn of the same id, a memory of the same id, an identical history row), so importing a
        file again adds nothing. Active memories enter the index outbox. Returns how many were added."""
        now = time.time()
        added = {"turns": 0, "memories": 0, "history": 0}
        with self._tx() as db:
            for t, status, error in turns:
                if t.user_id != user_id:
                    raise StoreError(f"turn {t.id} belongs to another user than {user_id}")
                if db.execute("SELECT 1 FROM turns WHERE user_id=? AND id=?", (user_id, t.id)).fetchone():
                    continue
                self._insert_turns(db, [t], now)
                db.execute("UPDATE turns SET processed=?, error=? WHERE user_id=? AND id=?",
                           (int(status), error, user_id, t.id))
                added["turns"] += 1
            for r, memory_status, vector in memories:
                if self._import_memory(db, user_id, r, memory_status, vector, now):
                    added["memories"] += 1
            for e in history:
                if db.execute("SELECT 1 FROM history WHERE user_id=? AND memory_id=? AND event=? AND timestamp=? "
                              "AND actor=?", (user_id, e.memory_id, e.event.value, e.timestamp, e.actor)).fetchone():
                    continue
                self._insert_history(db, user_id, e)
                added["history"] += 1
        return added

    @staticmethod
    def _import_memory(db: sqlite3.Connection, user_id: str, r: MemoryRecord, status: str,
                       vector: np.ndarray | None, now: float) -> bool:
        if r.user_id != user_id:
            raise StoreError(f"memory {r.id} belongs to another user than {user_id}")
        owner = db.execute("SELECT user_id FROM memories WHERE id=?", (r.id,)).fetchone()
        if owner is not None:
            if owner[0] != user_id:
                raise StoreError(f"memory id {r.id} is taken by another user")
            return False
        blob = encode(vector)
        state = IndexState.UPSERT if status == "active" else IndexState.SYNCED  # new ids: nothing to remove
        db.execute(
            "INSERT INTO memories (id, user_id, status, tier, agent_id, session_id, speaker_name, float_time_stamp, "
            "version, payload, vector, access_count, last_accessed, index_state, index_error, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?)",
            (r.id, user_id, status, r.tier, r.agent_id, r.session_id, r.speaker_name, r.float_time_stamp,
             r.version, _payload(r), blob, r.access_count, r.last_accessed, int(state), now))
        return True

    # -- reads ------------------------------------------------------------------------------
    def memory(self, user_id: str, memory_id: str, *, statuses: Sequence[str] = ("active",)) -> MemoryRecord | None:
        rows = self._query(f"{_SELECT} WHERE user_id=? AND id=? AND status IN ({_marks(statuses)})",
                           [user_id, memory_id, *statuses])
        return memory_row(rows[0]) if rows else None

    def memories(self, user_id: str, *, statuses: Sequence[str] = ("active",), after_id: str | None = None,
                 limit: int = 100, tier: str | None = None, ids: Sequence[str] | None = None,
                 contains: str | None = None) -> list[MemoryRecord]:
        """This user's memories ordered by id, ``limit`` at a time after ``after_id``; ``contains``:
        only those whose text holds it (case-insensitive for ASCII letters)."""
        sql = f"{_SELECT} WHERE user_id=? AND status IN ({_marks(statuses)})"
        params: list[object] = [user_id, *statuses]
        if contains:
            sql += f" AND lower({self._memory_text_sql}) LIKE ? ESCAPE '!'"
            params.append(like_pattern(contains))
        if after_id is not None:
            sql, params = sql + " AND id > ?", [*params, after_id]
        if tier is not None:
            sql, params = sql + " AND tier=?", [*params, tier]
        if ids is None:
            return [memory_row(r) for r in self._query(sql + " ORDER BY id LIMIT ?", [*params, limit])]
        rows = [r for part in _parts(ids, ID_PART)
                for r in self._query(sql + f" AND id IN ({_marks(part)}) ORDER BY id LIMIT ?", [*params, *part, limit])]
        return [memory_row(r) for r in sorted(rows, key=lambda r: r["id"])[:limit]]

    def vectors(self, user_id: str, ids: Sequence[str]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for part in _parts(ids, ID_PART):
            rows = self._query(f"SELECT id, vector FROM memories WHERE user_id=? AND id IN ({_marks(part)})",
                               [user_id, *part])
            out.update((r[0], v) for r in rows if (v := _vector(r[1])) is not None)
        return out

    def count_memories(self, user_id: str | None = None, *, status: str = "active", tier: str | None = None) -> int:
        sql, params = "SELECT COUNT(*) FROM memories WHERE status=?", [status]
        if user_id is not None:
            sql, params = sql + " AND user_id=?", [*params, user_id]
        if tier is not None:
            sql, params = sql + " AND tier=?", [*params, tier]
        return int(self._query(sql, params)[0][0])

    def largest_user(self) -> int:
        """The most active memories one user holds (0 for an empty store)."""
        rows = self._query("SELECT COALESCE(MAX(n), 0) FROM (SELECT COUNT(*) AS n FROM memories "
                           "WHERE status='active' GROUP BY user_id) AS per_user")
        return int(rows[0][0])

    def memory_owner(self, memory_id: str) -> str | None:
        rows = self._query("SELECT user_id FROM memories WHERE id=?", (memory_id,))
        return rows[0][0] if rows else None

    # -- the index outbox -------------------------------------------------------------------
    def index_rows(self, *, states: Sequence[IndexState] | None = None, user_id: str | None = None,
                   batch: int = 1000) -> Iterator[tuple[MemoryRecord, np.ndarray | None, IndexState]]:
        """Rows to apply to an index, by id: those in ``states`` (the outbox), or with ``states=None``
        every active row (a rebuild; with ``user_id``, that user's only)."""
        last = ""
        while True:
            sql = ("SELECT id, payload, access_count, last_accessed, status, vector, index_state FROM memories "
                   "WHERE id > ?")
            params: list[object] = [last]
            if states is None:
                sql += " AND status='active'"
            else:
                sql, params = sql + f" AND index_state IN ({_marks(states)})", [*params, *(int(s) for s in states)]
            if user_id is not None:
                sql, params = sql + " AND user_id=?", [*params, user_id]
            rows = self._query(sql + " ORDER BY id LIMIT ?", [*params, batch])
            for r in rows:
                yield memory_row(r), _vector(r["vector"]), IndexState(r["index_state"])
            if len(rows) < batch:
                return
            last = rows[-1]["id"]

    def outbox_users(self) -> list[str]:
        """The users with rows the index still has to apply (upserts or removals)."""
        rows = self._query("SELECT DISTINCT user_id FROM memories WHERE index_state IN (?, ?) ORDER BY user_id",
                           (int(IndexState.UPSERT), int(IndexState.REMOVE)))
        return [r[0] for r in rows]

    def mark_index(self, ids: Sequence[str], state: IndexState, error: str | None = None) -> None:
        if not ids:
            return
        with self._tx() as db:
            for part in _parts(ids, 500):
                db.execute(f"UPDATE memories SET index_state=?, index_error=? WHERE id IN ({_marks(part)})",
                           [int(state), error, *part])

    def count_index_state(self, state: IndexState) -> int:
        return int(self._query("SELECT COUNT(*) FROM memories WHERE index_state=?", (int(state),))[0][0])

    def add_access(self, deltas: Sequence[tuple[str, str, int, float]]) -> None:
        if deltas:
            with self._tx() as db:
                _add_access(db, deltas)


def _set_status(db: sqlite3.Connection, user_id: str, ids: Sequence[str], status: TurnStatus,
                error: str | None) -> int:
    """Moves pending turns to ``status``; returns how many moved."""
    moved = 0
    for part in _parts(ids, 500):
        moved += db.execute(f"UPDATE turns SET processed=?, error=? WHERE user_id=? AND processed=? "
                            f"AND id IN ({_marks(part)})",
                            [int(status), error, user_id, int(TurnStatus.PENDING), *part]).rowcount
    return moved


def _add_access(db: sqlite3.Connection, deltas: Sequence[tuple[str, str, int, float]]) -> None:
    db.executemany("UPDATE memories SET access_count=access_count+?, last_accessed=CASE WHEN last_accessed IS NULL "
                   "OR last_accessed<? THEN ? ELSE last_accessed END WHERE user_id=? AND id=?",
                   [(n, last, last, user, mid) for user, mid, n, last in sorted(deltas)])  # one lock order


def _payload(record: MemoryRecord) -> str:
    # access statistics live in their own columns (incremented in place), not in the payload; fields
    # holding their default are left out and read back as it (a rule memory: ~320 of ~710 bytes; the
    # defaults are pinned by tests/storage/test_footprint.py)
    return record.model_dump_json(exclude_defaults=True, exclude={"access_count", "last_accessed"})


def memory_row(row: Row) -> MemoryRecord:
    """The record of a ``memories`` row (payload, access columns), mending what an older version let in."""
    record = stored_record(row["payload"])
    return record.model_copy(update={"access_count": max(0, row["access_count"] or 0),
                                     "last_accessed": unix_time_or_none(row["last_accessed"])})


def _vector(blob: bytes | None) -> np.ndarray | None:
    return decode(blob)


#: ids bound in one ``IN (...)`` statement: SQLite's default build binds at most 32,766 values a
#: statement (builds differ: Debian's 3.40 takes 250,000) and PostgreSQL 65,535, so a longer id list
#: is read in parts of this size
ID_PART = 5000


def _parts(ids: Sequence[str], size: int) -> Iterator[list[str]]:
    """``ids`` without repeats (as one ``IN (...)`` reads them) in consecutive lists of at most
    ``size``: one statement each."""
    unique = list(dict.fromkeys(ids))
    for lo in range(0, len(unique), size):
        yield unique[lo:lo + size]


def _marks(items: Sequence[object]) -> str:
    return ",".join("?" * len(items))


def like_pattern(text: str) -> str:
    """A LIKE pattern (escape character ``!``) matching any text that holds ``text``, lower-cased."""
    escaped = text.lower().replace("!", "!!").replace("%", "!%").replace("_", "!_")
    return f"%{escaped}%"
