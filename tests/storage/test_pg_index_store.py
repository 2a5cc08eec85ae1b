"""A store whose index lives in PostgreSQL beside its journal (``store.backend = "postgres"``), through
the facade: a change and its index rows commit in one transaction, so the outbox never holds
anything and a refused index row leaves the journal untouched.

Everything is real: PostgreSQL 18 with pgvector (tests/pg_server.py), MiniLM, the journal."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from dialogmem import ConfigError, InputError, Memory, MemoryRecord, StoreError
from dialogmem._changes import ChangeSet, MemoryWrite
from dialogmem._config import Config
from dialogmem._journal import IndexState
from dialogmem._store import PgIndex
from dialogmem._types import Event


def _opts(tmp_path: Path, url: str, schema: str) -> dict[str, Any]:
    return {"data_dir": tmp_path / "s", "journal": {"url": url, "schema_name": schema},
            "store": {"backend": "postgres"}}


def _rows(url: str, schema: str, sql: str) -> list[tuple]:
    with psycopg.connect(url, options=f"-c search_path={schema},public") as conn:
        return conn.execute(sql).fetchall()


def test_the_postgres_index_needs_a_postgres_journal(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"journal\.url"):
        Config.load(data_dir=tmp_path, store={"backend": "postgres"})
    with pytest.raises(ConfigError, match=r"journal\.url"):
        Memory(data_dir=tmp_path, store={"backend": "postgres"})


def test_a_store_on_postgres_alone_writes_journal_and_index_together(tmp_path: Path, pgvector_url: str,
                                                                     pgvector_schema: str) -> None:
    opts = _opts(tmp_path, pgvector_url, pgvector_schema)
    with Memory(**opts) as mem:
        assert isinstance(mem._parts.index, PgIndex)
        mem.add([{"role": "user", "content": "I moved to Lisbon last spring and I work as a nurse."}], "alice")
        mem.add([{"role": "user", "content": "My sister Ana plays the cello."}], "bob")
        hits = mem.search("Where does she live?", "alice").hits
        assert hits and "Lisbon" in hits[0].memory
        assert all("cello" not in h.memory for h in mem.search("cello", "alice").hits)  # bob's stays bob's
        journal = mem._parts.journal
        # nothing waits in the outbox: the index rows were written in the journal's transaction
        assert journal.count_index_state(IndexState.UPSERT) == 0
        assert journal.count_index_state(IndexState.SYNCED) == journal.count_memories()
        first = mem.get_all("alice")[0]
        mem.update(first.id, "I moved to Porto last spring.", "alice")
        assert "Porto" in mem.search("Which city?", "alice").hits[0].memory
        assert journal.count_index_state(IndexState.UPSERT) == 0
        mem.delete(first.id, "alice")
        assert journal.count_index_state(IndexState.REMOVE) == 0
    assert not (tmp_path / "s" / "index").exists()  # no local index: nothing but PostgreSQL holds the store
    held = _rows(pgvector_url, pgvector_schema, "SELECT user_id, count(*) FROM ix_points GROUP BY user_id")
    with Memory(**opts) as mem:  # a second open finds the same rows; the counts agree
        counts = {u: len(mem.get_all(u)) for u in ("alice", "bob")}
        assert dict(held) == {u: n for u, n in counts.items() if n} and counts["bob"] == 1
        mem.forget_user("bob")
        assert mem.get_all("bob") == [] and mem.search("cello", "bob").hits == []
    assert _rows(pgvector_url, pgvector_schema, "SELECT count(*) FROM ix_points WHERE user_id = 'bob'") == [(0,)]
    assert _rows(pgvector_url, pgvector_schema, "SELECT count(*) FROM ix_terms WHERE user_id = 'bob'") == [(0,)]


def test_a_change_the_index_refuses_leaves_the_journal_untouched(tmp_path: Path, pgvector_url: str,
                                                                 pgvector_schema: str) -> None:
    with Memory(**_opts(tmp_path, pgvector_url, pgvector_schema)) as mem:
        good = MemoryRecord(id=str(uuid.uuid4()), user_id="u1", memory="the garden has three apple trees",
                            time_stamp="", float_time_stamp=1.0, weekday="", created_at=1.0, updated_at=1.0)
        bad = good.model_copy(update={"id": str(uuid.uuid4()), "memory": "a memory with a zero vector"})
        cs = ChangeSet("u1", writes=[MemoryWrite(record=good, event=Event.ADD, actor="test"),
                                     MemoryWrite(record=bad, event=Event.ADD, actor="test",
                                                 vector=np.zeros(384, dtype=np.float32))])
        with pytest.raises(InputError, match="non-zero"):
            mem._parts.writer.apply(cs)
        # the journal's rows and the index's rolled back together: neither memory exists anywhere
        assert mem._parts.journal.count_memories("u1") == 0
        assert mem._parts.index.count("u1") == 0
        mem._parts.writer.apply(ChangeSet("u1", writes=[MemoryWrite(record=good, event=Event.ADD, actor="test")]))
        assert mem._parts.journal.count_memories("u1") == 1 and mem._parts.index.count("u1") == 1
        assert mem._parts.journal.count_index_state(IndexState.SYNCED) == 1


def test_an_embedded_store_moves_to_postgres_by_export_and_import(tmp_path: Path, pgvector_url: str,
                                                                  pgvector_schema: str) -> None:
    """The migration deploy/README.md describes: ``dialogmem export --all --vectors`` from the embedded
    store, ``dialogmem import`` into the PostgreSQL one; counts and vectors arrive as they were."""
    with Memory(data_dir=tmp_path / "embedded") as old:
        old.add([{"role": "user", "content": "I moved to Lisbon last spring and I work as a nurse."}], "alice")
        old.add([{"role": "user", "content": "My sister Ana plays the cello in an orchestra."}], "bob")
        old.flush()
        report = old.export(tmp_path / "all.jsonl", all_users=True, vectors=True)
        before = {u: {m.id: old._parts.journal.vectors(u, [m.id])[m.id] for m in old.get_all(u)}
                  for u in ("alice", "bob")}
        stats = old.stats()["counts"]
    with Memory(**_opts(tmp_path, pgvector_url, pgvector_schema)) as new:
        imported = new.import_(tmp_path / "all.jsonl")
        assert imported.embedded == 0  # the file's vectors were used, none computed again
        assert imported.memories == report.memories == sum(len(v) for v in before.values())
        assert new.stats()["counts"]["memories"] == stats["memories"]
        assert new.stats()["counts"]["turns"] == stats["turns"]
        for user, vectors in before.items():
            assert new._parts.index.count(user) == len(vectors)  # the index holds every imported memory
            for memory_id, vector in vectors.items():
                np.testing.assert_array_equal(new._parts.journal.vectors(user, [memory_id])[memory_id], vector)
        assert "Lisbon" in new.search("Where does she live?", "alice").hits[0].memory
        assert new._parts.journal.count_index_state(IndexState.UPSERT) == 0


def test_dialogmem_migrate_moves_a_store_and_checks_the_counts(tmp_path: Path, pgvector_url: str,
                                                               pgvector_schema: str) -> None:
    """``dialogmem migrate --to postgresql://...``: the embedded store read only, everything arrives with
    its vectors, the counts of both sides checked. Run again, it adds nothing (rows held are kept) and the
    counts still agree; a schema holding more of these users' rows than the store sent fails the check."""
    from typer.testing import CliRunner

    from dialogmem.cli import app

    with Memory(data_dir=tmp_path / "embedded") as old:
        old.add([{"role": "user", "content": "I moved to Lisbon last spring and I work as a nurse."}], "alice")
        old.add([{"role": "user", "content": "My sister Ana plays the cello in an orchestra."}], "bob")
        old.flush()
        doomed = old.get_all("bob")[0]
        old.delete(doomed.id, "bob")
        kept = {u: sorted(m.id for m in old.get_all(u)) for u in ("alice", "bob")}
    args = ["migrate", "--to", pgvector_url, "--schema", pgvector_schema, "--data-dir", str(tmp_path / "embedded")]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "moved 2 users" in res.output and "(0 embedded again)" in res.output
    with Memory(**_opts(tmp_path, pgvector_url, pgvector_schema)) as new:
        assert {u: sorted(m.id for m in new.get_all(u)) for u in ("alice", "bob")} == kept
        assert new.history(doomed.id, "bob")[-1].event.value == "DELETE"  # a deleted memory's history came too
        assert "Lisbon" in new.search("Where does she live?", "alice").hits[0].memory
    with Memory(data_dir=tmp_path / "embedded", read_only=True) as again:  # the source was only read
        assert {u: sorted(m.id for m in again.get_all(u)) for u in ("alice", "bob")} == kept
    res = CliRunner().invoke(app, args)  # the schema holds them already: rows kept, counts still equal
    assert res.exit_code == 0, res.output
    with Memory(**_opts(tmp_path, pgvector_url, pgvector_schema)) as new:
        new.add([{"role": "user", "content": "I also keep bees on the roof."}], "alice", flush=True)
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 1 and "counts differ" in res.output, res.output
    res = CliRunner().invoke(app, ["migrate", "--to", "mysql://nope", "--data-dir", str(tmp_path / "embedded")])
    assert res.exit_code == 1 and "journal.url" in res.output


