"""The SQLite journal on its own: migrations, idempotency, never deleting on open."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from dialogmem import InputError, SchemaVersionError
from dialogmem._journal import SCHEMA_VERSION, Journal
from dialogmem._types import Event, HistoryEntry, Turn
from dialogmem._usage import StageUsage


def _turn(i: int, user: str = "u", content: str | None = None) -> Turn:
    return Turn(id=f"t{i}", user_id=user, speaker="A", content=content or f"text {i}",
                time_stamp="2024-01-01T00:00:00.000", float_time_stamp=1704067200.0 + i, weekday="Mon")


def test_wal_and_schema_version(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j.sqlite3")
    assert j.schema_version == SCHEMA_VERSION
    assert j._query("PRAGMA journal_mode")[0][0] == "wal"
    j.close()


def test_reopen_keeps_rows_and_migrations_run_once(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite3"
    j = Journal(path)
    j.append_turns([_turn(1), _turn(2)])
    j.add_history([("u", HistoryEntry(memory_id="m", event=Event.ADD, old_memory=None, new_memory="x",
                                      timestamp=1.0, actor="write"))])
    j.add_usage({("llm", "add_memory"): StageUsage(calls=2, prompt_tokens=10, completion_tokens=5)})
    j.close()
    for _ in range(2):
        j = Journal(path)
        assert [t.id for t in j.turns("u")] == ["t1", "t2"]
        assert len(j.history("m", "u")) == 1
        assert j.usage()[("llm", "add_memory")].total_tokens == 15
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
    assert db.execute("SELECT value FROM meta").fetchone()[0] == "999"
    db.close()


def test_append_is_idempotent_and_conflicts_are_errors(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j.sqlite3")
    first = j.append_turns([_turn(1)])
    again = j.append_turns([_turn(1)])
    assert first[0].seq == again[0].seq and j.count_turns("u") == 1
    with pytest.raises(InputError):
        j.append_turns([_turn(2), _turn(1, content="changed")])
    assert j.count_turns("u") == 1  # the whole transaction rolled back
    j.close()


def test_pending_and_forget(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j.sqlite3")
    j.append_turns([_turn(1), _turn(2), _turn(3, user="v")])
    j.mark_processed("u", ["t1"])
    assert [t.id for t in j.turns("u", pending_only=True)] == ["t2"]
    assert sorted(j.pending_users()) == ["u", "v"]
    assert j.forget_user("u") == 2
    assert j.count_turns() == 1 and j.speakers("u") == []
    j.close()


def test_add_history_skips_repeated_add(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j.sqlite3")
    entry = HistoryEntry(memory_id="m", event=Event.ADD, old_memory=None, new_memory="x", timestamp=1.0,
                         actor="write")
    j.add_history([("u", entry)], sleep_pending=[("u", "m")])
    j.add_history([("u", entry)], sleep_pending=[("u", "m")])
    assert len(j.history("m", "u")) == 1
    assert j.sleep_pending() == {"u": ["m"]}
    j.clear_sleep_pending("u", ["m"])
    assert j.sleep_pending("u") == {}
    j.close()
