"""The journal contract: every backend (SQLite file, PostgreSQL server) behaves the same through the
``Journal`` protocol — turns and their status, quarantine, memory rows and index states, history,
the sleep queue, usage, access counters, forgetting a user, schema versions, read-only opening.

The PostgreSQL cases run against a real server started for the session (tests/pg_server.py)."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from dialogmem import Event, HistoryEntry, InputError, MemoryRecord, SchemaVersionError, StoreError, Turn
from dialogmem._changes import ChangeSet, MemoryRemoval, MemoryWrite
from dialogmem._config import JournalConfig
from dialogmem._journal import (
    SCHEMA_VERSION,
    GraphRows,
    IndexSource,
    IndexState,
    Journal,
    JournalHandle,
    KeyRing,
    MemoryRows,
    TurnLog,
    TurnStatus,
    UserRows,
    open_journal,
    stored_precision,
)
from dialogmem._journal._dialect import POSTGRES, SQLITE
from dialogmem._journal._schema import MIGRATIONS
from dialogmem._usage import StageUsage

Opener = Callable[..., Journal]
SRC = Path(__file__).resolve().parents[2] / "src" / "dialogmem"


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return str(request.param)


@pytest.fixture
def config(backend: str, request: pytest.FixtureRequest) -> JournalConfig:
    if backend == "sqlite":
        return JournalConfig()
    return JournalConfig(url=request.getfixturevalue("postgres_url"), schema_name=request.getfixturevalue("pg_schema"),
                         pool_max_size=4)


@pytest.fixture
def opener(config: JournalConfig, tmp_path: Path) -> Iterator[Opener]:
    opened: list[Journal] = []

    def open_(read_only: bool = False) -> Journal:
        j = open_journal(config, tmp_path / "journal.sqlite3", read_only=read_only)
        opened.append(j)
        return j

    yield open_
    for j in opened:
        j.close()


def _turn(i: int, user: str = "u", content: str | None = None) -> Turn:
    return Turn(id=f"t{i}", user_id=user, speaker=f"S{i % 2}", content=content or f"text {i} 100% sure?",
                time_stamp="2024-01-01T00:00:00.000", float_time_stamp=1704067200.0 + i, weekday="Mon",
                metadata={"n": i})


def _record(i: int, user: str = "u", tier: str = "mtm") -> MemoryRecord:
    return MemoryRecord(id=f"00000000-0000-0000-0000-{i:012d}", user_id=user, memory=f"memory {i}",
                        time_stamp="2024-01-01T00:00:00", float_time_stamp=1704067200.0 + i, weekday="Mon",
                        created_at=1.0, updated_at=1.0, source_turn_ids=[f"t{i}"], tier=tier)


def _vec(i: int) -> np.ndarray:
    """A vector as the write path hands it to the journal: already at the journal's precision."""
    return stored_precision(np.arange(4, dtype=np.float32) + i)


def _add(j: Journal, *records: MemoryRecord, **cs: object) -> None:
    writes = [MemoryWrite(record=r, event=Event.ADD, actor="test") for r in records]
    j.commit(ChangeSet(records[0].user_id if records else "u", writes=writes, **cs),  # type: ignore[arg-type]
             {r.id: _vec(int(r.id[-4:])) for r in records})


def test_implements_the_protocol_and_migrates(opener: Opener) -> None:
    j = opener()
    assert isinstance(j, Journal)
    assert j.schema_version == SCHEMA_VERSION and len(j.meta("store_id") or "") == 32
    assert j.meta("index_generation") == "1" and j.meta("import_index") is None
    j.set_meta("k", "v")
    assert j.meta("k") == "v"
    j.set_meta("k", None)
    assert j.meta("k") is None


def test_reopening_keeps_everything_and_migrates_once(opener: Opener) -> None:
    j = opener()
    j.commit(ChangeSet("u", turns=[_turn(1), _turn(2)]), {})
    store_id = j.meta("store_id")
    j.close()
    j = opener()
    assert [t.id for t in j.turns("u")] == ["t1", "t2"] and j.meta("store_id") == store_id
    assert j.turns("u")[0] == _turn(1).model_copy(update={"seq": j.turns("u")[0].seq})


def test_turns_retries_conflicts_and_order(opener: Opener) -> None:
    j = opener()
    j.commit(ChangeSet("u", turns=[_turn(i) for i in range(1, 6)]), {})
    j.commit(ChangeSet("v", turns=[_turn(1, user="v", content="other user, same id")]), {})
    assert j.fresh_turns([_turn(1), _turn(9)]) == [_turn(9)]
    with pytest.raises(InputError):
        j.fresh_turns([_turn(1, content="changed")])
    with pytest.raises(InputError):  # checked again inside the transaction, which rolls back whole
        j.commit(ChangeSet("u", turns=[_turn(7), _turn(2, content="changed")]), {})
    assert j.count_turns("u") == 5 and j.count_turns() == 6
    assert [t.id for t in j.turns("u", ids=["t4", "t2", "nope"])] == ["t2", "t4"]
    assert j.turns("u", ids=[]) == [] and [t.id for t in j.turns("u", limit=2)] == ["t1", "t2"]
    # more ids than SQLite (32,766) or PostgreSQL (65,535) bind in one statement: read in parts, same answers
    many = [f"absent-{i}" for i in range(70_000)]
    assert [t.id for t in j.turns("u", ids=["t4", *many, "t2"])] == ["t2", "t4"]
    assert [t.id for t in j.turns("u", ids=["t3", *many, "t1"], limit=1)] == ["t1"]  # limit across parts
    assert [t.id for t in j.turns("u", ids=["t1", *many, "t1"])] == ["t1"]  # a repeat across parts: once
    fresh = j.fresh_turns([*(_turn(i) for i in range(10, 70_010)), _turn(3), _turn(9)])
    assert len(fresh) == 70_001 and _turn(3) not in fresh and fresh[-1] == _turn(9)
    with pytest.raises(InputError):  # a known id with other content, far past the first part
        j.fresh_turns([*(_turn(i) for i in range(10, 20_010)), _turn(4, content="changed")])
    assert j.set_turn_status("u", ["t5", *many, "t5"], TurnStatus.PENDING, only_from=TurnStatus.PENDING) == 1
    seq4 = j.turns("u", ids=["t4"])[0].seq
    assert [t.id for t in j.turns_before("u", seq4, 2)] == ["t2", "t3"]
    assert [t.id for t in j.turns_before("u", None, 2)] == ["t4", "t5"]
    assert j.turns("u")[0].metadata == {"n": 1} and j.turns("u")[0].content == "text 1 100% sure?"
    assert j.speakers("u") == ["S0", "S1"] and j.speakers("nobody") == []
    assert sorted(j.pending_users()) == ["u", "v"] and [t.id for t in j.pending_turns("v")] == ["t1"]


