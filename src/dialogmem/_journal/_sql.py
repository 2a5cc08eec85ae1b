"""The SQL journal: every statement of the journal, written once, in the spellings of a ``Dialect``.

``SQLJournal`` puts the parts together (the turn log, memory rows and their outbox, the LTM graph
and its queue, API keys) and adds what spans them: the one commit of a change set, rows copied
from an export, forgetting a user, usage counters, meta and the schema's migrations. It runs no
connection of its own: ``SQLiteJournal`` (one file) and ``PostgresJournal`` (a shared database)
give it a dialect, a transaction and a read; the PostgreSQL one adds what a database shared by
several processes needs (per-user locks, a commit run again after a deadlock, the index joined to
its transactions), and neither holds a statement of the journal's rows.
"""

from __future__ import annotations

import logging
import time
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import numpy as np

from .._changes import ChangeSet
from .._errors import SchemaVersionError, StoreError
from .._types import HistoryEntry, MemoryRecord, Turn
from .._usage import StageUsage
from ._dialect import Dialect
from ._graph import GraphSQL
from ._keys import KeySQL
from ._ltmqueue import LTMQueueSQL
from ._memories import (
    ADD_SAME,
    MemorySQL,
    add_access,
    import_memories,
    insert_histories,
    remove_memories,
    write_memories,
)
from ._rows import Conn, many, rows_where_in, set_meta, tx_reader
from ._schema import MIGRATIONS, READABLE_FROM, SCHEMA_VERSION, TurnStatus
from ._turns import TurnSQL, insert_turns, set_pending_status

log = logging.getLogger(__name__)


