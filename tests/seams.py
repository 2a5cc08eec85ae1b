"""The internal seams of the behaviour tests, gathered in one module.

Behaviour tests (tests/api, tests/server) drive dialogmem the way a user does: ``from dialogmem import
...``, the ``dialogmem`` command through typer's CliRunner, the servers over HTTP. A few of them must
also reach below that surface, and take what they need from here and nowhere else. Each seam exists
for one of four reasons, named in its docstring:

- **look**: read what the public verbs do not show (the journal's raw rows beneath a view, the index's
  points, the SQL a call runs), to check that a verb did what its result claims;
- **fault**: inject a fault the public API cannot cause (a disk without room, an extractor that
  crashes, a graph commit that fails halfway, a clock far ahead, a crash between journal and index);
- **serve**: build the app that ``dialogmem serve`` / ``dialogmem mcp --http`` run, to serve it
  in-process on a free port;
- **data**: the sample conversation shipped with the package, split as a live chat would send it.

Fault seams patch through ``pytest.MonkeyPatch``, so pytest undoes them after the test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from dialogmem import Memory, MemoryRecord, SearchHit, ServerSettings
from dialogmem._changes import GraphCommit
from dialogmem._graph import GraphDelta, GraphView
from dialogmem._journal import Journal
from dialogmem._journal import SQLiteJournal as SQLiteJournal
from dialogmem._journal._graph import GraphSQL
from dialogmem._store import LTM_SCOPE, _room
from dialogmem._store import EdgeIndex as EdgeIndex
from dialogmem._store._room import GROWTH_STEP as GROWTH_STEP
from dialogmem._store._room import MIB as MIB
from dialogmem._store._room import NEW_SHARD as NEW_SHARD
from dialogmem._store._room import DiskRoom as DiskRoom
from dialogmem._store._room import hole_bytes as hole_bytes
from dialogmem._sync._ltmindex import indexed_memories as _indexed_memories
from dialogmem._transfer._conversation import SessionBatch
from dialogmem._transfer._conversation import parse_conversation as _parse_conversation
from dialogmem._transfer._conversation import sample_path as _sample_path
from dialogmem._write._extract import RuleExtractor

# -- data ---------------------------------------------------------------------------------------


def sample_path() -> Path:
    """data: the sample conversation shipped with the package (the one ``dialogmem demo`` loads)."""
    return _sample_path()


def parse_conversation(data: Any) -> list[SessionBatch]:
    """data: a conversation (LoCoMo or a message list) as the session batches ``dialogmem add`` reads,
    so that a test can feed it turn by turn as a live chat would."""
    return _parse_conversation(data)


# -- look: the journal (the source of truth) -----------------------------------------------------


def journal(mem: Memory) -> Journal:
    """look: the open store's journal, to read rows the public verbs hide (turns kept after a drop or a
    refusal, the count of records the index refused). Tests only read through it."""
    return mem._parts.journal


def journal_turn_count(mem: Memory, user_id: str) -> int:
    """look: how many raw turns of the user the journal holds (whatever their status)."""
    return len(mem._parts.journal.turns(user_id))


def journal_turns(mem: Memory, user_id: str) -> list[Any]:
    """look: the user's raw turns as the journal holds them (whatever their status)."""
    return list(mem._parts.journal.turns(user_id))


def trace_sql(mem: Memory, callback: Callable[[str], object]) -> None:
    """look: every SQL statement the SQLite journal runs from now on goes to ``callback`` (to count
    transactions, or to check that searches write nothing)."""
    mem._parts.journal._db.set_trace_callback(callback)  # type: ignore[attr-defined]


def integrity_check(mem: Memory) -> str:
    """look: SQLite's own ``PRAGMA integrity_check`` of the journal ("ok" when sound)."""
    return str(mem._parts.journal._query("PRAGMA integrity_check")[0][0])  # type: ignore[attr-defined]


def _write_stage_entries(mem: Memory) -> list[tuple[str, str]]:
    """(user id, text) of every entry the write stages keep between calls: compressed turns, and
    the parts' vectors (keyed ``user \\x1f text``)."""
    stages = mem._parts.stages
    entries = [(user, text) for (user, _, text) in stages._cache]
    if stages.parts is not None:
        entries += [(user, text) for user, text in (key.split("\x1f", 1) for key in stages.parts._cache._rows)]
    return entries


def remembered_texts(mem: Memory) -> set[str]:
    """look: every text kept in memory between calls: the write stages' (compressed turns, parts'
    vectors) and the embedder's query cache."""
    return {text for _, text in _write_stage_entries(mem)} | set(mem._parts.embedder.query_cache._rows)


