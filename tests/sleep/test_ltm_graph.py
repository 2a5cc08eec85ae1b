"""LTM graph decisions (sleep/_graph.py, sleep/_consolidate.py): merge, evidence, decay, revival,
forget_subject and one-hop expansion, on hand-computed cases. Defaults: initial confidence 0.5,
reinforce 0.3, decay 0.8, floor 0.2, merge cosine 0.9, anchor cosine 0.6.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from dialogmem._graph import (
    EvidenceLink,
    GraphEdge,
    GraphNode,
    GraphView,
    edge_id,
    expand_one_hop,
    node_id,
    normalise,
)
from dialogmem._sleep._consolidate import ConsolidationThresholds, consolidate, forget_memories, forget_subject
from dialogmem._sleep._units import KnowledgeUnit, UnitEdge, UnitNode

T0, T1, T2 = 1000.0, 2000.0, 3000.0


def no_similar(_text: str) -> Sequence[tuple[str, float]]:
    return []


def node(text: str, *, evidence: int = 1, confidence: float = 0.5, kind: str = "Concept",
         dropped: float | None = None) -> GraphNode:
    return GraphNode(id=node_id(text), type=kind, text=text, evidence=evidence,  # type: ignore[arg-type]
                     confidence=confidence, created_at=T0, updated_at=T0, dropped_at=dropped)


def edge(kind: str, a: str, b: str, *, evidence: int = 1, confidence: float = 0.5) -> GraphEdge:
    src, dst = (node_id(a), node_id(b))
    if kind == "RelatedTo":
        src, dst = sorted((src, dst))
    return GraphEdge(id=edge_id(kind, node_id(a), node_id(b)), type=kind, source=src, target=dst,  # type: ignore[arg-type]
                     evidence=evidence, confidence=confidence, created_at=T0, updated_at=T0)


def unit(memory: str, *texts: str, edges: Sequence[tuple[str, str, str]] = (), subject: str = "s1") -> KnowledgeUnit:
    return KnowledgeUnit(memory_id=memory, subject_key=subject,
                         nodes=[UnitNode(text=t, type="Concept") for t in texts],
                         edges=[UnitEdge(type=k, source=a, target=b) for a, k, b in edges])  # type: ignore[arg-type]


def view(*rows: GraphNode | GraphEdge, links: Sequence[EvidenceLink] = ()) -> GraphView:
    return GraphView(nodes={r.id: r for r in rows if isinstance(r, GraphNode)},
                     edges={r.id: r for r in rows if isinstance(r, GraphEdge)}, links=list(links))


def test_ids_and_normalisation() -> None:
    assert normalise("The Dogs ") == normalise("dog") == "dog"
    assert normalise("glass") == "glass" and normalise("bus") == "bus"
    assert node_id("Golden Retrievers") == node_id("golden retriever")
    a, b = node_id("x"), node_id("y")
    assert edge_id("RelatedTo", a, b) == edge_id("RelatedTo", b, a)
    assert edge_id("IsA", a, b) != edge_id("IsA", b, a)


def test_new_units_insert_nodes_edges_and_links() -> None:
    u = unit("m1", "golden retriever", "dog breed", edges=[("golden retriever", "IsA", "dog breed")])
    delta = consolidate([u], GraphView(), similar=no_similar, now=T1)
    assert sorted(n.text for n in delta.insert_nodes) == ["dog breed", "golden retriever"]
    assert all(n.evidence == 1 and n.confidence == 0.5 for n in delta.insert_nodes)
    (e,) = delta.insert_edges
    assert (e.type, e.source, e.target, e.evidence) == ("IsA", node_id("golden retriever"), node_id("dog breed"), 1)
    assert {(link.memory_id, link.target_id) for link in delta.add_links} == {
        ("m1", node_id("golden retriever")), ("m1", node_id("dog breed")), ("m1", e.id)}


def test_merge_evidence_and_confidence_arithmetic() -> None:
    old = node("dog", evidence=1, confidence=0.5)
    g = view(old, links=[EvidenceLink(subject_key="s1", memory_id="m0", target_id=old.id)])
    # two new memories of two subjects support "dogs" (same normalised text): 0.5 -> 0.65 -> 0.755
    delta = consolidate([unit("m1", "dogs"), unit("m2", "Dogs", subject="s2")], g, similar=no_similar, now=T1)
    (n,) = delta.update_nodes
    assert (n.evidence, n.confidence, n.text) == (3, pytest.approx(0.755), "dog")
    # the same memory delivered again (retrieval-reactivated) adds no evidence, but no decay either
    g2 = g.with_delta(delta)
    again = consolidate([unit("m1", "dog")], g2, similar=no_similar, now=T2)
    assert again.is_empty()


def test_similar_node_above_merge_threshold_is_merged_into() -> None:
    old = node("golden retriever")
    delta = consolidate([unit("m1", "golden retriever dog")], view(old),
                        similar=lambda _t: [(old.id, 0.93)], now=T1)
    assert delta.insert_nodes == [] and delta.merged == 1
    assert delta.update_nodes[0].id == old.id and delta.update_nodes[0].evidence == 2


def test_new_node_is_linked_to_its_anchor() -> None:
    anchor = node("dog breed")
    far = node("tax law")
    delta = consolidate([unit("m1", "beagle")], view(anchor, far),
                        similar=lambda _t: [(far.id, 0.3), (anchor.id, 0.71), ("unknown-id", 0.99)], now=T1)
    assert [n.text for n in delta.insert_nodes] == ["beagle"]
    (e,) = delta.insert_edges
    assert e.type == "RelatedTo" and {e.source, e.target} == {node_id("beagle"), anchor.id}
    # both anchor and far were not supported: they decay (0.5 * 0.8); the anchor link does not count
    assert {n.id: n.confidence for n in delta.update_nodes} == {anchor.id: 0.4, far.id: 0.4}


def test_decay_depends_on_evidence_and_drops_below_floor() -> None:
    weak = node("stamp collecting", evidence=1, confidence=0.5)
    strong = node("python", evidence=4, confidence=0.5)
    fading = node("fax machine", evidence=1, confidence=0.24)
    link = edge("RelatedTo", "fax machine", "python")
    delta = consolidate([], view(weak, strong, fading, link), similar=no_similar, now=T1)
    conf = {n.text: n.confidence for n in [*delta.update_nodes, *delta.drop_nodes]}
    assert conf == {"stamp collecting": pytest.approx(0.4),        # 0.5 * (1 - 0.2 / 1)
                    "python": pytest.approx(0.475),                # 0.5 * (1 - 0.2 / 4)
                    "fax machine": pytest.approx(0.192)}           # 0.24 * 0.8 < 0.2: dropped
    assert [n.text for n in delta.drop_nodes] == ["fax machine"]
    assert delta.drop_nodes[0].dropped_at == T1
    assert [e.id for e in delta.drop_edges] == [link.id]  # an edge of a dropped node goes too


def test_cycles_until_drop_match_the_formula() -> None:
    g = view(node("pager"))
    cycles = 0
    while g.nodes[node_id("pager")].live:
        g = g.with_delta(consolidate([], g, similar=no_similar, now=T1 + cycles))
        cycles += 1
    assert cycles == 5  # 0.5 * 0.8**k < 0.2  <=>  k > 4.1


def test_dropped_node_is_revived_by_new_support() -> None:
    gone = node("vinyl records", evidence=2, confidence=0.15, dropped=T0)
    delta = consolidate([unit("m9", "vinyl record")], view(gone), similar=no_similar, now=T1)
    (n,) = delta.update_nodes
    assert (n.live, n.evidence, n.confidence) == (True, 3, 0.5)


def test_forget_subject_weakens_shared_and_drops_exclusive_knowledge() -> None:
    shared = node("pottery class", evidence=3, confidence=0.6)
    mine = node("rescue dog", evidence=2, confidence=0.65)
    rel = edge("RelatedTo", "pottery class", "rescue dog", evidence=1, confidence=0.5)
    links = [EvidenceLink(subject_key="s1", memory_id="m1", target_id=shared.id),
             EvidenceLink(subject_key="s1", memory_id="m2", target_id=shared.id),
             EvidenceLink(subject_key="s2", memory_id="m7", target_id=shared.id),
             EvidenceLink(subject_key="s1", memory_id="m1", target_id=mine.id),
             EvidenceLink(subject_key="s1", memory_id="m3", target_id=mine.id),
             EvidenceLink(subject_key="s1", memory_id="m1", target_id=rel.id)]
    g = view(shared, mine, rel, links=links)
    delta = forget_subject("s1", links, g, now=T1)
    (s,) = delta.update_nodes
    assert (s.id, s.evidence, s.confidence) == (shared.id, 1, pytest.approx(0.2))  # 0.6 * 1/3, not < 0.2
    (m,) = delta.drop_nodes
    assert (m.id, m.evidence, m.confidence, m.dropped_at) == (mine.id, 0, 0.0, T1)
    assert [e.id for e in delta.drop_edges] == [rel.id]
    assert sorted(link.memory_id for link in delta.remove_links) == ["m1", "m1", "m1", "m2", "m3"]
    after = g.with_delta(delta)
    assert {link.subject_key for link in after.links} == {"s2"}
    assert forget_subject("s1", after.links, after, now=T2).is_empty()



def test_forget_memories_removes_one_memorys_links_only() -> None:
    shared = node("pottery class", evidence=3, confidence=0.6)
    only_m1 = node("rescue dog", evidence=1, confidence=0.65)
    rel = edge("RelatedTo", "pottery class", "rescue dog", evidence=1, confidence=0.5)
    links = [EvidenceLink(subject_key="s1", memory_id="m1", target_id=shared.id),
             EvidenceLink(subject_key="s1", memory_id="m2", target_id=shared.id),
             EvidenceLink(subject_key="s2", memory_id="m1", target_id=shared.id),  # another user's m1: kept
             EvidenceLink(subject_key="s1", memory_id="m1", target_id=only_m1.id),
             EvidenceLink(subject_key="s1", memory_id="m1", target_id=rel.id)]
    g = view(shared, only_m1, rel, links=links)
    delta = forget_memories("s1", ["m1"], links, g, now=T1)
    (s,) = delta.update_nodes
    assert (s.id, s.evidence, s.confidence) == (shared.id, 2, pytest.approx(0.4))  # 0.6 * 2/3
    (m,) = delta.drop_nodes
    assert (m.id, m.evidence, m.confidence, m.dropped_at) == (only_m1.id, 0, 0.0, T1)
    assert [e.id for e in delta.drop_edges] == [rel.id]
    assert sorted((link.subject_key, link.memory_id) for link in delta.remove_links) == [("s1", "m1")] * 3
    after = g.with_delta(delta)
    assert sorted((link.subject_key, link.memory_id) for link in after.links) == [("s1", "m2"), ("s2", "m1")]
    assert forget_memories("s1", ["m1"], after.links, after, now=T2).is_empty()


def test_expand_one_hop_follows_live_edges_both_ways() -> None:
    a, b, c, d = (node(t) for t in ("alpha", "beta", "gamma", "delta"))
    dead = node("omega", dropped=T0)
    edges = [edge("IsA", "alpha", "beta", confidence=0.9), edge("RelatedTo", "gamma", "alpha", confidence=0.4),
             edge("HasProperty", "beta", "delta"), edge("RelatedTo", "alpha", "omega", confidence=0.99)]
    nodes = {n.id: n for n in (a, b, c, d, dead)}
    assert expand_one_hop([a.id], edges, nodes=nodes) == [b.id, c.id]
    assert expand_one_hop([a.id], edges, nodes=nodes, limit=1) == [b.id]
    assert set(expand_one_hop([a.id, b.id], edges, nodes=nodes)) == {c.id, d.id}
    assert dead.id in expand_one_hop([a.id], edges)  # without the node table nothing is filtered


def test_thresholds_are_used() -> None:
    old = node("golden retriever")
    strict = ConsolidationThresholds(merge_cosine=0.95)
    delta = consolidate([unit("m1", "golden retriever dog")], view(old),
                        similar=lambda _t: [(old.id, 0.93)], now=T1, thresholds=strict)
    assert [n.text for n in delta.insert_nodes] == ["golden retriever dog"] and delta.merged == 0


def test_batch_selection_new_reactivated_and_evicted() -> None:
    from dialogmem import MemoryRecord
    from dialogmem._sleep._consolidate import select_for_consolidation

    def r(rid: str, updated: float, *, access: int = 0, last: float | None = None) -> MemoryRecord:
        return MemoryRecord(id=rid, user_id="u", memory=rid, time_stamp="2023-01-01T00:00:00",
                            float_time_stamp=updated, weekday="Sun", created_at=updated, updated_at=updated,
                            access_count=access, last_accessed=last)

    rows = [r("new", 150), r("old", 50), r("hot", 40, access=3, last=160), r("warm", 45, access=2, last=170),
            r("stale-hot", 30, access=9, last=90), r("gone", 20)]
    chosen = select_for_consolidation(rows, since=100.0, evicted_ids=["gone"])
    assert [c.id for c in chosen] == ["gone", "hot", "new"]
