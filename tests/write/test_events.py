"""HyMem's event units (write.events): topic units with overlap, one LLM summary each, linked to L2.

The LLM here is ``ScriptedLLM``, a SCRIPTED FAKE (not a model): it replies per stage
(``event_write``) with what each test writes, so the tests check what the write path does with a
summary, with garbage and with failures — not the quality of a summary. Memories besides the
events are written LLM-free (rules).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from dialogmem import ConfigError, LLMTimeoutError, Memory, NotFoundError, ScriptedLLM
from dialogmem._write._events import EVENT_CLASS, event_units
from dialogmem._write._extract import BufferedTurn

TURNS = [
    ("Anna", "I moved to Porto last month for my new job at the bakery."),
    ("Ben", "How is the bakery job going?"),
    ("Anna", "Great, I bake sourdough every morning at five."),
    ("Ben", "I adopted a dog called Rex yesterday."),
    ("Anna", "Rex is a lovely name, what breed is he?"),
]


def turn(i: int, session: str = "s1") -> BufferedTurn:
    return BufferedTurn(turn_id=f"t{i}", speaker="A", text=f"text {i}", time_stamp="2023-05-01T10:00:00",
                        float_time_stamp=1682935200.0 + i, weekday="Mon", session_id=session)


def ids(units: list[list[BufferedTurn]]) -> list[list[str]]:
    return [[t.turn_id for t in u] for u in units]


def test_units_pack_topics_overlap_their_neighbours_and_split_long_topics() -> None:
    previous = [turn(0), turn(1), turn(2)]
    batch = [[turn(3), turn(4)], [turn(5)], [turn(6), turn(7), turn(8), turn(9)], [turn(10, "s2"), turn(11, "s2")]]
    got = ids(event_units(batch, previous, max_turns=3, overlap=2))
    assert got == [["t1", "t2", "t3", "t4", "t5"],    # two short topics packed; the last batch leads in
                   ["t4", "t5", "t6", "t7", "t8"],    # a long topic in pieces of 3, overlapping
                   ["t7", "t8", "t9"],
                   ["t10", "t11"]]                    # a new session starts without overlap
    assert ids(event_units(batch, previous, max_turns=12, overlap=0)) == [
        ["t3", "t4", "t5", "t6", "t7", "t8", "t9"], ["t10", "t11"]]
    with pytest.raises(ValueError):
        event_units(batch, max_turns=0)


def summaries(reply: Any) -> Any:
    """A script answering the event stage with ``reply`` (a string, or a callable of the prompt)."""
    def script(stage: str, messages: list[dict[str, str]]) -> Any:
        assert stage == "event_write", stage
        return reply(messages[-1]["content"]) if callable(reply) else reply
    return script


def store(make_memory: Any, reply: Any, name: str = "events", **write: Any) -> tuple[Memory, ScriptedLLM]:
    llm = ScriptedLLM(summaries(reply))
    mem = make_memory(name, llm_client=llm, write={"extractor": "rules", "events": "llm", "segmenter": "none", **write})
    for i, (who, text) in enumerate(TURNS):
        mem.add([{"content": text, "name": who, "id": f"t{i}"}], "u", session_id="s1",
                timestamp=f"2023-05-0{i + 1}T10:00:00")
    mem.flush("u")
    return mem, llm


SUMMARY = json.dumps({"summary": "Anna moved to Porto for a bakery job; Ben adopted a dog named Rex yesterday."})


def test_an_event_summary_is_an_extra_memory_citing_its_unit(make_memory: Any) -> None:
    mem, llm = store(make_memory, SUMMARY)
    plain = make_memory("plain", write={"extractor": "rules"})
    for i, (who, text) in enumerate(TURNS):
        plain.add([{"content": text, "name": who, "id": f"t{i}"}], "u", session_id="s1",
                  timestamp=f"2023-05-0{i + 1}T10:00:00")
    records = mem.get_all("u")
    events = [r for r in records if r.memory_class == EVENT_CLASS]
    assert len(events) == 1 and len(llm.calls) == 1
    event = events[0]
    assert event.memory.startswith("Anna moved to Porto") and "2023-05-04" in event.memory  # yesterday resolved
    assert event.source_turn_ids == [f"t{i}" for i in range(5)]
    # every line the model read is in the prompt, dates resolved; the summary's sources are the L2 turns
    prompt = llm.calls[0].messages[-1]["content"]
    assert "[2023-05-01, Mon] Anna: I moved to Porto last month" in prompt
    assert [s.id for s in mem.sources(event.id, "u")] == event.source_turn_ids
    # the extractor's memories are the LLM-free ones, unchanged: events come in addition
    facts = sorted((r.memory, tuple(r.source_turn_ids)) for r in records if r.memory_class != EVENT_CLASS)
    assert facts == sorted((r.memory, tuple(r.source_turn_ids)) for r in plain.get_all("u"))
    hits = {h.id: h for h in mem.search("Who adopted a dog?", "u", limit=10).hits}
    assert hits[event.id].memory_class == EVENT_CLASS
    with pytest.raises(NotFoundError):
        mem.sources(event.id, "someone-else")


@pytest.mark.parametrize("reply", ["not json at all", json.dumps({"summary": ""}), LLMTimeoutError("slow")],
                         ids=["garbage", "empty", "timeout"])
def test_no_summary_leaves_the_memories_and_counts_a_failure(make_memory: Any, reply: Any) -> None:
    mem, _ = store(make_memory, reply)
    records = mem.get_all("u")
    assert records and not [r for r in records if r.memory_class == EVENT_CLASS]
    assert {t for r in records for t in r.source_turn_ids} == {f"t{i}" for i in range(5)}
    fallbacks = mem.stats()["llm"].get("event_write", {}).get("fallbacks", 0)
    assert fallbacks == (0 if "summary" in str(reply) else 1)  # "" is an answer: nothing worth keeping


def test_a_unit_of_filler_gets_no_call(make_memory: Any) -> None:
    llm = ScriptedLLM(summaries(SUMMARY))
    mem = make_memory(llm_client=llm, write={"extractor": "rules", "events": "llm"})
    mem.add([{"content": "ok", "name": "Anna"}, {"content": "thanks!", "name": "Ben"}], "u")
    mem.flush("u")
    assert llm.calls == [] and mem.get_all("u")


def test_events_need_a_model_and_batches(make_memory: Any) -> None:
    with pytest.raises(ConfigError, match=r"write\.events"):
        make_memory("no-llm", write={"events": "llm"})
    with pytest.raises(ConfigError, match=r"write\.events"):
        make_memory("turn-mode", llm_client=ScriptedLLM([]), write={"events": "llm", "mode": "turn"})
    auto = make_memory("auto", write={"events": "auto"})  # no model: no events, memories at once
    auto.add([{"content": TURNS[0][1], "name": "Anna"}], "u")
    assert len(auto.get_all("u")) == 1


def test_synthesis_does_not_merge_event_units(make_memory: Any) -> None:
    mem, _ = store(make_memory, SUMMARY, synthesis="duplicates")
    events = [r for r in mem.get_all("u") if r.memory_class == EVENT_CLASS]
    assert len(events) == 1 and events[0].source_turn_ids == [f"t{i}" for i in range(5)]


def test_real_gguf_plumbing_summary_or_counted_failure(make_memory: Any) -> None:
    """The real SmolLM2-135M GGUF (llama.cpp) writing the event summary: whatever a tiny model
    replies, the write completes, the memories are all there, and an event (if any) cites its unit."""
    # (a plumbing test: a 135M model's summary is not judged, only what the write path does with it)
    import importlib.util

    from modelkit import smollm2_path

    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama_cpp cannot be imported: pip install llama-cpp-python")
    llm = {"backend": "llama_cpp", "model_path": str(smollm2_path()), "n_ctx": 2048, "n_threads": 2,
           "max_tokens": 96, "timeout_s": 600}  # generous: a loaded CI machine is slow, not wrong
    mem = make_memory("gguf", llm=llm, write={"extractor": "rules", "events": "llm", "segmenter": "none"})
    for i, (who, text) in enumerate(TURNS):
        mem.add([{"content": text, "name": who, "id": f"t{i}"}], "u", session_id="s1",
                timestamp=f"2023-05-0{i + 1}T10:00:00")
    mem.flush("u")
    records = mem.get_all("u")
    events = [r for r in records if r.memory_class == EVENT_CLASS]
    assert {t for r in records if r.memory_class != EVENT_CLASS for t in r.source_turn_ids} == {
        f"t{i}" for i in range(5)}
    stage = mem.stats("u")["llm"]["event_write"]
    assert stage["calls"] >= 1
    # a summary, "" (nothing worth keeping), or a counted failure and no summary
    assert len(events) <= 1 and not (events and stage.get("fallbacks", 0))
    for e in events:
        assert e.memory.strip() and e.source_turn_ids == [f"t{i}" for i in range(5)]
