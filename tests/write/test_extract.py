"""Fact extraction: rule backend and LLM backend (write/_extract.py, prompts/extract.py).

The LLM is ``ScriptedLLM``: a scripted fake (NOT a model) whose answers go through the real
repair / validation / retry path of the client.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest

from dialogmem import LLMTimeoutError
from dialogmem._models import ChatMessage, ScriptedLLM
from dialogmem._write._extract import (
    FILLER_SALIENCE,
    BufferedTurn,
    ExtractedFact,
    ExtractionOutput,
    LLMExtractor,
    RuleExtractor,
    facts_in_turn_order,
    render_line,
)

LINE = re.compile(r"^\[(?P<ts>[^,\]]+), (?P<wd>\w+)\] (?P<sid>\d+)\.(?P<spk>[^:]+): (?P<text>.*)$")


def turn(tid: str, speaker: str, text: str, *, minute: int = 0, topic: int = 0,
         session: str | None = "s1", day: int = 8) -> BufferedTurn:
    return BufferedTurn(
        turn_id=tid, speaker=speaker, text=text, compressed=text,
        time_stamp=f"2023-05-{day:02d}T13:{minute:02d}:00",
        float_time_stamp=1683550000.0 + day * 86400 + minute * 60,
        weekday="Mon", session_id=session, topic_id=topic,
    )


def prompt_lines(messages: list[ChatMessage]) -> list[dict[str, str]]:
    """The transcript lines of an extraction request, parsed back (what a model would read)."""
    out = []
    for line in messages[-1]["content"].splitlines():
        m = LINE.match(line)
        if m:
            out.append(m.groupdict())
    return out


def answer(items: list[tuple[object, str]]) -> str:
    return json.dumps({"data": [{"source_id": sid, "fact": fact} for sid, fact in items]})


# ---------------------------------------------------------------- rule backend


def test_rule_extractor_one_fact_per_turn_nothing_skipped() -> None:
    batch = [[turn("t1", "Caroline", "I went to a support group yesterday."),
              turn("t2", "Melanie", "ok thanks!", minute=1)],
             [turn("t3", "Caroline", "Painting with Melanie next Saturday.", minute=2, topic=1)]]
    facts = RuleExtractor().extract(batch)
    assert [f.fact for f in facts] == [
        "Caroline: I went to a support group yesterday (2023-05-07).",
        "Melanie: ok thanks!",
        "Caroline: Painting with Melanie next Saturday (2023-05-13).",
    ]
    assert [f.source_turn_ids for f in facts] == [["t1"], ["t2"], ["t3"]]
    assert facts[1].salience == FILLER_SALIENCE and facts[0].salience > FILLER_SALIENCE
    assert facts[2].topic_id == 1 and facts[2].speaker_name == "Caroline"
    assert facts[2].entities == ["Caroline", "Melanie"]
    assert facts[0].original == "I went to a support group yesterday."
    assert all(f.method == "rule" for f in facts)


def test_rule_extractor_uses_original_when_compression_emptied_the_turn() -> None:
    t = turn("t1", "Bo", "Bought a kayak.").model_copy(update={"compressed": "  "})
    (fact,) = RuleExtractor().extract([[t]])
    assert fact.fact == "Bo: Bought a kayak."


# ---------------------------------------------------------------- LLM backend: rendering


def test_prompt_renders_topic_blocks_and_local_source_ids() -> None:
    llm = ScriptedLLM([answer([])])
    batch = [[turn("msg-a", "Ann", "hello there", minute=0),
              turn("msg-b", "Ann", "I moved yesterday", minute=1)],
             [turn("zz-9", "Bob", "Got a dog.", minute=2, topic=5)]]
    LLMExtractor(llm).extract(batch)
    content = llm.calls[0].messages[-1]["content"].splitlines()
    assert content == [
        "--- Topic 1 ---",
        "[2023-05-08T13:00:00, Mon] 0.Ann: hello there",
        "[2023-05-08T13:01:00, Mon] 1.Ann: I moved yesterday (2023-05-07)",
        "--- Topic 2 ---",
        "[2023-05-08T13:02:00, Mon] 2.Bob: Got a dog.",
    ]
    assert llm.calls[0].stage == "add_memory"
    assert render_line(7, batch[1][0]) == "[2023-05-08T13:02:00, Mon] 7.Bob: Got a dog."


# ---------------------------------------------------------------- LLM backend: mapping


def multiparty_batch() -> list[list[BufferedTurn]]:
    # Three speakers, consecutive same-speaker turns, caller ids in no particular order.
    return [
        [turn("id-42", "Ann", "I adopted a cat named Miso.", minute=0),
         turn("id-07", "Ann", "She is two years old.", minute=1),
         turn("id-99", "Bob", "Nice! I have a parrot.", minute=2)],
        [turn("id-13", "Cy", "I start at Acme Corp next week.", minute=3, topic=1),
         turn("id-01", "Bob", "Congrats!", minute=4, topic=1),
         turn("id-55", "Ann", "Where is Acme based?", minute=5, topic=1)],
    ]


def test_source_ids_map_to_turn_ids_for_any_speaker_sequence() -> None:
    def script(stage: str, messages: list[ChatMessage]) -> str:
        lines = prompt_lines(messages)
        assert [ln["spk"] for ln in lines] == ["Ann", "Ann", "Bob", "Cy", "Bob", "Ann"]
        return answer([(3, "Cy starts a job at Acme Corp in the week of 2023-05-15."),
                       (0, "Ann adopted a cat named Miso."),
                       ([0, 1], "Ann's cat Miso is two years old."),
                       ("2", "Bob has a parrot."),
                       (5, "Ann asked where Acme Corp is based.")])

    facts = LLMExtractor(ScriptedLLM(script)).extract(multiparty_batch())
    got = {f.fact: (f.source_turn_ids, f.speaker_name, f.topic_id) for f in facts}
    assert got == {
        "Ann adopted a cat named Miso.": (["id-42"], "Ann", 0),
        "Ann's cat Miso is two years old.": (["id-42", "id-07"], "Ann", 0),
        "Bob has a parrot.": (["id-99"], "Bob", 0),
        "Cy starts a job at Acme Corp in the week of 2023-05-15.": (["id-13"], "Cy", 1),
        "Ann asked where Acme Corp is based.": (["id-55"], "Ann", 1),
    }
    # Facts come out in transcript order; "Congrats!" (filler) got no fact and needs none.
    assert [f.source_turn_ids[0] for f in facts] == ["id-42", "id-42", "id-99", "id-13", "id-55"]
    two = next(f for f in facts if len(f.source_turn_ids) == 2)
    assert two.time_stamp == "2023-05-08T13:01:00"  # of the latest source turn
    assert two.original == "I adopted a cat named Miso.\nShe is two years old."
    assert all(f.method == "llm" for f in facts)
    assert two.entities == ["Ann", "Miso"]


def test_turns_without_llm_fact_are_covered_by_rules() -> None:
    llm = ScriptedLLM([answer([(0, "Ann adopted a cat named Miso.")])])
    facts = LLMExtractor(llm).extract(multiparty_batch())
    by_turn: dict[str, list[ExtractedFact]] = {}
    for f in facts:
        for tid in f.source_turn_ids:
            by_turn.setdefault(tid, []).append(f)
    # Every informative turn is represented; the pure filler "Congrats!" is the only one left out.
    assert set(by_turn) == {"id-42", "id-07", "id-99", "id-13", "id-55"}
    assert [f.method for f in by_turn["id-07"]] == ["rule"]
    assert by_turn["id-13"][0].fact == "Cy: I start at Acme Corp next week (the week of 2023-05-15)."
    assert [f.method for f in by_turn["id-42"]] == ["llm"]


def test_unknown_source_ids() -> None:
    llm = ScriptedLLM([answer([
        ([99, 3], "Cy will work at Acme Corp."),  # one bad id, one good: keep the good one
        (-4, "Bob owns a parrot."),  # no valid id: grounded on the turn sharing its words
        (77, "Something about the weather."),  # no valid id, nothing in common: dropped
        (0, "   "),  # empty fact: ignored
    ])])
    facts = LLMExtractor(llm).extract(multiparty_batch())
    llm_facts = {f.fact: f.source_turn_ids for f in facts if f.method == "llm"}
    assert llm_facts == {"Cy will work at Acme Corp.": ["id-13"], "Bob owns a parrot.": ["id-99"]}
    covered = {tid for f in facts for tid in f.source_turn_ids}
    assert covered == {"id-42", "id-07", "id-99", "id-13", "id-55"}


def test_relative_dates_left_by_the_model_are_resolved() -> None:
    llm = ScriptedLLM([answer([(0, "Ann moved to Oslo last month.")])])
    (fact,) = LLMExtractor(llm).extract([[turn("a", "Ann", "I moved to Oslo last month")]])
    assert fact.fact == "Ann moved to Oslo last month (April 2023)."


@pytest.mark.parametrize("bad", [
    lambda: "I cannot do that.",
    lambda: '{"data": [{"fact": "no id"}]}',
    lambda: LLMTimeoutError("scripted timeout"),
])
def test_llm_failure_falls_back_to_rules_for_the_whole_batch(bad: Callable[[], object],
                                                            caplog: pytest.LogCaptureFixture) -> None:
    llm = ScriptedLLM(lambda stage, messages: bad(), max_retries=1)
    batch = multiparty_batch()
    facts = LLMExtractor(llm).extract(batch)
    assert [f.source_turn_ids for f in facts] == [[t.turn_id] for seg in batch for t in seg]
    assert all(f.method == "rule" for f in facts)
    assert facts[5].fact == "Ann: Where is Acme based?"
    usage = llm.usage.get("llm", "add_memory")
    assert usage.fallbacks == 1
    assert "using the LLM-free backend" in caplog.text


def test_near_json_is_repaired_not_fallen_back() -> None:
    raw = "Sure!\n```json\n{'data': [{'source_id': '0', 'fact': 'Ann adopted a cat named Miso.'},]}\n```"
    llm = ScriptedLLM([raw])
    facts = LLMExtractor(llm).extract([[turn("a", "Ann", "I adopted a cat named Miso.")]])
    assert [(f.fact, f.method) for f in facts] == [("Ann adopted a cat named Miso.", "llm")]
    assert llm.usage.get("llm", "add_memory").fallbacks == 0


def test_large_batch_is_split_into_calls_at_topic_boundaries() -> None:
    long = "We talked about the garden and the new greenhouse and tomatoes " * 6
    batch = [[turn(f"a{i}", "Ann", long, minute=i) for i in range(3)],
             [turn(f"b{i}", "Bob", long, minute=10 + i, topic=1) for i in range(3)]]

    def script(stage: str, messages: list[ChatMessage]) -> str:
        return answer([(int(ln["sid"]), f"{ln['spk']} fact {ln['ts']}") for ln in prompt_lines(messages)])

    llm = ScriptedLLM(script)
    facts = LLMExtractor(llm, max_prompt_tokens=250).extract(batch)
    assert len(llm.calls) >= 2
    heads = [c.messages[-1]["content"].splitlines()[0] for c in llm.calls]
    assert heads[0] == "--- Topic 1 ---" and "--- Topic 2 ---" in heads
    # Source ids restart in each call and still map to the right turns.
    assert [f.source_turn_ids for f in facts] == [[t.turn_id] for seg in batch for t in seg]
    assert facts[4].fact == "Bob fact 2023-05-08T13:11:00"


def test_rule_extractor_context_window_cites_what_it_contains() -> None:
    seg_a = [turn("a1", "Tom", "What's the dog's name?", minute=1),
             turn("a2", "Maya", "His name is Biscuit.", minute=2),
             turn("a3", "Maya", "He is a beagle mix " + "very " * 60 + "cute.", minute=3)]
    seg_b = [turn("b1", "Tom", "Anyway, I moved to Seattle.", minute=4, topic=1)]
    facts = RuleExtractor(context_turns=1).extract([seg_a, seg_b])
    assert [f.source_turn_ids for f in facts] == [["a1"], ["a1", "a2"], ["a2", "a3"], ["a3", "b1"]]
    assert facts[1].fact == "Tom: What's the dog's name?\nMaya: His name is Biscuit."
    assert facts[1].speaker_name == "Maya" and facts[1].time_stamp == seg_a[1].time_stamp
    assert facts[3].speaker_name == "Tom" and facts[3].topic_id == 1  # the turn's, not its context's
    first_line = facts[3].fact.splitlines()[0]
    assert first_line.endswith("...") and len(first_line.split()) <= 42  # long context is clipped
    assert facts[2].fact.startswith("Maya: His name is Biscuit.\nMaya: He is a beagle mix")
    assert RuleExtractor(context_turns=0).extract([seg_a])[1].fact == "Maya: His name is Biscuit."
    with pytest.raises(ValueError):
        RuleExtractor(context_turns=-1)


def test_rule_extractor_context_comes_from_previous_batches_but_not_other_sessions() -> None:
    earlier = [turn("p1", "Tom", "What's the dog's name?", minute=1)]
    now = [[turn("n1", "Maya", "His name is Biscuit.", minute=2)]]
    facts = RuleExtractor(context_turns=1).extract(now, previous=earlier)
    assert facts[0].source_turn_ids == ["p1", "n1"]
    other_session = [[turn("n2", "Maya", "Hello again!", minute=3, session="s2")]]
    facts = RuleExtractor(context_turns=1).extract(other_session, previous=earlier)
    assert facts[0].source_turn_ids == ["n2"]


def test_enrich_adds_fact_words_to_the_rule_facts_and_keeps_an_unplaced_fact() -> None:
    """``facts_in_turn_order(enrich=True)``: the rule facts of every turn come back; a model fact
    adds its missing words to the keywords of the rule facts of the turns it cites, and stays a
    fact of its own only when none of its turns got a rule fact."""
    turns = [turn("a", "Ann", "We went to the lake.", minute=0), turn("b", "Bo", "Nice!", minute=1),
             turn("c", "Ann", "The cabin was cold.", minute=2)]
    rules = RuleExtractor(context_turns=1).extract([turns])
    out = ExtractionOutput.model_validate({"data": [
        {"source_id": 0, "fact": "Ann and Bo visited Lake Tarrow."},
        {"source_id": [0, 2], "fact": "Ann stayed in a cabin near Tarrow."},
        {"source_id": 1, "fact": "Bo liked the Tarrow trip."},
    ]})

    def fill(missing: list[int]) -> list[tuple[int, ExtractedFact]]:
        return [(i, rules[i]) for i in missing if i != 1]  # no rule fact for turn b

    got = facts_in_turn_order(out, turns, lambda item, text: item.ids(), fill, what="test", enrich=True)
    assert [f.fact for f in got] == [rules[0].fact, "Bo liked the Tarrow trip.", rules[2].fact]
    assert got[0].source_turn_ids == ["a"] and got[1].method == "llm" and got[2].source_turn_ids == ["b", "c"]
    assert got[0].keywords[:len(rules[0].keywords)] == rules[0].keywords
    assert {"tarrow", "visited", "stayed", "cabin"} - set(rules[0].keywords) <= set(got[0].keywords)
    assert "tarrow" in got[2].keywords and "visited" not in got[2].keywords
    plain = facts_in_turn_order(out, turns, lambda item, text: item.ids(), fill, what="test")
    assert [f.method for f in plain] == ["llm", "llm", "llm"]  # enrich=False: facts are the memories
