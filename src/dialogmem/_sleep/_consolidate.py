"""One consolidation cycle over the LTM graph, decided without I/O (seed 000 §3.6, Algorithm 3 lines
8-15), and the removal of one subject's evidence.

``consolidate(units, graph, similar=..., now=..., thresholds=...) -> GraphDelta``:

1. *Resolve* each unit node: the live or dropped node with the same normalised text (same id), else
   the best live node of the same type that ``similar(text)`` returns with cosine
   ``>= merge_cosine`` and whose every word the unit's text holds (``says_all``) — a merge — else a
   new node (``confidence = initial``, ``evidence = 0``).
2. *Support*: every (node or edge, memory) pair not linked before adds one evidence link and
   ``evidence += 1``, and raises confidence ``c <- c + (1 - c) * reinforce``. A memory supports a
   node once, however many cycles re-deliver it (a retrieval-reactivated item refreshes its nodes —
   they count as supported this cycle — without inflating their evidence). A dropped node that gets
   support again is revived with ``confidence = initial``.
3. *Link in the neighbourhood*: a new node gets one ``RelatedTo`` edge to its best anchor (the top
   live hit of ``similar`` with ``anchor_cosine <= cosine < merge_cosine``), supported by the unit's
   memory. The unit's own edges connect the resolved nodes.
4. *Decay*: every live node and edge not supported in this cycle loses confidence
   ``c <- c * (1 - (1 - decay) / max(1, evidence))`` — weakly supported knowledge fades fastest, a
   node with evidence 4 decays four times slower than one with evidence 1. Below ``floor`` it is
   soft-dropped (``dropped_at = now``), and so is every edge touching a dropped node.

One cycle should cover every user of the store (``Memory.sleep()`` without a user): decay counts
cycles, so per-user cycles would make shared knowledge fade with the number of users.

``forget_subject(subject_key, links, graph, ...)`` removes the subject's links; for every node or edge
it supported, ``evidence' = evidence - removed`` and ``confidence' = confidence * evidence' / evidence``
(0 when nothing else supports it); below ``floor`` it is soft-dropped, edges of dropped nodes too.
``forget_memories`` does the same for the links of some of one subject's memories (``Memory.delete``).

Confidences are rounded to 9 decimals, so that a value computed to sit exactly at ``floor`` stays.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from .._graph import (
    EdgeType,
    EvidenceLink,
    GraphDelta,
    GraphEdge,
    GraphNode,
    GraphView,
    NodeType,
    edge_ends,
    edge_id,
    node_id,
    normalise,
)
from .._types import MemoryRecord
from ._units import KnowledgeUnit, UnitNode

Similar = Callable[[str], Sequence[tuple[str, float]]]
_Row = TypeVar("_Row", GraphNode, GraphEdge)
_WORDS = re.compile(r"\w+")


class ConsolidationThresholds(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    merge_cosine: float = Field(0.9, gt=0, le=1)
    anchor_cosine: float = Field(0.6, ge=0, le=1)
    initial_confidence: float = Field(0.5, gt=0, le=1)
    reinforce: float = Field(0.3, ge=0, le=1)
    decay: float = Field(0.8, gt=0, le=1)
    floor: float = Field(0.2, ge=0, lt=1)


class _Cycle:
    """Working state of one cycle: current rows, what changed, links known and added."""

    def __init__(self, graph: GraphView, now: float, th: ConsolidationThresholds) -> None:
        self.th = th
        self.now = now
        self.nodes = dict(graph.nodes)
        self.edges = dict(graph.edges)
        self.links = {link.key() for link in graph.links}
        self.new_ids: set[str] = set()
        self.touched: set[str] = set()  # supported this cycle
        self.add_links: list[EvidenceLink] = []
        self.merged = 0

    def support(self, target_id: str, unit: KnowledgeUnit) -> None:
        self.touched.add(target_id)
        link = EvidenceLink(subject_key=unit.subject_key, memory_id=unit.memory_id, target_id=target_id)
        if link.key() in self.links:
            return
        self.links.add(link.key())
        self.add_links.append(link)
        row = self.nodes.get(target_id) or self.edges[target_id]
        revive = row.dropped_at is not None
        conf = self.th.initial_confidence if revive else row.confidence + (1 - row.confidence) * self.th.reinforce
        if target_id in self.new_ids and row.evidence == 0:
            conf = row.confidence  # the first evidence of a new row is what created it
        updated = row.model_copy(update={"evidence": row.evidence + 1, "confidence": round(conf, 9),
                                         "updated_at": self.now, "dropped_at": None})
        if target_id in self.nodes:
            self.nodes[target_id] = updated  # type: ignore[assignment]
        else:
            self.edges[target_id] = updated  # type: ignore[assignment]

    def node_for(self, node: UnitNode, similar: Similar) -> tuple[str, str | None]:
        """(node id, anchor id for a new node) for a unit node."""
        nid = node_id(node.text)
        if nid in self.nodes:
            return nid, None
        hits = [(h, c) for h, c in similar(node.text) if h in self.nodes and self.nodes[h].live]
        hits.sort(key=lambda hc: (-hc[1], hc[0]))
        for h, c in hits:
            old = self.nodes[h]
            if c >= self.th.merge_cosine and old.type == node.type and says_all(node.text, old.text):
                self.merged += 1
                return h, None
        self.nodes[nid] = GraphNode(id=nid, type=node.type, text=node.text, evidence=0,
                                    confidence=self.th.initial_confidence, created_at=self.now,
                                    updated_at=self.now)
        self.new_ids.add(nid)
        anchor = next((h for h, c in hits if self.th.anchor_cosine <= c < self.th.merge_cosine), None)
        return nid, anchor

    def edge_for(self, edge_type: EdgeType, a: str, b: str) -> str:
        eid = edge_id(edge_type, a, b)
        if eid not in self.edges:
            src, dst = edge_ends(edge_type, a, b)
            self.edges[eid] = GraphEdge(id=eid, type=edge_type, source=src, target=dst,
                                        evidence=0, confidence=self.th.initial_confidence,
                                        created_at=self.now, updated_at=self.now)
            self.new_ids.add(eid)
        return eid


def consolidate(batch_units: Sequence[KnowledgeUnit], graph_view: GraphView, *, similar: Similar,
                now: float, thresholds: ConsolidationThresholds | None = None) -> GraphDelta:
    """The delta of one cycle (see the module docstring). ``similar(text)`` returns
    ``[(node_id, cosine)]`` against the live nodes' embeddings; unknown ids are ignored."""
    cycle = _Cycle(graph_view, now, thresholds or ConsolidationThresholds())
    for unit in sorted(batch_units, key=lambda u: (u.subject_key, u.memory_id)):
        _apply_unit(cycle, unit, similar)
    _decay(cycle)
    delta = _delta(graph_view, cycle.nodes, cycle.edges)
    delta.add_links = cycle.add_links
    delta.merged = cycle.merged
    return delta