def test_status_quarantine_retry_and_drop(opener: Opener) -> None:
    j = opener()
    j.commit(ChangeSet("u", turns=[_turn(1), _turn(2), _turn(3)], processed=["t3"],
                       quarantined={"t1": "ValueError: " + "x" * 5000}), {})
    assert j.count_turns("u", TurnStatus.PENDING) == 1 and j.count_turns("u", TurnStatus.PROCESSED) == 1
    [(user, q)] = j.quarantined()
    assert user == "u" and q.turn.id == "t1" and len(q.error) == 2000
    assert j.quarantined("v") == []
    assert j.set_turn_status("u", ["t2"], TurnStatus.DROPPED, only_from=TurnStatus.QUARANTINED) == 0
    assert j.set_turn_status("v", ["t1"], TurnStatus.PENDING) == 0  # another user's id: nothing
    assert j.set_turn_status("u", ["t1"], TurnStatus.PENDING, only_from=TurnStatus.QUARANTINED) == 1
    assert [t.id for t in j.pending_turns("u")] == ["t1", "t2"] and j.quarantined() == []
    retaken = ChangeSet("u", turns=[_turn(8)], processed=["t1", "t2", "t3"])  # t3 is processed already
    if getattr(j, "strict_claims", False):  # a shared journal: another process took t3, the commit is refused
        with pytest.raises(StoreError, match="no longer pending"):
            j.commit(retaken, {})
        assert j.count_turns("u", TurnStatus.PENDING) == 2 and j.count_turns("u") == 3  # nothing of it committed
        retaken.processed = ["t1", "t2"]
    j.commit(retaken, {})  # (SQLite, one process: t3 is left as it is)
    assert j.count_turns("u", TurnStatus.PROCESSED) == 3 and j.count_turns("u", TurnStatus.PENDING) == 1


def test_memories_containing_a_text(opener: Opener) -> None:
    """``contains`` reads the memory text (not the payload's other fields), any ASCII case, with
    LIKE's wildcards and the escape character as plain characters."""
    j = opener()
    assert j.largest_user() == 0
    _add(j, _record(1), _record(2).model_copy(update={"memory": 'Café "Ole" 100% OFF_x!'}))
    _add(j, _record(3, user="v"))
    assert [m.id for m in j.memories("u", contains="MEMORY 1")] == [_record(1).id]
    assert [m.id for m in j.memories("u", contains='café "ole" 100% off_x!')] == [_record(2).id]
    assert j.memories("u", contains="100_") == [] and j.memories("u", contains="x!!") == []
    assert j.memories("u", contains="mtm") == [] and j.memories("u", contains="memory 3") == []


def test_memory_rows_reads_and_isolation(opener: Opener) -> None:
    j = opener()
    _add(j, *[_record(i) for i in range(1, 6)], _record(6, tier="ltm"))
    _add(j, _record(7, user="v"))
    assert j.memory("u", _record(1).id) == _record(1) and j.memory("v", _record(1).id) is None
    assert j.memory_owner(_record(7).id) == "v" and j.memory_owner("missing") is None
    page = j.memories("u", limit=2)
    assert [m.id for m in page] == [_record(1).id, _record(2).id]
    assert [m.id for m in j.memories("u", after_id=page[-1].id, limit=2)] == [_record(3).id, _record(4).id]
    assert [m.id for m in j.memories("u", tier="ltm")] == [_record(6).id]
    assert [m.id for m in j.memories("u", ids=[_record(2).id, _record(7).id])] == [_record(2).id]
    assert j.memories("u", ids=[]) == []
    # contains: the memory text (not the payload's other fields), any ASCII case, wildcards as characters
    assert [m.id for m in j.memories("u", contains="MEMORY 3")] == [_record(3).id]
    assert j.memories("u", contains="mtm") == [] and j.memories("v", contains="memory 3") == []
    vectors = j.vectors("u", [_record(3).id, _record(7).id])
    assert list(vectors) == [_record(3).id] and np.array_equal(vectors[_record(3).id], _vec(3))
    assert j.vectors("u", []) == {}
    many = [f"absent-{i}" for i in range(70_000)] + [_record(3).id]  # more ids than SQLite or PostgreSQL bind at once
    assert list(j.vectors("u", many)) == [_record(3).id]
    assert [m.id for m in j.memories("u", ids=[_record(5).id, *many])] == sorted([_record(3).id, _record(5).id])
    assert [m.id for m in j.memories("u", ids=[_record(5).id, *many], limit=1)] == [min(_record(3).id, _record(5).id)]
    assert j.count_memories() == 7 and j.count_memories("u") == 6 and j.count_memories("u", tier="ltm") == 1
    assert j.largest_user() == 6
    stolen = _record(1).model_copy(update={"user_id": "v"})
    with pytest.raises(StoreError):  # a memory id cannot change owner; the whole commit rolls back
        j.commit(ChangeSet("v", turns=[_turn(50, user="v")], writes=[MemoryWrite(stolen, Event.ADD, "t")]), {})
    assert j.memory("u", _record(1).id) == _record(1) and j.count_turns("v") == 0


