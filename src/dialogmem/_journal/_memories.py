"""Memory rows of the journal: the canonical copy of every memory, its history, and the index outbox.

A row holds the record (JSON), its dense vector, its status (active, evicted, deleted), and its
index state — the outbox of the vector index: a committed change marks the rows it touched, the
change writer applies them to the index and marks them synced once the index has flushed, and
whatever is still marked after a crash is applied again when the store opens.

The reads and outbox calls are :class:`MemorySQL` (the ``MemoryRows`` role); the writes are
functions run inside the journal's one commit (``_sql.SQLJournal.commit``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from .._changes import MemoryRemoval, MemoryWrite
from .._errors import StoreError
from .._types import Event, HistoryEntry, MemoryRecord, mend_stored, stored_record, unix_time_or_none
from ._dialect import Dialect
from ._ltmqueue import queue_for_ltm, unqueue_for_ltm
from ._rows import ID_PART, Conn, Reader, Row, SQLRows, many, parts, rows_where_in, tx_reader
from ._schema import IndexState
from ._vectors import decode, encode_all

#: record fields a ``memories`` row keeps in columns of their own, so its payload leaves them out
#: (~100 bytes a row); reading puts them back (a row written before holds them in both, equal)
COLUMN_FIELDS = ("id", "user_id", "tier", "agent_id", "session_id", "speaker_name", "float_time_stamp", "version")
#: what ``memory_row`` reads
ROW_COLUMNS = f"{', '.join(COLUMN_FIELDS)}, payload, access_count, last_accessed, status"
_SELECT = f"SELECT {ROW_COLUMNS} FROM memories"
#: the stored event of an ADD history row whose text is its memory row's (~a memory's text a row,
#: instead of a second copy): ``history`` reads it as ``ADD`` with that text, and a write that
#: changes the memory's text first writes the text into the row (``_keep_added_texts``). Earlier
#: versions never wrote this code, so no row of theirs is read this way.
ADD_SAME = "ADD="


class MemorySQL(SQLRows):
    """Reads of memory rows and history, the index outbox, access counters, the sleep queue."""

    def memory(self, user_id: str, memory_id: str, *, statuses: Sequence[str] = ("active",)) -> MemoryRecord | None:
        d = self.dialect
        rows = self._query(f"{_SELECT} WHERE user_id={d.mark} AND id={d.mark} AND status IN ({d.marks(statuses)})",
                           [user_id, memory_id, *statuses])
        return memory_row(rows[0]) if rows else None

    def memories(self, user_id: str, *, statuses: Sequence[str] = ("active",), after_id: str | None = None,
                 limit: int = 100, tier: str | None = None, ids: Sequence[str] | None = None,
                 contains: str | None = None) -> list[MemoryRecord]:
        """This user's memories ordered by id, ``limit`` at a time after ``after_id``; ``contains``:
        only those whose text holds it (case-insensitive for ASCII letters)."""
        d = self.dialect
        p = d.mark
        sql = f"{_SELECT} WHERE user_id={p} AND status IN ({d.marks(statuses)})"
        params: list[object] = [user_id, *statuses]
        if contains:
            sql += f" AND lower({d.json_field('payload', 'memory')}) LIKE {p} ESCAPE '!'"
            params.append(like_pattern(contains))
        if after_id is not None:
            sql, params = sql + f" AND id > {p}", [*params, after_id]
        if tier is not None:
            sql, params = sql + f" AND tier={p}", [*params, tier]
        if ids is None:
            return [memory_row(r) for r in self._query(sql + f" ORDER BY id LIMIT {p}", [*params, limit])]
        rows = [r for part in parts(ids, ID_PART)
                for r in self._query(sql + f" AND id IN ({d.marks(part)}) ORDER BY id LIMIT {p}",
                                     [*params, *part, limit])]
        return [memory_row(r) for r in sorted(rows, key=lambda r: r["id"])[:limit]]

    def vectors(self, user_id: str, ids: Sequence[str]) -> dict[str, np.ndarray]:
        d = self.dialect
        out: dict[str, np.ndarray] = {}
        for part in parts(ids, ID_PART):
            rows = self._query(f"SELECT id, vector FROM memories WHERE user_id={d.mark} AND id IN ({d.marks(part)})",
                               [user_id, *part])
            out.update((r[0], v) for r in rows if (v := decode(r[1])) is not None)
        return out

    def count_memories(self, user_id: str | None = None, *, status: str = "active", tier: str | None = None) -> int:
        p = self.dialect.mark
        sql, params = f"SELECT COUNT(*) FROM memories WHERE status={p}", [status]
        if user_id is not None:
            sql, params = sql + f" AND user_id={p}", [*params, user_id]
        if tier is not None:
            sql, params = sql + f" AND tier={p}", [*params, tier]
        return int(self._query(sql, params)[0][0])

    def largest_user(self) -> int:
        """The most active memories one user holds (0 for an empty store)."""
        rows = self._query("SELECT COALESCE(MAX(n), 0) FROM (SELECT COUNT(*) AS n FROM memories "
                           "WHERE status='active' GROUP BY user_id) AS per_user")
        return int(rows[0][0])

    def memory_owner(self, memory_id: str) -> str | None:
        rows = self._query(f"SELECT user_id FROM memories WHERE id={self.dialect.mark}", (memory_id,))
        return rows[0][0] if rows else None

    def memory_owners(self, memory_ids: Sequence[str]) -> dict[str, str]:
        """The user holding each of ``memory_ids`` that the journal holds (any status), one read a
        few thousand ids (an import checks a whole batch at once)."""
        return _owners(self._query, self.dialect, memory_ids)

    def users_over_capacity(self, capacity: int, user_id: str | None = None) -> list[str]:
        """Users whose active MTM holds more than ``capacity`` items."""
        p = self.dialect.mark
        sql, params = "SELECT user_id FROM memories WHERE status='active' AND tier='mtm'", []
        if user_id is not None:
            sql, params = sql + f" AND user_id={p}", [user_id]
        rows = self._query(sql + f" GROUP BY user_id HAVING COUNT(*) > {p} ORDER BY user_id", [*params, capacity])
        return [r[0] for r in rows]

    def history(self, memory_id: str, user_id: str) -> list[HistoryEntry]:
        return self.histories(user_id, [memory_id]).get(memory_id, [])

    def histories(self, user_id: str, memory_ids: Sequence[str]) -> dict[str, list[HistoryEntry]]:
        """The history rows of each of ``memory_ids`` (this user's; in their order of writing), in two
        reads a few thousand ids instead of one or two a memory (an export reads a page of memories'
        histories at once). A memory without history rows is absent."""
        d = self.dialect
        rows = sorted(rows_where_in(
            self._query, d, "SELECT seq, memory_id, event, old_memory, new_memory, timestamp, actor, old_record "
            f"FROM history WHERE user_id={d.mark} AND", "memory_id", list(dict.fromkeys(memory_ids)), [user_id]),
            key=lambda r: r["seq"])
        texts = self._texts(user_id, [r["memory_id"] for r in rows if r["event"] == ADD_SAME])
        out: dict[str, list[HistoryEntry]] = {}
        for r in rows:
            data: dict[str, Any] = dict(r)
            data.pop("seq")
            raw = data.pop("old_record")
            data["previous"] = stored_record(raw) if raw else None
            memory_id = data["memory_id"]
            if data["event"] == ADD_SAME:  # the text is the memory row's own (see ``insert_histories``)
                if memory_id not in texts:
                    raise StoreError(f"the ADD history row of memory {memory_id!r} refers to the memory's text, "
                                     "and the journal holds no memory row for it")
                data["event"], data["new_memory"] = Event.ADD.value, texts[memory_id]
            out.setdefault(memory_id, []).append(
                mend_stored(HistoryEntry, data, f"a history row of memory {memory_id!r}"))
        return out

    def _texts(self, user_id: str, memory_ids: Sequence[str]) -> dict[str, str]:
        """Each held memory's text, read as the memory itself is (mended alike), any status."""
        if not memory_ids:
            return {}
        rows = rows_where_in(self._query, self.dialect, f"{_SELECT} WHERE user_id={self.dialect.mark} AND", "id",
                             list(dict.fromkeys(memory_ids)), [user_id])
        return {(rec := memory_row(r)).id: rec.memory for r in rows}

    def sleep_pending(self, user_id: str | None = None) -> dict[str, list[str]]:
        """user_id -> memory ids added or changed since that user's last sleep."""
        if user_id is None:
            rows = self._query("SELECT user_id, memory_id FROM sleep_pending ORDER BY user_id, memory_id")
        else:
            rows = self._query(f"SELECT user_id, memory_id FROM sleep_pending WHERE user_id={self.dialect.mark} "
                               "ORDER BY memory_id", (user_id,))
        out: dict[str, list[str]] = {}
        for r in rows:
            out.setdefault(r[0], []).append(r[1])
        return out

    # -- the index outbox -------------------------------------------------------------------
    def index_rows(self, *, states: Sequence[IndexState] | None = None, user_id: str | None = None,
                   batch: int = 1000) -> Iterator[tuple[MemoryRecord, np.ndarray | None, IndexState]]:
        """Rows to apply to an index, by id: those in ``states`` (the outbox), or with ``states=None``
        every active row (a rebuild; with ``user_id``, that user's only)."""
        d = self.dialect
        last = ""
        while True:
            sql = f"SELECT {ROW_COLUMNS}, vector, index_state FROM memories WHERE id > {d.mark}"
            params: list[object] = [last]
            if states is None:
                sql += " AND status='active'"
            else:
                sql, params = sql + f" AND index_state IN ({d.marks(states)})", [*params, *(int(s) for s in states)]
            if user_id is not None:
                sql, params = sql + f" AND user_id={d.mark}", [*params, user_id]
            rows = self._query(sql + f" ORDER BY id LIMIT {d.mark}", [*params, batch])
            for r in rows:
                yield memory_row(r), decode(r["vector"]), IndexState(r["index_state"])
            if len(rows) < batch:
                return
            last = rows[-1]["id"]

    def outbox_users(self) -> list[str]:
        """The users with rows the index still has to apply (upserts or removals)."""
        d = self.dialect
        rows = self._query(f"SELECT DISTINCT user_id FROM memories WHERE index_state IN ({d.marks(2)}) "
                           "ORDER BY user_id", (int(IndexState.UPSERT), int(IndexState.REMOVE)))
        return [r[0] for r in rows]

    def mark_index(self, ids: Sequence[str], state: IndexState, error: str | None = None) -> None:
        if ids:
            with self._tx() as db:
                set_index_state(db, self.dialect, ids, state, error)

    def count_index_state(self, state: IndexState) -> int:
        return int(self._query(f"SELECT COUNT(*) FROM memories WHERE index_state={self.dialect.mark}",
                               (int(state),))[0][0])

    def add_access(self, deltas: Sequence[tuple[str, str, int, float]]) -> None:
        if deltas:
            with self._tx() as db:
                add_access(db, self.dialect, deltas)


# -- writes, inside the caller's transaction ------------------------------------------------
# Each takes a whole batch in a few statements (one read of what is held, one ``executemany`` a
# table): on PostgreSQL a statement is a round trip, and psycopg pipelines an ``executemany``.

_UPSERT = (
    "INSERT INTO memories (id, user_id, status, tier, agent_id, session_id, speaker_name, float_time_stamp, "
    "version, payload, vector, index_state, index_error, updated_at) "
    "VALUES ({p}, {p}, 'active', {nine}, NULL, {p}) ON CONFLICT(id) DO UPDATE SET "
    "status='active', tier=excluded.tier, agent_id=excluded.agent_id, session_id=excluded.session_id, "
    "speaker_name=excluded.speaker_name, float_time_stamp=excluded.float_time_stamp, "
    "version=excluded.version, payload=excluded.payload, vector=COALESCE(excluded.vector, memories.vector), "
    "index_state=excluded.index_state, index_error=NULL, updated_at=excluded.updated_at")


def held_owners(db: Conn, d: Dialect, ids: Sequence[str]) -> dict[str, str]:
    """id -> user of the memories among ``ids`` the journal holds (inside the caller's transaction)."""
    return _owners(tx_reader(db), d, ids)


def _owners(read: Reader, d: Dialect, ids: Sequence[str]) -> dict[str, str]:
    """id -> user of the held memories among ``ids``."""
    return {r[0]: r[1] for r in rows_where_in(read, d, "SELECT id, user_id FROM memories WHERE", "id", ids)}


def write_memories(db: Conn, d: Dialect, user_id: str, writes: Sequence[MemoryWrite],
                   vectors: Mapping[str, np.ndarray], now: float) -> None:
    """The memory rows of ``writes`` (all of ``user_id``: an id held by another user is refused),
    their history rows, and the sleep queue's entries, in order."""
    if not writes:
        return
    for w in writes:
        if w.record.user_id != user_id:
            raise StoreError(f"memory {w.record.id} belongs to another change set's user")
    # one read of the rows held: their owners, and their texts for ``_keep_added_texts``
    held = rows_where_in(tx_reader(db), d, "SELECT id, user_id, payload FROM memories WHERE", "id",
                         [w.record.id for w in writes])
    for mid, owner, _ in held:
        if owner != user_id:
            raise StoreError(f"memory id {mid} is taken by another user")
    final = {w.record.id: w.record.memory for w in writes}  # the text each row holds after this batch
    _keep_added_texts(db, d, user_id, final, [(r[0], r[2]) for r in held])
    blobs = encode_all([vectors.get(w.record.id) for w in writes])
    many(db, _UPSERT.format(p=d.mark, nine=d.marks(9)), [
        (r.id, user_id, r.tier, r.agent_id, r.session_id, r.speaker_name, r.float_time_stamp, r.version,
         _payload(r), blob, int(IndexState.UPSERT), now)
        for r, blob in zip((w.record for w in writes), blobs, strict=True)])
    insert_histories(db, d, user_id, [HistoryEntry(
        memory_id=w.record.id, event=w.event, old_memory=w.old.memory if w.old is not None else None,
        new_memory=w.record.memory, timestamp=now, actor=w.actor, previous=w.old) for w in writes], same_text=final)
    many(db, f"INSERT INTO sleep_pending (user_id, memory_id) VALUES ({d.mark}, {d.mark}) ON CONFLICT DO NOTHING",
         [(user_id, w.record.id) for w in writes if w.sleep_pending])


def remove_memories(db: Conn, d: Dialect, user_id: str, removals: Sequence[MemoryRemoval], now: float) -> None:
    """Mark the removed memories (deleted or evicted) for the index to drop, with their history rows;
    an evicted one is handed to the next LTM consolidation cycle, exactly once."""
    if not removals:
        return
    many(db, f"UPDATE memories SET status={d.mark}, index_state={d.mark}, index_error=NULL, updated_at={d.mark} "
             f"WHERE id={d.mark} AND user_id={d.mark}",
         [(rm.status, int(IndexState.REMOVE), now, rm.record.id, user_id) for rm in removals])
    insert_histories(db, d, user_id, [HistoryEntry(
        memory_id=rm.record.id, event=rm.event, old_memory=rm.record.memory, new_memory=None, timestamp=now,
        actor=rm.actor, previous=rm.record) for rm in removals])
    many(db, f"DELETE FROM sleep_pending WHERE user_id={d.mark} AND memory_id={d.mark}",
         [(user_id, rm.record.id) for rm in removals])
    last = {rm.record.id: rm.status for rm in removals}  # a memory removed twice ends as its last removal says
    queue_for_ltm(db, d, [(user_id, mid) for mid, status in last.items() if status == "evicted"])
    unqueue_for_ltm(db, d, [(user_id, mid) for mid, status in last.items() if status != "evicted"])


def import_memories(db: Conn, d: Dialect, user_id: str,
                    memories: Sequence[tuple[MemoryRecord, str, np.ndarray | None]], now: float) -> int:
    """Memory rows copied from an export as they were (record, status, vector); one whose id is held
    already (or comes twice) is left out. Returns how many were written."""
    for r, _, _ in memories:
        if r.user_id != user_id:
            raise StoreError(f"memory {r.id} belongs to another user than {user_id}")
    held = held_owners(db, d, [r.id for r, _, _ in memories])
    for mid, owner in held.items():
        if owner != user_id:
            raise StoreError(f"memory id {mid} is taken by another user")
    fresh: dict[str, tuple[MemoryRecord, str, np.ndarray | None]] = {}
    for r, status, vector in memories:
        if r.id not in held and r.id not in fresh:
            fresh[r.id] = (r, status, vector)
    many(db, "INSERT INTO memories (id, user_id, status, tier, agent_id, session_id, speaker_name, "
             "float_time_stamp, version, payload, vector, access_count, last_accessed, index_state, index_error, "
             f"updated_at) VALUES ({d.marks(14)}, NULL, {d.mark})",
         [(r.id, user_id, status, r.tier, r.agent_id, r.session_id, r.speaker_name, r.float_time_stamp, r.version,
           _payload(r), blob, r.access_count, r.last_accessed,
           int(IndexState.UPSERT if status == "active" else IndexState.SYNCED),  # new ids: nothing to remove
           now) for (r, status, _), blob in zip(fresh.values(), encode_all([v for _, _, v in fresh.values()]),
                                                 strict=True)])
    return len(fresh)


def insert_histories(db: Conn, d: Dialect, user_id: str, entries: Sequence[HistoryEntry],
                     same_text: Mapping[str, str] | None = None) -> None:
    """History rows, in order; an ADD for a memory that has one already (held, or earlier in
    ``entries``) is a replay and is skipped. ``same_text``: id -> the text the memory row holds
    once the caller's transaction is done; an ADD whose text is that one refers to it (``ADD_SAME``)
    instead of keeping a copy."""
    same = same_text or {}
    adds = [e.memory_id for e in entries if e.event is Event.ADD]
    added = {r[0] for r in rows_where_in(tx_reader(db), d, f"SELECT memory_id FROM history WHERE user_id={d.mark} "
                                         f"AND event IN ('ADD', '{ADD_SAME}') AND", "memory_id", adds, [user_id])}
    rows = []
    for e in entries:
        event, new_memory = e.event.value, e.new_memory
        if e.event is Event.ADD:
            if e.memory_id in added:
                continue
            added.add(e.memory_id)
            if new_memory is not None and e.old_memory is None and same.get(e.memory_id) == new_memory:
                event, new_memory = ADD_SAME, None
        previous = e.previous.model_dump_json() if e.previous is not None else None
        rows.append((e.memory_id, user_id, event, e.old_memory, new_memory, e.timestamp, e.actor, previous))
    many(db, "INSERT INTO history (memory_id, user_id, event, old_memory, new_memory, timestamp, actor, "
             f"old_record) VALUES ({d.marks(8)})", rows)


def _keep_added_texts(db: Conn, d: Dialect, user_id: str, final: Mapping[str, str],
                      held: Sequence[tuple[str, str]]) -> None:
    """Before the held rows ((id, payload), the user's) get the texts of ``final``: an ADD history row
    that refers to its memory's text gets that text written in, where the text is about to change."""
    changed = []
    for mid, payload in held:
        try:  # parsed as reads parse it (SQL's JSON functions refuse what Python's json reads, e.g. NaN)
            text = json.loads(payload).get("memory")
        except (ValueError, AttributeError):  # a payload no version can read: no first text left to keep
            continue
        if isinstance(text, str) and text != final.get(mid, text):
            changed.append((text, user_id, mid))
    many(db, f"UPDATE history SET event='ADD', new_memory={d.mark} WHERE user_id={d.mark} AND memory_id={d.mark} "
             f"AND event='{ADD_SAME}'", changed)


def set_index_state(db: Conn, d: Dialect, ids: Sequence[str], state: IndexState, error: str | None) -> None:
    for part in parts(ids, 500):
        sql, params = d.one_of("id", part)
        db.execute(f"UPDATE memories SET index_state={d.mark}, index_error={d.mark} WHERE {sql}",
                   [int(state), error, *params])


def add_access(db: Conn, d: Dialect, deltas: Sequence[tuple[str, str, int, float]]) -> None:
    p = d.mark
    many(db, f"UPDATE memories SET access_count=access_count+{p}, last_accessed=CASE WHEN last_accessed IS NULL "
             f"OR last_accessed<{p} THEN {p} ELSE last_accessed END WHERE user_id={p} AND id={p}",
         [(n, last, last, user, mid) for user, mid, n, last in sorted(deltas)])  # one lock order


def _payload(record: MemoryRecord) -> str:
    """The JSON a row keeps of ``record``. Access statistics and the ``COLUMN_FIELDS`` live in their own
    columns (the counters incremented in place), not in it; fields holding their default are left out
    and read back as it (a rule memory: ~320 of ~710 bytes; the defaults are pinned by
    tests/storage/test_footprint.py). Three fields that usually repeat another are left out too
    (``_SAME_AS``), and ``memory_row`` reads them back from the one they repeat."""
    skip = {"access_count", "last_accessed", *COLUMN_FIELDS}
    skip.update(name for name, source in _SAME_AS.items() if getattr(record, name) == getattr(record, source))
    once = bool(record.compressed_memory) and record.compressed_memory == record.original_memory
    if once:
        skip.add("compressed_memory")
    text = record.model_dump_json(exclude_defaults=True, exclude=skip)
    if not once:
        return text
    # a text of a rule memory (~a third of its payload) kept once
    return text[:-1] + (',' if text != "{}" else "") + '"compressed_memory":true}'


#: a field -> the field it usually equals; a payload leaves the first out where they are equal, and a
#: payload without it (written so; no version left ``updated_at`` out, and a missing ``valid_from`` is
#: its evidence's time anyway) reads it as the second. ``compressed_memory`` equal to a non-empty
#: ``original_memory`` is written ``true`` (an empty one is a default, left out as such).
_SAME_AS = {"updated_at": "created_at", "valid_from": "time_stamp"}


def _unpacked(data: dict[str, Any]) -> dict[str, Any]:
    """A row's payload with the fields ``_payload`` left out as repeats put back."""
    for name, source in _SAME_AS.items():
        if name not in data and source in data:
            data[name] = data[source]
    if data.get("compressed_memory") is True:
        data["compressed_memory"] = data.get("original_memory", "")
    return data


def memory_row(row: Row) -> MemoryRecord:
    """The record of a ``memories`` row (``ROW_COLUMNS``: payload, the fields kept in columns, access
    columns), mending what an older version let in."""
    raw = row["payload"]
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise StoreError(f"memory row {row['id']!r} holds a payload that is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise StoreError(f"memory row {row['id']!r} holds a payload that is not a JSON object")
    for name in COLUMN_FIELDS:
        if name not in data:
            data[name] = row[name]
    _unpacked(data)
    data["access_count"] = max(0, row["access_count"] or 0)
    data["last_accessed"] = unix_time_or_none(row["last_accessed"])
    return stored_record(data)


def like_pattern(text: str) -> str:
    """A LIKE pattern (escape character ``!``) matching any text that holds ``text``, lower-cased."""
    escaped = text.lower().replace("!", "!!").replace("%", "!%").replace("_", "!_")
    return f"%{escaped}%"
