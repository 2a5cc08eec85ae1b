"""Per-turn MTM writer (write/_turnwriter.py) and reconcile decisions (write/_reconcile.py).

The LLM is ``ScriptedLLM``: a scripted fake (NOT a model) through the real client path.
"""

from __future__ import annotations

import json

import pytest

from dialogmem import ScriptedLLM
from dialogmem._types import Event, MemoryRecord, ScoredRecord
from dialogmem._write._extract import BufferedTurn
from dialogmem._write._reconcile import ReconcileThresholds, apply_reconcile, evidence, reconcile
from dialogmem._write._turnwriter import LLMTurnWriter, RuleTurnWriter

NOW = 5000.0


def turn(tid: str, speaker: str, text: str, *, session: str = "s1", day: int = 8) -> BufferedTurn:
    return BufferedTurn(turn_id=tid, speaker=speaker, text=text, time_stamp=f"2023-05-{day:02d}T10:00:00",
                        float_time_stamp=day * 86400.0, weekday="Mon", session_id=session)


CONTEXT = [turn("c0", "Dana", "Old news from another day.", session="s0", day=1),
           turn("c1", "Dana", "We finally picked a name for the puppy.")]
EXCHANGE = [turn("t1", "Dana", "It's Biscuit! We got him yesterday."),
            turn("t2", "assistant", "Biscuit is a great name!")]


def test_rule_writer_prefixes_speakers_normalises_dates_and_cites_what_it_contains() -> None:
    out = RuleTurnWriter(context_turns=2).write(EXCHANGE, CONTEXT)
    assert out.text.splitlines() == [
        "Dana: We finally picked a name for the puppy.",  # c0 is another session: not context
        "Dana: It's Biscuit! We got him yesterday (2023-05-07).",
        "assistant: Biscuit is a great name!",
    ]
    assert out.source_turn_ids == ["c1", "t1", "t2"] and out.method == "rule"
    assert RuleTurnWriter(context_turns=0).write(EXCHANGE, CONTEXT).source_turn_ids == ["t1", "t2"]


def test_rule_writer_stores_nothing_for_filler() -> None:
    filler = [turn("t1", "Dana", "haha ok thanks!"), turn("t2", "assistant", "You're welcome!")]
    assert RuleTurnWriter().write(filler, CONTEXT).text == ""
    with pytest.raises(ValueError):
        RuleTurnWriter(context_turns=-1)


def test_llm_writer_summary_empty_and_fallback() -> None:
    llm = ScriptedLLM([json.dumps({"memory": "Dana's puppy is named Biscuit; Dana got him yesterday."}),
                       json.dumps({"memory": ""}),
                       "not json", "still not json", "nope"])
    writer = LLMTurnWriter(llm)
    out = writer.write(EXCHANGE, CONTEXT)
    assert out.text == "Dana's puppy is named Biscuit; Dana got him yesterday (2023-05-07)."
    assert (out.source_turn_ids, out.method) == (["t1", "t2"], "llm")
    prompt = llm.calls[0].messages[-1]["content"]
    assert "We finally picked a name" in prompt and "Old news" not in prompt  # same-session context only
    assert writer.write(EXCHANGE, CONTEXT).text == ""  # nothing worth keeping
    fallback = writer.write(EXCHANGE, CONTEXT)  # garbage three times: the rule writer answers
    assert fallback.method == "rule" and fallback.text.startswith("Dana: We finally picked")
    assert llm.usage.get("llm", "turn_write").fallbacks == 1


def rec(rid: str, text: str, *, day: float = 1.0, turns: tuple[str, ...] = ("t",), access: int = 0) -> MemoryRecord:
    return MemoryRecord(id=rid, user_id="u", memory=text, time_stamp="2023-05-01T00:00:00",
                        float_time_stamp=day * 86400.0, weekday="Mon", source_turn_ids=list(turns),
                        access_count=access, created_at=day, updated_at=day, entities=[rid])


def scored(r: MemoryRecord, score: float) -> ScoredRecord:
    return ScoredRecord(record=r, score=score)