def test_vectors_stay_in_their_rows(tmp_path: Path, pgvector_url: str, pgvector_schema: str) -> None:
    """A 1.5 KB vector (float32; 0.8 KB as halfvec) and a ~0.7 KB record passed PostgreSQL's 2 KB row
    limit; left to the default the vector went out of line (TOAST) and ranking one user's 10^4 points
    read ~60k buffers. The vector column is stored in the row, uncompressed, as halfvec (8 bytes of
    header, 2 a value; the record is what gets compressed), and search still finds it."""
    with Memory(**_opts(tmp_path, pgvector_url, pgvector_schema)) as mem:
        mem.add([{"role": "user", "content": "I moved to Lisbon last spring and I work as a nurse. " * 12}], "alice",
                flush=True)
        assert "Lisbon" in mem.search("Where does she live?", "alice").hits[0].memory
    assert _rows(pgvector_url, pgvector_schema, "SELECT attstorage FROM pg_attribute WHERE attrelid = "
                 "'ix_points'::regclass AND attname = 'dense'") == [("p",)]
    assert _rows(pgvector_url, pgvector_schema, "SELECT count(*) FROM ix_points "
                 "WHERE pg_column_compression(dense) IS NOT NULL OR pg_column_size(dense) <> 8 + 2 * 384") == [(0,)]