def test_update_removal_history_and_sleep_queue(opener: Opener) -> None:
    j = opener()
    rec = _record(1)
    _add(j, rec)
    _add(j, rec)  # a replayed ADD: one history row
    new = rec.model_copy(update={"memory": "memory 1, edited", "version": 2})
    j.commit(ChangeSet("u", writes=[MemoryWrite(new, Event.UPDATE, "user", old=rec, sleep_pending=False)]), {})
    assert np.array_equal(j.vectors("u", [rec.id])[rec.id], _vec(1))  # no new vector: the old one stays
    assert j.sleep_pending() == {"u": [rec.id]} and j.sleep_pending("v") == {}
    j.commit(ChangeSet("u", sleep_done=[rec.id]), {})
    assert j.sleep_pending("u") == {}
    _add(j, _record(2))
    j.commit(ChangeSet("u", removals=[MemoryRemoval(_record(2), "user"), MemoryRemoval(new, "sleep", "evicted")]), {})
    assert j.sleep_pending() == {} and j.memory("u", rec.id) is None
    assert j.memory("u", rec.id, statuses=("evicted",)) == new
    assert j.count_memories("u", status="deleted") == 1 and j.count_memories("u", status="evicted") == 1
    history = j.history(rec.id, "u")
    assert [h.event for h in history] == [Event.ADD, Event.UPDATE, Event.EVICT]
    assert history[1].old_memory == "memory 1" and history[1].previous == rec and history[2].previous == new
    assert j.history(rec.id, "v") == []


def _history_rows(j: Journal, memory_id: str) -> list[tuple[str, str | None]]:
    """(event, new_memory) of a memory's history rows as stored."""
    p = j.dialect.mark  # type: ignore[attr-defined]
    return [(r[0], r[1]) for r in j._query(  # type: ignore[attr-defined]
        f"SELECT event, new_memory FROM history WHERE memory_id={p} ORDER BY seq", (memory_id,))]


def test_an_add_row_refers_to_its_memorys_text_and_reads_as_before(opener: Opener) -> None:
    """Issue 45, item 5: an ADD history row whose text is the memory's keeps no second copy; history()
    gives the same entries, and a later change of the text writes the first text into the row first."""
    j = opener()
    rec, other = _record(1), _record(2)
    _add(j, rec, other)
    assert _history_rows(j, rec.id) == [("ADD=", None)]  # no copy of the text
    assert [(h.event, h.old_memory, h.new_memory) for h in j.history(rec.id, "u")] == [(Event.ADD, None, "memory 1")]
    edited = rec.model_copy(update={"memory": "memory 1, edited", "version": 2})
    j.commit(ChangeSet("u", writes=[MemoryWrite(edited, Event.UPDATE, "user", old=rec)]), {})
    assert _history_rows(j, rec.id)[0] == ("ADD", "memory 1")  # written in before the text changed
    assert [(h.event, h.old_memory, h.new_memory) for h in j.history(rec.id, "u")] == [
        (Event.ADD, None, "memory 1"), (Event.UPDATE, "memory 1", "memory 1, edited")]
    moved = other.model_copy(update={"tier": "ltm"})  # a write keeping the text leaves the reference
    j.commit(ChangeSet("u", writes=[MemoryWrite(moved, Event.UPDATE, "sleep", old=other)]), {})
    assert _history_rows(j, other.id)[0] == ("ADD=", None)
    j.commit(ChangeSet("u", removals=[MemoryRemoval(moved, "user")]), {})  # deleted: the row keeps its text
    assert j.history(other.id, "u")[0].new_memory == "memory 2" and j.history(other.id, "v") == []
    # an ADD and a change of the same memory in one batch: the row holds the first text itself
    third, fourth = _record(3), _record(4)
    third_edited = third.model_copy(update={"memory": "memory 3, edited", "version": 2})
    j.commit(ChangeSet("u", writes=[MemoryWrite(third, Event.ADD, "t"),
                                    MemoryWrite(third_edited, Event.UPDATE, "t", old=third)]), {})
    assert _history_rows(j, third.id)[0] == ("ADD", "memory 3")
    # a replayed ADD with another text (the row's text changes, no history row says so)
    _add(j, fourth)
    j.commit(ChangeSet("u", writes=[MemoryWrite(fourth.model_copy(update={"memory": "memory 4, again"}),
                                                Event.ADD, "t")]), {})
    assert [(h.event, h.new_memory) for h in j.history(fourth.id, "u")] == [(Event.ADD, "memory 4")]
    # an import of the store's own history leaves the referring row alone (the same row, not a new one)
    added = j.import_rows("u", history=j.history(other.id, "u"))
    assert added["history"] == 0 and len(j.history(other.id, "u")) == 3  # ADD, UPDATE, DELETE


