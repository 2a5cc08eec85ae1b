"""Online semantic synthesis (write/_synthesize.py, write/_synthesize_llm.py, prompts/synthesize.py).

Decision tests use hand-set vectors where the cosine itself is the point, and the real MiniLM
embedder where realistic texts are. The LLM is ``ScriptedLLM``: a scripted fake (NOT a model) whose
answers go through the client's real repair / validation / retry path.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from dialogmem import LLMTimeoutError, MemoryRecord
from dialogmem._models import LocalEmbedder, ScriptedLLM
from dialogmem._prompts.synthesize import SYNTHESIZE_SYSTEM
from dialogmem._text._words import content_tokens
from dialogmem._write._synthesize import (
    Fragment,
    RuleConfig,
    SynthesisHistory,
    apply_synthesis,
    decide_synthesis,
    merge_text,
    plan_batch,
    rule_decider,
    synthesis_history,
    undo_synthesis,
)
from dialogmem._write._synthesize_llm import STAGE, LLMSynthesizer


def vec(angle_deg: float) -> np.ndarray:
    """A unit vector at ``angle_deg`` from (1, 0, 0): cosine with vec(0) is cos(angle)."""
    a = np.radians(angle_deg)
    return np.array([np.cos(a), np.sin(a), 0.0])


def frag(fid: str, text: str, *, angle: float = 0.0, user: str = "u1", session: str | None = "s1",
         entities: tuple[str, ...] = (), t: float = 0.0) -> Fragment:
    return Fragment(fid, user, session, text, vec(angle), (f"turn-{fid}",), entities, t,
                    f"2023-05-08T13:{int(t):02d}:00")


# ---------------------------------------------------------------- the merged text


def test_merge_text_drops_only_lines_whose_words_are_already_kept() -> None:
    a = "Melanie: How is your sister Anna?\nCaroline: She moved to Lisbon last month (April 2023)."
    b = "Caroline: She moved to Lisbon last month (April 2023).\nMelanie: Does she like it there?"
    assert merge_text([a, b]) == (
        "Melanie: How is your sister Anna?\nCaroline: She moved to Lisbon last month (April 2023)."
        "\nMelanie: Does she like it there?")
    clipped = "Caroline: I love the pottery class I ...\nMelanie: Me too!"
    full = "Caroline: I love the pottery class I took with my mom."
    assert merge_text([clipped, full]) == ("Caroline: I love the pottery class I took with my mom."
                                           "\nMelanie: Me too!")  # the fuller line takes the place
    assert merge_text(["Sam likes tea.", "Sam does not like tea."]) == (
        "Sam likes tea.\nSam does not like tea.")  # a negation is information
    assert merge_text(["ok thanks!", "Ok  thanks!", "lol"]) == "ok thanks!\nlol"


LINES = [
    "Caroline: I went to a LGBTQ support group yesterday (2023-05-07).",
    "Caroline: I went to a LGBTQ support group ...",
    "Melanie: That's great! How did it go?",
    "Caroline: It was powerful, the support group was not what I expected.",
    "Melanie: Did you go alone?",
    "Caroline: No, with my friend Anna.",
    "Melanie: Nice!",
    "Melanie: That's great!",
]


def test_merge_text_keeps_every_content_word_for_all_combinations() -> None:
    for n in range(1, 4):
        for combo in itertools.permutations(LINES, n):
            texts = ["\n".join(combo[: i + 1]) for i in range(len(combo))]  # overlapping, like rule memories
            merged = merge_text(texts)
            assert set(content_tokens(merged)) == {w for t in texts for w in content_tokens(t)}
            assert merge_text([merged]) == merged
            assert len(merged.splitlines()) <= len(set(combo))


# ---------------------------------------------------------------- the rule decision


def test_near_duplicate_is_merged_into_the_oldest() -> None:
    old = frag("m1", "Caroline adopted a rescue dog named Biscuit.", t=1)
    new = frag("m2", "Caroline adopted a rescue dog named Biscuit yesterday.", angle=10, t=2)
    d = decide_synthesis(new, [old], min_cosine=0.9)
    assert d is not None and d.reason == "near_duplicate" and d.method == "rule"
    assert (d.survivor_id, d.absorbed_ids) == ("m1", ["m2"])
    assert d.text == "Caroline adopted a rescue dog named Biscuit yesterday."
    assert d.source_turn_ids == ["turn-m1", "turn-m2"]
    assert d.cosines == {"m1": pytest.approx(np.cos(np.radians(10)))}


def test_shared_entity_fragments_are_merged_with_every_line() -> None:
    old = frag("m1", "Caroline: Biscuit is a beagle.", entities=("Caroline", "Biscuit"), t=1)
    new = frag("m2", "Caroline: Biscuit loves the park.", angle=20, entities=("Caroline", "Biscuit"), t=2)
    d = decide_synthesis(new, [old], min_cosine=0.9, ignore_entities=["Caroline"])
    assert d is not None and d.reason == "shared_entity"
    assert d.text == "Caroline: Biscuit is a beagle.\nCaroline: Biscuit loves the park."
    assert d.entities == ["Caroline", "Biscuit"]


def test_duplicates_only_merges_a_repeat_but_not_a_shared_entity() -> None:
    """``shared_entity=False`` (write.synthesis = "duplicates"): the near-duplicate rule alone."""
    old = frag("m1", "Caroline: Biscuit is a beagle.", entities=("Caroline", "Biscuit"), t=1)
    other = frag("m2", "Caroline: Biscuit loves the park.", angle=20, entities=("Caroline", "Biscuit"), t=2)
    assert decide_synthesis(other, [old], min_cosine=0.9, ignore_entities=["Caroline"],
                            shared_entity=False) is None
    repeat = frag("m3", "Caroline: Biscuit is a beagle!", angle=5, entities=("Caroline", "Biscuit"), t=3)
    d = decide_synthesis(repeat, [old], min_cosine=0.9, shared_entity=False)
    assert d is not None and d.reason == "near_duplicate" and d.absorbed_ids == ["m3"]


@pytest.mark.parametrize(("candidate", "kwargs", "why"), [
    (frag("m1", "Caroline: Biscuit is a beagle.", entities=("Biscuit",), user="u2"),
     {"cross_session": True}, "another user, even across sessions"),
    (frag("m1", "Caroline: Biscuit is a beagle.", entities=("Biscuit",), session="s2"), {},
     "another session"),
    (frag("m1", "Caroline: Biscuit is a beagle.", entities=("Biscuit",), session=None), {},
     "unknown session"),
    (frag("m1", "Caroline: Biscuit is a beagle.", entities=("Biscuit",), angle=40), {},
     "cosine below the threshold"),
    (frag("m1", "Caroline: my sister runs a bakery.", entities=("Caroline",)),
     {"ignore_entities": ["Caroline"]}, "only the speaker in common"),
    (frag("m1", "Caroline: Biscuit is a beagle.", entities=("Biscuit",)),
     {"max_words": 8}, "merged text too long"),
])
def test_refuses_to_merge(candidate: Fragment, kwargs: dict[str, object], why: str) -> None:
    new = frag("m2", "Caroline: Biscuit loves the park.", angle=5, entities=("Caroline", "Biscuit"), t=2)
    assert decide_synthesis(new, [candidate], min_cosine=0.9, **kwargs) is None, why


def test_cross_session_is_allowed_only_when_configured() -> None:
    old = frag("m1", "Caroline: Biscuit is a beagle.", entities=("Biscuit",), session="s0")
    new = frag("m2", "Caroline: Biscuit loves the park.", angle=5, entities=("Biscuit",), t=2)
    assert decide_synthesis(new, [old], min_cosine=0.9) is None
    assert decide_synthesis(new, [old], min_cosine=0.9, cross_session=True) is not None


def test_group_size_and_length_bound_the_merge() -> None:
    olds = [frag(f"m{i}", f"Caroline: Biscuit trick number {i}.", angle=i, entities=("Biscuit",), t=i)
            for i in range(1, 5)]
    new = frag("new", "Caroline: Biscuit learned a trick.", entities=("Biscuit",), t=9)
    d = decide_synthesis(new, olds, min_cosine=0.9, max_group=3)
    assert d is not None and (d.survivor_id, d.absorbed_ids) == ("m1", ["m2", "new"])  # 2 best
    d = decide_synthesis(new, olds, min_cosine=0.9, max_group=3, max_words=10)
    assert d is not None and (d.survivor_id, d.absorbed_ids) == ("m1", ["new"])  # least similar left out


def test_real_minilm_merges_a_repeat_and_keeps_different_facts_apart() -> None:
    emb = LocalEmbedder()
    texts = ["Melanie: We went camping at the beach last weekend with the kids.",
             "Melanie: Last weekend we went camping at the beach with our kids.",
             "Melanie: I signed up for a pottery class on Tuesdays."]
    v = emb.embed(texts)
    frags = [Fragment(f"m{i}", "u1", "s1", t, v[i], (f"t{i}",), ("Melanie",), float(i))
             for i, t in enumerate(texts)]
    repeat = decide_synthesis(frags[1], [frags[0]], min_cosine=0.85, ignore_entities=["Melanie"])
    assert repeat is not None and repeat.reason == "near_duplicate"
    assert decide_synthesis(frags[2], frags[:2], min_cosine=0.85, ignore_entities=["Melanie"]) is None


# ---------------------------------------------------------------- apply, history, undo


def record(rid: str, text: str, t: float, **kw: object) -> MemoryRecord:
    return MemoryRecord(id=rid, user_id="u1", session_id="s1", memory=text, original_memory=text,
                        compressed_memory=text, time_stamp=f"2023-05-08T13:{int(t):02d}:00",
                        float_time_stamp=1683550000.0 + t, weekday="Mon", created_at=1.0,
                        updated_at=1.0, source_turn_ids=[f"turn-{rid}"], **kw)


def test_apply_then_undo_restores_every_record_exactly() -> None:
    records = {
        "m1": record("m1", "Caroline: Biscuit is a beagle.", 1, entities=["Biscuit"], keywords=["beagle"]),
        "m2": record("m2", "Caroline: Biscuit loves the park.", 2, entities=["Biscuit"],
                     keywords=["park"], salience=0.9),
    }
    d = decide_synthesis(frag("m2", records["m2"].memory, angle=5, entities=("Biscuit",), t=2),
                         [frag("m1", records["m1"].memory, entities=("Biscuit",), t=1)], min_cosine=0.9)
    assert d is not None
    history = synthesis_history(d, records)
    merged = apply_synthesis(d, records, now=99.0)
    assert merged.id == "m1" and merged.version == 2 and merged.updated_at == 99.0
    assert merged.memory == "Caroline: Biscuit is a beagle.\nCaroline: Biscuit loves the park."
    assert merged.source_turn_ids == ["turn-m1", "turn-m2"]
    assert merged.keywords == ["beagle", "park"] and merged.salience == 0.9
    assert merged.time_stamp == records["m2"].time_stamp  # the latest member's time
    # the payload survives a JSON round trip (as a history row stores it) and undoes the merge
    stored = json.loads(history.model_dump_json())
    restored = undo_synthesis(SynthesisHistory.model_validate(stored))
    assert restored == [records["m1"], records["m2"]]


def test_plan_batch_applies_decisions_in_order_and_reembeds_merges() -> None:
    embedded: list[str] = []

    def embed(texts: list[str]) -> np.ndarray:
        embedded.extend(texts)
        return np.stack([vec(0.0) for _ in texts])

    existing = [frag("old", "Caroline: Biscuit is a beagle.", entities=("Biscuit",), t=1)]
    new = [frag("n1", "Caroline: Biscuit loves the park.", angle=5, entities=("Biscuit",), t=2),
           frag("n2", "Caroline: My pottery class starts Monday.", angle=80, entities=("Monday",), t=3),
           frag("n3", "Caroline: Biscuit sleeps all day.", angle=3, entities=("Biscuit",), t=4)]
    plan = plan_batch(new, existing, rule_decider(RuleConfig(min_cosine=0.9)), embed)
    assert plan.stored == ["n2"] and plan.deleted == []
    assert [(m.survivor_id, m.absorbed_ids) for m in plan.merges] == [("old", ["n1"]), ("old", ["n3"])]
    assert plan.merges[1].text == ("Caroline: Biscuit is a beagle.\nCaroline: Biscuit loves the park."
                                   "\nCaroline: Biscuit sleeps all day.")
    assert embedded == [plan.merges[0].text, plan.merges[1].text]


def test_plan_batch_deletes_an_existing_memory_absorbed_by_an_older_one() -> None:
    existing = [frag("a", "Caroline: Biscuit is a beagle.", entities=("Biscuit",), t=1),
                frag("b", "Caroline: Biscuit is a beagle puppy.", angle=60, entities=("Biscuit",), t=2)]
    new = [frag("n1", "Caroline: Biscuit is a beagle puppy from the shelter.", angle=30,
                entities=("Biscuit",), t=3)]
    plan = plan_batch(new, existing, rule_decider(RuleConfig(min_cosine=0.8)),
                      lambda texts: np.stack([vec(30.0) for _ in texts]))
    assert [(m.survivor_id, m.absorbed_ids) for m in plan.merges] == [("a", ["b", "n1"])]
    assert plan.deleted == ["b"] and plan.stored == []


# ---------------------------------------------------------------- the LLM backend (scripted fake)


def llm_case(answers: list[object]) -> tuple[ScriptedLLM, LLMSynthesizer, Fragment, list[Fragment]]:
    llm = ScriptedLLM([a if isinstance(a, BaseException) else json.dumps(a) for a in answers],
                      max_retries=0)
    synth = LLMSynthesizer(llm, RuleConfig(min_cosine=0.9, ignore_entities=("Caroline",)))
    olds = [frag("m1", "Caroline: Biscuit is a beagle.", entities=("Caroline", "Biscuit"), t=1),
            frag("other", "Caroline: Biscuit is a beagle.", entities=("Biscuit",), user="u2")]
    new = frag("m2", "Caroline: Biscuit loves the park.", angle=5, entities=("Caroline", "Biscuit"), t=2)
    return llm, synth, new, olds


def test_llm_merge_is_used_when_it_names_every_entity() -> None:
    llm, synth, new, olds = llm_case([{"merge": True, "memory": "Caroline's beagle Biscuit loves the park."}])
    d = synth.decide(new, olds)
    assert d is not None and d.method == "llm" and d.reason == "llm"
    assert (d.survivor_id, d.absorbed_ids, d.text) == ("m1", ["m2"], "Caroline's beagle Biscuit loves the park.")
    (call,) = llm.calls
    assert call.stage == STAGE and call.messages[0]["content"] == SYNTHESIZE_SYSTEM
    assert call.messages[1]["content"] == ("1. [2023-05-08T13:01:00] Caroline: Biscuit is a beagle.\n"
                                           "NEW [2023-05-08T13:02:00] Caroline: Biscuit loves the park.")
    assert llm.usage.get("llm", STAGE).fallbacks == 0


def test_llm_says_no_merge() -> None:
    llm, synth, new, olds = llm_case([{"merge": False, "memory": None}])
    assert synth.decide(new, olds) is None
    assert llm.usage.get("llm", STAGE).fallbacks == 0


@pytest.mark.parametrize("answer", [
    {"merge": True, "memory": "The beagle loves the park."},  # drops "Caroline" and "Biscuit"
    {"merge": True, "memory": None},
    LLMTimeoutError("scripted timeout"),
])
def test_unusable_llm_answer_falls_back_to_the_rule(answer: object) -> None:
    llm, synth, new, olds = llm_case([answer])
    d = synth.decide(new, olds)
    assert d is not None and d.method == "rule" and d.reason == "shared_entity"
    assert d.text == "Caroline: Biscuit is a beagle.\nCaroline: Biscuit loves the park."
    assert llm.usage.get("llm", STAGE).fallbacks == 1


def test_no_call_when_nothing_in_scope_is_close() -> None:
    llm, synth, new, olds = llm_case([])
    far = [frag("m1", "Caroline: Biscuit is a beagle.", angle=60, entities=("Biscuit",))]
    assert synth.decide(new, far) is None and synth.decide(new, olds[1:]) is None
    assert llm.calls == []