def remembered_users(mem: Memory) -> set[str]:
    """look: the user ids kept in memory between calls by the write path (its per-user locks, the
    write stages' cache and their turn-part vectors)."""
    return set(mem._parts.ingest._locks) | {user for user, _ in _write_stage_entries(mem)}


def stored_vectors(mem: Memory, user_id: str, ids: list[str]) -> dict[str, Any]:
    """look: the embedding the journal keeps for each memory id (to import records with their vectors)."""
    return dict(mem._parts.journal.vectors(user_id, ids))


def embed_texts(mem: Memory, texts: list[str]) -> Any:
    """look: ``texts`` through the store's own embedder (its memories' graph), one row each."""
    return mem._parts.embedder.embed(texts)


def graph_view(mem: Memory, *, with_links: bool = True) -> GraphView:
    """look: the LTM graph as the journal holds it, live and dropped rows, whoever supports them
    (``graph()`` and ``graph_audit()`` show live, visible rows only)."""
    return mem._parts.journal.graph_view(with_links=with_links)


def graph_links(mem: Memory, user_id: str) -> list[Any]:
    """look: the evidence links from this user's memories to graph rows (``stats`` counts them only)."""
    return list(mem._parts.journal.graph_links(mem._parts.consolidator.subject_key(user_id)))


def ltm_queued(mem: Memory) -> list[tuple[str, str]]:
    """look: the memories evicted from MTM and waiting to be handed to LTM consolidation."""
    return list(mem._parts.journal.ltm_queued())


# -- look: the vector index (a copy of the journal) ----------------------------------------------


def indexed_memories(mem: Memory) -> int:
    """look: how many memory points the index holds (every user; graph nodes not counted)."""
    return _indexed_memories(mem._parts.index)


def index_point_count(mem: Memory) -> int:
    """look: every point the index holds, all users' memories and the graph's nodes together."""
    return mem._parts.index.count_all()


def index_count(mem: Memory, user_id: str) -> int:
    """look: how many points the index holds in one user's scope."""
    return mem._parts.index.count(user_id)


def user_points(mem: Memory, user_id: str) -> list[MemoryRecord]:
    """look: the index's points in one user's scope (up to 1000)."""
    return list(mem._parts.index.scroll(user_id, limit=1000)[0])


def index_vectors(mem: Memory, ids: Iterable[str], user_id: str) -> dict[str, Any]:
    """look: the vectors the index holds for these memory ids of one user."""
    return {rec.id: vec for rec, vec in mem._parts.index.retrieve(list(ids), user_id, with_vectors=True)}


def indexed_graph_nodes(mem: Memory) -> dict[str, str]:
    """look: the graph-node points of the index (node id -> text); every one must be ``tier="ltm"``."""
    records, _ = mem._parts.index.scroll(LTM_SCOPE, limit=1000)
    assert all(r.tier == "ltm" for r in records)
    return {r.id: r.memory for r in records}


def graph_route_hits(mem: Memory, user_id: str, query: str) -> list[SearchHit]:
    """look: the LTM graph route's hits for one user on their own, with no MTM hit beside them that
    ``search`` would let make one redundant."""
    parts = mem._parts
    return parts.search.graph.search([query], 4, min_score=mem.config.sleep.ltm_min_score,
                                     subject_key=parts.consolidator.subject_key(user_id),
                                     memories=lambda _ids: [])


# -- fault: crashes, clocks, failing stages -----------------------------------------------------


def checkpoint_every(mem: Memory, changes: int) -> None:
    """fault: the change writer flushes the index and marks the journal synced every ``changes``
    changes (default 2000), so that a crash test meets checkpoints inside its run, not only at close.
    The write points a crash test kills a process at are methods of ``SQLiteJournal`` (``commit``,
    ``mark_index``) and ``EdgeIndex`` (``upsert``, ``flush``), exported here for that."""
    mem._parts.writer.sync_every = changes


def mark_unprocessed(mem: Memory, turn_id: str) -> None:
    """fault: a journaled turn looks unprocessed again, as after a kill between writing its memories
    and marking the turn done."""
    mem._parts.journal._db.execute("UPDATE turns SET processed=0 WHERE id=?", (turn_id,))  # type: ignore[attr-defined]


def set_ltm_since(mem: Memory, value: float) -> None:
    """fault: the time of the last consolidation cycle, as a clock far ahead would have written it."""
    with mem._parts.journal._tx() as db:  # type: ignore[attr-defined]
        db.execute("INSERT INTO meta (key, value) VALUES ('ltm_since', ?) "
                   "ON CONFLICT(key) DO UPDATE SET value=excluded.value", (repr(float(value)),))