def test_histories_of_many_memories_in_two_reads(opener: Opener) -> None:
    """An export reads a page of memories' histories at once: the same entries as ``history`` one
    memory at a time (ADD rows that refer to the memory's text included), this user's only, in two
    statements whatever the number of memories (before: one or two a memory)."""
    j = opener()
    recs = [_record(i) for i in range(1, 8)]
    _add(j, *recs)
    edited = recs[0].model_copy(update={"memory": "memory 1, edited", "version": 2})
    j.commit(ChangeSet("u", writes=[MemoryWrite(edited, Event.UPDATE, "user", old=recs[0])]), {})
    j.commit(ChangeSet("u", removals=[MemoryRemoval(recs[1], "user")]), {})
    _add(j, _record(9, user="v"))
    ids = [r.id for r in recs] + [_record(9).id, "no-such-memory"]
    one_by_one = {i: h for i in ids if (h := j.history(i, "u"))}
    statements: list[str] = []
    query = j._query  # type: ignore[attr-defined]

    def counted(sql: str, params: object = ()) -> object:
        statements.append(sql)
        return query(sql, params)

    j._query = counted  # type: ignore[attr-defined]
    together = j.histories("u", ids)
    assert together == one_by_one and len(together) == 7 and len(statements) == 2
    assert [h.event for h in together[recs[0].id]] == [Event.ADD, Event.UPDATE]
    assert together[recs[2].id][0].new_memory == "memory 3"  # an ADD= row reads its memory's text
    assert j.histories("v", [r.id for r in recs]) == {} and j.histories("u", []) == {}


def test_add_rows_of_an_older_store_read_as_they_were(opener: Opener) -> None:
    j = opener()
    rec = _record(1)
    _add(j, rec)
    p = j.dialect.mark  # type: ignore[attr-defined]
    # as an earlier version wrote it: the text copied into the row
    with j._tx() as db:  # type: ignore[attr-defined]
        db.execute(f"UPDATE history SET event='ADD', new_memory={p} WHERE memory_id={p}", ("memory 1", rec.id))
    assert [(h.event, h.new_memory) for h in j.history(rec.id, "u")] == [(Event.ADD, "memory 1")]


def test_index_outbox_states(opener: Opener) -> None:
    j = opener()
    _add(j, _record(1), _record(2), _record(3))
    _add(j, _record(4, user="v"))
    assert j.outbox_users() == ["u", "v"]
    upsert = [(m.id, s) for m, _, s in j.index_rows(states=(IndexState.UPSERT,), batch=2)]
    assert upsert == [(_record(i).id, IndexState.UPSERT) for i in range(1, 5)]
    j.mark_index([_record(1).id, _record(2).id, _record(4).id], IndexState.SYNCED)
    j.mark_index([_record(3).id], IndexState.FAILED, "refused")
    j.mark_index([], IndexState.SYNCED)
    assert j.count_index_state(IndexState.FAILED) == 1 and j.count_index_state(IndexState.UPSERT) == 0
    j.commit(ChangeSet("u", removals=[MemoryRemoval(_record(2), "user")]), {})
    assert [m.id for m, _, _ in j.index_rows(states=(IndexState.REMOVE, IndexState.UPSERT))] == [_record(2).id]
    assert j.outbox_users() == ["u"]
    rebuild = [(m.id, v is not None) for m, v, _ in j.index_rows(states=None, user_id="u", batch=1)]
    assert rebuild == [(_record(1).id, True), (_record(3).id, True)]
    assert len(list(j.index_rows(states=None))) == 3


def test_access_and_usage_counters(opener: Opener) -> None:
    j = opener()
    _add(j, _record(1))
    j.add_access([("u", _record(1).id, 2, 5.0), ("v", _record(1).id, 9, 99.0)])  # v: not its memory
    j.commit(ChangeSet("u"), {}, access=[("u", _record(1).id, 1, 3.0)],
             usage={("llm", "extract"): StageUsage(calls=1, prompt_tokens=10, latency_ms=2.5)})
    got = j.memory("u", _record(1).id)
    assert got is not None and got.access_count == 3 and got.last_accessed == 5.0
    j.add_usage({("llm", "extract"): StageUsage(calls=2, completion_tokens=4, failures=1, fallbacks=1)})
    j.add_usage({})
    u = j.usage()[("llm", "extract")]
    assert (u.calls, u.prompt_tokens, u.completion_tokens, u.failures, u.fallbacks) == (3, 10, 4, 1, 1)
    assert u.latency_ms == 2.5


def test_forget_user_removes_only_that_user(opener: Opener) -> None:
    j = opener()
    j.commit(ChangeSet("u", turns=[_turn(1), _turn(2)]), {})
    _add(j, _record(1), _record(2))
    j.commit(ChangeSet("v", turns=[_turn(1, user="v")]), {})
    _add(j, _record(3, user="v"))
    assert j.forget_user("u") == {"turns": 2, "memories": 2}
    assert j.count_turns("u") == 0 and j.history(_record(1).id, "u") == [] and j.speakers("u") == []
    assert j.sleep_pending() == {"v": [_record(3).id]} and j.count_memories("v") == 1 and j.count_turns() == 1
    assert j.forget_user("u") == {"turns": 0, "memories": 0}