class SQLJournal(TurnSQL, MemorySQL, GraphSQL, LTMQueueSQL, KeySQL):
    """The journal over one SQL database (see the module docstring). Thread-safe where its
    connection layer is."""

    path: Path | str  # where it lives, for messages (a PostgreSQL URL without its password)
    #: True where several processes may write the journal at once (then ``user_lock`` spans them)
    shared = False
    #: refuse a commit whose processed turns are not all pending (another process took them)
    strict_claims = False

    @abstractmethod
    def close(self) -> None: ...

    def user_lock(self, user_id: str) -> AbstractContextManager[None]:
        """Nothing to take across processes where one process owns the journal."""
        return nullcontext()

    # -- meta and schema --------------------------------------------------------------------
    @property
    def schema_version(self) -> int:
        return int(self.meta("schema_version") or 0)

    def meta(self, key: str) -> str | None:
        rows = self._query(f"SELECT value FROM meta WHERE key={self.dialect.mark}", (key,))
        return rows[0][0] if rows else None

    def set_meta(self, key: str, value: str | None) -> None:
        with self._tx() as db:
            if value is None:
                db.execute(f"DELETE FROM meta WHERE key={self.dialect.mark}", (key,))
            else:
                set_meta(db, self.dialect, key, value)

    def _migrate(self) -> None:
        """Bring the schema to ``SCHEMA_VERSION`` in one transaction (a reader only checks it)."""
        if self.read_only:
            try:
                rows = self._query("SELECT * FROM meta WHERE key='schema_version'")
            except StoreError as exc:
                raise StoreError(f"{self._where()} is not a dialogmem journal: {exc}") from exc
            if rows and len(rows[0]) != 2:
                raise StoreError(f"{self._where()} is not a dialogmem journal: its meta table has "
                                 f"{len(rows[0])} columns")
            self._check_version(int(rows[0][1]) if rows else 0, reading=True)
            return
        with self._tx() as db:  # concurrent openers wait on the transaction's lock
            self._prepare(db)
            db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)", ())
            columns = [c[0] for c in db.execute("SELECT * FROM meta WHERE 1 = 0", ()).description or ()]
            if columns != ["key", "value"]:  # another program's table: write nothing to it
                raise StoreError(f"{self._where()} is not a dialogmem journal: its meta table has columns "
                                 f"{', '.join(columns)}")
            row = db.execute("SELECT value FROM meta WHERE key='schema_version'", ()).fetchone()
            current = int(row[0]) if row else 0
            self._check_version(current, reading=False)
            for version in range(current + 1, SCHEMA_VERSION + 1):
                MIGRATIONS[version](db, self.dialect)
                set_meta(db, self.dialect, "schema_version", str(version))
                log.info("journal %s migrated to schema version %d", self._where(), version)

    def _prepare(self, db: Conn) -> None:
        """First step of the opening transaction (``PostgresJournal``: lock the store, make its schema)."""

    def _check_version(self, current: int, *, reading: bool) -> None:
        if current > SCHEMA_VERSION:
            raise SchemaVersionError(f"{self._where()} has schema version {current}; this dialogmem reads up to "
                                     f"{SCHEMA_VERSION}")
        if reading and current < READABLE_FROM:
            raise StoreError(f"{self._where()} has schema version {current} and needs an upgrade: open it once "
                             "read-write (without read_only)")

    def _where(self) -> str:
        """The journal, for messages."""
        return str(self.path)

    # -- the one commit ---------------------------------------------------------------------
    def commit(self, cs: ChangeSet, vectors: Mapping[str, np.ndarray], *,
               access: Sequence[tuple[str, str, int, float]] = (),
               usage: Mapping[tuple[str, str], StageUsage] | None = None) -> None:
        """Everything in ``cs`` in one transaction (one fsync); ``vectors`` by memory id for the
        writes; ``access`` (user, id, count, last) deltas of access statistics and ``usage`` counters
        ride along."""
        d, now = self.dialect, time.time()
        with self._tx() as db:
            insert_turns(db, d, cs.turns, now)
            write_memories(db, d, cs.user_id, cs.writes, vectors, now)
            remove_memories(db, d, cs.user_id, cs.removals, now)
            claimed = set_pending_status(db, d, cs.user_id, cs.processed, TurnStatus.PROCESSED, None)
            if self.strict_claims and claimed != len(set(cs.processed)):
                raise StoreError(f"{len(set(cs.processed)) - claimed} of the turns this change processes for user "
                                 f"{cs.user_id} are no longer pending (another process took them); nothing committed")
            for turn_id, error in cs.quarantined.items():
                set_pending_status(db, d, cs.user_id, [turn_id], TurnStatus.QUARANTINED, error[:2000])
            many(db, f"DELETE FROM sleep_pending WHERE user_id={d.mark} AND memory_id={d.mark}",
                 [(cs.user_id, m) for m in cs.sleep_done])
            if cs.graph is not None:
                self._apply_graph(db, cs.graph)
            add_access(db, d, access)
            if usage:
                _add_usage(db, d, usage)
            self._in_commit(db, cs, vectors)

    def _in_commit(self, db: Conn, cs: ChangeSet, vectors: Mapping[str, np.ndarray]) -> None:
        """Last step of :meth:`commit`, inside its transaction: nothing here; a journal that carries
        its index in the same database applies the change to it (``PostgresJournal.join_index``)."""

    # -- rows copied from an export ---------------------------------------------------------
    def import_rows(self, user_id: str, *, turns: Sequence[tuple[Turn, TurnStatus, str | None]] = (),
                    memories: Sequence[tuple[MemoryRecord, str, np.ndarray | None]] = (),
                    history: Sequence[HistoryEntry] = ()) -> dict[str, int]:
        """Rows of one user copied from an export as they were, in one transaction: turns with their
        status and error, memories with their status (active, evicted, deleted), vector and access
        counts, history rows with their own times. What the journal holds already is left as it is
        (a turn of the same id, a memory of the same id, an identical history row), so importing a
        file again adds nothing. Active memories enter the index outbox. Returns how many were added."""
        d, p, now = self.dialect, self.dialect.mark, time.time()
        added = {"turns": 0, "memories": 0, "history": 0}
        for t, _, _ in turns:
            if t.user_id != user_id:
                raise StoreError(f"turn {t.id} belongs to another user than {user_id}")
        with self._tx() as db:
            read = tx_reader(db)
            held_turns = {r[0] for r in rows_where_in(read, d, f"SELECT id FROM turns WHERE user_id={p} AND", "id",
                                                      [t.id for t, _, _ in turns], [user_id])}
            first: dict[str, tuple[Turn, int, str | None]] = {}  # a turn held, or met before, is left out
            for t, turn_status, error in turns:
                if t.id not in held_turns:
                    first.setdefault(t.id, (t, int(turn_status), error))
            status = {tid: (code, error) for tid, (_, code, error) in first.items()}
            fresh = insert_turns(db, d, [t for t, _, _ in first.values()], now, unheld=True)
            many(db, f"UPDATE turns SET processed={p}, error={p} WHERE user_id={p} AND id={p}",
                 [(*status[t.id], user_id, t.id) for t in fresh])
            added["turns"] = len(fresh)
            added["memories"] = import_memories(db, d, user_id, memories, now)
            seen = {(r[0], "ADD" if r[1] == ADD_SAME else r[1], r[2], r[3]) for r in rows_where_in(
                read, d, f"SELECT memory_id, event, timestamp, actor FROM history WHERE user_id={p} AND", "memory_id",
                [e.memory_id for e in history], [user_id])}
            new: list[HistoryEntry] = []
            for e in history:  # an identical row (held, or earlier in the file) is left out
                key = (e.memory_id, e.event.value, e.timestamp, e.actor)
                if key not in seen:
                    seen.add(key)
                    new.append(e)
            insert_histories(db, d, user_id, new)
            added["history"] = len(new)
        return added

    # -- forgetting -------------------------------------------------------------------------
    def forget_user(self, user_id: str) -> dict[str, int]:
        """Delete every row of this user; returns how many turns and memories were removed."""
        p = self.dialect.mark
        with self._tx() as db:
            turns = db.execute(f"DELETE FROM turns WHERE user_id={p}", (user_id,)).rowcount
            memories = db.execute(f"DELETE FROM memories WHERE user_id={p}", (user_id,)).rowcount
            for table in ("history", "sleep_pending", "speakers", "ltm_pending"):
                db.execute(f"DELETE FROM {table} WHERE user_id={p}", (user_id,))
            self._in_forget(db, user_id)
        return {"turns": turns, "memories": memories}

    def _in_forget(self, db: Conn, user_id: str) -> None:
        """Last step of :meth:`forget_user`, inside its transaction (see ``_in_commit``)."""

    # -- usage counters ---------------------------------------------------------------------
    def add_usage(self, deltas: Mapping[tuple[str, str], StageUsage]) -> None:
        """Add counters to the persisted totals, all in one transaction."""
        if not deltas or self.read_only:
            return
        with self._tx() as db:
            _add_usage(db, self.dialect, deltas)

    def usage(self) -> dict[tuple[str, str], StageUsage]:
        rows = self._query("SELECT kind, stage, calls, prompt_tokens, completion_tokens, latency_ms, failures, "
                           "fallbacks FROM usage")
        return {(r[0], r[1]): StageUsage(*r[2:]) for r in rows}


def _add_usage(db: Conn, d: Dialect, deltas: Mapping[tuple[str, str], StageUsage]) -> None:
    many(db, "INSERT INTO usage (kind, stage, calls, prompt_tokens, completion_tokens, latency_ms, failures, "
             f"fallbacks) VALUES ({d.marks(8)}) ON CONFLICT(kind, stage) DO UPDATE SET "
             "calls=usage.calls+excluded.calls, prompt_tokens=usage.prompt_tokens+excluded.prompt_tokens, "
             "completion_tokens=usage.completion_tokens+excluded.completion_tokens, "
             "latency_ms=usage.latency_ms+excluded.latency_ms, failures=usage.failures+excluded.failures, "
             "fallbacks=usage.fallbacks+excluded.fallbacks",
         [(kind, stage, u.calls, u.prompt_tokens, u.completion_tokens, u.latency_ms, u.failures, u.fallbacks)
          for (kind, stage), u in sorted(deltas.items())])  # one lock order