def test_a_read_only_store_reads_the_live_postgres_index(tmp_path: Path, pgvector_url: str,
                                                         pgvector_schema: str) -> None:
    """A read-only process on a PostgreSQL store searches the shared index itself: a memory another
    process commits after the read-only one opened is found at once (the per-user copies of an
    embedded store would have been snapshots taken at the first search), and no write gets through."""
    opts = _opts(tmp_path, pgvector_url, pgvector_schema)
    with Memory(**opts) as writer:
        writer.add([{"role": "user", "content": "I moved to Lisbon last spring."}], "alice", flush=True)
        with Memory(**{**opts, "data_dir": tmp_path / "reader"}, read_only=True) as reader:
            assert "Lisbon" in reader.search("Where does she live?", "alice").hits[0].memory
            writer.add([{"role": "user", "content": "My sister Ines adopted a grey parrot called Pixel."}],
                       "alice", flush=True)
            hits = reader.search("What pet did her sister get?", "alice").hits
            assert hits and "Pixel" in hits[0].memory
            assert reader.search("Where does she live?", "bob").hits == []
            with pytest.raises(StoreError, match="read-only"):
                reader.add([{"role": "user", "content": "I like tea."}], "alice", flush=True)
            with pytest.raises(StoreError, match="read-only"):
                reader.delete(hits[0].id, "alice")
        assert len(writer.get_all("alice")) == 2  # the refused delete removed nothing