def test_read_only_reads_beside_a_writer_and_refuses_writes(opener: Opener) -> None:
    writer = opener()
    writer.commit(ChangeSet("u", turns=[_turn(1)]), {})
    reader = opener(read_only=True)
    assert reader.read_only and [t.id for t in reader.turns("u")] == ["t1"]
    writer.commit(ChangeSet("u", turns=[_turn(2)]), {})
    assert reader.count_turns("u") == 2
    for write in (lambda: reader.commit(ChangeSet("u", turns=[_turn(3)]), {}),
                  lambda: reader.set_meta("k", "v"), lambda: reader.forget_user("u")):
        with pytest.raises(StoreError, match="read-only"):
            write()
    reader.add_usage({("llm", "x"): StageUsage(calls=1)})  # counters of a reader are not persisted
    assert writer.usage() == {}


def test_a_newer_schema_is_refused_not_rewritten(opener: Opener) -> None:
    j = opener()
    j.set_meta("schema_version", "999")
    j.close()
    for read_only in (False, True):
        with pytest.raises(SchemaVersionError):
            opener(read_only=read_only)


def test_an_old_schema_is_migrated_and_a_reader_asks_for_the_upgrade(backend: str, opener: Opener,
                                                                     config: JournalConfig, tmp_path: Path) -> None:
    _write_v1_store(backend, config, tmp_path / "journal.sqlite3")
    with pytest.raises(StoreError, match="upgrade"):
        opener(read_only=True)
    j = opener()
    assert j.schema_version == SCHEMA_VERSION and [t.content for t in j.turns("u")] == ["hello"]
    assert j.meta("import_index") == "1"  # the facade copies the v1 index into memory rows once


def test_a_v5_store_opens_read_only_as_it_is_and_read_write_raises_its_version(opener: Opener) -> None:
    """Version 6 changed row formats, no table: this code reads a v5 store without an upgrade, and a
    read-write open records version 6, so that a v5 dialogmem refuses the store instead of failing on
    an int8 vector or a history row that refers to its memory's text."""
    j = opener()
    j.commit(ChangeSet("u", turns=[_turn(1)]), {})
    j.set_meta("schema_version", "5")
    j.close()
    reader = opener(read_only=True)
    assert reader.schema_version == 5 and [t.id for t in reader.turns("u")] == ["t1"]
    reader.close()
    j = opener()
    assert j.schema_version == SCHEMA_VERSION == 6 and [t.id for t in j.turns("u")] == ["t1"]
    j.close()


def test_another_programs_meta_table_is_refused_and_left_as_it_was(backend: str, opener: Opener,
                                                                   config: JournalConfig, tmp_path: Path) -> None:
    """A database whose ``meta`` table is not ours is named as such, and nothing is written to it."""
    create = "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL, owner TEXT NOT NULL)"
    insert = "INSERT INTO meta VALUES ('schema_version', '3', 'billing')"
    if backend == "sqlite":
        db = sqlite3.connect(tmp_path / "journal.sqlite3")
        db.execute(create)
        db.execute(insert)
        db.commit()
        db.close()
    else:
        import psycopg

        assert config.url is not None
        with psycopg.connect(config.url, autocommit=True) as raw:
            raw.execute(f"CREATE SCHEMA {config.schema_name}")
            raw.execute(f"CREATE TABLE {config.schema_name}.{create[len('CREATE TABLE '):]}")
            raw.execute(insert.replace("INTO meta", f"INTO {config.schema_name}.meta"))
    for read_only in (False, True):
        with pytest.raises(StoreError, match="is not a dialogmem journal"):
            opener(read_only=read_only)
    if backend == "sqlite":
        db = sqlite3.connect(tmp_path / "journal.sqlite3")
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        rows = db.execute("SELECT * FROM meta").fetchall()
        db.close()
        assert tables == ["meta"] and rows == [("schema_version", "3", "billing")]


def _write_v1_store(backend: str, config: JournalConfig, path: Path) -> None:
    statements = [
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "INSERT INTO meta VALUES ('schema_version', '1')",
        "INSERT INTO turns (id, user_id, speaker, content, time_stamp, float_time_stamp, weekday, created_at) "
        "VALUES ('t1', 'u', 'A', 'hello', '2024-01-01T00:00:00', 0, 'Mon', 0)",
    ]
    if backend == "sqlite":
        db = sqlite3.connect(path)
        db.execute(statements[0])
        MIGRATIONS[1](db, SQLITE)
        for s in statements[1:]:
            db.execute(s)
        db.commit()
        db.close()
        return
    import psycopg

    assert config.url is not None
    with psycopg.connect(config.url, autocommit=True) as raw:
        raw.execute(f"CREATE SCHEMA {config.schema_name}")
        raw.execute(f"SET search_path TO {config.schema_name}")
        raw.execute(statements[0])
        MIGRATIONS[1](raw, POSTGRES)
        for s in statements[1:]:
            raw.execute(s)


def test_the_protocol_lists_every_journal_call_made_outside_the_journal() -> None:
    called = set()
    for path in SRC.rglob("*.py"):
        if "_journal" not in path.parts:
            called |= set(re.findall(r"journal\.(\w+)\(", path.read_text(encoding="utf-8")))
    called -= {"exists"}  # StorePaths.journal is the SQLite file's path
    members = _members(Journal)
    assert called - members == set(), "calls missing from the Journal protocol"
    # beyond the calls found by name: the journal's own surface its tests and the facade's counters use
    assert members - called == {"add_access", "add_usage", "schema_version", "read_only", "path", "shared",
                                "commit_graph"}  # graph changes go through the writer; its contract tests call it


def _members(protocol: type) -> set[str]:
    """The public methods, properties and attributes of a protocol, its bases' included."""
    return {n for n in dir(protocol) if not n.startswith("_")} | {
        n for cls in protocol.__mro__ for n in getattr(cls, "__annotations__", {}) if not n.startswith("_")}


