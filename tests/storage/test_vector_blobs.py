"""A memory's vector is kept once, as int8 components and a scale, and the index holds exactly what
the journal can rebuild (issue 45, item 5). Rows written in float32 or float16 by earlier versions
read as they were."""

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


def test_a_memory_vector_takes_a_byte_a_component_and_reads_back_as_stored(make_memory: Any, tmp_path: Path) -> None:
    mem = make_memory()
    out = mem.add([{"name": "Ann", "content": "I moved to Lisbon in May to teach piano."}], "u", session_id="s")
    [hit] = out.memories
    blobs = _blobs(tmp_path / "store" / "journal.sqlite3")
    assert [len(b) for b in blobs] == [6 + 384]  # float32 took 1,536 bytes, float16 770
    embedded = mem._parts.embedder.embed([hit.memory])[0]
    stored = mem._parts.journal.vectors("u", [hit.id])[hit.id]
    assert stored.dtype == np.float32
    assert np.array_equal(stored, stored_precision(embedded))
    assert float(stored @ embedded) / float(np.linalg.norm(stored)) > 0.9999  # cosine


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


def test_float16_rows_of_an_older_store_read_as_they_were(make_memory: Any, tmp_path: Path) -> None:
    mem = make_memory()
    [hit] = mem.add([{"name": "Ann", "content": "My sister Clara plays the cello."}], "u").memories
    half = mem._parts.embedder.embed([hit.memory])[0].astype(np.float16)
    mem.close()
    with sqlite3.connect(tmp_path / "store" / "journal.sqlite3") as db:  # the previous version's format
        db.execute("UPDATE memories SET vector=? WHERE id=?", (b"h2" + half.astype("<f2").tobytes(), hit.id))
    again = make_memory()
    assert np.array_equal(again._parts.journal.vectors("u", [hit.id])[hit.id], half.astype(np.float32))
    assert again.search("Clara's cello", "u").hits[0].id == hit.id


def test_blob_formats_cannot_be_mistaken() -> None:
    rng = np.random.default_rng(0)
    for dim in (1, 2, 3, 4, 5, 6, 7, 384, 768, 1536):
        v = rng.standard_normal(dim).astype(np.float32)
        blob = encode(v)
        assert blob is not None and len(blob) in range(6 + dim, 10 + dim) and len(blob) % 4 == 2
        decoded = decode(blob)
        assert decoded is not None and decoded.shape == (dim,) and np.array_equal(decoded, stored_precision(v))
        assert float(decoded @ v) / float(np.linalg.norm(decoded) * np.linalg.norm(v)) > 0.9999
        assert np.array_equal(decode(v.tobytes()), v)  # a float32 blob (always 4 * dim bytes)
        if dim % 2 == 0:  # a float16 blob (the previous version wrote one for an even dim)
            half = v.astype("<f2")
            assert np.array_equal(decode(b"h2" + half.tobytes()), half.astype(np.float32))
        assert np.array_equal(decode(memoryview(blob)), decoded)  # as PostgreSQL hands it out
    assert encode(None) is None and decode(None) is None


def test_rounding_a_stored_vector_again_keeps_it_bit_for_bit() -> None:
    """A vector read from the journal and written again (an update keeping it, a re-import) must
    reach the index with the values a rebuild gives: the scale keeps 12 bits, so q * scale is exact."""
    rng = np.random.default_rng(3)
    for _ in range(500):
        v = rng.standard_normal(384).astype(np.float32) * rng.uniform(1e-3, 1e3)
        once = stored_precision(v)
        assert np.array_equal(stored_precision(once), once)
        assert encode(once) == encode(v)
    assert np.array_equal(stored_precision(np.zeros(8, np.float32)), np.zeros(8, np.float32))
    matrix = rng.standard_normal((3, 384)).astype(np.float32)  # rows rounded each with its own scale
    assert all(np.array_equal(stored_precision(matrix)[i], stored_precision(matrix[i])) for i in range(3))


def test_a_batch_is_rounded_together_and_each_blob_is_its_vectors_own() -> None:
    """``encode_all`` (a change set's or an import's vectors in one rounding) gives each vector the blob
    ``encode`` gives it alone, whatever else is in the batch: None, another dimension, a zero vector, a
    tiny one; and the rows of ``stored_precision`` of a matrix are each row's own rounding."""
    from dialogmem._journal._vectors import encode_all

    rng = np.random.default_rng(5)
    batch = [rng.normal(size=384).astype(np.float32), None, np.zeros(384, np.float32),
             rng.normal(size=7).astype(np.float32), (rng.normal(size=384) * 1e-40).astype(np.float32),
             rng.normal(size=384).astype(np.float32) * 1e6]
    assert encode_all(batch) == [encode(v) for v in batch]
    matrix = np.stack([v for v in batch if v is not None and v.size == 384])
    assert np.array_equal(stored_precision(matrix), np.stack([stored_precision(row) for row in matrix]))
    assert all(np.array_equal(decode(encode(row)), stored_precision(row)) for row in matrix)
