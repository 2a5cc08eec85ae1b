"""Knowledge units for the LTM (sleep/_units.py rules, sleep/_llmunits.py LLM backend) and their
consolidation; privacy checked over every node and edge text. The LLM is ``ScriptedLLM``: a
scripted fake (NOT a model) that goes through the real client path (repair, validation, retries).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

import pytest

from dialogmem import MemoryRecord
from dialogmem._graph import GraphView
from dialogmem._models import ChatMessage, ScriptedLLM
from dialogmem._sleep._consolidate import consolidate
from dialogmem._sleep._deid import Deidentifier
from dialogmem._sleep._llmunits import LLMUnitExtractor
from dialogmem._sleep._units import RuleUnitExtractor, UnitEdge, UnitNode
from dialogmem._transfer._conversation import parse_conversation, sample_path

NAMES = ["Maya", "Tom Baker"]
USER_IDS = ["user-maya"]


def subject(user_id: str) -> str:
    return f"key-of-{len(user_id)}"  # opaque in tests as in the facade (which uses an HMAC)


def leaked(texts: Iterable[str], names: Iterable[str]) -> list[tuple[str, str]]:
    words = {w for n in names for w in re.findall(r"\w+", n) if len(w) >= 2}
    return [(t, w) for t in texts for w in words if re.search(rf"(?<!\w){re.escape(w)}(?!\w)", t, re.IGNORECASE)]


def graph_texts(g: GraphView) -> list[str]:
    texts = [n.text for n in g.nodes.values()]
    texts += [f"{g.nodes[e.source].text} {e.type} {g.nodes[e.target].text}" for e in g.edges.values()]
    return texts


def record(rid: str, text: str, user: str = "user-maya") -> MemoryRecord:
    return MemoryRecord(id=rid, user_id=user, memory=text, time_stamp="2023-03-04T18:12:00",
                        float_time_stamp=1.0, weekday="Sat", created_at=1.0, updated_at=1.0)


@pytest.fixture
def rules() -> RuleUnitExtractor:
    return RuleUnitExtractor(Deidentifier(NAMES, USER_IDS))


def test_rule_patterns_give_typed_edges(rules: RuleUnitExtractor) -> None:
    nodes, edges = rules.extract("Maya: My dog is a golden retriever. The weather is cold. Paris is a capital city.")
    assert UnitEdge(type="IsA", source="dog", target="golden retriever") in edges
    assert UnitEdge(type="HasProperty", source="weather", target="cold") in edges
    assert len(nodes) == 5  # capped: "capital city" does not fit
    nodes, edges = rules.extract("The project has a tight deadline and the team is tired.")
    assert UnitEdge(type="HasProperty", source="project", target="tight deadline") in edges
    assert UnitEdge(type="HasProperty", source="team", target="tired") in edges
    assert not any(e.type == "RelatedTo" and {e.source, e.target} == {"project", "tight deadline"} for e in edges)


def test_rule_units_are_conservative(rules: RuleUnitExtractor) -> None:
    assert rules.extract("Tom Baker: ok thanks, see you soon!") == ([], [])
    assert rules.extract("Maya: I love it, it is great") == ([], [])  # no determiner, pronoun subject
    nodes, edges = rules.extract("Maya: The shelter is not a zoo.")
    assert [e for e in edges if e.type != "RelatedTo"] == []  # negation gives no typed edge
    nodes, _ = rules.extract("Maya: I went to a LGBTQ support group yesterday (2023-05-07).")
    assert nodes == [UnitNode(text="LGBTQ support group", type="Entity")]  # "LGBTQ" alone is inside it


def test_speaker_and_user_names_are_never_nodes(rules: RuleUnitExtractor) -> None:
    text = "Tom Baker: Maya's dog Rex is a beagle and Tom's friend Maya has a red bike. Email maya@x.io"
    nodes, edges = rules.extract(text)
    assert nodes and not leaked([n.text for n in nodes] + [f"{e.source} {e.target}" for e in edges], NAMES)
    assert not any("@" in n.text for n in nodes)


def test_sample_conversation_graph_has_no_speaker_name(rules: RuleUnitExtractor) -> None:
    batches = parse_conversation(json.loads(sample_path().read_text(encoding="utf-8")))
    speakers = sorted({m["name"] for b in batches for m in b.messages})
    x = RuleUnitExtractor(Deidentifier(speakers, ["sample-user"]))
    records = [record(f"m{i}", f"{m['name']}: {m['content']}", "sample-user")
               for i, m in enumerate(m for b in batches for m in b.messages)]
    units = x.units(records, subject)
    g = GraphView().with_delta(consolidate(units, GraphView(), similar=lambda _t: [], now=1.0))
    assert len(g.nodes) >= 10 and g.edges
    assert leaked(graph_texts(g), speakers) == []


def llm_answer(units: list[dict[str, object]]) -> str:
    return json.dumps({"units": units})


def test_llm_units_are_deidentified_on_the_way_in_and_out() -> None:
    records = [record("m1", "Maya adopted a beagle named Rex from the Elm Road shelter; call 555-123-4567"),
               record("m2", "Maya: ok bye"),
               record("m3", "Tom Baker says the Louvre in Paris is huge")]
    answer = llm_answer([
        {"sources": [1], "nodes": [{"text": "beagle", "type": "entity"}, {"text": "Maya's dog", "type": "Entity"}],
         "edges": [{"source": "beagle", "relation": "is_a", "target": "dog breed"},
                   {"source": "Maya's dog", "relation": "RelatedTo", "target": "beagle"},
                   {"source": "beagle", "relation": "loves", "target": "walks"}]},
        {"sources": ["3", 9], "nodes": [{"text": "Louvre", "type": "Entity"}, {"text": "Tom", "type": "Entity"}],
         "edges": [{"source": "Louvre", "relation": "RelatedTo", "target": "Paris"}]},
    ])
    llm = ScriptedLLM([answer])
    deid = Deidentifier(NAMES, USER_IDS)
    batch = LLMUnitExtractor(llm, deid).units(records, subject, existing=["dog breed"])
    sent = "\n".join(m["content"] for m in llm.calls[0].messages if m["role"] == "user")
    assert leaked([sent], NAMES) == [] and "555" not in sent and "dog breed" in sent
    assert (batch.method, batch.fallbacks) == ("llm", 0)
    by_memory = {u.memory_id: u for u in batch.units}
    assert set(by_memory) == {"m1", "m3"}  # m2 gave no unit; source 9 does not exist
    assert [n.text for n in by_memory["m1"].nodes] == ["beagle", "dog breed"]  # "Maya's dog" dropped
    assert by_memory["m1"].edges == [UnitEdge(type="IsA", source="beagle", target="dog breed")]
    assert [n.text for n in by_memory["m3"].nodes] == ["Louvre", "Paris"]
    g = GraphView().with_delta(consolidate(batch.units, GraphView(), similar=lambda _t: [], now=1.0))
    assert leaked(graph_texts(g), NAMES) == [] and len(g.edges) == 2


def test_garbage_llm_output_falls_back_to_rules_and_is_counted() -> None:
    llm = ScriptedLLM(["no json here", "{not: valid", "[1, 2"], max_retries=2)
    records = [record("m1", "Maya: My dog is a golden retriever.")]
    batch = LLMUnitExtractor(llm, Deidentifier(NAMES, USER_IDS)).units(records, subject)
    assert (batch.method, batch.fallbacks) == ("rule", 1)
    assert [u.method for u in batch.units] == ["rule"]
    assert UnitEdge(type="IsA", source="dog", target="golden retriever") in batch.units[0].edges
    assert llm.usage.get("llm", "consolidate").fallbacks == 1
    assert llm.usage.get("llm", "consolidate").calls == 3


def test_llm_chunks_fall_back_independently() -> None:
    def script(stage: str, messages: list[ChatMessage]) -> str:
        if "golden retriever" in messages[-1]["content"]:
            return "garbage"
        return llm_answer([{"sources": [1], "nodes": [{"text": "cello", "type": "Entity"}], "edges": []}])

    llm = ScriptedLLM(script, max_retries=0)
    records = [record("m1", "Maya: My dog is a golden retriever."), record("m2", "Tom Baker plays the cello.")]
    batch = LLMUnitExtractor(llm, Deidentifier(NAMES, USER_IDS), max_items=1).units(records, subject)
    assert (batch.method, batch.fallbacks) == ("mixed", 1)
    assert [(u.memory_id, u.method) for u in batch.units] == [("m1", "rule"), ("m2", "llm")]


def test_one_word_common_nouns_only_in_patterns_unless_asked(rules: RuleUnitExtractor) -> None:
    text = "The kids loved the pottery class. The kids are tired."
    nodes, _ = rules.extract(text)
    assert [n.text for n in nodes] == ["kids", "tired", "pottery class"]  # "kids" via the pattern
    nodes, _ = rules.extract("The kids loved the pottery class.")
    assert [n.text for n in nodes] == ["pottery class"]
    loose = RuleUnitExtractor(Deidentifier(NAMES, USER_IDS), single_word_concepts=True)
    assert [n.text for n in loose.extract("The kids loved the pottery class.")[0]] == ["kids", "pottery class"]


def test_sentence_opening_capital_is_no_name_outside_patterns(rules: RuleUnitExtractor) -> None:
    assert rules.extract("Appreciate it. Since then the pottery class is fun. Let's go")[0] == [
        UnitNode(text="pottery class", type="Concept"), UnitNode(text="fun", type="Concept")]
    nodes, _ = rules.extract("We drove to Lisbon. Lisbon is a port city.")
    assert [n.text for n in nodes] == ["Lisbon", "port city"]
