"""The Memory facade with an LLM: extraction, sleep-time update and answers.

The LLM here is ``ScriptedLLM``, a SCRIPTED FAKE (not a model): it answers each stage from rules
written in this file, so the logic around the LLM is tested with real storage and embeddings.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from dialogmem import Event, LLMUnavailableError, Memory, ScriptedLLM

LINE = re.compile(r"^\[[^\]]+\] (\d+)\.([^:]+): (.*)$", re.M)


def _extraction(messages: list[dict[str, str]]) -> str:
    """One fact per transcript line, rewritten in the third person, citing the line's source id."""
    user = messages[-1]["content"]
    data = [{"source_id": int(sid), "fact": f"{speaker.strip()} said that {text.strip()}"}
            for sid, speaker, text in LINE.findall(user)]
    return json.dumps({"data": data})


def _update(messages: list[dict[str, str]]) -> str:
    target, _, candidates = messages[-1]["content"].partition("CANDIDATES:")
    numbered = dict(re.findall(r"^(\d+)\. \[[^\]]+\] (.*)$", candidates, re.M))
    seattle = [int(n) for n, text in numbered.items() if "moved to Seattle" in text]
    lisbon = [int(n) for n, text in numbered.items() if "Lisbon" in text]
    if "lives in Denver" in target and seattle:
        return json.dumps({"action": "delete", "new_memory": None, "sources": seattle})
    if "runs marathons" in target and lisbon:
        return json.dumps({"action": "update", "new_memory": "Tom runs marathons, including Lisbon in October.",
                           "sources": lisbon})
    return json.dumps({"action": "ignore", "new_memory": None, "sources": []})


def fake_llm(stage: str, messages: list[dict[str, str]]) -> str:
    if stage == "add_memory":
        return _extraction(messages)
    if stage == "update":
        return _update(messages)
    if stage == "answer.light":
        return "Seattle [1, 99]"
    raise AssertionError(f"unexpected stage {stage}")


@pytest.fixture
def mem(make_memory: Any) -> Memory:
    """Facts as memories of their own (``write.llm_facts = "memories"``): the mapping of the model's
    facts to turns is what these tests check. The default, "enrich", is tested below. The scripted
    answer names its lines inline (``answer.citations = "inline"``)."""
    return make_memory(llm_client=ScriptedLLM(fake_llm), sleep={"score_threshold": 0.3},
                       write={"llm_facts": "memories"}, answer={"citations": "inline"})


def test_llm_extraction_maps_source_ids_to_turn_ids_multi_party(mem: Memory) -> None:
    msgs = [
        {"content": "Welcome to the planning call.", "name": "Host", "id": "a"},
        {"content": "I can bring the tent.", "name": "Rui", "id": "b"},
        {"content": "And I have two sleeping bags.", "name": "Rui", "id": "c"},
        {"content": "I'll drive the van.", "name": "Sade", "id": "d"},
        {"content": "Great, the trip starts Friday.", "name": "Host", "id": "e"},
    ]
    mem.add(msgs, "camp", timestamp="2024-06-03T09:00:00", flush=True)
    by_turn = {r.source_turn_ids[0]: r for r in mem.get_all("camp")}
    assert set(by_turn) == {"a", "b", "c", "d", "e"}
    assert by_turn["c"].memory.startswith("Rui said that And I have two sleeping bags")
    assert by_turn["d"].speaker_name == "Sade" and by_turn["d"].original_memory == "I'll drive the van."
    stats = mem.stats()
    assert stats["llm"]["add_memory"]["calls"] >= 1
    assert stats["summary"]["total_llm_calls"] >= 1


def test_enrich_keeps_the_llm_free_memories_and_indexes_the_facts_words(make_memory: Any) -> None:
    """The default: every turn keeps its LLM-free memory (with its context turns); a fact's words
    join the lexical view of the memories of the turns it cites, so a word only the model wrote
    finds the turn's memory, whose text the reader sees as without the model."""
    def extraction(stage: str, messages: list[dict[str, str]]) -> str:
        assert stage == "add_memory"
        ids = {text.strip(): int(sid) for sid, _, text in LINE.findall(messages[-1]["content"])}
        return json.dumps({"data": [
            {"source_id": ids["I finally adopted the dog from the shelter."],
             "fact": "Mara adopted a Weimaraner from the Quellport shelter."},
            {"source_id": [ids["ok"], 99], "fact": "Mara agreed to the Zindler plan."},
        ]})

    free = make_memory("free", write={"extractor": "rules"})
    mem = make_memory("llm", llm_client=ScriptedLLM(extraction))
    msgs = [{"content": "Did you go to the shelter again?", "name": "Lee", "id": "m1"},
            {"content": "I finally adopted the dog from the shelter.", "name": "Mara", "id": "m2"},
            {"content": "ok", "name": "Mara", "id": "m3"}]
    for m in (free, mem):
        m.add(msgs, "mara", timestamp="2024-02-10T18:00:00", flush=True)
    rules = {r.source_turn_ids[-1]: r for r in free.get_all("mara")}
    got = {r.source_turn_ids[-1]: r for r in mem.get_all("mara")}
    assert {k: r.memory for k, r in got.items()} == {k: r.memory for k, r in rules.items()}  # the same memories
    adopted = got["m2"]
    assert adopted.source_turn_ids == rules["m2"].source_turn_ids == ["m1", "m2"]
    assert {"weimaraner", "quellport"} <= set(adopted.keywords)  # the fact's words, not its text
    assert "zindler" in got["m3"].keywords and "zindler" not in got["m2"].keywords  # only cited turns
    assert mem.search("Weimaraner", "mara", limit=1).hits[0].id == adopted.id
    assert mem.search("Weimaraner", "mara", limit=1).hits[0].memory == rules["m2"].memory


