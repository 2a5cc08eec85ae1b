"""LTM graph rows of the journal (schema step ``_v4_graph``): nodes, edges and evidence links.

The graph is shared by the users of a store and holds no personal identifier (consolidation
de-identifies before anything reaches it). What ties it to a user is only the evidence links, keyed
by ``subject_key`` (a keyed hash of the user id) and that user's memory id: ``forget_user`` removes
them, and a node or edge left with no evidence at all is deleted, not merely dropped.

A cycle's delta is written by :meth:`GraphSQL._apply_graph` inside the change writer's one
transaction (``ChangeSet.graph``), together with the time the cycle read its batch up to
(``meta.ltm_since``); ``meta.ltm_generation`` counts changes, so readers know when to reload.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .._changes import GraphCommit
from .._graph import EvidenceLink, GraphEdge, GraphNode, GraphView
from .._types import MemoryRecord
from ._ltmqueue import unqueue_for_ltm
from ._memories import ROW_COLUMNS, memory_row
from ._rows import ID_PART, Conn, Row, SQLRows, many, parts, set_meta

_NODE_COLS = "id, type, text, evidence, confidence, created_at, updated_at, dropped_at"
_EDGE_COLS = "id, type, source, target, evidence, confidence, created_at, updated_at, dropped_at"


class GraphSQL(SQLRows):
    """The shared LTM graph's rows and what consolidation reads to build it (the ``GraphRows`` role)."""

    # -- writes -----------------------------------------------------------------------------
    def _apply_graph(self, db: Conn, graph: GraphCommit) -> None:
        """``graph`` inside the caller's transaction."""
        delta, d = graph.delta, self.dialect
        for n in [*delta.insert_nodes, *delta.update_nodes, *delta.drop_nodes]:
            vec = graph.vectors.get(n.id)
            blob = None if vec is None else np.asarray(vec, dtype=np.float32).tobytes()
            db.execute(
                f"INSERT INTO ltm_nodes ({_NODE_COLS}, vector) VALUES ({d.marks(9)}) ON CONFLICT(id) DO UPDATE "
                "SET type=excluded.type, text=excluded.text, evidence=excluded.evidence, "
                "confidence=excluded.confidence, updated_at=excluded.updated_at, dropped_at=excluded.dropped_at, "
                "vector=COALESCE(excluded.vector, ltm_nodes.vector)",
                (n.id, n.type, n.text, n.evidence, n.confidence, n.created_at, n.updated_at, n.dropped_at, blob))
        for e in [*delta.insert_edges, *delta.update_edges, *delta.drop_edges]:
            db.execute(
                f"INSERT INTO ltm_edges ({_EDGE_COLS}) VALUES ({d.marks(9)}) ON CONFLICT(id) DO UPDATE SET "
                "evidence=excluded.evidence, confidence=excluded.confidence, updated_at=excluded.updated_at, "
                "dropped_at=excluded.dropped_at",
                (e.id, e.type, e.source, e.target, e.evidence, e.confidence, e.created_at, e.updated_at,
                 e.dropped_at))
        many(db, f"DELETE FROM ltm_links WHERE subject_key={d.mark} AND memory_id={d.mark} AND target_id={d.mark}",
             [link.key() for link in delta.remove_links])
        many(db, f"INSERT INTO ltm_links (subject_key, memory_id, target_id) VALUES ({d.marks(3)}) "
                 "ON CONFLICT DO NOTHING",
             [link.key() for link in delta.add_links])
        # knowledge nothing supports any more is deleted (a forgotten user's only trace)
        db.execute("DELETE FROM ltm_edges WHERE evidence=0 AND dropped_at IS NOT NULL "
                   "AND id NOT IN (SELECT target_id FROM ltm_links)", ())
        db.execute("DELETE FROM ltm_nodes WHERE evidence=0 AND dropped_at IS NOT NULL "
                   "AND id NOT IN (SELECT target_id FROM ltm_links)", ())
        db.execute("DELETE FROM ltm_edges WHERE source NOT IN (SELECT id FROM ltm_nodes) "
                   "OR target NOT IN (SELECT id FROM ltm_nodes)", ())
        unqueue_for_ltm(db, d, graph.done)
        if graph.since is not None:
            set_meta(db, d, "ltm_since", repr(graph.since))
        if not delta.is_empty():
            row = db.execute("SELECT value FROM meta WHERE key='ltm_generation'", ()).fetchone()
            set_meta(db, d, "ltm_generation", str(int(row[0]) + 1 if row else 1))

    def commit_graph(self, graph: GraphCommit) -> None:
        """A graph change on its own (one transaction)."""
        with self._tx() as db:
            self._apply_graph(db, graph)

    # -- reads ------------------------------------------------------------------------------
    def graph_view(self, *, with_links: bool = True) -> GraphView:
        """Every node and edge (dropped ones too) and, with ``with_links``, every evidence link."""
        nodes = {r["id"]: _node(r) for r in self._query(f"SELECT {_NODE_COLS} FROM ltm_nodes")}
        edges = {r["id"]: _edge(r) for r in self._query(f"SELECT {_EDGE_COLS} FROM ltm_edges")}
        links = self.graph_links() if with_links else []
        return GraphView(nodes=nodes, edges=edges, links=links)

    def graph_links(self, subject_key: str | None = None, *,
                    target_ids: Sequence[str] | None = None) -> list[EvidenceLink]:
        """Evidence links, of one subject and/or to some nodes or edges."""
        d = self.dialect
        sql, params = "SELECT subject_key, memory_id, target_id FROM ltm_links WHERE 1=1", []
        if subject_key is not None:
            sql, params = sql + f" AND subject_key={d.mark}", [subject_key]
        reads = [(sql, params)] if target_ids is None else [
            (sql + f" AND target_id IN ({d.marks(part)})", [*params, *part]) for part in parts(target_ids, ID_PART)]
        return [EvidenceLink(subject_key=r[0], memory_id=r[1], target_id=r[2])
                for one, args in reads for r in self._query(one, args)]

    def graph_support(self, target_ids: Sequence[str] | None = None, subject_key: str | None = None
                      ) -> dict[str, tuple[int, bool]]:
        """Per node or edge id (all linked ones, or those of ``target_ids``): (distinct subjects among
        its evidence links, whether ``subject_key`` is one of them), in one grouped query. An id
        without any link is absent."""
        d = self.dialect
        sql = (f"SELECT target_id, COUNT(DISTINCT subject_key), MAX(CASE WHEN subject_key = {d.mark} THEN 1 ELSE 0 "
               "END) FROM ltm_links")
        params: list[object] = [subject_key if subject_key is not None else ""]
        reads = [(sql, params)] if target_ids is None else [  # a part holds every link of its ids
            (sql + f" WHERE target_id IN ({d.marks(part)})", [*params, *part]) for part in parts(target_ids, ID_PART)]
        return {r[0]: (int(r[1]), bool(r[2]))
                for one, args in reads for r in self._query(one + " GROUP BY target_id", args)}

    def graph_node_vectors(self, ids: Sequence[str] | None = None) -> tuple[list[GraphNode], np.ndarray]:
        """The live nodes that have an embedding (all, or those of ``ids``), and their vectors (one
        row each), ordered by id."""
        sql = f"SELECT {_NODE_COLS}, vector FROM ltm_nodes WHERE dropped_at IS NULL AND vector IS NOT NULL"
        if ids is None:
            rows = self._query(sql + " ORDER BY id", [])
        else:
            rows = sorted((r for part in parts(ids, ID_PART)
                           for r in self._query(sql + f" AND id IN ({self.dialect.marks(part)})", part)),
                          key=lambda r: r["id"])
        if not rows:
            return [], np.zeros((0, 0), dtype=np.float32)
        return [_node(r) for r in rows], np.stack([np.frombuffer(r["vector"], dtype=np.float32) for r in rows])

    def graph_nodes(self, ids: Sequence[str]) -> list[GraphNode]:
        """The live nodes of ``ids`` (in no particular order)."""
        sql = f"SELECT {_NODE_COLS} FROM ltm_nodes WHERE dropped_at IS NULL AND id IN "
        return [_node(r) for part in parts(ids, ID_PART)
                for r in self._query(sql + f"({self.dialect.marks(part)})", part)]

    def graph_live_edges(self, touching: Sequence[str] | None = None) -> list[GraphEdge]:
        """Live edges: all, or those with an endpoint in ``touching``."""
        sql = f"SELECT {_EDGE_COLS} FROM ltm_edges WHERE dropped_at IS NULL"
        if touching is None:
            return [_edge(r) for r in self._query(sql, [])]
        found: dict[str, GraphEdge] = {}  # an edge whose two ends fall in two parts is read twice
        for part in parts(touching, ID_PART):
            marks = self.dialect.marks(part)
            for r in self._query(sql + f" AND (source IN ({marks}) OR target IN ({marks}))", [*part, *part]):
                edge = _edge(r)
                found.setdefault(edge.id, edge)
        return list(found.values())

    def graph_counts(self) -> dict[str, int]:
        def one(sql: str) -> int:
            return int(self._query(sql)[0][0])

        return {"ltm_nodes": one("SELECT COUNT(*) FROM ltm_nodes WHERE dropped_at IS NULL"),
                "ltm_edges": one("SELECT COUNT(*) FROM ltm_edges WHERE dropped_at IS NULL"),
                "ltm_links": one("SELECT COUNT(*) FROM ltm_links")}

    def graph_generation(self) -> int:
        rows = self._query("SELECT value FROM meta WHERE key='ltm_generation'")
        return int(rows[0][0]) if rows else 0

    def ltm_since(self) -> float:
        rows = self._query("SELECT value FROM meta WHERE key='ltm_since'")
        return float(rows[0][0]) if rows else 0.0

    def consolidation_candidates(self, since: float, *, min_access: int) -> list[tuple[MemoryRecord, str]]:
        """(record, status) of every active or evicted memory, of every user, committed after
        ``since`` (written, changed or evicted), retrieved ``min_access`` times with a retrieval after
        it, or marked for hand-over (``ltm_pending``: evicted, whatever the clocks say)."""
        p = self.dialect.mark
        rows = self._query(
            f"SELECT {ROW_COLUMNS} FROM memories "
            f"WHERE status IN ('active', 'evicted') AND (updated_at > {p} "
            f"OR (access_count >= {p} AND last_accessed > {p}) "
            "OR EXISTS (SELECT 1 FROM ltm_pending p WHERE p.user_id = memories.user_id AND p.memory_id = memories.id)) "
            "ORDER BY float_time_stamp, id", (since, min_access, since))
        return [(memory_row(r), r["status"]) for r in rows]

    def store_identities(self) -> tuple[list[str], list[str]]:
        """(every speaker name, every user id) of the store: what LTM must never contain."""
        speakers = [r[0] for r in self._query("SELECT DISTINCT speaker FROM speakers")]
        speakers += [r[0] for r in self._query("SELECT DISTINCT speaker_name FROM memories WHERE speaker_name != ''")]
        users = [r[0] for r in self._query("SELECT user_id FROM turns UNION SELECT user_id FROM memories")]
        return sorted(set(speakers)), sorted(set(users))


def _node(r: Row) -> GraphNode:
    return GraphNode(id=r["id"], type=r["type"], text=r["text"], evidence=r["evidence"], confidence=r["confidence"],
                     created_at=r["created_at"], updated_at=r["updated_at"], dropped_at=r["dropped_at"])


def _edge(r: Row) -> GraphEdge:
    return GraphEdge(id=r["id"], type=r["type"], source=r["source"], target=r["target"], evidence=r["evidence"],
                     confidence=r["confidence"], created_at=r["created_at"], updated_at=r["updated_at"],
                     dropped_at=r["dropped_at"])
