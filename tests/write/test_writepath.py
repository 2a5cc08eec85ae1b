"""The SimpleMem write path through ``Memory``: sliding windows (``write.window_turns`` /
``write.stride``) and coreference across batches (``write.coref``); and the per-user write lock.

The LLM here is ``ScriptedLLM``, a SCRIPTED FAKE (not a model): it answers the window prompt from
rules written in this file (a fact for every line it is shown, context lines included, as a sloppy
model would), so the write path's guarantees are tested with real storage and embeddings.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from typing import Any

import numpy as np
import pytest

from dialogmem import ConfigError, Memory, MemoryRecord, ScriptedLLM
from dialogmem._text._words import content_tokens
from dialogmem._write import BufferedTurn
from dialogmem._write._interactions import due_interactions
from dialogmem._write._online import synthesis_changes
from dialogmem._write._records import memory_id
from dialogmem._write._synthesize import RuleConfig, rule_decider
from seams import remembered_users

LINE = re.compile(r"^\[[^\]]+\] (\d+)\.([^:]+): (.*)$", re.M)
TURNS = [("Caroline", "I adopted a dog named Rex last month."), ("Melanie", "What breed is he?"),
         ("Caroline", "A beagle, and he loves the park."), ("Melanie", "Which park do you go to?"),
         ("Caroline", "Mercy Park, near my office."), ("Melanie", "I should bring my kids there."),
         ("Caroline", "They would love it."), ("Melanie", "Let's plan it for Sunday.")]


def _msgs(turns: list[tuple[str, str]], start: int = 0) -> list[dict[str, str]]:
    return [{"name": who, "content": text, "id": f"t{start + i}"} for i, (who, text) in enumerate(turns)]


def _window_llm(stage: str, messages: list[dict[str, str]]) -> str:
    """A fact for every numbered line, the context lines included."""
    assert stage == "add_memory"
    data = [{"source_id": int(sid), "fact": f"{who.strip()} said: {text.strip()}"}
            for sid, who, text in LINE.findall(messages[-1]["content"])]
    return json.dumps({"data": data})


def _targets_once(mem: Memory, user: str, n: int) -> list[Any]:
    records = mem.get_all(user, limit=1000)
    own = Counter(r.source_turn_ids[-1] for r in records)  # the turn a memory is written for
    assert own == Counter({f"t{i}": 1 for i in range(n)})
    return records


def test_rule_windows_write_each_turn_once_with_the_window_context(make_memory: Any) -> None:
    mem = make_memory(write={"window_turns": 4, "stride": 2})
    mem.add(_msgs(TURNS), "u1", session_id="s1")
    records = _targets_once(mem, "u1", len(TURNS))
    by_turn = {r.source_turn_ids[-1]: r for r in records}
    # W - stride = 2 context turns: turn 3's memory carries turns 1 and 2, context_turns=1 only turn 2
    assert by_turn["t3"].source_turn_ids == ["t1", "t2", "t3"]
    assert "breed" in by_turn["t3"].memory and by_turn["t3"].speaker_name == "Melanie"
    one = make_memory("one", write={"context_turns": 1})
    one.add(_msgs(TURNS), "u1", session_id="s1")
    plain = {r.source_turn_ids[-1]: r for r in one.get_all("u1", limit=1000)}
    assert plain["t3"].source_turn_ids == ["t2", "t3"] and "breed" not in plain["t3"].memory


def test_llm_windows_never_write_a_fact_for_a_context_line(make_memory: Any) -> None:
    llm = ScriptedLLM(_window_llm)
    mem = make_memory(llm_client=llm, write={"window_turns": 4, "stride": 2, "llm_facts": "memories"})
    mem.add(_msgs(TURNS[:4]), "u1", session_id="s1", flush=True)  # batch 1
    mem.add(_msgs(TURNS[4:], start=4), "u1", session_id="s1", flush=True)  # batch 2
    records = _targets_once(mem, "u1", len(TURNS))
    assert all(r.source_turn_ids == r.source_turn_ids[-1:] for r in records)  # no context cited
    prompts = [c.messages[-1]["content"] for c in llm.calls]
    assert len(prompts) == 4  # 8 turns, 2 targets a window
    # batch 2's first window reads the last turns of batch 1 (from the journal) as its context
    context, _, new = prompts[2].partition("--- New ---")
    assert "Which park do you go to?" in context and "Mercy Park" in new
    assert "Rex" not in prompts[2]


def test_llm_window_failure_falls_back_to_rules_per_window(make_memory: Any) -> None:
    llm = ScriptedLLM(lambda stage, messages: "not json at all")
    mem = make_memory(llm_client=llm, write={"window_turns": 2, "stride": 2})
    mem.add(_msgs(TURNS[:2]), "u1", session_id="s1", flush=True)
    records = _targets_once(mem, "u1", 2)
    assert all(" said: " not in r.memory for r in records)  # the rule memories
    assert mem.stats()["llm"]["add_memory"]["fallbacks"] >= 1


def test_stride_needs_a_window_no_larger_than_it(make_memory: Any) -> None:
    with pytest.raises(ConfigError):
        make_memory(write={"window_turns": 2, "stride": 3})
    with pytest.raises(ConfigError):
        make_memory("b", write={"stride": 1})


def test_rule_coref_resolves_a_pronoun_from_an_earlier_batch(make_memory: Any) -> None:
    mem = make_memory(write={"coref": True, "context_turns": 0})
    mem.add([{"name": "Caroline", "content": "My friend Jean came over yesterday."}], "u1", session_id="s1")
    mem.add([{"name": "Melanie", "content": "Nice! How is she doing these days?"}], "u1", session_id="s1")
    mem.add([{"name": "Melanie", "content": "Is she still in Paris?"}], "u2", session_id="s1")
    texts = [r.memory for r in mem.get_all("u1", limit=100)]
    assert any("she [Jean]" in t for t in texts)
    assert not any("she [" in r.memory for r in mem.get_all("u2", limit=100))  # another user's turns: none
    off = make_memory("off", write={"context_turns": 0})
    off.add([{"name": "Caroline", "content": "My friend Jean came over yesterday."}], "u1", session_id="s1")
    off.add([{"name": "Melanie", "content": "Nice! How is she doing these days?"}], "u1", session_id="s1")
    assert not any("[Jean]" in r.memory for r in off.get_all("u1", limit=100))


# ---------------------------------------------------------------- online synthesis (write.synthesis)

LAKE = "I love painting sunsets at the lake."
LAKE_MORE = "I really love painting sunsets at the lake every weekend."


def _say(mem: Memory, user: str, session: str, text: str, who: str = "Caroline") -> Any:
    return mem.add([{"name": who, "content": text}], user, session_id=session)


@pytest.mark.parametrize("mode", ["rules", "duplicates"])
def test_rule_synthesis_merges_a_near_duplicate_of_the_session_losslessly(make_memory: Any, mode: str) -> None:
    mem = make_memory(write={"synthesis": mode, "context_turns": 0})
    first = _say(mem, "u1", "s1", LAKE).memories[0]
    _say(mem, "u1", "s1", "What did you have for lunch today?", who="Melanie")
    added = _say(mem, "u1", "s1", LAKE_MORE)
    records = mem.get_all("u1", limit=100)
    assert len(records) == 2  # the two lake memories are one
    merged = next(r for r in records if r.id == first.id)  # the older memory survives, same id
    assert len(merged.source_turn_ids) == 2 and merged.version == 2
    for word in ("love", "painting", "sunsets", "lake", "weekend"):
        assert word in merged.memory.lower()
    assert [h.id for h in added.memories] == [first.id]  # the absorbed fragment is not reported as stored
    events = [(h.event.value, h.actor) for h in mem.history(first.id, "u1")]
    assert events == [("ADD", "write"), ("UPDATE", "write:synthesis")]
    assert mem.history(first.id, "u1")[-1].previous.memory == f"Caroline: {LAKE}"  # undoable
    # the new fragment was written and merged away in the same transaction: its own rows keep it
    absorbed = memory_id("u1", added.turn_ids, f"Caroline: {LAKE_MORE}")
    rows = mem.history(absorbed, "u1")
    into = f"write:synthesis:into:{first.id}"
    assert [(h.event.value, h.actor) for h in rows] == [("ADD", "write"), ("DELETE", into)]
    assert rows[-1].previous.memory == f"Caroline: {LAKE_MORE}"
    hits = mem.search("painting sunsets at the lake", "u1", limit=5)
    assert absorbed not in {h.id for h in hits.hits} and first.id in {h.id for h in hits.hits}


def test_synthesis_never_merges_across_sessions_or_users(make_memory: Any) -> None:
    mem = make_memory(write={"synthesis": "rules", "context_turns": 0})
    _say(mem, "u1", "s1", LAKE)
    _say(mem, "u1", "s2", LAKE_MORE)  # another session
    _say(mem, "u2", "s1", LAKE_MORE)  # another user, same session id
    assert len(mem.get_all("u1", limit=100)) == 2
    assert len(mem.get_all("u2", limit=100)) == 1
    cross = make_memory("cross", write={"synthesis": "rules", "context_turns": 0, "synthesis_cross_session": True})
    _say(cross, "u1", "s1", LAKE)
    _say(cross, "u1", "s2", LAKE_MORE)
    assert len(cross.get_all("u1", limit=100)) == 1


def test_duplicates_mode_keeps_different_facts_about_one_entity_apart(make_memory: Any) -> None:
    facts = ["My dog Biscuit is a beagle.", "Biscuit loves chasing squirrels in the park."]
    for mode, expected in (("rules", 1), ("duplicates", 2)):
        mem = make_memory(mode, write={"synthesis": mode, "context_turns": 0, "synthesis_min_cosine": 0.3})
        for text in facts:
            _say(mem, "u1", "s1", text)
        assert len(mem.get_all("u1", limit=100)) == expected, mode


@pytest.mark.parametrize("write", [{}, {"synthesis": "rules", "synthesis_min_cosine": 0.995}])
def test_synthesis_off_or_below_its_cosine_keeps_every_memory(make_memory: Any, write: dict[str, Any]) -> None:
    mem = make_memory(write={"context_turns": 0, **write})
    _say(mem, "u1", "s1", LAKE)
    _say(mem, "u1", "s1", LAKE_MORE)
    assert len(mem.get_all("u1", limit=100)) == 2


def test_llm_synthesis_writes_the_models_statement(make_memory: Any) -> None:
    def script(stage: str, messages: list[dict[str, str]]) -> str:
        assert stage == "synthesize"
        return json.dumps({"merge": True, "memory": "Caroline loves painting sunsets at the lake every weekend."})

    llm = ScriptedLLM(script)
    mem = make_memory(llm_client=llm, write={"synthesis": "llm", "extractor": "rules", "context_turns": 0})
    _say(mem, "u1", "s1", LAKE)
    _say(mem, "u1", "s1", LAKE_MORE)
    records = mem.get_all("u1", limit=100)
    assert [r.memory for r in records] == ["Caroline loves painting sunsets at the lake every weekend."]
    assert llm.stages() == ["synthesize"]


def test_llm_synthesis_needs_a_model(make_memory: Any) -> None:
    with pytest.raises(ConfigError):
        make_memory(write={"synthesis": "llm"})


# ---------------------------------------------------------------- per-turn writer (write.mode = "turn")

USER_TURN = {"name": "user", "content": "I adopted a beagle named Rex."}
REPLY = {"name": "assistant", "content": "Congrats on adopting Rex!"}


def test_rule_turn_writer_writes_one_item_per_interaction_when_the_reply_arrives(make_memory: Any) -> None:
    mem = make_memory(write={"mode": "turn", "context_turns": 0})
    first = mem.add([USER_TURN], "u1", session_id="s1")
    assert (first.memories, first.pending_turns) == ([], 1)  # the interaction waits for its reply
    done = mem.add([REPLY], "u1", session_id="s1")
    assert done.pending_turns == 0 and len(done.memories) == 1
    item = done.memories[0]
    assert item.memory == "user: I adopted a beagle named Rex.\nassistant: Congrats on adopting Rex!"
    assert item.source_turn_ids == [*first.turn_ids, *done.turn_ids]
    again = mem.add([USER_TURN, REPLY], "u1", session_id="s1")  # the same again: merged, not stored twice
    records = mem.get_all("u1", limit=100)
    assert [r.id for r in records] == [item.id] and len(records[0].source_turn_ids) == 4
    assert [h.event.value for h in mem.history(item.id, "u1")] == ["ADD", "UPDATE"]
    assert again.pending_turns == 0
    batch = make_memory("batch", write={"context_turns": 0})
    batch.add([USER_TURN, REPLY], "u1", session_id="s1")
    assert len(batch.get_all("u1", limit=100)) == 2  # the default: one memory per turn


def test_turn_mode_flush_writes_an_interaction_without_reply(make_memory: Any) -> None:
    mem = make_memory(write={"mode": "turn"})
    mem.add([USER_TURN], "u1", session_id="s1")
    mem.flush("u1")
    assert [r.memory for r in mem.get_all("u1", limit=100)] == ["user: I adopted a beagle named Rex."]


def test_llm_turn_writer_settles_a_conflict_by_time(make_memory: Any) -> None:
    answers = iter(["Sam has 2 dogs.", "", "Sam has 3 dogs."])

    def script(stage: str, messages: list[dict[str, str]]) -> str:
        assert stage == "turn_write"
        return json.dumps({"memory": next(answers)})

    llm = ScriptedLLM(script)
    mem = make_memory(llm_client=llm, write={"mode": "turn", "turn_writer": "llm"})
    old = mem.add([{"name": "Sam", "content": "I have two dogs."}, REPLY], "u1", session_id="s1",
                  timestamp="2023-05-01T10:00:00")
    mem.add([{"name": "Sam", "content": "ok thanks"}, {"name": "assistant", "content": "bye"}], "u1",
            session_id="s1", timestamp="2023-05-01T10:01:00")  # nothing worth keeping: no item
    mem.add([{"name": "Sam", "content": "We got a third dog!"}, REPLY], "u1", session_id="s1",
            timestamp="2023-06-01T10:00:00")
    assert [r.memory for r in mem.get_all("u1", limit=100)] == ["Sam has 3 dogs."]
    rows = mem.history(old.memories[0].id, "u1")
    assert rows[-1].event.value == "DELETE" and rows[-1].actor.startswith("write:turn:superseded-by:")
    assert llm.stages() == ["turn_write"] * 3


def test_llm_turn_writer_falls_back_to_the_rule_item(make_memory: Any) -> None:
    llm = ScriptedLLM(lambda stage, messages: "no json here")
    mem = make_memory(llm_client=llm, write={"mode": "turn", "turn_writer": "llm", "context_turns": 0})
    mem.add([USER_TURN, REPLY], "u1", session_id="s1")
    assert [r.memory for r in mem.get_all("u1", limit=100)] == [
        "user: I adopted a beagle named Rex.\nassistant: Congrats on adopting Rex!"]
    assert mem.stats()["llm"]["turn_write"]["fallbacks"] == 1


def _bt(i: int, speaker: str, session: str = "s1") -> BufferedTurn:
    return BufferedTurn(turn_id=f"t{i}", speaker=speaker, text="x", time_stamp="2023-05-01T10:00:00",
                        float_time_stamp=0.0, weekday="Mon", session_id=session)


@pytest.mark.parametrize(("speakers", "force", "expected"), [
    ("AB", False, ["AB"]),
    ("A", False, []),
    ("A", True, ["A"]),
    ("AAB", False, ["AAB"]),
    ("ABB", False, ["ABB"]),
    ("ABA", False, ["AB"]),  # the last one waits for its reply
    ("ABAB", False, ["AB", "AB"]),
    ("ABC", False, ["AB"]),  # a third speaker opens the next interaction
    ("AAAAAAAAA", False, ["AAAAAAAA"]),  # MAX_OPENER turns with no reply are due anyway
])
def test_due_interactions(speakers: str, force: bool, expected: list[str]) -> None:
    turns = [_bt(i, s) for i, s in enumerate(speakers)]
    got = due_interactions(turns, force=force)
    assert ["".join(t.speaker for t in g) for g in got] == expected


def test_due_interactions_close_at_a_session_change() -> None:
    turns = [_bt(0, "A", "s1"), _bt(1, "A", "s2"), _bt(2, "B", "s2")]
    assert [[t.turn_id for t in g] for g in due_interactions(turns, force=False)] == [["t0"], ["t1", "t2"]]


def _rec(mid: str, text: str, t: float) -> MemoryRecord:
    return MemoryRecord(id=mid, user_id="u1", session_id="s1", memory=text, time_stamp="2023-05-01T10:00:00",
                        float_time_stamp=t, weekday="Mon", source_turn_ids=[f"turn-{mid}"], entities=["Rex"],
                        created_at=t, updated_at=t)


def test_synthesis_changes_fold_a_batch_into_the_oldest_memory() -> None:
    one = np.array([1.0, 0.0], dtype=np.float32)
    a, b, c = _rec("a", "Rex is a beagle.", 1), _rec("b", "Rex is a beagle puppy.", 2), \
        _rec("c", "Rex is a small beagle puppy.", 3)
    out = synthesis_changes([(b, one), (c, one)], [(a, one)], rule_decider(RuleConfig()),
                            lambda texts: np.stack([one for _ in texts]), now=10.0)
    assert [(w.record.id, w.event.value) for w in out.writes] == [("b", "ADD"), ("c", "ADD"), ("a", "UPDATE")]
    survivor = out.writes[-1]
    assert survivor.old == a and survivor.record.source_turn_ids == ["turn-a", "turn-b", "turn-c"]
    assert {"small", "beagle", "puppy", "rex"} <= set(content_tokens(survivor.record.memory))
    assert [(r.record.id, r.actor) for r in out.removals] == [("b", "write:synthesis:into:a"),
                                                              ("c", "write:synthesis:into:a")]
    other = _rec("x", "Rex is a beagle puppy.", 2).model_copy(update={"user_id": "u2"})
    alone = synthesis_changes([(other, one)], [(a, one)], rule_decider(RuleConfig()),
                              lambda texts: np.stack([one for _ in texts]), now=10.0)
    assert [w.record.id for w in alone.writes] == ["x"] and not alone.removals  # never across users


def test_a_users_write_lock_serialises_and_is_not_kept(make_memory: Any) -> None:
    """The per-user locks live only while held or awaited: the same user's callers share one, and
    none is kept afterwards for a user id (the map does not grow with every user ever seen)."""
    mem = make_memory()
    ingest = mem._parts.ingest
    entered = threading.Event()

    def second() -> None:
        with ingest.user_lock("u"):
            entered.set()

    with ingest.user_lock("u"):
        waiting = threading.Thread(target=second, daemon=True)
        waiting.start()
        assert ingest._thread_lock("u").locked()  # the same lock, still held while referenced
        assert not entered.wait(0.3)  # the second caller waits for it
        with ingest.user_lock("v"):  # another user's is its own
            pass
    assert entered.wait(10)
    waiting.join(10)
    assert not waiting.is_alive()
    mem.add("I keep bees.", "u", flush=True)
    assert remembered_users(mem) <= {"u"} and not set(ingest._locks)