def says_all(unit_text: str, node_text: str) -> bool:
    """Whether every word of ``node_text`` is a word of ``unit_text`` (plural "-s" aside): only then
    may a unit support an existing node by similarity. A memory never lends its support to words it
    did not say, so a node's supporters all said its text (k-anonymity of the shared graph,
    ``_visibility``, counts them)."""
    return _word_set(node_text) <= _word_set(unit_text)


def _word_set(text: str) -> set[str]:
    return {normalise(w) for w in _WORDS.findall(text.lower())}


def _apply_unit(cycle: _Cycle, unit: KnowledgeUnit, similar: Similar) -> None:
    resolved: dict[str, str] = {}
    for node in unit.nodes:
        nid, anchor = cycle.node_for(node, similar)
        resolved[node.text] = nid
        cycle.support(nid, unit)
        if anchor is not None:
            cycle.support(cycle.edge_for("RelatedTo", nid, anchor), unit)
    for edge in unit.edges:
        a, b = resolved.get(edge.source), resolved.get(edge.target)
        if a is not None and b is not None and a != b:
            cycle.support(cycle.edge_for(edge.type, a, b), unit)


def _decay(cycle: _Cycle) -> None:
    _decay_table(cycle, cycle.nodes)
    _decay_table(cycle, cycle.edges)
    _drop_dangling(cycle.nodes, cycle.edges, cycle.now)


def _decay_table(cycle: _Cycle, table: dict[str, _Row]) -> None:
    th = cycle.th
    for rid, row in list(table.items()):
        if not row.live or rid in cycle.touched:
            continue
        conf = round(row.confidence * (1 - (1 - th.decay) / max(1, row.evidence)), 9)
        table[rid] = row.model_copy(update={
            "confidence": conf, "updated_at": cycle.now,
            "dropped_at": cycle.now if conf < th.floor else None})


def _drop_dangling(nodes: dict[str, GraphNode], edges: dict[str, GraphEdge], now: float) -> None:
    for eid, e in list(edges.items()):
        if e.live and not (nodes.get(e.source) and nodes[e.source].live and nodes.get(e.target)
                           and nodes[e.target].live):
            edges[eid] = e.model_copy(update={"dropped_at": now, "updated_at": now})


