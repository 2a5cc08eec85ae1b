"""A memory's vector is kept once, in half precision, and the index holds exactly what the journal
can rebuild (issue 45, item 5). Rows written in float32 by earlier versions read as they were."""

from __future__ import annotations

import base64
import json
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np

from dialogmem._journal import stored_precision
from dialogmem._journal._vectors import decode, encode
from dialogmem._store import EdgeIndex
from dialogmem._sync._writer import fill_index


def _blobs(path: Path) -> list[bytes]:
    with sqlite3.connect(path) as db:
        return [r[0] for r in db.execute("SELECT vector FROM memories WHERE vector IS NOT NULL")]


def test_a_memory_vector_takes_half_the_bytes_and_reads_back_as_stored(make_memory: Any, tmp_path: Path) -> None:
    mem = make_memory()
    out = mem.add([{"name": "Ann", "content": "I moved to Lisbon in May to teach piano."}], "u", session_id="s")
    [hit] = out.memories
    blobs = _blobs(tmp_path / "store" / "journal.sqlite3")
    assert [len(b) for b in blobs] == [2 + 2 * 384]  # float32 took 1,536 bytes
    embedded = mem._parts.embedder.embed([hit.memory])[0]
    stored = mem._parts.journal.vectors("u", [hit.id])[hit.id]
    assert stored.dtype == np.float32
    assert np.array_equal(stored, stored_precision(embedded))
    assert float(stored @ embedded) / float(np.linalg.norm(stored)) > 0.99999  # cosine


def test_the_index_holds_what_a_rebuild_from_the_journal_gives(make_memory: Any, tmp_path: Path) -> None:
    mem = make_memory()
    mem.add([{"name": "Ann", "content": "I moved to Lisbon in May."}, {"name": "Bo", "content": "Why Lisbon?"},
             {"name": "Ann", "content": "The light, and a job at the conservatory."}], "u", session_id="s")
    ids = [r.id for r in mem.get_all("u")]
    live = {r.id: v for r, v in mem._parts.index.retrieve(ids, "u", with_vectors=True)}
    rebuilt_index = EdgeIndex(tmp_path / "rebuilt", dim=384)
    try:
        assert fill_index(mem._parts.journal, mem._parts.embedder, rebuilt_index, mark=False) == len(ids)
        rebuilt = {r.id: v for r, v in rebuilt_index.retrieve(ids, "u", with_vectors=True)}
    finally:
        rebuilt_index.close()
    assert set(live) == set(rebuilt) == set(ids)
    for i in ids:  # bit for bit: the same float32 points, hence the same int8 copy
        assert np.array_equal(np.asarray(live[i], np.float32), np.asarray(rebuilt[i], np.float32))


def test_an_imported_vector_reaches_the_index_as_the_journal_keeps_it(make_memory: Any, tmp_path: Path) -> None:
    source = make_memory("source")
    source.add([{"name": "Ann", "content": "I moved to Lisbon in May to teach piano."}], "u", session_id="s")
    [record] = source.get_all("u")
    export = tmp_path / "u.jsonl"
    source.export(export, "u")
    lines = export.read_text(encoding="utf-8").splitlines()
    full = np.random.default_rng(2).standard_normal(384).astype(np.float32)  # float32 from another store
    full /= np.linalg.norm(full)
    for n, text in enumerate(lines):
        line = json.loads(text)
        if line.get("kind") == "memory":
            line["vector"] = base64.b64encode(full.astype("<f4").tobytes()).decode()
            lines[n] = json.dumps(line)
    export.write_text("\n".join(lines) + "\n", encoding="utf-8")
    mem = make_memory("target")
    mem.import_(export)
    assert np.array_equal(mem._parts.journal.vectors("u", [record.id])[record.id], stored_precision(full))
    [(_, indexed)] = mem._parts.index.retrieve([record.id], "u", with_vectors=True)
    rebuilt_index = EdgeIndex(tmp_path / "rebuilt", dim=384)
    try:
        fill_index(mem._parts.journal, mem._parts.embedder, rebuilt_index, mark=False)
        [(_, rebuilt)] = rebuilt_index.retrieve([record.id], "u", with_vectors=True)
    finally:
        rebuilt_index.close()
    assert np.array_equal(np.asarray(indexed, np.float32), np.asarray(rebuilt, np.float32))  # not the file's float32


def test_float32_rows_of_an_older_store_read_as_they_were(make_memory: Any, tmp_path: Path) -> None:
    mem = make_memory()
    [hit] = mem.add([{"name": "Ann", "content": "My sister Clara plays the cello."}], "u").memories
    mem.close()
    old = np.random.default_rng(1).standard_normal(384).astype(np.float32)
    old /= np.linalg.norm(old)
    with sqlite3.connect(tmp_path / "store" / "journal.sqlite3") as db:  # as an earlier version wrote it
        db.execute("UPDATE memories SET vector=? WHERE id=?", (old.tobytes(), hit.id))
    again = make_memory()
    assert np.array_equal(again._parts.journal.vectors("u", [hit.id])[hit.id], old)
    assert again.search("Clara's cello", "u").hits[0].id == hit.id


def test_blob_formats_cannot_be_mistaken() -> None:
    rng = np.random.default_rng(0)
    for dim in (2, 4, 6, 384, 768, 1536):
        v = rng.standard_normal(dim).astype(np.float32)
        blob = encode(v)
        assert blob is not None and len(blob) == 2 + 2 * dim and len(blob) % 4 == 2
        decoded = decode(blob)
        assert decoded is not None and np.array_equal(decoded, stored_precision(v))
        assert np.array_equal(decode(v.tobytes()), v)  # a float32 blob (always 4 * dim bytes)
        assert np.array_equal(decode(memoryview(blob)), decoded)  # as PostgreSQL hands it out
    odd = rng.standard_normal(5).astype(np.float32)  # an odd dimension keeps float32
    assert encode(odd) == odd.tobytes()
    assert np.array_equal(stored_precision(odd), odd)
    assert encode(None) is None and decode(None) is None