def test_the_roles_split_the_journal() -> None:
    """Every call of the journal belongs to exactly one role (or to the handle all roles share, or
    to the usage counters only the facade reads), so a consumer that names a role names all it can
    call."""
    own = {role: {n for n in _members(role) if n not in _members(JournalHandle) or role is JournalHandle}
           for role in (JournalHandle, TurnLog, MemoryRows, GraphRows, KeyRing)}
    own[UserRows] = _members(UserRows) - _members(TurnLog) - _members(MemoryRows)
    assert _members(IndexSource) == _members(MemoryRows) | _members(GraphRows)  # a union, nothing of its own
    own[Journal] = _members(Journal) - set().union(*own.values())
    for role, names in own.items():
        for other, more in own.items():
            assert role is other or not names & more, (role, other, names & more)
    assert own[Journal] == {"add_usage", "usage"}
    assert own[UserRows] == {"import_rows", "forget_user"}
    assert set().union(*own.values()) == _members(Journal)


def test_ltm_graph_rows_links_and_vectors(opener: Opener) -> None:
    from dialogmem._changes import GraphCommit
    from dialogmem._graph import EvidenceLink, GraphDelta, GraphEdge, GraphNode

    j = opener()
    a = GraphNode(id="n1", type="Entity", text="pottery class", evidence=1, confidence=0.5, created_at=1.0,
                  updated_at=1.0)
    b = a.model_copy(update={"id": "n2", "text": "clay"})
    edge = GraphEdge(id="e1", type="RelatedTo", source="n1", target="n2", evidence=1, confidence=0.5)
    links = [EvidenceLink(subject_key="k1", memory_id="m1", target_id=t) for t in ("n1", "n2", "e1")]
    delta = GraphDelta(insert_nodes=[a, b], insert_edges=[edge], add_links=links)
    j.commit_graph(GraphCommit(delta=delta, vectors={"n1": _vec(1), "n2": _vec(2)}, since=5.0))
    j.commit_graph(GraphCommit(delta=GraphDelta(add_links=links[:1])))  # the same link again: no error
    assert j.graph_counts()["ltm_nodes"] == 2 and j.graph_counts()["ltm_edges"] == 1
    nodes, vectors = j.graph_node_vectors()
    assert sorted(n.id for n in nodes) == ["n1", "n2"] and vectors.shape == (2, 4)
    assert len(j.graph_links("k1")) == 3 and j.ltm_since() == 5.0 and j.graph_generation() == 2  # two deltas
    updated = a.model_copy(update={"evidence": 2, "updated_at": 2.0})  # no vector given: the stored one stays
    j.commit_graph(GraphCommit(delta=GraphDelta(update_nodes=[updated])))
    nodes, vectors = j.graph_node_vectors()
    assert vectors[[n.id for n in nodes].index("n1")].tolist() == _vec(1).tolist()
    assert j.graph_view().nodes["n1"].evidence == 2
    # the reads of the ltm search route: some nodes, the live edges around them
    only, vecs = j.graph_node_vectors(["n2", "missing"])
    assert [n.id for n in only] == ["n2"] and vecs.tolist() == [_vec(2).tolist()]
    assert j.graph_node_vectors([])[0] == [] and j.graph_nodes([]) == []
    assert sorted(n.id for n in j.graph_nodes(["n1", "n2", "missing"])) == ["n1", "n2"]
    assert [e.id for e in j.graph_live_edges(touching=["n2"])] == ["e1"] and j.graph_live_edges(touching=[]) == []
    # id lists longer than one statement binds: read in parts; an edge whose ends fall in two parts comes once
    many = ["n2", *(f"absent-{i}" for i in range(70_000)), "n1"]
    assert [n.id for n in j.graph_node_vectors(many)[0]] == ["n1", "n2"]
    assert sorted(n.id for n in j.graph_nodes(many)) == ["n1", "n2"]
    assert [e.id for e in j.graph_live_edges(touching=many)] == ["e1"]
    assert sorted(x.target_id for x in j.graph_links(target_ids=[*many, "e1"])) == ["e1", "n1", "n2"]
    assert j.graph_support([*many, "e1"], "k1") == {"n1": (1, True), "n2": (1, True), "e1": (1, True)}
    dropped = b.model_copy(update={"dropped_at": 3.0})
    j.commit_graph(GraphCommit(delta=GraphDelta(drop_nodes=[dropped], drop_edges=[edge.model_copy(
        update={"dropped_at": 3.0})])))
    assert [n.id for n in j.graph_nodes(["n1", "n2"])] == ["n1"] and j.graph_live_edges(touching=["n1"]) == []
    assert [n.id for n in j.graph_node_vectors(["n1", "n2"])[0]] == ["n1"]


def test_graph_support_counts_distinct_subjects_in_one_query(opener: Opener) -> None:
    from dialogmem._changes import GraphCommit
    from dialogmem._graph import EvidenceLink, GraphDelta

    j = opener()
    links = [EvidenceLink(subject_key=k, memory_id=m, target_id=t) for k, m, t in [
        ("k1", "m1", "n1"), ("k1", "m2", "n1"), ("k2", "m3", "n1"), ("k3", "m4", "n1"), ("k1", "m1", "n2")]]
    j.commit_graph(GraphCommit(delta=GraphDelta(add_links=links)))
    # two memories of k1 count once: the k of k-anonymity is users, not memories
    assert j.graph_support() == {"n1": (3, False), "n2": (1, False)}
    assert j.graph_support(["n1", "n2", "none"], "k2") == {"n1": (3, True), "n2": (1, False)}
    assert j.graph_support(["n2"], "k1") == {"n2": (1, True)} and j.graph_support([], "k1") == {}