def test_a_read_only_store_needs_the_postgres_index_to_exist(tmp_path: Path, pgvector_url: str,
                                                             pgvector_schema: str) -> None:
    """Read-only opening creates nothing: a schema whose journal exists but whose index tables do not
    is refused with a clear error, and still has no index tables afterwards."""
    opts = _opts(tmp_path, pgvector_url, pgvector_schema)
    with Memory(**{**opts, "store": {"backend": "edge"}}) as mem:  # the journal alone, an embedded index
        mem.add([{"role": "user", "content": "I moved to Lisbon last spring."}], "alice", flush=True)
    with pytest.raises(StoreError, match="no postgres index"):
        Memory(**opts, read_only=True)
    assert _rows(pgvector_url, pgvector_schema, "SELECT to_regclass('ix_points') IS NULL") == [(True,)]


def test_a_repair_beside_another_node_writes_no_deleted_memory_back(tmp_path: Path, pgvector_url: str,
                                                                     pgvector_schema: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """`dialogmem repair` on a PostgreSQL index refills it from the journal while other nodes keep
    writing. A refill that read a memory before another node deleted it used to write it back after
    (the delete found nothing to remove in the emptied index): a stale point, found by search. The
    rebuild now holds the index's tables against writers until it commits; the delete waits for it
    and then removes the point from the rebuilt index."""
    import threading

    import dialogmem._sync._writer as writer_mod

    opts = _opts(tmp_path, pgvector_url, pgvector_schema)
    with Memory(**opts) as mem:
        mem.add([{"role": "user", "content": "I keep a red kayak at the lake house."},
                 {"role": "user", "content": "My sister Ines adopted a grey parrot called Pixel."}],
                "alice", flush=True)
        doomed = next(m for m in mem.get_all("alice") if "kayak" in m.memory)
    filling, resume = threading.Event(), threading.Event()
    real_fill_batch = writer_mod._fill_batch

    def paused_fill_batch(index: Any, batch: list, outcomes: Any) -> int:
        if batch:  # the journal's rows are read: pause before they reach the index
            filling.set()
            resume.wait(30)
        return real_fill_batch(index, batch, outcomes)

    monkeypatch.setattr(writer_mod, "_fill_batch", paused_fill_batch)
    errors: list[BaseException] = []

    def run(fn: Any) -> threading.Thread:
        def guarded() -> None:
            try:
                fn()
            except BaseException as exc:  # reported by the asserting thread
                errors.append(exc)
        thread = threading.Thread(target=guarded)
        thread.start()
        return thread

    with Memory(**{**opts, "data_dir": tmp_path / "node2"}) as node2:
        repair = run(lambda: Memory.repair(Config(**{**opts, "data_dir": tmp_path / "node1"})))
        assert filling.wait(60), errors
        delete = run(lambda: node2.delete(doomed.id, "alice"))
        delete.join(3)
        assert delete.is_alive(), "the delete went through beside the refill instead of waiting for it"
        resume.set()
        repair.join(60)
        delete.join(60)
        assert not errors and not repair.is_alive() and not delete.is_alive(), errors
        assert doomed.id not in {h.id for h in node2.search("Where is the kayak kept?", "alice").hits}
    assert _rows(pgvector_url, pgvector_schema, f"SELECT count(*) FROM ix_points WHERE id = '{doomed.id}'") == [(0,)]
    assert _rows(pgvector_url, pgvector_schema, "SELECT count(*) FROM ix_points WHERE user_id = 'alice'") == [(1,)]
