"""Issue 27's rules without I/O: the sensitive-value filter (``_sleep._sensitive``), the visibility
rule (``_sleep._visibility``) and the merge rule of consolidation (``_sleep._consolidate``). Moved from
tests/api/test_graph_privacy.py, which checks the same rules through ``Memory``, REST and MCP."""

from __future__ import annotations

import pytest

from dialogmem import GraphEdge, GraphNode
from dialogmem._graph import GraphView, node_id
from dialogmem._sleep._consolidate import consolidate
from dialogmem._sleep._sensitive import drop_sensitive_sentences, sensitive_reason
from dialogmem._sleep._units import KnowledgeUnit, UnitNode
from dialogmem._sleep._visibility import Support, Visibility

T0 = 1_700_000_000.0

# -- the sensitive-value filter ---------------------------------------------------------------

SENSITIVE = [
    ("My bank PIN is 4711.", "credential"), ("My password for the bank is hunter2zebra.", "credential"),
    ("the api key", "credential"), ("social security", "credential"), ("hunter2zebra", "id_number"),
    ("078-05-1120", "id_number"), ("4111 1111 1111 1111", "id_number"), ("X4829173", "id_number"),
    ("diabetes type 2", "health"), ("I was diagnosed last March.", "health"), ("eating disorder", "health"),
    ("$184,500 a year", "amount"), ("23,750 euros", "amount"), ("USD 40", "amount"),
]
HARMLESS = ["The Louvre is a museum in Paris.", "I was born in 1990.", "We met on 2023-05-07 at 10:30.",
            "I have 3 kids and 2 dogs.", "an MP3 player from the 1990s", "the 21st century", "Taylor Swift",
            "eating out with friends", "Zanzibar Quokka Holdings"]


@pytest.mark.parametrize(("text", "kind"), SENSITIVE)
def test_sensitive_values_are_recognised(text: str, kind: str) -> None:
    assert sensitive_reason(text) == kind


@pytest.mark.parametrize("text", HARMLESS)
def test_ordinary_text_is_not_sensitive(text: str) -> None:
    assert sensitive_reason(text) is None


def test_sensitive_sentences_are_dropped_and_the_rest_kept() -> None:
    text = "My bank PIN is 4711. The Louvre is a museum!\nI take insulin daily; Paris is a capital city."
    assert drop_sensitive_sentences(text) == "The Louvre is a museum!\nParis is a capital city."


# -- the visibility rule and the merge rule, without I/O ----------------------------------------

def _node(text: str) -> GraphNode:
    return GraphNode(id=node_id(text), type="Concept", text=text, evidence=1, confidence=0.5, created_at=T0,
                     updated_at=T0)


def test_visibility_needs_own_evidence_or_k_users_and_visible_ends() -> None:
    a, b, c = _node("bank"), _node("museum"), _node("capital city")
    ab = GraphEdge(id="e1", type="RelatedTo", source=a.id, target=b.id, evidence=3, confidence=0.5)
    ac = GraphEdge(id="e2", type="RelatedTo", source=a.id, target=c.id, evidence=3, confidence=0.5)
    support = {a.id: Support(supporters=3), b.id: Support(supporters=1, own=True), c.id: Support(supporters=2),
               "e1": Support(supporters=3), "e2": Support(supporters=3)}
    seen = Visibility(support, 3)
    assert [n.text for n in seen.nodes([a, b, c])] == ["bank", "museum"]  # 3 users; own; 2 < 3
    assert [e.id for e in seen.edges([ab, ac])] == ["e1"]  # e2 passes, but its end "capital city" does not
    assert not Visibility(support, 4).shows(a.id) and Visibility(support, 2).shows(c.id)
    assert not seen.shows("never-linked")


def test_similarity_never_lends_support_to_words_the_memory_did_not_say() -> None:
    rare = _node("Zanzibar Quokka Holdings")
    unit = KnowledgeUnit(memory_id="m1", subject_key="s2", nodes=[UnitNode(text="Quokka Holdings", type="Concept")])
    delta = consolidate([unit], GraphView(nodes={rare.id: rare}), similar=lambda _t: [(rare.id, 0.97)], now=T0)
    assert delta.merged == 0 and [n.text for n in delta.insert_nodes] == ["Quokka Holdings"]
    longer = KnowledgeUnit(memory_id="m2", subject_key="s2",
                           nodes=[UnitNode(text="Zanzibar Quokka Holdings Ltd", type="Concept")])
    merged = consolidate([longer], GraphView(nodes={rare.id: rare}), similar=lambda _t: [(rare.id, 0.95)], now=T0)
    assert merged.merged == 1 and merged.update_nodes[0].id == rare.id
