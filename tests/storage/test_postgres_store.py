"""A store on the PostgreSQL journal, through the facade: one node (PostgreSQL + Edge index, still
under the file lock), and stateless nodes (PostgreSQL + a Qdrant index: no file lock) — several
worker processes writing the same users at once lose no turn and extract no batch twice.

Everything is real: a PostgreSQL server started for the session, MiniLM, Qdrant (Edge, and
qdrant-client's in-process engine standing in for a Qdrant server, which cannot be installed here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from dialogmem import ConfigError, Memory, StoreError
from dialogmem._config import Config, JournalConfig
from dialogmem._journal import TurnStatus, open_journal
from dialogmem._journal._postgres import PostgresJournal, redact

WORKER = Path(__file__).parent.parent / "pg_worker.py"


def _journal(url: str, schema: str) -> dict[str, Any]:
    return {"url": url, "schema_name": schema}


def test_the_facade_on_a_postgres_journal_persists_across_reopen(tmp_path: Path, postgres_url: str,
                                                                  pg_schema: str) -> None:
    opts = {"data_dir": tmp_path / "s", "journal": _journal(postgres_url, pg_schema)}
    with Memory(**opts) as mem:
        assert isinstance(mem._parts.journal, PostgresJournal)
        mem.add([{"role": "user", "content": "I moved to Lisbon last spring and I work as a nurse."}], "alice")
        mem.add([{"role": "user", "content": "My sister Ana plays the cello."}], "bob")
        hits = mem.search("Where does she live?", "alice").hits
        assert hits and "Lisbon" in hits[0].memory
        assert all("cello" not in h.memory for h in mem.search("cello", "alice").hits)  # bob's stays bob's
        first = mem.get_all("alice")[0]
        mem.update(first.id, "I moved to Porto last spring.", "alice")
        assert [h.event.value for h in mem.history(first.id, "alice")] == ["ADD", "UPDATE"]
        with pytest.raises(StoreError):  # the file lock still guards a store with a local (Edge) index
            Memory(**opts)
    assert not (tmp_path / "s" / "journal.sqlite3").exists()
    with Memory(**opts) as mem:  # the Edge index is checked against the PostgreSQL journal at open
        assert "Porto" in mem.get(first.id, "alice").memory
        assert mem.stats()["counts"]["memories"] == len(mem.get_all("alice")) + len(mem.get_all("bob"))
        mem.forget_user("alice")
        assert mem.get_all("alice") == [] and mem.get_all("bob")


def test_the_environment_selects_postgres(monkeypatch: pytest.MonkeyPatch, postgres_url: str, pg_schema: str) -> None:
    monkeypatch.setenv("DIALOGMEM_JOURNAL__URL", postgres_url)
    monkeypatch.setenv("DIALOGMEM_JOURNAL__SCHEMA_NAME", pg_schema)
    config = Config.load()
    assert config.journal.url == postgres_url and config.journal.schema_name == pg_schema
    assert not config.stateless and config.with_overrides(store={"backend": "qdrant"}).stateless


def test_bad_journal_settings_are_config_errors(tmp_path: Path) -> None:
    for bad in ({"url": "mysql://x"}, {"schema_name": "Robert'); DROP"}, {"pool_min_size": 9, "pool_max_size": 2}):
        with pytest.raises(ConfigError):
            Config.load(journal=bad)
    assert redact("postgresql://me:s3cret@db:5432/x") == "postgresql://me:***@db:5432/x"
    with pytest.raises(StoreError, match="cannot open the PostgreSQL journal"):  # nothing listens there
        open_journal(JournalConfig(url="postgresql://u:pw@127.0.0.1:9/x", connect_timeout_s=2), tmp_path / "j")


def test_stateless_nodes_share_one_store_without_a_file_lock(tmp_path: Path, postgres_url: str,
                                                             pg_schema: str) -> None:
    opts = {"data_dir": tmp_path / "s", "journal": _journal(postgres_url, pg_schema),
            "store": {"backend": "qdrant", "url": ":memory:"}}
    with Memory(**opts) as a, Memory(**opts) as b:
        first = a.add([{"role": "user", "content": "I adopted a cat named Miso.", "id": "m1"}], "alice")
        again = b.add([{"role": "user", "content": "I adopted a cat named Miso.", "id": "m1"}], "alice")
        # a retry through another node is recognised: answered with the memory the first call made
        assert [h.id for h in again.memories] == [h.id for h in first.memories] and first.memories
        assert b.stats("alice")["counts"]["turns"] == 1 and len(b.get_all("alice")) == 1


def test_worker_processes_lose_no_turn_and_extract_no_batch_twice(tmp_path: Path, postgres_url: str,
                                                                  pg_schema: str) -> None:
    users, workers, turns = ["u0", "u1", "u2"], 3, 30
    Memory(data_dir=tmp_path / "s", journal=_journal(postgres_url, pg_schema),
           store={"backend": "qdrant", "url": ":memory:"}).close()  # migrate once up front
    procs = []
    for w in range(workers):
        args = {"url": postgres_url, "schema": pg_schema, "data_dir": str(tmp_path / "s"), "worker": w,
                "users": users, "turns": turns, "flush_every": 7, "stm_threshold": 60}
        procs.append(subprocess.Popen([sys.executable, str(WORKER), json.dumps(args)], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, env=os.environ.copy()))
    acked: dict[str, list[str]] = {u: [] for u in users}
    extracted: Counter[str] = Counter()
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
        report = json.loads(out)
        for user, ids in report["acked"].items():
            acked[user] += ids
        extracted.update(t for batch in report["extracted"] for t in batch)
    assert sum(len(v) for v in acked.values()) == workers * turns
    assert extracted == Counter({t: 1 for ids in acked.values() for t in ids}), "a turn was extracted twice"
    journal = open_journal(JournalConfig(**_journal(postgres_url, pg_schema)), tmp_path / "unused")
    try:
        for user in users:
            journaled = {t.id for t in journal.turns(user)}
            assert journaled == set(acked[user])  # zero lost turns, nothing extra
            assert journal.count_turns(user, TurnStatus.PENDING) == 0
            assert journal.count_turns(user, TurnStatus.QUARANTINED) == 0
            assert journal.count_turns(user, TurnStatus.PROCESSED) == len(journaled)
            memories = journal.memories(user, limit=10_000)
            assert {t for m in memories for t in m.source_turn_ids} == journaled  # every turn became memories
            texts = Counter(m.memory for m in memories)
            assert max(texts.values()) == 1, "the same memory written twice"
            history = [h for m in memories for h in journal.history(m.id, user)]
            assert [h.event.value for h in history] == ["ADD"] * len(memories) == ["ADD"] * journal.count_memories(user)
        assert journal.count_turns() == workers * turns
    finally:
        journal.close()


def test_a_node_killed_holding_a_batch_leaves_it_to_the_others(tmp_path: Path, postgres_url: str,
                                                                pg_schema: str) -> None:
    opts = {"data_dir": tmp_path / "s", "journal": _journal(postgres_url, pg_schema),
            "store": {"backend": "qdrant", "url": ":memory:"}, "write": {"stm_threshold": 100_000}}
    marker = tmp_path / "in-extraction"
    with Memory(**opts) as mem:
        for i in range(3):
            mem.add([{"role": "user", "content": f"I collect stamps from country {i}.", "id": f"c{i}"}], "carol")
        assert mem.stats("carol")["counts"]["pending_turns"] == 3
        args = {"url": postgres_url, "schema": pg_schema, "data_dir": str(tmp_path / "s"), "worker": 0,
                "users": ["carol"], "turns": 0, "flush_every": 1, "stm_threshold": 100_000,
                "hang_marker": str(marker)}
        proc = subprocess.Popen([sys.executable, str(WORKER), json.dumps(args)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=os.environ.copy())
        try:
            deadline = time.monotonic() + 300
            while not marker.exists():
                assert proc.poll() is None, proc.communicate()[1][-3000:]
                assert time.monotonic() < deadline, "the worker never reached the extraction"
                time.sleep(0.2)
            assert sorted(json.loads(marker.read_text())) == ["c0", "c1", "c2"]  # it holds carol's batch
        finally:
            proc.kill()  # SIGKILL: no cleanup in the node; PostgreSQL drops its session and its locks
            proc.communicate(timeout=60)
        assert mem.stats("carol")["counts"]["pending_turns"] == 3  # nothing was committed by the dead node
        stored = mem.flush("carol")  # this node takes the user's lock and does the work
        assert {t for h in stored for t in h.source_turn_ids} == {"c0", "c1", "c2"}
        assert mem.stats("carol")["counts"]["pending_turns"] == 0


def test_two_nodes_sleeping_at_once_process_each_entry_once(tmp_path: Path, postgres_url: str,
                                                            pg_schema: str) -> None:
    opts = {"data_dir": tmp_path / "s", "journal": _journal(postgres_url, pg_schema),
            "store": {"backend": "qdrant", "url": ":memory:"}}
    with Memory(**opts) as a, Memory(**opts) as b:
        for i in range(6):
            a.add([{"role": "user", "content": f"I repaired bicycle number {i} for my neighbour."}], "dave")
        queued = len(a._parts.journal.sleep_pending("dave").get("dave", []))
        assert queued > 0
        with ThreadPoolExecutor(2) as pool:
            reports = list(pool.map(lambda m: m.sleep("dave"), [a, b]))
        assert sum(r.new_entries for r in reports) == queued  # one node slept dave, the other found nothing
        assert sorted(r.users for r in reports) == [0, 1]
        assert b._parts.journal.sleep_pending("dave") == {}


def test_a_commit_aborted_by_a_deadlock_is_run_again(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                     postgres_url: str, pg_schema: str) -> None:
    from psycopg import errors

    from dialogmem import Turn
    from dialogmem._changes import ChangeSet
    from dialogmem._journal._sql import SQLJournal

    journal = open_journal(JournalConfig(**_journal(postgres_url, pg_schema)), tmp_path / "unused")
    real, calls = SQLJournal.commit, []

    def flaky(self: Any, cs: ChangeSet, *args: Any, **kw: Any) -> None:
        calls.append(cs.user_id)
        if len(calls) == 1 or cs.user_id == "broken":
            cause = errors.DeadlockDetected("deadlock detected") if cs.user_id != "broken" else errors.UndefinedTable()
            raise StoreError("journal write failed") from cause
        real(self, cs, *args, **kw)

    monkeypatch.setattr(SQLJournal, "commit", flaky)
    turn = Turn(id="t1", user_id="u", speaker="A", content="hi", time_stamp="2024-01-01T00:00:00.000",
                float_time_stamp=0.0, weekday="Mon")
    try:
        journal.commit(ChangeSet("u", turns=[turn]), {})
        assert calls == ["u", "u"] and journal.count_turns("u") == 1
        with pytest.raises(StoreError):  # anything else is not retried
            journal.commit(ChangeSet("broken", turns=[turn.model_copy(update={"user_id": "broken"})]), {})
        assert calls.count("broken") == 1
    finally:
        journal.close()


def test_a_starting_node_applies_rows_a_dead_node_left_in_the_outbox(tmp_path: Path, postgres_url: str,
                                                                     pg_schema: str) -> None:
    import numpy as np

    from dialogmem import Event, MemoryRecord
    from dialogmem._changes import ChangeSet, MemoryWrite
    from dialogmem._journal import IndexState

    opts = {"data_dir": tmp_path / "s", "journal": _journal(postgres_url, pg_schema),
            "store": {"backend": "qdrant", "url": ":memory:"}}
    with Memory(**opts) as a:  # committed to the journal, then "died" before its index write
        vector = a._parts.embedder.embed(["I keep bees on the roof."])[0]
        record = MemoryRecord(id="00000000-0000-0000-0000-000000000001", user_id="erin",
                              memory="I keep bees on the roof.", time_stamp="2024-01-01T00:00:00",
                              float_time_stamp=1704067200.0, weekday="Mon", created_at=1.0, updated_at=1.0)
        a._parts.journal.commit(ChangeSet("erin", writes=[MemoryWrite(record, Event.ADD, "test")]),
                                {record.id: np.asarray(vector)})
        assert a._parts.journal.outbox_users() == ["erin"]
        with Memory(**opts) as b:
            assert [h.id for h in b.search("bees", "erin").hits] == [record.id]
            assert b._parts.journal.count_index_state(IndexState.UPSERT) == 0


def test_connections_the_server_dropped_are_replaced(tmp_path: Path, postgres_url: str, pg_schema: str) -> None:
    import psycopg

    journal = open_journal(JournalConfig(**_journal(postgres_url, pg_schema)), tmp_path / "unused")
    try:
        assert journal.count_turns() == 0
        with journal.user_lock("u"):
            pass
        with psycopg.connect(postgres_url, autocommit=True) as admin:  # a server restart, an idle timeout...
            killed = admin.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
                                   "application_name='dialogmem'").fetchone()
        assert killed is not None and killed[0] >= 2  # the query pool's and the lock pool's
        assert journal.count_turns() == 0  # a read runs again on a fresh connection
        with journal.user_lock("u"):  # lock connections are checked before use
            pass
    finally:
        journal.close()
