"""A memory's bytes on disk (issue 45, item 5): Edge keeps its float originals in float16, a point's
payload packs the record without its defaults, and a new journal packs rows into 8 KB pages. Stores
written before keep their formats and open as they were."""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import qdrant_edge as q

from dialogmem._errors import StoreError
from dialogmem._journal import SQLiteJournal
from dialogmem._journal._sqlite import PAGE_SIZE
from dialogmem._store import EdgeIndex, IndexFilter, IndexPoint
from dialogmem._store._payload import DENSE, RECORD_FIELD, SPARSE, from_payload, half_precision, to_payload
from dialogmem._types import MemoryRecord

DIM = 32


def _record(user: str, text: str, **fields: object) -> MemoryRecord:
    base: dict[str, object] = dict(id=str(uuid.uuid4()), user_id=user, memory=text, time_stamp="2024-05-01T10:00:00",
                                   float_time_stamp=1_714_557_600.0, weekday="Wed", created_at=1_714_557_600.0,
                                   updated_at=1_714_557_600.0)
    return MemoryRecord(**(base | fields))  # type: ignore[arg-type]


def _units(n: int, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_memory_record_defaults_are_pinned_because_payloads_leave_them_out() -> None:
    """A point's packed record omits the fields that hold their default; reading fills in today's.
    Changing a default changes every point written before: this list says so."""
    defaults = {n: f.get_default(call_default_factory=True) for n, f in MemoryRecord.model_fields.items()
                if not f.is_required()}
    assert defaults == {
        "agent_id": None, "session_id": None, "tier": "mtm", "level": "L1", "original_memory": "",
        "compressed_memory": "", "topic_id": None, "topic_summary": "", "category": "", "subcategory": "",
        "memory_class": "fact", "speaker_id": None, "speaker_name": "", "entities": [], "keywords": [],
        "salience": 0.5, "source_turn_ids": [], "update_queue": [], "access_count": 0, "last_accessed": None,
        "confidence": 1.0, "version": 1, "metadata": {}, "valid_from": None, "invalid_at": None,
        "superseded_by": None}


def test_a_payload_packs_the_record_without_its_defaults_and_reads_back_equal() -> None:
    plain = _record("u1", "Alice adopted a kitten named Miso")
    payload = to_payload(plain)
    packed = payload[RECORD_FIELD]
    assert len(packed) < 0.6 * len(plain.model_dump_json())
    assert "entities" not in json.loads(packed) and "salience" not in json.loads(packed)
    assert from_payload(payload) == plain
    # not a default, empty or not: written as it is
    odd = _record("u1", "x", salience=0.9, tier="ltm", keywords=["kitten"], speaker_name="", valid_from="",
                  metadata={"k": [1, None]}, topic_id=0)
    fields = json.loads(to_payload(odd)[RECORD_FIELD])
    assert fields["salience"] == 0.9 and fields["tier"] == "ltm" and fields["valid_from"] == ""
    assert fields["topic_id"] == 0 and fields["keywords"] == ["kitten"]
    assert from_payload(to_payload(odd)) == odd
    # a payload written before (the whole record) reads as it did
    assert from_payload({"user_id": "u1", RECORD_FIELD: plain.model_dump_json()}) == plain


def test_half_precision_keeps_a_vectors_direction_in_float16_values() -> None:
    v = _units(50)
    for row in v:
        h = half_precision(row)
        assert h.dtype == np.float32 and np.array_equal(h, h.astype(np.float16).astype(np.float32))
        assert float(h @ row) / float(np.linalg.norm(h)) > 0.99999
        assert np.array_equal(half_precision(h), h)  # a unit half vector is a fixed point
    assert np.array_equal(half_precision(3.0 * v[0]), half_precision(v[0]))  # scale does not matter
    assert not np.any(half_precision(np.zeros(DIM)))  # left for dense_list to refuse
    assert np.all(np.isfinite(half_precision(np.full(DIM, 1e30, np.float32))))  # no overflow


def _vector_bytes(path: Path) -> int:
    """Bytes the dense vectors' chunks occupy (Edge preallocates a chunk file sparsely: 32 MiB apparent)."""
    return sum(f.stat().st_blocks * 512 for f in path.glob("segments/*/vector_storage-dense/vectors/chunk_*.mmap"))


def test_a_new_edge_index_keeps_float16_originals_and_returns_what_it_was_given(tmp_path: Path) -> None:
    idx = EdgeIndex(tmp_path / "index", dim=DIM)
    vecs = np.stack([half_precision(v) for v in _units(20)])
    recs = [_record("u1", f"memory {i}") for i in range(20)]
    try:
        idx.upsert([IndexPoint(record=r, vector=v) for r, v in zip(recs, vecs, strict=True)])
        saved = json.loads((tmp_path / "index" / "edge_config.json").read_text())["vectors"][DENSE]
        assert saved["datatype"] == "float16"
        for rec, got in idx.retrieve([r.id for r in recs], "u1", with_vectors=True):
            assert got is not None and np.array_equal(got, vecs[[r.id for r in recs].index(rec.id)])
        hit = idx.dense_search("u1", vecs[3], limit=1)[0]
        assert hit.record.id == recs[3].id and hit.score == pytest.approx(1.0, abs=1e-3)
    finally:
        idx.close()
    again = EdgeIndex(tmp_path / "index", dim=DIM)  # reopened with the type it was made with
    try:
        assert again.count("u1") == 20
    finally:
        again.close()


def test_an_edge_index_made_with_float32_originals_opens_and_stays_so(tmp_path: Path) -> None:
    """A shard created before this release (no datatype in its config: float32) is loaded with its
    own type: loading asks Edge to check it, and a float16 config would refuse the shard."""
    path = tmp_path / "index"
    path.mkdir()
    old = q.EdgeShard.create(str(path), q.EdgeConfig(
        vectors={DENSE: q.EdgeVectorParams(size=DIM, distance=q.Distance.Cosine, memory=q.Memory.Cold)},
        sparse_vectors={SPARSE: q.EdgeSparseVectorParams(modifier=q.Modifier.Idf)}))
    rec, vec = _record("u1", "written before"), _units(1, seed=4)[0]
    old.update(q.UpdateOperation.upsert_points([q.Point(rec.id, {DENSE: vec.tolist()}, to_payload(rec))]))
    old.flush()
    old.close()
    idx = EdgeIndex(path, dim=DIM)
    try:
        [(got, got_vec)] = idx.retrieve([rec.id], "u1", with_vectors=True)
        assert got == rec and np.allclose(got_vec, vec, atol=1e-6)
        new = _record("u1", "written after")
        idx.upsert([IndexPoint(record=new, vector=_units(1, seed=5)[0])])
        assert idx.count("u1") == 2
    finally:
        idx.close()
    assert json.loads((path / "edge_config.json").read_text())["vectors"][DENSE].get("datatype") in (None, "float32")


def test_float16_originals_take_half_the_bytes(tmp_path: Path) -> None:
    n = 2000
    vecs, recs = _units(n, seed=7), [_record("u1", f"m{i}") for i in range(n)]
    new = EdgeIndex(tmp_path / "new", dim=DIM)
    try:
        new.upsert([IndexPoint(record=r, vector=v) for r, v in zip(recs, vecs, strict=True)])
        new.flush()
    finally:
        new.close()
    assert n * DIM * 2 <= _vector_bytes(tmp_path / "new") < 1.2 * n * DIM * 2  # float32 would be n * DIM * 4


def test_a_new_journal_packs_rows_into_8_kb_pages_and_an_old_one_keeps_its_own(tmp_path: Path) -> None:
    j = SQLiteJournal(tmp_path / "new.sqlite3")
    j.close()
    with sqlite3.connect(tmp_path / "new.sqlite3") as db:
        assert db.execute("PRAGMA page_size").fetchone()[0] == PAGE_SIZE == 8192
    old_path = tmp_path / "old.sqlite3"
    with sqlite3.connect(old_path) as db:  # a journal made before: 4 KB pages, WAL, some table
        db.execute("PRAGMA page_size=4096")
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE keep_me (x INTEGER)")
        db.execute("INSERT INTO keep_me VALUES (7)")
    j = SQLiteJournal(old_path)
    j.close()
    with sqlite3.connect(old_path) as db:
        assert db.execute("PRAGMA page_size").fetchone()[0] == 4096
        assert db.execute("SELECT x FROM keep_me").fetchall() == [(7,)]


def test_a_journal_row_keeps_the_record_without_its_defaults(make_memory: Any, tmp_path: Path) -> None:
    mem = make_memory()
    mem.add([{"name": "Ann", "content": "I moved to Lisbon in May to teach piano."}], "u", session_id="s")
    [before] = mem.get_all("u")
    with sqlite3.connect(tmp_path / "store" / "journal.sqlite3") as db:
        [(raw,)] = db.execute("SELECT payload FROM memories").fetchall()
    fields = json.loads(raw)
    assert "update_queue" not in fields and "confidence" not in fields and "access_count" not in fields
    assert fields["memory"] == before.memory and "session_id" not in fields  # a column of its own
    assert len(raw) < len(before.model_dump_json()) - 200
    mem.close()
    again = make_memory()  # the same store, reopened: the record reads back whole
    [after] = again.get_all("u")
    assert after == before


def test_a_float16_index_builds_its_graph_at_the_point_count_float32_did(tmp_path: Path) -> None:
    """Edge counts its indexing threshold in KB of stored vectors, which float16 halves: the shard is
    given half the KB, so a graph is built for as many points as before (here 100 KB of float32
    vectors: 800 points of 32 dimensions; 1,000 points of float16 are only 62.5 KB)."""
    idx = EdgeIndex(tmp_path / "index", dim=DIM, indexing_threshold_kb=100)
    try:
        idx.upsert([IndexPoint(record=_record("u1", f"m{i}"), vector=v) for i, v in enumerate(_units(1000))])
        idx.optimize()
        assert idx.info().indexed_vectors_count >= 1000  # the dense graph (BM25 counts as indexed too)
        assert idx.unindexed() == 0
    finally:
        idx.close()


def test_a_stores_index_points_keep_no_record_and_searches_read_it_from_the_journal(make_memory: Any) -> None:
    """Item 5 of issue 45: an Edge point carries the fields filters read, not a second copy of its record
    (~370 B a memory); a search reads its hits' records from the journal in one batched read."""
    mem = make_memory()
    mem.add([{"name": "Ann", "content": "I moved to Lisbon in May to teach piano."},
             {"name": "Bo", "content": "Lisbon! Do you still play the cello too?"}], "u", session_id="s")
    records = {r.id: r for r in mem.get_all("u")}
    index = mem._parts.index
    assert isinstance(index, EdgeIndex)
    fetched = index._fetch(sorted(records), False)
    assert {pid for pid, _, _ in fetched} == set(records)
    for _, payload, _ in fetched:
        assert payload is not None and RECORD_FIELD not in payload and "memory" not in payload
        assert payload["user_id"] == "u" and payload["session_id"] == "s"
    hits = mem.search("Where did Ann move to teach piano?", "u", limit=2).hits
    assert hits and all(h.memory == records[h.id].memory for h in hits)
    assert {r.id for r, _ in index.retrieve(sorted(records), "u")} == set(records)
    assert index.retrieve(sorted(records), "someone-else") == []  # scoped like a missing id
    gone = next(iter(records))
    mem.delete(gone, "u")
    assert gone not in {r.id for r, _ in index.retrieve(sorted(records), "u")}


def test_index_records_keeps_a_copy_in_each_point(make_memory: Any) -> None:
    mem = make_memory(store={"index_records": True})
    mem.add([{"name": "Ann", "content": "I moved to Lisbon in May to teach piano."}], "u", session_id="s")
    [record] = mem.get_all("u")
    [(_, payload, _)] = mem._parts.index._fetch([record.id], False)
    assert payload is not None and from_payload(payload) == record


def test_points_written_with_their_records_still_read_beside_lean_ones(tmp_path: Path) -> None:
    """A store written before (its points hold their records, packed or spread over fields) opens and
    reads; new points go without; a record source is asked only for the points that need it."""
    spread, packed, lean = (_record("u", t) for t in ("spread fields kitten", "packed kitten", "lean kitten"))
    vectors = _units(3)
    old = EdgeIndex(tmp_path / "index", dim=DIM)  # no record source: every point keeps its record
    old.upsert([IndexPoint(record=packed, vector=vectors[1])])
    old._upsert([(spread.id, half_precision(vectors[0]).tolist(), old._bm25.document(spread),
                  spread.model_dump(mode="json"))])  # the layout before packing
    old.close()
    asked: list[list[str]] = []

    def journal(user_id: str, ids: Any) -> dict[str, MemoryRecord]:
        asked.append(list(ids))
        return {lean.id: lean} if user_id == "u" and lean.id in ids else {}

    idx = EdgeIndex(tmp_path / "index", dim=DIM, records=journal)
    idx.upsert([IndexPoint(record=lean, vector=vectors[2])])
    [(_, payload, _)] = idx._fetch([lean.id], False)
    assert payload is not None and RECORD_FIELD not in payload
    want = {r.id: r for r in (spread, packed, lean)}
    for hits in (idx.hybrid_search("u", vectors[2], "kitten", limit=3),
                 idx.hybrid_search("u", vectors[2], "kitten", limit=3, dense_weight=0.5),
                 idx.dense_search("u", vectors[0], limit=3)):
        assert {h.record.id: h.record for h in hits} == want
    assert asked and all(a == [lean.id] for a in asked)  # one batched read, for the lean point only
    assert {r.id: r for r, _ in idx.retrieve(list(want), "u")} == want
    assert {r.id for r in idx.scroll("u")[0]} == set(want)
    assert idx.retrieve(list(want), "v") == [] and idx.dense_search("v", vectors[0], limit=3) == []
    assert idx.points_without_records() == 1
    # the record source holds a lean point's record: only the fields filters read can be set here
    with pytest.raises(StoreError, match="only its filter fields"):
        idx.set_payload(lean.id, "u", {"memory": "something else"})
    assert idx.set_payload(lean.id, "u", {"speaker_name": "Zoe"})
    assert [h.record.id for h in idx.dense_search("u", vectors[2], limit=3, flt=IndexFilter(speakers=["Zoe"]))] \
        == [lean.id]
    assert idx.set_payload(packed.id, "u", {"memory": "packed kitten, renamed"})  # it keeps its own copy
    assert idx.retrieve([packed.id], "u")[0][0].memory == "packed kitten, renamed"
    idx.close()
    blind = EdgeIndex(tmp_path / "index", dim=DIM)  # opened without the journal: says so, never guesses
    with pytest.raises(StoreError, match="without their memory records"):
        blind.dense_search("u", vectors[2], limit=3)
    blind.close()


def test_a_journal_row_leaves_out_what_its_columns_hold_and_an_older_row_reads_the_same(
        make_memory: Any, tmp_path: Path) -> None:
    """The id, user, tier, session, speaker, time and version are columns of a memory row: its payload
    leaves them out (~100 B a row) and reading puts them back; a row written before (them in both)
    reads the same."""
    mem = make_memory()
    mem.add([{"name": "Ann", "content": "I moved to Lisbon in May to teach piano."}], "u", session_id="s")
    [before] = mem.get_all("u")
    mem.close()
    with sqlite3.connect(tmp_path / "store" / "journal.sqlite3") as db:
        [(raw,)] = db.execute("SELECT payload FROM memories").fetchall()
        fields = json.loads(raw)
        for name in ("id", "user_id", "session_id", "speaker_name", "float_time_stamp"):
            assert name not in fields
        assert fields["memory"] == before.memory
        again = make_memory()
        assert again.get_all("u") == [before]
        again.close()
        # as the release before wrote it: every field that is not a default, in the payload too
        old = before.model_dump_json(exclude_defaults=True, exclude={"access_count", "last_accessed"})
        db.execute("UPDATE memories SET payload = ?", (old,))
    third = make_memory()
    assert third.get_all("u") == [before]
    assert third.search("Where did Ann move?", "u", limit=1).hits[0].id == before.id


def test_a_journal_row_keeps_a_repeated_field_once_and_reads_it_back(make_memory: Any, tmp_path: Path) -> None:
    """A rule memory's compressed text is its original text, its ``updated_at`` its ``created_at`` and its
    ``valid_from`` its time stamp until something changes them: the payload keeps each once (~a third
    of a rule memory's payload) and reading gives the same record; where they differ both are kept, and
    an empty compressed text stays empty."""
    mem = make_memory()
    mem.add([{"name": "Ann", "content": "I moved to Lisbon in May to teach piano at the conservatory."}], "u")
    [before] = mem.get_all("u")
    assert before.compressed_memory == before.original_memory != ""
    assert before.updated_at == before.created_at and before.valid_from == before.time_stamp
    path = tmp_path / "store" / "journal.sqlite3"
    with sqlite3.connect(path) as db:
        [(raw,)] = db.execute("SELECT payload FROM memories").fetchall()
    fields = json.loads(raw)
    assert fields["compressed_memory"] is True and fields["original_memory"] == before.original_memory
    assert "updated_at" not in fields and "valid_from" not in fields
    assert mem.get_all("u") == [before]
    changed = before.model_copy(update={"compressed_memory": "Ann moved to Lisbon", "updated_at": before.created_at + 5,
                                        "valid_from": "2024-05-01T00:00:00"})
    emptied = before.model_copy(update={"id": str(uuid.uuid4()), "compressed_memory": ""})
    mem.close()
    j = SQLiteJournal(path)
    from dialogmem._changes import ChangeSet, MemoryWrite
    from dialogmem._types import Event
    j.commit(ChangeSet("u", writes=[MemoryWrite(record=changed, event=Event.UPDATE, actor="t", old=before),
                                    MemoryWrite(record=emptied, event=Event.ADD, actor="t")]), {})
    assert j.memory("u", before.id) == changed and j.memory("u", emptied.id) == emptied
    with sqlite3.connect(path) as db:
        raws = [json.loads(r) for (r,) in db.execute("SELECT payload FROM memories ORDER BY id")]
    for fields in raws:
        assert fields.get("compressed_memory") in ("Ann moved to Lisbon", None)
    j.close()