def test_reconcile_merge_when_the_new_item_says_nothing_more() -> None:
    old = rec("old", "Dana adopted a beagle named Biscuit in May 2023.", turns=("t1",))
    new = rec("new", "Dana adopted a beagle named Biscuit", day=2, turns=("t9",))
    d = reconcile(new, [scored(old, 0.95)], now=NOW)
    assert (d.action, d.target_id, d.text, d.source_turn_ids) == ("merge", "old", old.memory, ["t1", "t9"])
    assert [(h.memory_id, h.event, h.actor) for h in d.history] == [("old", Event.UPDATE, "write:merge:absorbed:new")]
    upserts, deletes = apply_reconcile(new, d, old, now=NOW)
    assert deletes == [] and [(u.id, u.memory, u.source_turn_ids, u.version) for u in upserts] == [
        ("old", old.memory, ["t1", "t9"], 2)]


def test_reconcile_rewrite_when_the_new_item_says_more() -> None:
    old = rec("old", "Dana adopted a beagle.")
    new = rec("new", "Dana adopted a beagle named Biscuit.", day=2)
    d = reconcile(new, [scored(old, 0.93)], now=NOW)
    assert (d.action, d.text) == ("rewrite", new.memory)
    assert (d.history[0].old_memory, d.history[0].new_memory) == (old.memory, new.memory)
    (u,), _ = apply_reconcile(new, d, old, now=NOW)
    assert (u.id, u.memory) == ("old", new.memory)


def test_reconcile_conflict_newer_supersedes_unless_older_evidence_is_much_stronger() -> None:
    old = rec("old", "Dana has 2 dogs.", day=1)
    new = rec("new", "Dana has 3 dogs.", day=5)
    d = reconcile(new, [scored(old, 0.9)], now=NOW)
    assert (d.action, d.retired_id) == ("supersede", "old")
    assert [(h.memory_id, h.event, h.actor) for h in d.history] == [
        ("new", Event.ADD, "write"), ("old", Event.DELETE, "write:superseded-by:new")]
    assert apply_reconcile(new, d, old, now=NOW)[1] == ["old"]
    # negation is a conflict too; a replayed older item loses to the newer existing one
    late = rec("late", "Dana does not like tea.", day=9)
    early = rec("early", "Dana likes tea.", day=3)
    d2 = reconcile(early, [scored(late, 0.85)], now=NOW)
    assert (d2.action, d2.retired_id) == ("supersede", "early")
    # well-established older fact (evidence 3 turns + 3 accesses = 6 >= 3 * 1): both kept, new one doubted
    strong = rec("strong", "Dana has 2 dogs.", turns=("a", "b", "c"), access=3)
    assert evidence(strong) == 6
    d3 = reconcile(new, [scored(strong, 0.9)], now=NOW)
    assert (d3.action, d3.new_confidence) == ("keep_both", pytest.approx(1 / 6, abs=1e-6))
    (kept,), gone = apply_reconcile(new, d3, strong, now=NOW)
    assert gone == [] and kept.confidence == pytest.approx(1 / 6, abs=1e-6)


def test_reconcile_adds_related_but_distinct_items() -> None:
    old = rec("old", "Dana adopted a beagle named Biscuit.")
    for text, score in [("Dana adopted a cat named Miso.", 0.88),       # different words, same claims
                        ("Dana adopted a beagle named Biscuit.", 0.5),  # identical text, low cosine
                        ("Dana walks Biscuit at the beach", 0.95)]:     # neither contains the other
        d = reconcile(rec("new", text, day=2), [scored(old, score)], now=NOW)
        assert d.action == "add", text
        assert [h.event for h in d.history] == [Event.ADD]
    strict = ReconcileThresholds(duplicate_cosine=0.99)
    same = rec("new", "Dana adopted a beagle named Biscuit", day=2)
    assert reconcile(same, [scored(old, 0.95)], now=NOW, thresholds=strict).action == "add"
    with pytest.raises(ValueError):
        apply_reconcile(same, reconcile(same, [scored(old, 0.95)], now=NOW), None, now=NOW)
