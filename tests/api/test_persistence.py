"""Durability: everything survives close and reopen in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from conftest import ingest_sample
from dialogmem import Memory
from seams import index_vectors, mark_unprocessed

DUMP = r"""
import json, sys
from dialogmem import Memory
from seams import index_vectors
with Memory(data_dir=sys.argv[1]) as mem:
    recs = mem.get_all("alice", limit=10000)
    vecs = index_vectors(mem, [r.id for r in recs], "alice").items()
    out = {
        "records": [r.model_dump(mode="json") for r in recs],
        "vectors": {rid: [float(x) for x in vec] for rid, vec in vecs},
        "history": {r.id: [h.model_dump(mode="json") for h in mem.history(r.id, "alice")] for r in recs},
        "turns": mem.stats("alice")["counts"]["turns"],
        "hits": [h.source_turn_ids for h in mem.search("Maya's dog name", "alice", limit=3).hits],
        "usage": mem.stats()["embedding"],
    }
print(json.dumps(out))
"""


def _dump_in_new_process(data_dir: Path) -> dict[str, Any]:
    tests = str(Path(__file__).resolve().parents[1])  # the child imports the seams too
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", DUMP, str(data_dir)], capture_output=True, text=True,
                          timeout=300, check=False, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_reopen_in_new_process_keeps_everything(tmp_path: Path, sample_data: dict[str, Any]) -> None:
    data_dir = tmp_path / "store"
    with Memory(data_dir=data_dir) as mem:
        ingest_sample(mem, sample_data, "alice")
        first = mem.get_all("alice", limit=1)[0]
        mem.update(first.id, "Maya's dog Biscuit is a beagle mix.", "alice")
        records = {r.id: r.model_dump(mode="json") for r in mem.get_all("alice", limit=10000)}
        vectors = index_vectors(mem, records, "alice")
        hits = [h.source_turn_ids for h in mem.search("Maya's dog name", "alice", limit=3).hits]

    dumped = _dump_in_new_process(data_dir)
    assert {r["id"]: r for r in dumped["records"]}.keys() == records.keys()
    for r in dumped["records"]:
        expected = records[r["id"]]
        # access statistics move with every search; everything else is identical
        for key in ("access_count", "last_accessed"):
            r.pop(key)
            expected.pop(key)
        assert r == expected
    for rid, vec in dumped["vectors"].items():
        assert np.allclose(vec, vectors[rid], atol=1e-6)
    assert [h["event"] for h in dumped["history"][first.id]] == ["ADD", "UPDATE"]
    assert dumped["turns"] == 36
    assert dumped["hits"] == hits
    assert dumped["usage"], "usage statistics were not persisted"


def test_reopening_never_deletes(tmp_path: Path) -> None:
    data_dir = tmp_path / "store"
    for i in range(3):
        with Memory(data_dir=data_dir) as mem:
            mem.add(f"Fact number {i}: the locker code is {1000 + i}.", "u", flush=True)
    with Memory(data_dir=data_dir) as mem:
        assert mem.stats("u")["counts"] == {"memories": 3,
        "evicted": 0, "turns": 3, "pending_turns": 0, "quarantined_turns": 0,
        "ltm_nodes": 0, "ltm_edges": 0, "ltm_links": 0}


def test_pending_turns_survive_close(tmp_path: Path) -> None:
    data_dir = tmp_path / "store"
    with Memory(data_dir=data_dir, write={"sensory_tokens": 100000}) as mem:
        res = mem.add([{"content": "My bike is a green Brompton.", "id": "p1"}], "u")
        assert res.pending_turns == 1 and res.memories == []
    with Memory(data_dir=data_dir, write={"sensory_tokens": 100000}) as mem:
        assert mem.stats("u")["counts"]["pending_turns"] == 1
        stored = mem.flush("u")
        assert [h.source_turn_ids for h in stored] == [["p1"]]


def test_a_replayed_turn_rewrites_the_same_memory(tmp_path: Path) -> None:
    """A turn found pending at open (whatever left it so) is processed again with the same context,
    so it rewrites the same memory instead of adding a copy."""
    data_dir = tmp_path / "store"
    with Memory(data_dir=data_dir) as mem:
        mem.add([{"content": "What's the dog's name?", "name": "Tom", "id": "c1"},
                 {"content": "His name is Biscuit.", "name": "Maya", "id": "c2"}],
                "u", session_id="s", timestamp="2023-03-04T18:00:00", flush=True)
        before = {r.id: r.memory for r in mem.get_all("u")}
        mark_unprocessed(mem, "c2")  # as if killed in between
    with Memory(data_dir=data_dir) as mem:
        mem.flush("u")
        after = {r.id: r.memory for r in mem.get_all("u")}
        assert after == before
        assert len(mem.history(next(iter(before)), "u")) == 1  # no second ADD row either


def test_rebuilding_the_index_right_after_a_write_keeps_the_store_usable(tmp_path: Path) -> None:
    """A write not yet flushed to the index, then ``rebuild_index``: the old shard is flushed before it
    is closed, the new one holds everything, and the store goes on (it used to raise "closed")."""
    with Memory(data_dir=tmp_path / "store") as mem:
        first = mem.add("My sister lives in Porto.", "ana", flush=True).memories[0].id
        report = mem.rebuild_index()
        assert report.memories_indexed == 1
        assert mem.search("where does my sister live", "ana").hits[0].id == first
        mem.add("My brother lives in Braga.", "ana", flush=True)
        assert len(mem.get_all("ana")) == 2
    with Memory(data_dir=tmp_path / "store") as again:
        assert {h.memory for h in again.search("who lives where", "ana", limit=5).hits} >= {
            m.memory for m in again.get_all("ana")}