def _delta(before: GraphView, nodes: dict[str, GraphNode], edges: dict[str, GraphEdge]) -> GraphDelta:
    delta = GraphDelta()
    for rid, row in nodes.items():
        _place(rid, row, before.nodes.get(rid), delta.insert_nodes, delta.update_nodes, delta.drop_nodes)
    for rid, erow in edges.items():
        _place(rid, erow, before.edges.get(rid), delta.insert_edges, delta.update_edges, delta.drop_edges)
    return delta


def _place(rid: str, row: GraphNode | GraphEdge, old: GraphNode | GraphEdge | None, inserts: list[Any],
           updates: list[Any], drops: list[Any]) -> None:
    if old is None:
        if row.live:
            inserts.append(row)  # a row created and dropped in the same cycle never existed
    elif row != old:
        (drops if not row.live and old.live else updates).append(row)


def forget_subject(subject_key: str, links: Iterable[EvidenceLink], graph: GraphView, *, now: float,
                   floor: float = ConsolidationThresholds().floor) -> GraphDelta:
    """Remove ``subject_key``'s evidence links and weaken what they supported (module docstring)."""
    return remove_links(lambda link: link.subject_key == subject_key, links, graph, now=now, floor=floor)


def forget_memories(subject_key: str, memory_ids: Iterable[str], links: Iterable[EvidenceLink], graph: GraphView, *,
                    now: float, floor: float = ConsolidationThresholds().floor) -> GraphDelta:
    """Remove the evidence links of some of one subject's memories (a deleted MTM item), with the
    arithmetic of ``forget_subject``: what rested only on them loses all its evidence."""
    ids = set(memory_ids)
    return remove_links(lambda link: link.subject_key == subject_key and link.memory_id in ids, links, graph,
                        now=now, floor=floor)


def remove_links(gone: Callable[[EvidenceLink], bool], links: Iterable[EvidenceLink], graph: GraphView, *,
                 now: float, floor: float) -> GraphDelta:
    """Remove the links ``gone`` selects; every node or edge they supported keeps
    ``evidence - removed`` (0 when no other link supports it) and its confidence in proportion."""
    all_links = list(links)
    mine = [link for link in all_links if gone(link)]
    removed: dict[str, int] = {}
    for link in mine:
        removed[link.target_id] = removed.get(link.target_id, 0) + 1
    others = {link.target_id for link in all_links if not gone(link)}
    nodes, edges = dict(graph.nodes), dict(graph.edges)
    for target, count in sorted(removed.items()):
        if target in nodes:
            nodes[target] = _weaken(nodes[target], count, target in others, now=now, floor=floor)
        elif target in edges:
            edges[target] = _weaken(edges[target], count, target in others, now=now, floor=floor)
    _drop_dangling(nodes, edges, now)
    delta = _delta(graph, nodes, edges)
    delta.remove_links = mine
    return delta


def _weaken(row: _Row, count: int, supported: bool, *, now: float, floor: float) -> _Row:
    """``row`` after losing ``count`` links (all of them unless other links still ``supported`` it)."""
    evidence = max(0, row.evidence - count) if supported else 0
    conf = round(row.confidence * evidence / row.evidence, 9) if row.evidence else 0.0
    dropped = row.dropped_at if row.dropped_at is not None else (now if conf < floor else None)
    return row.model_copy(update={"evidence": evidence, "confidence": conf,
                                  "updated_at": now, "dropped_at": dropped})


def node_type_of(text: str) -> NodeType:
    """Capitalised text names a thing (Entity); lower-case text a class or property (Concept)."""
    return "Entity" if text[:1].isupper() else "Concept"


def select_for_consolidation(records: Iterable[MemoryRecord], *, since: float, evicted_ids: Iterable[str] = (),
                             min_access: int = 3) -> list[MemoryRecord]:
    """The incremental batch of one cycle (seed 000 Algorithm 3, line 4), oldest first: items written
    or changed after ``since`` (the previous cycle's wall-clock time), items retrieved at least
    ``min_access`` times with a retrieval after ``since`` (reactivated), and evicted items."""
    evicted = set(evicted_ids)
    chosen = [r for r in records
              if r.updated_at > since or r.id in evicted
              or (r.access_count >= min_access and r.last_accessed is not None and r.last_accessed > since)]
    return sorted(chosen, key=lambda r: (r.float_time_stamp, r.id))