def test_malformed_llm_output_falls_back_and_keeps_every_turn(make_memory: Any) -> None:
    mem = make_memory(llm_client=ScriptedLLM(lambda stage, m: "I'm sorry, I cannot do that."))
    mem.add([{"content": "My locker number is 418.", "name": "Ivy", "id": "x1"},
             {"content": "Mine is 419.", "name": "Joe", "id": "x2"}], "lock", flush=True)
    records = mem.get_all("lock")
    assert sorted(r.source_turn_ids[-1] for r in records) == ["x1", "x2"]
    assert mem.stats()["llm"]["add_memory"]["fallbacks"] >= 1


def test_sleep_applies_update_and_delete_with_history_and_reembedding(mem: Memory) -> None:
    mem.add([{"content": "Tom lives in Denver.", "name": "Tom", "id": "s1"},
             {"content": "Tom runs marathons.", "name": "Tom", "id": "s2"}],
            "tom", timestamp="2023-03-01T10:00:00", flush=True)
    mem.add([{"content": "Tom moved to Seattle.", "name": "Tom", "id": "s3"},
             {"content": "Tom will run the Lisbon marathon.", "name": "Tom", "id": "s4"}],
            "tom", timestamp="2023-07-01T10:00:00", flush=True)
    before = {r.source_turn_ids[0]: r for r in mem.get_all("tom")}
    report = mem.sleep("tom")
    assert report.superseded == 1 and report.deleted == 0 and report.updated == 1 and report.llm_calls >= 2
    after = {r.source_turn_ids[0]: r for r in mem.get_all("tom")}
    denver = before["s1"]
    # contradicted by the newer "moved to Seattle": kept, with its validity closed by the LLM backend
    # (the same fields the LLM-free detector fills)
    kept = after["s1"]
    assert kept.memory == denver.memory and kept.superseded_by == after["s3"].id
    assert kept.invalid_at == after["s3"].time_stamp and kept.valid_from == denver.time_stamp
    hist = mem.history(denver.id, "tom")
    assert [h.event for h in hist] == [Event.ADD, Event.UPDATE]
    assert hist[-1].actor == f"sleep:llm:superseded-by:{after['s3'].id}"
    marathon = next(r for r in after.values() if r.id == before["s2"].id)
    assert marathon.memory == "Tom runs marathons, including Lisbon in October." and marathon.version == 2
    assert set(marathon.source_turn_ids) == {"s2", "s4"}
    hist = mem.history(marathon.id, "tom")
    assert hist[-1].event == Event.UPDATE and hist[-1].old_memory == before["s2"].memory
    # re-embedded: a query that only the new text answers finds it first
    assert mem.search("Lisbon in October", "tom", limit=1).hits[0].id == marathon.id
    # newer entries are never rewritten by older ones
    assert after["s3"].version == 1 and after["s4"].version == 1
    assert after["s3"].superseded_by is None and after["s3"].invalid_at is None


def test_second_sleep_with_nothing_new_costs_no_llm_call(mem: Memory) -> None:
    mem.add([{"content": "Tom lives in Denver.", "name": "Tom"}], "t2", timestamp="2023-01-01", flush=True)
    mem.add([{"content": "Tom moved to Seattle.", "name": "Tom"}], "t2", timestamp="2023-06-01", flush=True)
    mem.sleep("t2")
    calls = mem.stats()["llm"]["update"]["calls"]
    report = mem.sleep("t2")
    assert report.llm_calls == 0 and report.new_entries == 0
    assert mem.stats()["llm"]["update"]["calls"] == calls


def test_answer_cites_only_returned_ids(mem: Memory) -> None:
    mem.add([{"content": "I moved to Seattle last weekend.", "name": "Tom", "id": "q1"}], "ans",
            timestamp="2023-07-02T10:00:00", flush=True)
    answer = mem.answer("Where does Tom live?", "ans")
    hit_ids = {h.id for h in mem.search("Where does Tom live?", "ans").hits}
    assert answer.text == "Seattle"
    assert answer.memory_ids and set(answer.memory_ids) <= hit_ids  # the bogus index 99 is dropped
    assert answer.context_tokens > 0


def test_answer_without_llm_names_the_config(make_memory: Any) -> None:
    mem = make_memory()
    mem.add("I like tea.", "u", flush=True)
    with pytest.raises(LLMUnavailableError, match=r"llm\.backend"):
        mem.answer("What do I like?", "u")
