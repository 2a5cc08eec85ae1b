"""The embedded index's search graph (HNSW): points are searched by an exact scan until a build puts
them in the graph; ``import_`` and ``sleep`` build it when ``store.index_min_points`` of them wait."""

from __future__ import annotations

import base64
import io
import json
import uuid
from pathlib import Path

import numpy as np

from dialogmem import Memory

USER = "long-history"
COUNT = 8_000  # above the shard's indexing threshold (about 10 MB of 384-d vectors: ~6,700 points)


def export_file(path: Path, embedder: str, vectors: np.ndarray, users: tuple[str, ...] = (USER,)) -> Path:
    """A dialogmem export of ``len(vectors)`` memories, with their vectors, dealt to ``users`` in turn."""
    lines = [{"kind": "header", "format": "dialogmem-export", "version": 1, "embedder": embedder,
              "users": list(users)}]
    for i, v in enumerate(vectors):
        t = 1_600_000_000.0 + 3600.0 * i
        lines.append({"kind": "memory", "status": "active",
                      "vector": base64.b64encode(v.astype("<f4").tobytes()).decode(),
                      "record": {"id": str(uuid.UUID(int=i + 1)), "user_id": users[i % len(users)],
                                 "memory": f"note {i}: the reading list had book number {i}",
                                 "time_stamp": "", "float_time_stamp": t, "weekday": "Mon",
                                 "created_at": t, "updated_at": t}})
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    return path


def unit_vectors(n: int) -> np.ndarray:
    vectors = np.random.default_rng(7).normal(size=(n, 384)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def store_embedder(mem: Memory) -> str:
    """The identity of the embedder of ``mem``'s vectors, as its exports name it."""
    mem.add("I keep a reading list", USER)
    header = io.StringIO()
    mem.export(header, user_id=USER, vectors=True)
    return str(json.loads(header.getvalue().splitlines()[0])["embedder"])


def test_import_then_sleep_build_the_graph_once(tmp_path: Path) -> None:
    vectors = unit_vectors(COUNT)
    with Memory(data_dir=tmp_path / "a", store={"index_min_points": 0}) as plain:
        embedder = store_embedder(plain)
        path = export_file(tmp_path / "history.jsonl", embedder, vectors)
        assert plain.import_(path).indexed == 0  # building turned off: every point is scanned
        assert plain.sleep(USER).indexed == 0
    with Memory(data_dir=tmp_path / "b", store={"index_min_points": 5_000}) as mem:
        report = mem.import_(path)
        assert report.memories == COUNT and report.indexed == COUNT  # the import ends with a build
        assert mem.sleep(USER).indexed == 0  # nothing waits any more
        hits = mem.search("the reading list had book number 4321", USER, limit=5).hits
        assert hits and hits[0].memory == "note 4321: the reading list had book number 4321"
    with Memory(data_dir=tmp_path / "b", store={"index_min_points": 5_000}) as again:  # the graph was kept
        assert again.sleep(USER).indexed == 0


def test_many_short_histories_need_no_graph(tmp_path: Path) -> None:
    """Enough points wait, but no user holds enough of them: a search reads one user's slice through
    the payload index, so no graph is built."""
    with Memory(data_dir=tmp_path / "store", store={"index_min_points": 5_000}) as mem:
        path = export_file(tmp_path / "two.jsonl", store_embedder(mem), unit_vectors(7_000), users=("ann", "bo"))
        assert mem.import_(path).indexed == 0 and mem.sleep().indexed == 0
        assert mem.search("the reading list had book number 10", "ann", limit=1).hits[0].memory.startswith("note 10:")
