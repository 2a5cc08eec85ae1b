"""The shared LTM graph's nodes in the vector index (seed 000 §10: node texts searchable as
``tier="ltm"`` points), so the ``ltm`` search route costs one index query, not a scan of every node.

The points live under the reserved scope ``LTM_SCOPE``, which no user id can name; the journal stays
the source of truth. After each graph commit the change writer applies the nodes the delta touched
(a live node with an embedding is upserted, any other is deleted), flushes the index, and records
the graph generation the index now reflects (meta ``ltm_indexed``). A crash between the commit and
that mark leaves the mark behind the journal's ``ltm_generation``; opening the store then re-syncs
every node. A rebuilt index is filled the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from .._graph import GraphNode
from .._journal import GraphRows
from .._store import LTM_SCOPE, IndexPoint, VectorIndex
from .._types import MemoryRecord

log = logging.getLogger(__name__)

_BATCH = 500


def node_point(node: GraphNode, vector: np.ndarray) -> IndexPoint:
    """A node as an index point: its text is what dense and BM25 search see."""
    record = MemoryRecord(id=node.id, user_id=LTM_SCOPE, tier="ltm", memory=node.text, memory_class=node.type,
                          confidence=node.confidence, time_stamp="", float_time_stamp=node.created_at, weekday="",
                          created_at=node.created_at, updated_at=node.updated_at)
    return IndexPoint(record=record, vector=np.asarray(vector, dtype=np.float32))


def fill_graph(journal: GraphRows, index: VectorIndex, ids: Sequence[str] | None = None) -> tuple[int, int]:
    """Upsert the live nodes (all, or those of ``ids``) and delete the rest of ``ids`` — or, with
    ``ids=None``, every indexed node that is no longer live. Returns (upserted, deleted)."""
    nodes, matrix = journal.graph_node_vectors(ids)
    live = {n.id for n in nodes}
    for start in range(0, len(nodes), _BATCH):
        index.upsert([node_point(n, v) for n, v in zip(nodes[start:start + _BATCH], matrix[start:start + _BATCH],
                                                        strict=True)])
    stale = sorted(set(ids) - live) if ids is not None else [i for i in _indexed_ids(index) if i not in live]
    if stale:
        index.delete(stale, LTM_SCOPE)
    return len(nodes), len(stale)


def sync_graph_index(journal: GraphRows, index: VectorIndex, touched: Sequence[str] | None = None, *,
                     force: bool = False) -> bool:
    """Bring the index's node points up to the journal's graph generation: only the ``touched``
    nodes when the index was one generation behind (the commit that touched them), every node
    otherwise (or with ``force``). Returns whether anything was synced."""
    generation = journal.graph_generation()
    indexed = int(journal.meta("ltm_indexed") or 0)
    if indexed == generation and not force:
        return False
    full = force or touched is None or indexed != generation - 1
    upserted, deleted = fill_graph(journal, index, None if full else touched)
    index.flush()
    journal.set_meta("ltm_indexed", str(generation))
    if full:
        log.info("synced the LTM graph into the index: %d nodes, %d removed (generation %d)",
                 upserted, deleted, generation)
    return True


def indexed_memories(index: VectorIndex) -> int:
    """Points of every user's memories (the index also holds the graph's nodes)."""
    return index.count_all() - index.count(LTM_SCOPE)


def _indexed_ids(index: VectorIndex) -> list[str]:
    ids: list[str] = []
    offset: str | None = None
    while True:
        page, offset = index.scroll(LTM_SCOPE, limit=_BATCH, offset=offset)
        ids += [r.id for r in page]
        if offset is None:
            return ids