def test_evicted_items_are_marked_for_ltm_until_a_cycle_takes_them(opener: Opener) -> None:
    from dialogmem import Event
    from dialogmem._changes import ChangeSet, GraphCommit, MemoryRemoval, MemoryWrite
    from dialogmem._graph import GraphDelta

    j = opener()
    rows = [_record(i) for i in range(3)]
    j.commit(ChangeSet("u", writes=[MemoryWrite(record=r, event=Event.ADD, actor="t") for r in rows]),
             {r.id: _vec(i) for i, r in enumerate(rows)})
    j.commit(ChangeSet("u", removals=[MemoryRemoval(record=rows[0], actor="t", status="evicted"),
                                      MemoryRemoval(record=rows[1], actor="t", status="evicted")]), {})
    assert j.ltm_queued() == [("u", rows[0].id), ("u", rows[1].id)]
    # the marks make the batch whatever the time: a cycle "since" the far future still takes them
    assert {r.id for r, s in j.consolidation_candidates(1e12, min_access=3)} == {rows[0].id, rows[1].id}
    j.commit(ChangeSet("u", removals=[MemoryRemoval(record=rows[1], actor="t", status="deleted")]), {})
    assert j.ltm_queued() == [("u", rows[0].id)]  # a deleted item is not handed over
    j.commit(ChangeSet("", graph=GraphCommit(delta=GraphDelta(), since=2e12, done=[("u", rows[0].id)])), {})
    assert j.ltm_queued() == [] and j.consolidation_candidates(2e12, min_access=3) == []


def test_api_keys_are_stored_hashed_and_revocable(opener: Opener) -> None:
    j = opener()
    row, key = j.create_key("user", "u", label="agent")
    admin, admin_key = j.create_key("admin")
    assert j.verify_key(key) == row and j.verify_key(admin_key) == admin
    assert j.verify_key(key[:-1] + ("A" if key[-1] != "A" else "B")) is None
    assert {k.key_id for k in j.list_keys()} == {row.key_id, admin.key_id}
    j.revoke_key(row.key_id)
    assert j.verify_key(key) is None and [k.key_id for k in j.list_keys()] == [admin.key_id]
    with pytest.raises(InputError):
        j.create_key("admin", "u")


def test_rows_imported_keep_status_counts_and_history_and_are_added_once(opener: Opener) -> None:
    j = opener()
    history = [HistoryEntry(memory_id=_record(1).id, event=Event.ADD, old_memory=None, new_memory="memory 1",
                            timestamp=5.5, actor="user"),
               HistoryEntry(memory_id=_record(2).id, event=Event.DELETE, old_memory="memory 2", new_memory=None,
                            timestamp=6.5, actor="user", previous=_record(2))]
    counted = _record(1).model_copy(update={"access_count": 3, "last_accessed": 9.0})
    rows = {"turns": [(_turn(1), TurnStatus.PROCESSED, None), (_turn(2), TurnStatus.QUARANTINED, "bug"),
                      (_turn(3), TurnStatus.DROPPED, None)],
            "memories": [(counted, "active", _vec(1)), (_record(2), "deleted", None)],
            "history": history}
    assert j.import_rows("u", **rows) == {"turns": 3, "memories": 2, "history": 2}  # type: ignore[arg-type]
    assert j.import_rows("u", **rows) == {"turns": 0, "memories": 0, "history": 0}  # type: ignore[arg-type]
    got = j.turn_rows("u")
    assert [(t.id, s, e) for t, s, e in got] == [
        ("t1", TurnStatus.PROCESSED, None), ("t2", TurnStatus.QUARANTINED, "bug"), ("t3", TurnStatus.DROPPED, None)]
    assert [t.id for t, _, _ in j.turn_rows("u", after_seq=got[0][0].seq, limit=1)] == ["t2"]
    assert j.memory("u", counted.id) == counted and j.memory("u", _record(2).id) is None
    assert j.memory("u", _record(2).id, statuses=("deleted",)) == _record(2)
    assert np.array_equal(j.vectors("u", [counted.id])[counted.id], _vec(1))
    assert [(r.id, s) for r, _, s in j.index_rows(states=(IndexState.UPSERT, IndexState.REMOVE))] == [
        (counted.id, IndexState.UPSERT)]
    assert j.history(_record(1).id, "u") == history[:1] and j.history(_record(2).id, "u") == history[1:]
    assert j.speakers("u") == ["S0", "S1"]
    with pytest.raises(StoreError, match="taken by another user"):
        j.import_rows("v", memories=[(_record(1, user="v"), "active", None)])


def test_validity_is_kept_through_a_supersession_and_a_reopen(opener: Opener) -> None:
    """A superseded memory is a new version of the same row (never a deletion): its validity fields
    survive the commit and a reopen on both journals, and the history keeps the version before."""
    j = opener()
    old, new = _record(1), _record(2)
    _add(j, old, new)
    assert old.valid_from == old.time_stamp and old.invalid_at is None and old.superseded_by is None
    closed = old.model_copy(update={"invalid_at": new.time_stamp, "superseded_by": new.id, "version": 2})
    j.commit(ChangeSet("u", writes=[MemoryWrite(closed, Event.UPDATE, f"sleep:rule:superseded-by:{new.id}",
                                                old=old, sleep_pending=False)]), {})
    j.close()
    again = opener()
    got = again.memory("u", old.id)
    assert got == closed and got is not None and got.superseded_by == new.id and got.invalid_at == new.time_stamp
    assert again.count_memories("u") == 2  # kept: a past-state question still reaches it
    assert [h.event for h in again.history(old.id, "u")] == [Event.ADD, Event.UPDATE]