def desync_graph_index(mem: Memory, lost: list[str], dropped: str) -> None:
    """fault: a crash after a graph commit, before the index caught up: the index lost the points of
    the ``lost`` nodes, the journal drops the node ``dropped`` without telling the index, and the
    synced mark is written behind the journal's generation."""
    parts = mem._parts
    parts.index.delete(lost, LTM_SCOPE)
    node = parts.journal.graph_view(with_links=False).nodes[dropped]
    parts.journal.commit_graph(GraphCommit(delta=GraphDelta(drop_nodes=[node.model_copy(update={"dropped_at": 1.0})])))
    parts.writer.checkpoint()


def crash_extractor_on(monkeypatch: pytest.MonkeyPatch, word: str) -> Callable[[], None]:
    """fault: the rule extractor raises (an extractor bug) on any batch with a turn that says ``word``;
    returns the fix (the original extractor again)."""
    original = RuleExtractor.extract

    def extract(self: RuleExtractor, batch: Any, *, previous: Any = ()) -> Any:
        if any(word in t.text for seg in batch for t in seg):
            raise RuntimeError("extractor bug")
        return original(self, batch, previous=previous)

    monkeypatch.setattr(RuleExtractor, "extract", extract)
    return lambda: monkeypatch.setattr(RuleExtractor, "extract", original)


def poison_row(mem: Memory, memory_id: str, payload: dict[str, Any], last_accessed: float | None) -> None:
    """fault: write a memory row's payload fields and access column straight into the SQLite journal,
    as an older dialogmem that let NaN and Infinity in could have (no verb can any more)."""
    import json
    import sqlite3

    db = sqlite3.connect(mem._parts.journal.path)  # type: ignore[attr-defined]
    try:
        (raw,) = db.execute("SELECT payload FROM memories WHERE id=?", (memory_id,)).fetchone()
        db.execute("UPDATE memories SET payload=?, last_accessed=? WHERE id=?",
                   (json.dumps({**json.loads(raw), **payload}), last_accessed, memory_id))
        db.commit()
    finally:
        db.close()


def fail_graph_commit_halfway(monkeypatch: pytest.MonkeyPatch, error: Exception) -> Callable[[], None]:
    """fault: the journal writes every row of a graph commit inside its transaction, then ``error`` is
    raised before the commit; returns the fix."""
    original = GraphSQL._apply_graph

    def half_then_fail(self: GraphSQL, db: Any, graph: Any) -> None:
        original(self, db, graph)
        raise error

    monkeypatch.setattr(GraphSQL, "_apply_graph", half_then_fail)
    return lambda: monkeypatch.setattr(GraphSQL, "_apply_graph", original)


def forbid_graph_node_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    """fault: reading every graph node's vector from the journal fails loudly (the search route must
    use the index instead)."""
    def no_scan(self: GraphSQL, ids: Any = None) -> Any:
        raise AssertionError("graph_node_vectors called on the read path")

    monkeypatch.setattr(GraphSQL, "graph_node_vectors", no_scan)


#: fault: the disk's real free space, as the index's room check measures it
real_free_bytes: Callable[[Path], int] = _room.free_bytes


def free_bytes(path: Path) -> int:
    """fault: the free space the index's room check sees now (faked or real)."""
    return _room.free_bytes(path)


def fake_free_space(monkeypatch: pytest.MonkeyPatch, free: Callable[[Path], int]) -> None:
    """fault: the index's room check sees ``free(path)`` bytes free (a full disk without filling one;
    ``DiskRoom``, ``hole_bytes``, ``GROWTH_STEP``, ``NEW_SHARD`` and ``MIB``, exported here, are the
    check's own arithmetic)."""
    monkeypatch.setattr(_room, "free_bytes", free)


# -- serve --------------------------------------------------------------------------------------


def create_app(mem: Memory, settings: ServerSettings | None = None, *, auth: bool = True) -> Any:
    """serve: the REST app ``dialogmem serve`` runs over ``mem``."""
    from dialogmem._server import create_app as make

    return make(mem, settings, auth=auth)


def uvicorn_options(settings: ServerSettings) -> dict[str, Any]:
    """serve: the uvicorn options ``dialogmem serve`` derives from ``server.*`` (timeouts, limits)."""
    from dialogmem._server._limits import uvicorn_options as options

    return dict(options(settings))


def mcp_http_app(mem: Memory, settings: ServerSettings, *, default_user: str | None, host: str) -> Any:
    """serve: the MCP app (streamable HTTP) ``dialogmem mcp --http`` runs over ``mem``."""
    from dialogmem._server._mcp import mcp_http_app as make

    return make(mem, settings, default_user=default_user, host=host)


def export_schema() -> dict[str, Any]:
    """look: the JSON Schema of an export line, generated from the line models."""
    from dialogmem._transfer._portable import json_schema

    return json_schema()


def export_schema_text() -> str:
    """look: that schema as the text committed in docs/export-schema.json."""
    from dialogmem._transfer._portable import schema_text

    return schema_text()
