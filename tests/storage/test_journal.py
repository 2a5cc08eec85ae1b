"""The SQLite journal on its own: migrations, idempotency, one commit per change set, never
deleting on open."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from dialogmem import Event, InputError, MemoryRecord, SchemaVersionError, StoreError, Turn
from dialogmem._changes import ChangeSet, MemoryRemoval, MemoryWrite
from dialogmem._journal import SCHEMA_VERSION, IndexState, TurnStatus
from dialogmem._journal import SQLiteJournal as Journal
from dialogmem._usage import StageUsage


def _turn(i: int, user: str = "u", content: str | None = None) -> Turn:
    return Turn(id=f"t{i}", user_id=user, speaker="A", content=content or f"text {i}",
                time_stamp="2024-01-01T00:00:00.000", float_time_stamp=1704067200.0 + i, weekday="Mon")


def _record(i: int, user: str = "u", text: str = "memory") -> MemoryRecord:
    return MemoryRecord(id=f"00000000-0000-0000-0000-{i:012d}", user_id=user, memory=f"{text} {i}",
                        time_stamp="2024-01-01T00:00:00", float_time_stamp=1704067200.0 + i, weekday="Mon",
                        created_at=1.0, updated_at=1.0, source_turn_ids=[f"t{i}"])


def _write(record: MemoryRecord, event: Event = Event.ADD) -> MemoryWrite:
    return MemoryWrite(record=record, event=event, actor="test", vector=np.ones(4, dtype=np.float32))


def _vectors(cs: ChangeSet) -> dict[str, np.ndarray]:
    return {w.record.id: w.vector for w in cs.writes if w.vector is not None}


def test_wal_and_schema_version(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j.sqlite3")
    assert j.schema_version == SCHEMA_VERSION
    assert j._query("PRAGMA journal_mode")[0][0] == "wal"
    assert len(j.meta("store_id") or "") == 32
    j.close()


def test_reopen_keeps_rows_and_migrations_run_once(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite3"
    j = Journal(path)
    cs = ChangeSet("u", turns=[_turn(1), _turn(2)], writes=[_write(_record(1))], processed=["t1"])
    j.commit(cs, _vectors(cs))
    j.add_usage({("llm", "add_memory"): StageUsage(calls=2, prompt_tokens=10, completion_tokens=5)})
    store_id = j.meta("store_id")
    j.close()
    for _ in range(2):
        j = Journal(path)
        assert [t.id for t in j.turns("u")] == ["t1", "t2"]
        assert [t.id for t in j.pending_turns("u")] == ["t2"]
        assert len(j.history(_record(1).id, "u")) == 1
        assert j.memory("u", _record(1).id) == _record(1)
        assert j.usage()[("llm", "add_memory")].total_tokens == 15
        assert j.meta("store_id") == store_id
        j.close()


def test_a_v1_journal_is_migrated_without_losing_a_row(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite3"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    db.commit()
    from dialogmem._journal._dialect import SQLITE
    from dialogmem._journal._schema import MIGRATIONS

    MIGRATIONS[1](db, SQLITE)
    db.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    db.execute("INSERT INTO turns (id, user_id, speaker, content, time_stamp, float_time_stamp, weekday, "
               "created_at) VALUES ('t1', 'u', 'A', 'hello', '2024-01-01T00:00:00', 0, 'Mon', 0)")
    db.commit()
    db.close()
    j = Journal(path)
    assert j.schema_version == SCHEMA_VERSION
    assert [t.content for t in j.turns("u")] == ["hello"]
    assert j.meta("import_index") == "1"  # the facade copies the v1 index into memory rows once
    j.close()


def test_newer_schema_is_refused_not_rewritten(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite3"
    Journal(path).close()
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value='999' WHERE key='schema_version'")
    db.commit()
    db.close()
    with pytest.raises(SchemaVersionError):
        Journal(path)
    db = sqlite3.connect(path)
    assert db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == "999"
    db.close()


def test_retried_turns_are_recognised_and_conflicts_are_errors(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j.sqlite3")
    j.commit(ChangeSet("u", turns=[_turn(1)]), {})
    assert j.fresh_turns([_turn(1), _turn(2)]) == [_turn(2)]
    with pytest.raises(InputError):
        j.fresh_turns([_turn(1, content="changed")])
    with pytest.raises(InputError):  # the same check inside the transaction, which then rolls back
        j.commit(ChangeSet("u", turns=[_turn(2), _turn(1, content="changed")]), {})
    assert j.count_turns("u") == 1
    j.close()


def test_commit_is_one_transaction(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j.sqlite3")
    statements: list[str] = []
    j._db.set_trace_callback(statements.append)
    cs = ChangeSet("u", turns=[_turn(1)], writes=[_write(_record(1))], processed=["t1"])
    j.commit(cs, _vectors(cs), access=[("u", _record(1).id, 2, 5.0)])
    assert sum(s.startswith("BEGIN") for s in statements) == 1
    assert sum(s == "COMMIT" for s in statements) == 1
    got = j.memory("u", _record(1).id)
    assert got is not None and got.access_count == 2 and got.last_accessed == 5.0
    assert j.pending_turns("u") == [] and j.sleep_pending("u") == {"u": [_record(1).id]}
    assert [m.id for m, _, state in j.index_rows(states=(IndexState.UPSERT,))] == [_record(1).id]
    j.close()


def test_removal_keeps_the_row_and_the_previous_record(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j.sqlite3")
    rec = _record(1)
    j.commit(ChangeSet("u", writes=[_write(rec)]), {rec.id: np.ones(4, dtype=np.float32)})
    j.commit(ChangeSet("u", removals=[MemoryRemoval(record=rec, actor="user")]), {})
    assert j.memory("u", rec.id) is None
    assert j.memory("u", rec.id, statuses=("deleted",)) == rec
    history = j.history(rec.id, "u")
    assert [h.event for h in history] == [Event.ADD, Event.DELETE] and history[1].previous == rec
    assert j.sleep_pending("u") == {}
    j.close()


def test_a_memory_id_cannot_change_owner(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j.sqlite3")
    rec = _record(1)
    j.commit(ChangeSet("u", writes=[_write(rec)]), {rec.id: np.ones(4, dtype=np.float32)})
    stolen = rec.model_copy(update={"user_id": "v"})
    with pytest.raises(StoreError):
        j.commit(ChangeSet("v", writes=[_write(stolen)]), {rec.id: np.ones(4, dtype=np.float32)})
    assert j.memory("v", rec.id) is None and j.memory("u", rec.id) == rec
    j.close()


def test_replayed_add_writes_one_history_row(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j.sqlite3")
    cs = ChangeSet("u", writes=[_write(_record(1))])
    j.commit(cs, _vectors(cs))
    j.commit(cs, _vectors(cs))
    assert len(j.history(_record(1).id, "u")) == 1
    j.close()


def test_quarantine_retry_drop_and_forget(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j.sqlite3")
    j.commit(ChangeSet("u", turns=[_turn(1), _turn(2)], quarantined={"t1": "ValueError: bad"}), {})
    j.commit(ChangeSet("v", turns=[_turn(3, user="v")]), {})
    assert [(u, q.turn.id, q.error) for u, q in j.quarantined()] == [("u", "t1", "ValueError: bad")]
    assert sorted(j.pending_users()) == ["u", "v"]
    assert j.set_turn_status("u", ["t1"], TurnStatus.PENDING, only_from=TurnStatus.QUARANTINED) == 1
    assert [t.id for t in j.pending_turns("u")] == ["t1", "t2"]
    assert j.set_turn_status("u", ["t2"], TurnStatus.DROPPED, only_from=TurnStatus.QUARANTINED) == 0
    assert j.forget_user("u") == {"turns": 2, "memories": 0}
    assert j.count_turns() == 1 and j.speakers("u") == []
    j.close()


def test_read_only_journal_reads_and_refuses_writes(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite3"
    writer = Journal(path)
    writer.commit(ChangeSet("u", turns=[_turn(1)]), {})
    reader = Journal(path, read_only=True)
    assert [t.id for t in reader.turns("u")] == ["t1"]
    writer.commit(ChangeSet("u", turns=[_turn(2)]), {})  # a writer goes on beside the reader
    assert reader.count_turns("u") == 2
    with pytest.raises(StoreError, match="read-only"):
        reader.commit(ChangeSet("u", turns=[_turn(3)]), {})
    reader.close()
    writer.close()


def test_a_read_does_not_wait_behind_a_write_transaction(tmp_path: Path) -> None:
    """A search's record read must not queue behind a write's commit (WAL lets both run): a read made
    while another thread holds a write transaction open returns at once, and sees what was committed
    before it, not the open transaction's rows."""
    import threading

    j = Journal(tmp_path / "j.sqlite3")
    first = ChangeSet("u", turns=[_turn(1)], writes=[_write(_record(1))])
    j.commit(first, _vectors(first))
    inside, release = threading.Event(), threading.Event()

    def hold_a_write() -> None:
        with j._tx() as db:
            db.execute("UPDATE turns SET content='changed' WHERE id='t1'")
            inside.set()
            release.wait(10)

    writer = threading.Thread(target=hold_a_write)
    writer.start()
    try:
        assert inside.wait(10)
        done: list[object] = []
        reader = threading.Thread(target=lambda: done.append(j.memory("u", _record(1).id)))
        reader.start()
        reader.join(2)
        assert done == [_record(1)], "the read waited for the write transaction to end"
        assert [t.content for t in j.turns("u")] == ["text 1"]  # the open transaction's change is not seen
    finally:
        release.set()
        writer.join(10)
    assert [t.content for t in j.turns("u")] == ["changed"]
    j.close()
    j.close()  # twice is harmless