def test_a_memory_written_before_validity_existed_reads_with_its_evidence_time(tmp_path: Path) -> None:
    """A store from before validity: its payloads lack the three fields; they open unchanged and read as
    valid from their evidence's time, never superseded."""
    j = open_journal(JournalConfig(), tmp_path / "journal.sqlite3")
    rec = _record(1)
    _add(j, rec)
    j.close()
    with sqlite3.connect(tmp_path / "journal.sqlite3") as db:
        payload = json.loads(db.execute("SELECT payload FROM memories").fetchone()[0])
        for field in ("valid_from", "invalid_at", "superseded_by"):
            payload.pop(field, None)  # a field holding its default is left out of the row already
        db.execute("UPDATE memories SET payload = ?", (json.dumps(payload),))
    j = open_journal(JournalConfig(), tmp_path / "journal.sqlite3")
    try:
        got = j.memory("u", rec.id)
        assert got is not None and got.valid_from == rec.time_stamp and got.is_current
        assert got.memory == rec.memory and got.source_turn_ids == rec.source_turn_ids
    finally:
        j.close()


class _Counted:
    """A real connection of the journal's, counting the statements sent through it (an
    ``executemany`` is one: psycopg sends its rows in one pipeline, sqlite3 runs them in C)."""

    def __init__(self, conn: object) -> None:
        self.conn, self.sent = conn, 0

    def execute(self, sql: str, params: object = ()) -> object:
        self.sent += 1
        return self.conn.execute(sql, params)  # type: ignore[attr-defined]

    def cursor(self) -> object:
        outer, cursor = self, self.conn.cursor()  # type: ignore[attr-defined]

        class _Cursor:
            def executemany(self, sql: str, rows: object) -> object:
                outer.sent += 1
                return cursor.executemany(sql, rows)

        return _Cursor()

    def __getattr__(self, name: str) -> object:
        return getattr(self.conn, name)


def _counting(j: Journal) -> list[_Counted]:
    """Wrap every write transaction's connection of ``j``; returns the list each one is added to."""
    seen: list[_Counted] = []
    tx = j._tx  # type: ignore[attr-defined]

    @contextmanager
    def counted() -> Iterator[object]:
        with tx() as conn:
            seen.append(_Counted(conn))
            yield seen[-1]

    j._tx = counted  # type: ignore[attr-defined]
    return seen


@pytest.mark.parametrize("n", [3, 300])
def test_a_batch_is_a_few_statements_whatever_its_size(opener: Opener, n: int) -> None:
    """A change set, an imported batch and an owner check cost a fixed number of statements, not
    some per row (on PostgreSQL each statement was a round trip: ~30-56 imported rows/s)."""
    j = opener()
    seen = _counting(j)
    records = [_record(i) for i in range(1, n + 1)]
    turns = [_turn(i) for i in range(1, n + 1)]
    writes = [MemoryWrite(record=r, event=Event.ADD, actor="test") for r in records]
    j.commit(ChangeSet("u", turns=turns, writes=writes, processed=[t.id for t in turns]),
             {r.id: _vec(i) for i, r in enumerate(records, 1)})
    j.commit(ChangeSet("u", removals=[MemoryRemoval(r, "sleep", "evicted") for r in records[: n // 2]]), {})
    rows = {"turns": [(_turn(i, "w"), TurnStatus.PROCESSED, None) for i in range(1, n + 1)],
            "memories": [(_record(n + i, "w"), "active", _vec(i)) for i in range(1, n + 1)],
            "history": [HistoryEntry(memory_id=_record(n + i).id, event=Event.ADD, old_memory=None,
                                     new_memory="m", timestamp=5.5, actor="user") for i in range(1, n + 1)]}
    assert j.import_rows("w", **rows) == {"turns": n, "memories": n, "history": n}  # type: ignore[arg-type]
    assert j.import_rows("w", **rows) == {"turns": 0, "memories": 0, "history": 0}  # type: ignore[arg-type]
    assert len(seen) == 4
    assert max(s.sent for s in seen) <= 16, [s.sent for s in seen]
    # what the batches wrote: every row once, in order, its history and queue marks
    assert j.count_turns("u") == n and j.count_turns("u", TurnStatus.PROCESSED) == n and j.count_turns("w") == n
    assert j.count_memories("u") == n - n // 2 and j.count_memories("u", status="evicted") == n // 2
    assert len(j.ltm_queued()) == n // 2 and j.count_memories("w") == n
    assert [h.event for h in j.history(records[0].id, "u")] == [Event.ADD, Event.EVICT]
    assert [h.timestamp for h in j.history(_record(n + 1).id, "w")] == [5.5]
    owners = j.memory_owners([records[0].id, _record(n + 1).id, "missing"])
    assert owners == {records[0].id: "u", _record(n + 1).id: "w"}
    assert len(j.memory_owners([_record(i).id for i in range(1, 2 * n + 1)] + ["x"] * 7000)) == 2 * n


def test_a_list_of_ids_is_one_array_parameter_on_postgresql() -> None:
    """psycopg parses every parameter mark of a statement on the client: a batch's ids go to
    PostgreSQL as one array (``= ANY(%s)``); sqlite3 binds a mark each."""
    ids = ["a", "b", "c"]
    assert POSTGRES.one_of("id", ids) == ("id = ANY(%s)", [ids])
    assert SQLITE.one_of("id", ids) == ("id IN (?,?,?)", ids)
